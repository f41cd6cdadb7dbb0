"""The kernel probe: y = x Wᵀ at a model's own shapes, for every product kernel this CPU has, at the verify widths.

    probe = kernels.probe(model)                 # the output layer and the MLP's up projection, M = 1 … 17
    probe.rows                                   # plain dicts, one per (linear, kernel, M): see ROW_FIELDS
    probe.v["lm_head"]["bf16 prepacked"][5]      # v_kernel(5) = t(5) ÷ t(1), the same round's ratio, median
    print(kernels.table(probe))                  # python -m specdec_core.bench.kernels [--quick]

A verify of γ guesses multiplies γ + 1 rows by every weight. A kernel that reads each weight once for all the rows
costs about what one row costs (v_kernel(M) ≈ 1: guesses are nearly free to check); one that serves a row at a
time costs M times one row. Which kernel does which differs by CPU (issue 56: f16 ``F.linear`` had the fastest
single row on one EPYC and grew 18× to M = 17, bf16 prepacked for oneDNN grew 3.8×), so it is measured here:

    f32              ``F.linear``, f32 weight                       4 bytes a weight
    f32 prepacked    oneDNN-prepacked f32 (``fast.PackedLinear``)    4
    bf16             ``F.linear``, bf16 weight and rows             2
    bf16 prepacked   ``fast.PackedLinear`` on bf16 (only where ``fast.packs(torch.bfloat16)``)  2
    f16              ``F.linear``, f16 weight and rows              2
    int8             ``torch._weight_int8pack_mm`` (``precision.Int8Linear``), f32 rows   1 (+ a scale a row)
    int8 bf16        the same kernel on bf16 rows (its scales cast to bf16 each call, as Int8Linear does)
    int4             ``torch._weight_int4pack_mm_for_cpu``, f32 rows, a scale and zero per 32 weights   ½ (+ ¼)
    int4 bf16        the same on bf16 rows, bf16 scales and zeros                              ½ (+ ⅛)

The rows' dtype matters as much as the weight's: on one AVX-512-bf16 EPYC the output layer's one-row product ran
about 15× (int8) and 35× (int4) faster on bf16 rows than on f32 rows, and on f32 rows it grew a row at a time
(v_kernel(17) ≈ 17), so both are probed.

A kernel that cannot run here is reported with the reason (``probe.unavailable``), never dropped. The int4 weight
is quantized as gpt-fast's: per group of :data:`INT4_GROUP` inputs, scale = (max − min) / 15, q = round((w − min)
/ scale) ∈ [0, 15], w ≈ (q − 8) · scale + zero with zero = min + 8 · scale.

How it times: per linear, one untimed warm-up round, then ``rounds`` rounds, each calling every (kernel, M) once
in a shuffled order (interleaved: a slow phase of a shared machine hits all alike). No product may read its
weight from a cache: each kernel's weight is held in enough copies that their total exceeds :data:`MULTIPLE` ×
the last-level cache, and each call reads the next copy (a rotation). Each row carries its floor, the weight bytes
÷ ``machine.bandwidth()``; a time below it means a cache served the weight (the rotation failed) or, for a weight
larger than the cache, that the floor is set too high (the bandwidth too low): the row is flagged and
``probe.warnings`` says which. On a busy machine a product on several threads may wait a scheduler's slice
(milliseconds) for a descheduled thread: the noise band then warns, and ``--threads 1`` measures one core's kernel.
"""

from __future__ import annotations

import argparse
import math
import random
import re
import statistics
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from .. import fast, machine, precision
from .harness import Spread, noise_band

KERNELS = ("f32", "f32 prepacked", "bf16", "bf16 prepacked", "f16", "int8", "int8 bf16", "int4", "int4 bf16")
ROWS_DTYPE = {"f32": torch.float32, "f32 prepacked": torch.float32, "bf16": torch.bfloat16,
              "bf16 prepacked": torch.bfloat16, "f16": torch.float16, "int8": torch.float32,
              "int8 bf16": torch.bfloat16, "int4": torch.float32, "int4 bf16": torch.bfloat16}
TOLERANCE = {"f32": 1e-5, "f32 prepacked": 1e-5, "bf16": 3e-2, "bf16 prepacked": 3e-2, "f16": 4e-3, "int8": 3e-2,
             "int8 bf16": 5e-2, "int4": 0.25, "int4 bf16": 0.25}  # max |y − y_f32| ÷ max |y_f32|, random weights
MS = (1, 2, 3, 5, 9, 17)  # rows per product: a verify of γ = M − 1 guesses
LINEARS = ("lm_head", "mlp.up_proj")  # the output layer and the MLP's (its gate has the same shape)
MULTIPLE = 4  # each kernel's rotation holds more than this many last-level caches of weights
INT4_GROUP = 32
BUSY = 0.5  # a noise band above this (±50 %): the machine was busy, the medians say little
ROW_FIELDS = ("linear", "out_features", "in_features", "kernel", "m", "median_s", "lo_s", "hi_s", "n",
              "weight_bytes", "floor_s", "beats_floor", "gb_per_s", "v")


@dataclass
class Product:
    """One prepared weight: ``fn(x [M, in]) → y [M, out]`` with x in :data:`ROWS_DTYPE` of its kernel, and the
    bytes of weight (scales included) one product reads."""

    fn: Callable[[torch.Tensor], torch.Tensor]
    nbytes: int
    keep: object = None  # the module or tensors fn reads


def _as_linear(weight: torch.Tensor) -> nn.Linear:
    """An ``nn.Linear`` around ``weight`` [out, in] (no bias, nothing allocated but the weight)."""
    layer = nn.Linear(weight.shape[1], weight.shape[0], bias=False, device="meta")
    layer.weight = nn.Parameter(weight, requires_grad=False)
    return layer


def int4_weight(weight: torch.Tensor, group: int = INT4_GROUP) -> tuple[torch.Tensor, torch.Tensor]:
    """W [out, in] (f32) → (packed uint8 [out, in / 2], scales and zeros [in / group, out, 2] f32) for
    ``torch._weight_int4pack_mm_for_cpu``: asymmetric 4-bit, one scale and zero per ``group`` inputs."""
    out, inp = weight.shape
    w = weight.float().reshape(out, inp // group, group)
    lo, hi = w.amin(-1, keepdim=True), w.amax(-1, keepdim=True)
    scale = (hi - lo).clamp(min=1e-6) / 15
    q = torch.clamp(torch.round((w - lo) / scale), 0, 15).reshape(out, inp).to(torch.int32)
    zero = lo + 8 * scale  # w ≈ (q − 8) · scale + zero
    packed = torch._convert_weight_to_int4pack_for_cpu(q, 2)  # inner_k_tiles: unused by the CPU kernel
    return packed, torch.stack([scale[..., 0].T, zero[..., 0].T], dim=-1).contiguous()


def prepare(kernel: str, weight: torch.Tensor) -> Product:
    """``weight`` [out, in] (f32) in ``kernel``'s format: a new copy every call (a rotation's copies never share)."""
    if kernel in ("f32", "bf16", "f16"):
        w = weight.to(ROWS_DTYPE[kernel], copy=True)
        return Product(partial(F.linear, weight=w), w.nbytes, w)
    if kernel in ("f32 prepacked", "bf16 prepacked"):
        layer = fast.PackedLinear(_as_linear(weight.to(ROWS_DTYPE[kernel], copy=True)))
        return Product(layer, weight.numel() * layer.packed.element_size(), layer)
    if kernel.startswith("int8"):
        layer = precision.Int8Linear(_as_linear(weight))
        return Product(layer, layer.weight_q.nbytes + layer.scale.nbytes, layer)
    if kernel.startswith("int4"):
        packed, scales = int4_weight(weight)
        scales = scales.to(ROWS_DTYPE[kernel])
        fn = partial(torch._weight_int4pack_mm_for_cpu, qGroupSize=INT4_GROUP, qScaleAndZeros=scales)
        return Product(lambda x: fn(x, packed), packed.nbytes + scales.nbytes, (packed, scales))
    raise ValueError(f"unknown kernel {kernel!r}: one of {', '.join(KERNELS)}")


def why_not(kernel: str, shape: tuple[int, int] | None = None) -> str | None:
    """Why ``kernel`` cannot run here (for a weight of ``shape`` [out, in]), or None when it runs: the
    checks it needs, then one small product that must equal the f32 one within :data:`TOLERANCE`."""
    if kernel not in KERNELS:
        return f"unknown kernel (one of {', '.join(KERNELS)})"
    if kernel.endswith("prepacked") and not fast.available():
        return "no oneDNN in this torch build (fast.available() is False)"
    if kernel == "bf16 prepacked" and not fast.packs(torch.bfloat16):
        return "oneDNN on this CPU does not prepack bf16 (fast.packs(torch.bfloat16) is False: no avx512_bf16 or AMX)"
    if kernel.startswith("int8") and not hasattr(torch, "_weight_int8pack_mm"):
        return f"torch {torch.__version__} has no _weight_int8pack_mm"
    if kernel.startswith("int4"):
        missing = [n for n in ("_weight_int4pack_mm_for_cpu", "_convert_weight_to_int4pack_for_cpu") if not hasattr(torch, n)]
        if missing:
            return f"torch {torch.__version__} ships no {' / '.join(missing)} (no CPU int4 kernel)"
        if shape is not None and shape[1] % INT4_GROUP:
            return f"in_features {shape[1]} is not a multiple of the int4 group ({INT4_GROUP})"
        if shape is not None and shape[0] % 16:
            return f"out_features {shape[0]} is not a multiple of 16 (the CPU int4 packing's tile)"
    gen = torch.Generator().manual_seed(0)  # host: a CPU kernel's self-check
    w, x = torch.randn(48, 64, generator=gen), torch.randn(3, 64, generator=gen)  # host: a CPU kernel's self-check
    try:
        y = prepare(kernel, w).fn(x.to(ROWS_DTYPE[kernel])).float()
    except (RuntimeError, NotImplementedError) as err:
        return f"{type(err).__name__}: {str(err).splitlines()[0]}"
    ref = x @ w.T
    err = ((y - ref).abs().max() / ref.abs().max()).item()
    return None if err <= TOLERANCE[kernel] else f"wrong products: relative error {err:.2g} > {TOLERANCE[kernel]}"


def linear_weights(model: nn.Module, names: Sequence[str] = LINEARS) -> dict[str, torch.Tensor]:
    """The weight [out, in] of each linear ``names`` of ``model``, a name without its layer ("mlp.up_proj"
    is layer 0's): the shapes come from the model, the values too (f32 copies)."""
    found: dict[str, torch.Tensor] = {}
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            found.setdefault(re.sub(r"^(model\.)?(layers\.\d+\.)?", "", name), module.weight)
    missing = [n for n in names if n not in found]
    if missing:
        raise KeyError(f"no linear {missing} in the model; it has {sorted(found)}")
    return {n: found[n].detach().float().cpu() for n in names}  # host: the probe times CPU kernels on a CPU copy


def copies_for(nbytes: int, multiple: float = MULTIPLE) -> int:
    """How many copies of a ``nbytes`` weight make a rotation larger than ``multiple`` last-level caches."""
    return int(multiple * machine.last_level_cache_bytes() // nbytes) + 1


class Rotation:
    """``copies`` of one kernel's weight; each call multiplies by the next, so no call finds its weight in a cache
    (the total exceeds ``multiple`` × the last-level cache)."""

    def __init__(self, kernel: str, weight: torch.Tensor, multiple: float = MULTIPLE) -> None:
        first = prepare(kernel, weight)
        self.products = [first] + [prepare(kernel, weight) for _ in range(copies_for(first.nbytes, multiple) - 1)]
        self.nbytes, self.turn = first.nbytes, 0

    @property
    def total_bytes(self) -> int:
        return self.nbytes * len(self.products)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        product = self.products[self.turn]
        self.turn = (self.turn + 1) % len(self.products)
        return product.fn(x)


def timed_rounds(calls: dict[Hashable, Callable[[], object]], rounds: int = 5, seed: int = 0,
                 clock: Callable[[], float] = time.perf_counter) -> dict[Hashable, list[float]]:
    """Seconds of each call: one untimed warm-up round, then ``rounds`` rounds, each calling every call once in
    an order shuffled per round. ``clock``: seconds now (a test feeds its own)."""
    rng, order = random.Random(seed), list(calls)
    times: dict[Hashable, list[float]] = {name: [] for name in calls}
    for round_ in range(rounds + 1):
        rng.shuffle(order)
        for name in order:
            if not round_:  # the warm-up: untimed
                calls[name]()
                continue
            start = clock()
            calls[name]()
            times[name].append(clock() - start)
    return times


def v_kernel(times: dict[tuple[str, str, int], list[float]]) -> dict[str, dict[str, dict[int, float]]]:
    """linear → kernel → {M: t(M) ÷ t(1)}: the median over rounds of each product ÷ the one-row product of the
    same round (the times of :func:`timed_rounds`, keyed (linear, kernel, M))."""
    out: dict[str, dict[str, dict[int, float]]] = {}
    for (linear, kernel, m), ts in sorted(times.items()):
        ones = times[(linear, kernel, 1)]
        out.setdefault(linear, {}).setdefault(kernel, {})[m] = statistics.median(t / one for t, one in zip(ts, ones))
    return out


def rows_of(times: dict[tuple[str, str, int], list[float]], shapes: dict[str, tuple[int, int]],
            nbytes: dict[tuple[str, str], int], bandwidth: float) -> list[dict]:
    """One plain row per (linear, kernel, M) (:data:`ROW_FIELDS`): the median and min–max seconds, the floor
    (weight bytes ÷ ``bandwidth``), ``beats_floor`` when any time was below it, GB/s read at the median, v."""
    v = v_kernel(times)
    rows = []
    for (linear, kernel, m), ts in times.items():
        s, floor = Spread.of(ts), nbytes[(linear, kernel)] / bandwidth
        out_features, in_features = shapes[linear]
        rows.append({"linear": linear, "out_features": out_features, "in_features": in_features, "kernel": kernel,
                     "m": m, "median_s": s.median, "lo_s": s.lo, "hi_s": s.hi, "n": s.n,
                     "weight_bytes": nbytes[(linear, kernel)], "floor_s": floor, "beats_floor": s.lo < floor,
                     "gb_per_s": nbytes[(linear, kernel)] / s.median / 1e9, "v": v[linear][kernel][m]})
    return rows


@dataclass
class Probe:
    """What :func:`probe` measured. ``v``: linear → kernel → {M: v_kernel(M)}; ``unavailable``: dicts with
    ``linear``, ``kernel``, ``reason``; ``rotation``: dicts with ``linear``, ``kernel``, ``copies``,
    ``total_bytes``, ``cache_bytes``, ``multiple``; ``noise``: the rounds' median relative spread."""

    rows: list[dict]
    v: dict[str, dict[str, dict[int, float]]]
    unavailable: list[dict] = field(default_factory=list)
    rotation: list[dict] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    bandwidth: float = math.nan
    noise: float = math.nan


def floor_warnings(rows: Sequence[dict], cache_bytes: int) -> list[str]:
    """A warning when a row's time beat its floor: a cache served its weight (the rotation failed) or, where one
    copy of the weight alone is larger than the last-level cache (``cache_bytes``), the bandwidth is too low."""
    beaten = [r for r in rows if r["beats_floor"]]
    if not beaten:
        return []
    which = ", ".join(f"{r['linear']} {r['kernel']} M={r['m']} ({r['lo_s'] * 1e6:.4g} < {r['floor_s'] * 1e6:.4g} µs)"
                      for r in beaten[:6])
    big = [r for r in beaten if r["weight_bytes"] > cache_bytes]
    why = ("a cache served the weight (the rotation failed: these are not products from memory), or "
           "machine.bandwidth() is low (measured on a busy machine?)" if not big else
           f"{'all' if len(big) == len(beaten) else len(big)} of them read a weight larger than the last-level cache, "
           "which no cache holds: machine.bandwidth() is below what these products read (the floor, bytes ÷ that "
           "bandwidth, is set too high for these)"
           + ("" if len(big) == len(beaten) else "; in the rest a cache served the weight (the rotation failed)"))
    return [f"{len(beaten)} of {len(rows)} rows beat their floor (weight bytes ÷ bandwidth): {which}"
            f"{' …' if len(beaten) > 6 else ''}. {why[0].upper() + why[1:]}."]


@torch.inference_mode()
def probe_weights(weights: dict[str, torch.Tensor], kernels: Sequence[str] = KERNELS, ms: Sequence[int] = MS,
                  rounds: int = 5, multiple: float = MULTIPLE, bandwidth: float | None = None, seed: int = 0,
                  clock: Callable[[], float] = time.perf_counter) -> Probe:
    """Every available kernel on every weight [out, in] of ``weights`` at M ∈ ``ms`` rows, interleaved, weights
    rotated (one linear at a time: its rotations are freed before the next). ``bandwidth``: bytes/s of the
    floors (default ``machine.bandwidth()``)."""
    if 1 not in ms:
        raise ValueError("ms must include 1: v_kernel(M) is t(M) ÷ t(1)")
    bandwidth = machine.bandwidth() if bandwidth is None else bandwidth
    gen = torch.Generator().manual_seed(seed)  # host: the probe times CPU kernels
    times, nbytes, unavailable, rotation = {}, {}, [], []
    for linear, weight in weights.items():
        rotations = {}
        for kernel in kernels:
            if (reason := why_not(kernel, tuple(weight.shape))) is not None:
                unavailable.append({"linear": linear, "kernel": kernel, "reason": reason})
                continue
            rotations[kernel] = rot = Rotation(kernel, weight, multiple)
            nbytes[(linear, kernel)] = rot.nbytes
            rotation.append({"linear": linear, "kernel": kernel, "copies": len(rot.products), "total_bytes": rot.total_bytes,
                             "cache_bytes": machine.last_level_cache_bytes(), "multiple": multiple})
        xs = {m: torch.randn(m, weight.shape[1], generator=gen) for m in ms}  # host: the probe times CPU kernels
        calls = {(linear, k, m): partial(rot, xs[m].to(ROWS_DTYPE[k])) for k, rot in rotations.items() for m in ms}
        times |= timed_rounds(calls, rounds, seed, clock)
        del rotations, calls
    shapes = {linear: tuple(w.shape) for linear, w in weights.items()}
    rows = rows_of(times, shapes, nbytes, bandwidth) if times else []
    noise = noise_band(list(times.values()))
    busy = [f"noise band ±{noise:.1%} (> ±{BUSY:.0%}): the machine was busy (other processes, or torch's threads "
            "waiting for a descheduled one: try fewer threads); these medians are noisy"] if noise > BUSY else []
    return Probe(rows, v_kernel(times) if times else {}, unavailable, rotation, floor_warnings(rows, machine.last_level_cache_bytes()) + busy, bandwidth,
                 noise)


def probe(model: nn.Module, linears: Sequence[str] = LINEARS, **kwargs) -> Probe:
    """:func:`probe_weights` on ``model``'s linears ``linears`` (:func:`linear_weights`)."""
    return probe_weights(linear_weights(model, linears), **kwargs)


def _us(seconds: float) -> str:
    """Seconds as µs in 8 characters: whole above 100, one decimal below."""
    us = seconds * 1e6
    return f"{us:8.0f}" if us >= 100 else f"{us:8.1f}"


def table(result: Probe) -> str:
    """The probe as text: per linear, each kernel's median µs per product at every M (``!`` where a time beat
    the floor), its floor and v_kernel(M); then the kernels that could not run, the rotation and the warnings."""
    ms = sorted({r["m"] for r in result.rows})
    lines = [f"bandwidth {result.bandwidth / 1e9:.1f} GB/s (machine.bandwidth), {torch.get_num_threads()} threads; "
             f"noise band ±{result.noise:.0%} (median relative spread of the rounds)"]
    for linear in dict.fromkeys(r["linear"] for r in result.rows):
        mine = [r for r in result.rows if r["linear"] == linear]
        lines += ["", f"{linear} ({mine[0]['out_features']:,} × {mine[0]['in_features']:,}): µs per product, median "
                  f"of {mine[0]['n']} (spread: widest min–max over M ÷ median)",
                  f"{'kernel':15s}{'MB':>7s}{'floor':>8s}" + "".join(f"{'M=' + str(m):>9s}" for m in ms)
                  + f"{'spread':>8s}  " + "".join(f"{'v(' + str(m) + ')':>7s}" for m in ms if m > 1)]
        for kernel in dict.fromkeys(r["kernel"] for r in mine):
            by_m = {r["m"]: r for r in mine if r["kernel"] == kernel}
            first = by_m[ms[0]]
            cells = "".join(f"{_us(by_m[m]['median_s'])}{'!' if by_m[m]['beats_floor'] else ' '}" for m in ms)
            spread = max((r["hi_s"] - r["lo_s"]) / r["median_s"] for r in by_m.values())
            lines.append(f"{kernel:15s}{first['weight_bytes'] / 1e6:7.1f}{_us(first['floor_s'])}{cells}"
                         f"{spread:8.0%}  " + "".join(f"{by_m[m]['v']:7.2f}" for m in ms if m > 1))
    lines += [f"not available: {u['kernel']} on {u['linear']}: {u['reason']}" for u in result.unavailable]
    sets = {(r["copies"], r["total_bytes"] / 1e6) for r in result.rotation}
    if result.rotation:
        r0 = result.rotation[0]
        lines.append(f"rotation: {min(c for c, _ in sets)}–{max(c for c, _ in sets)} copies a kernel, "
                     f"{min(b for _, b in sets):.0f}–{max(b for _, b in sets):.0f} MB each (> {r0['multiple']} × "
                     f"the {r0['cache_bytes'] / 2**20:.0f} MiB last-level cache)")
    lines += [f"WARNING: {w}" for w in result.warnings]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="the MLP's shape only, 3 rounds")
    p.add_argument("--rounds", type=int, default=None, help="timed rounds (default 7; 3 with --quick)")
    p.add_argument("--linears", default=None, help=f"comma-separated (default {','.join(LINEARS)})")
    p.add_argument("--kernels", default=",".join(KERNELS), help="comma-separated kernels")
    p.add_argument("--threads", type=int, default=None, help="torch's threads (default: torch's own)")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    from ..models import OFFLINE, PRESETS, load_model

    model = load_model(PRESETS[OFFLINE].target, "cpu", torch.float32)
    linears = args.linears.split(",") if args.linears else (["mlp.up_proj"] if args.quick else list(LINEARS))
    rounds = args.rounds or (3 if args.quick else 7)
    weights = linear_weights(model, linears)
    del model
    print(table(probe_weights(weights, args.kernels.split(","), rounds=rounds)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
