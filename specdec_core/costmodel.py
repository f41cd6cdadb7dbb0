"""The machine's cost model, measured once and reused: what a forward costs here, as a function of n.

    cm = costmodel.load_or_measure(pair.target, "offline target", drafters={"feature": drafter})
    cm.step_s        one decode step of the target (a forward over 1 new token on a realistic cache)
    cm.v(n)          a forward over n new tokens ÷ one step (v(1) = 1); speculation verifies n = γ + 1
    cm.c["feature"]  a drafter's time per guess ÷ one step, inside a speculative run (warp, draw, bookkeeping)
    cm.bandwidth     bytes/s of a streaming copy: weight bytes ÷ bandwidth is the floor of a step
                     (a memory-bound forward reads every weight once — the roofline's flat part)

Machines differ a lot (docs/reference.md#why-a-cpu-differs), so every number is measured on the machine
it is used on. A measurement is cached as JSON under ``$SPECDEC_CACHE/costmodel/``, keyed by the CPU,
the thread count, torch's version, the model, the forward engine and this file's version; any change
measures again. It is never cached under ``SPECDEC_QUICK``, in CI, or from tests running in parallel:
a v(n) measured while another process competes for the cores must never be stored as the truth.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import statistics
import time
from dataclasses import asdict, dataclass, field

import torch
from filelock import FileLock
from transformers import PreTrainedModel

from .assets import cache_dir
from .fast import is_twin
from .files import write_json
from .generation import Timer
from .lm import Decoder
from .memory import weight_bytes

VERSION = 1  # bump when the way of measuring changes: cached models are then measured again
NS = (1, 2, 3, 4, 5, 6, 8, 12, 16)  # new tokens per forward
CONTEXT = 64  # tokens already in the cache: a prompt's worth


@dataclass
class CostModel:
    """Measured costs of one model on one machine (seconds; ratios to one decode step)."""

    key: dict
    step_s: float
    v_by_n: dict[int, float]
    step_spread: tuple[float, float]  # min, max of the one-token steps (s)
    bandwidth: float  # bytes/s of a streaming copy
    weight_bytes: int
    c: dict[str, float] = field(default_factory=dict)

    def v(self, n: int) -> float:
        """v(n): measured where measured, else linear between the nearest measured n (flat beyond)."""
        if n in self.v_by_n:
            return self.v_by_n[n]
        ns = sorted(self.v_by_n)
        if n <= ns[0] or n >= ns[-1]:
            return self.v_by_n[ns[0] if n <= ns[0] else ns[-1]]
        lo = max(m for m in ns if m < n)
        hi = min(m for m in ns if m > n)
        return self.v_by_n[lo] + (self.v_by_n[hi] - self.v_by_n[lo]) * (n - lo) / (hi - lo)

    @property
    def floor_s(self) -> float:
        """The memory floor of one step: every weight byte read once at the measured bandwidth."""
        return self.weight_bytes / self.bandwidth

    def as_json(self) -> dict:
        out = asdict(self)
        out["v_by_n"] = {str(n): v for n, v in self.v_by_n.items()}
        return out

    @classmethod
    def from_json(cls, data: dict) -> CostModel:
        data = dict(data)
        data["v_by_n"] = {int(n): v for n, v in data["v_by_n"].items()}
        data["step_spread"] = tuple(data["step_spread"])
        return cls(**data)


def machine_key(model: PreTrainedModel, model_name: str, engine: str | None = None) -> dict:
    """What a measurement depends on: change any of it and the model is measured again."""
    cpu = platform.processor() or platform.machine()
    try:  # Linux names the CPU model here; platform.processor() is often just the architecture
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    device = next(model.parameters()).device
    if device.type == "cuda":
        cpu = f"{cpu} + {torch.cuda.get_device_name(device)}"
    return {"cpu": cpu, "threads": torch.get_num_threads(), "torch": torch.__version__, "model": model_name,
            "weight_bytes": weight_bytes(model), "engine": engine or engine_of(model),
            "device": str(device), "version": VERSION}


def engine_of(model: PreTrainedModel) -> str:
    """How the model's forwards run: eager PyTorch, or prepacked oneDNN linears (``fast.twin``)."""
    dtype = next(model.parameters()).dtype
    return f"prepacked oneDNN {dtype}" if is_twin(model) else f"eager {dtype}"


def may_cache() -> bool:
    """Whether a fresh measurement may be stored as this machine's truth: not in a quick run, not in
    CI (it uses a throwaway cache anyway), not from tests (``tests/conftest.py`` sets
    ``SPECDEC_TESTING``; a pytest worker shares the cores with others)."""
    return not (os.environ.get("SPECDEC_QUICK") == "1" or os.environ.get("CI")
                or os.environ.get("PYTEST_XDIST_WORKER") or os.environ.get("SPECDEC_TESTING"))


@torch.inference_mode()
def forward_times(model: PreTrainedModel, ns=NS, context: int = CONTEXT, repeats: int = 7, seed: int = 0
                  ) -> dict[int, list[float]]:
    """Seconds of a forward over n new tokens on a ``context``-token cache, ``repeats`` times per n,
    the n interleaved round by round (after one untimed warm-up round); the cache is rolled back after each."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, model.config.vocab_size, (1, context + max(ns)), generator=gen).to(model.device)
    decoder = Decoder(model)
    decoder.prefill(ids[:, :context])
    times: dict[int, list[float]] = {n: [] for n in ns}
    for round_ in range(repeats + 1):
        for n in ns:
            with Timer(model.device) as t:
                decoder.step(ids[:, context : context + n])
            decoder.rollback(context)
            if round_:
                times[n].append(t.seconds)
    return times


def bandwidth(megabytes: int = 256, repeats: int = 5) -> float:
    """Bytes per second of a streaming copy (read + write) of a buffer larger than the caches."""
    src = torch.ones(megabytes * 10**6 // 4)
    dst = torch.empty_like(src)
    dst.copy_(src)  # touch the pages first
    best = min(_timed(lambda: dst.copy_(src)) for _ in range(repeats))
    return 2 * src.numel() * src.element_size() / best


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def drafter_cost(target: PreTrainedModel, drafter, input_ids: torch.Tensor, step_s: float, gamma: int = 2,
                 max_new_tokens: int = 32) -> float:
    """c of a drafter in run conditions: its drafting time per guess inside a greedy speculative run
    (warp, draw and bookkeeping included) ÷ one target step ``step_s``."""
    from .speculative import speculative_generate

    speculative_generate(target, drafter, input_ids, 8, gamma=gamma)  # warm-up
    stats = speculative_generate(target, drafter, input_ids, max_new_tokens, gamma=gamma).stats
    drafted = sum(len(s["drafted"]) for s in stats["steps"])
    return stats["draft_time"] / drafted / step_s if drafted else 0.0


def measure(target: PreTrainedModel, model_name: str, drafters: dict | None = None,
            input_ids: torch.Tensor | None = None, engine: str | None = None, repeats: int = 7) -> CostModel:
    """Measure the cost model of ``target`` here (``drafters``: name → drafter, measured on ``input_ids``)."""
    times = forward_times(target, repeats=repeats)
    step = statistics.median(times[1])
    costs = CostModel(machine_key(target, model_name, engine), step,
                      {n: statistics.median(t) / step for n, t in times.items()},
                      (min(times[1]), max(times[1])), bandwidth(), weight_bytes(target))
    for name, drafter in (drafters or {}).items():
        costs.c[name] = drafter_cost(target, drafter, _needs(input_ids), step)
    return costs


def cache_path(key: dict):
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return cache_dir() / "costmodel" / f"{digest}.json"


def load_or_measure(target: PreTrainedModel, model_name: str, drafters: dict | None = None,
                    input_ids: torch.Tensor | None = None, engine: str | None = None,
                    refresh: bool = False, repeats: int = 7) -> CostModel:
    """The cached cost model of ``target`` on this machine, measured first if there is none for its
    key (or it lacks a drafter asked for, or ``refresh``). A fresh measurement is stored only when
    :func:`may_cache` allows it; the file is written atomically, under a lock. ``repeats``: timed
    rounds of a fresh measurement (fewer for a quick look, which is never cached anyway)."""
    key = machine_key(target, model_name, engine)
    path = cache_path(key)
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock"):
        cached = CostModel.from_json(json.loads(path.read_text())) if path.exists() and not refresh else None
        if cached is not None and cached.key == key:
            missing = {k: d for k, d in (drafters or {}).items() if k not in cached.c}
            if not missing:
                return cached
            costs = cached  # only the new drafters need measuring, against the cached step
            for name, drafter in missing.items():
                costs.c[name] = drafter_cost(target, drafter, _needs(input_ids), costs.step_s)
        else:
            quick = os.environ.get("SPECDEC_QUICK") == "1"  # a quick look, never stored: 2 rounds do
            costs = measure(target, model_name, drafters, input_ids, engine, min(repeats, 2) if quick else repeats)
        if may_cache():
            write_json(costs.as_json(), path, indent=1)
        return costs


def _needs(input_ids: torch.Tensor | None) -> torch.Tensor:
    if input_ids is None:
        raise ValueError("measuring a drafter's c needs input_ids (a prompt to draft on)")
    return input_ids
