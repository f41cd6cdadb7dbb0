"""The benchmark: every decoding method side by side on one model pair — ``python -m specdec_core.bench``.

    python -m specdec_core.bench --out results/       # make bench: offline pair, 5 chat prompts × 64 tokens
    python -m specdec_core.bench --preset smollm2 --prompts humaneval --n-prompts 10 --max-new-tokens 128
    python -m specdec_core.bench --methods ar,spec,jacobi --gamma 3 --n-prompts 1 --max-new-tokens 16

How it measures (bench.py says why each step is needed):

- Every method gets the same prompts (chat-template token ids) and stops at the tokenizer's EOS.
  Methods run INTERLEAVED: for each prompt, for each repeat, every method in turn, so a slow phase of
  a shared machine hits all methods alike. One untimed warm-up call per method comes first.
- One call's tokens/s = new tokens ÷ its wall time (prefill included; the device is synchronised).
  Per method: the median over prompts of the per-prompt median over repeats.
- ``× AR``: per prompt, the method's tokens/s ÷ our AR's tokens/s on that prompt in this run; the
  median over prompts. Our AR (``ar``) always runs: it is the baseline.
- α and tokens per target call come from the method's own stats where it has them (median over prompts).
- Memory: the probe of ``bench.measure_latency_and_memory`` (CUDA max allocated, or the CPU process's
  peak RSS, reset before each call: it includes every model loaded so far), the max over the method's
  calls; ``weights`` counts only the method's own models (shared tensors once).
- Same output as AR: for greedy methods, on how many prompts the new tokens equal our AR's exactly.

Results: ``<out>/<name>.json`` (every number, the settings and the machine), ``<name>.md`` (the
table) and ``<name>.png`` (bars), written atomically (a temp file, then ``os.replace``).
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

import torch
from tqdm.auto import tqdm

from . import bench, envinfo, theory
from . import prompts as prompt_sets
from .generation import Timer
from .methods import NOT_AVAILABLE, Method, build_methods, eos_id, estimate_seconds, tokens_per_call
from .models import PRESETS, Pair, chat_ids, load_pair
from .speculative import ModelDrafter, speculative_generate

# ---- the run ----------------------------------------------------------------------------------


def calibrate(pair: Pair, input_ids: torch.Tensor, gamma: int | None, max_gamma: int = 8) -> dict:
    """One target decode step, c, and v for every γ ≤ ``max_gamma`` (on a CPU the cost of verifying γ + 1
    tokens jumps with γ); unless ``gamma`` is given, α from a short greedy speculative run at γ = 4 and the
    γ that maximises S = E(α, γ) / (γc + v(γ)). ``v`` is v at the chosen γ; ``v_by_gamma`` keys are strings."""
    theory.measure_costs(pair.target, pair.draft, input_ids, gamma=4, repeats=2)  # discarded: the first calls
    costs = {g: theory.measure_costs(pair.target, pair.draft if g == 1 else None, input_ids, gamma=g, repeats=5)
             for g in range(1, max_gamma + 1)}  # page weights in, pick kernels; the draft's step once is enough
    step, c = costs[1].target_step, costs[1].c
    v = {g: cost.verify / step for g, cost in costs.items()}
    info = {"target_step_s": step, "c": c, "v_by_gamma": {str(g): x for g, x in v.items()}, "chosen_by": "--gamma"}
    if gamma is None:
        alpha = speculative_generate(pair.target, ModelDrafter(pair.draft), input_ids, 24, 4,
                                     eos_token_id=eos_id(pair)).stats["alpha"]
        alpha = 0.0 if math.isnan(alpha) else alpha  # NaN: no draft token was examined
        gamma = max(v, key=lambda g: theory.speedup(alpha, g, c, v[g]))
        info.update(alpha_at_gamma_4=alpha, chosen_by="argmax over γ of S(α, γ, c, v(γ))")
    return info | {"gamma": gamma, "v": v.get(gamma, v[max_gamma])}


def _num(x) -> float | None:
    """A JSON-safe number: None for a missing or non-finite value."""
    return None if x is None or not math.isfinite(x) else float(x)


def _json_safe(x):
    """``x`` with every non-finite float replaced by None (strict JSON has no NaN)."""
    if isinstance(x, dict):
        return {k: _json_safe(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_json_safe(v) for v in x]
    return _num(x) if isinstance(x, float) else x


def select_methods(registry: dict[str, Method], wanted: Sequence[str] | None) -> list[str]:
    """The method names to run, in registry order, with ``ar`` (the baseline) always included."""
    for name in wanted or ():
        if name in NOT_AVAILABLE and name not in registry:
            raise ValueError(f"method {name!r}, {NOT_AVAILABLE[name]}, is not available yet")
        if name not in registry:
            raise ValueError(f"unknown method {name!r}: choose from {', '.join(registry)}")
    if "ar" not in registry:
        raise ValueError("the registry has no 'ar' method: every ratio is relative to our AR")
    return [name for name in registry if not wanted or name in wanted or name == "ar"]


def run(args: argparse.Namespace, pair: Pair | None = None, methods: dict[str, Method] | None = None,
        prompt_texts: Sequence[str] | None = None, progress: bool = True, log: Callable[[str], None] = print) -> dict:
    """Run the benchmark with the settings of :func:`parse_args` and return the report (JSON-ready).
    ``pair``, ``methods`` and ``prompt_texts`` replace the preset, the registry and the prompt set."""
    started = time.perf_counter()
    pair = pair if pair is not None else load_pair(args.preset)
    texts = list(prompt_texts if prompt_texts is not None else prompt_sets.get(args.prompts))[: args.n_prompts]
    if not texts:
        raise ValueError("no prompts to run: --n-prompts must be >= 1")
    inputs = [chat_ids(pair.tokenizer, text, pair.device) for text in texts]
    cal = calibrate(pair, inputs[0], args.gamma)
    registry = methods if methods is not None else build_methods(
        cal["gamma"], args.lookup_tokens, args.temperature, args.seed, args.block_size, args.feature_gamma)
    names = select_methods(registry, args.methods)
    n, repeats, warm_n = args.max_new_tokens, args.repeats, min(args.max_new_tokens, 16)
    guess = estimate_seconds(cal["target_step_s"], names, len(inputs), repeats, n, warm_n)
    log(f"{len(names)} methods × {len(inputs)} prompts × {repeats} repeat(s) × {n} tokens, γ = {cal['gamma']} "
        f"({cal['chosen_by']}); one target step {cal['target_step_s'] * 1e3:.0f} ms → expected run time ≈ "
        f"{guess / 60:.1f} min (rough)")

    bar = tqdm(total=len(names) * (1 + len(inputs) * repeats), desc="benchmark", unit="call", disable=not progress)
    warm, failed = {}, {}
    for name in list(names):  # set-up and warm-up, untimed; a method that fails here is left out
        bar.set_postfix_str(f"warm-up: {name}")
        try:
            if registry[name].prepare is not None:
                registry[name].prepare(pair)
            with Timer(pair.device) as t:
                registry[name].fn(pair, inputs[0], warm_n)
            warm[name] = t.seconds
        except Exception as err:  # one broken method must not cost a 20-minute run
            if name == "ar":
                raise
            failed[name] = f"{type(err).__name__}: {err}"
            names.remove(name)
            bar.total -= len(inputs) * repeats
            log(f"{name} failed in the warm-up and is left out: {failed[name]}")
        bar.update()
    log(f"warm-up took {sum(warm.values()):.0f} s → about {sum(warm.values()) * len(inputs) * repeats * n / warm_n / 60:.1f} "
        "min to go")

    raw = []
    for i, ids in enumerate(inputs):
        runs: dict[str, list[dict]] = {name: [] for name in names}
        outputs: dict[str, list[int]] = {}
        for _ in range(repeats):
            for name in names:  # interleaved: every method once, then the next repeat
                bar.set_postfix_str(f"prompt {i + 1}/{len(inputs)}: {name}")
                m = bench.measure_latency_and_memory(partial(registry[name].fn, pair, ids, n), warmup=0, repeats=1,
                                                     device=pair.device)
                s = m.result.stats
                runs[name].append({
                    "seconds": m.latency, "tokens_per_s": m.tokens_per_s, "new_tokens": m.new_tokens,
                    "target_calls": s.get("target_calls"), "alpha": _num(s.get("alpha")),
                    "tokens_per_call": _num(tokens_per_call(m.result, name)),
                    "peak_memory_bytes": m.peak_memory_bytes, "memory_before_bytes": m.memory_before_bytes})
                outputs[name] = list(m.result.new_tokens)
                bar.update()
        same = {name: (outputs[name] == outputs["ar"]) if registry[name].greedy else None for name in names}
        raw.append({"prompt": texts[i], "prompt_tokens": int(ids.shape[1]), "runs": runs, "same_as_ar": same,
                    "outputs": outputs, "texts": {k: pair.tokenizer.decode(v) for k, v in outputs.items()}})
    bar.close()

    weights = {name: bench.weight_bytes(torch.nn.ModuleList(registry[name].models(pair)))
               for name in names if registry[name].models is not None}
    return {
        "settings": vars(args), "device": str(pair.device), "preset": pair.preset,
        "environment": envinfo.environment(), "calibration": cal, "estimate_s": guess, "warmup_s": warm,
        "elapsed_s": time.perf_counter() - started, "memory_kind": m.memory_kind,
        "methods": summarise(raw, registry, names, weights), "failed": failed, "not_available": NOT_AVAILABLE,
        "prompts": raw,
    }


def summarise(raw: list[dict], registry: dict[str, Method], names: Sequence[str], weights: dict[str, int]) -> list[dict]:
    """One row per method from the raw per-prompt records (the module docstring defines each number)."""

    def per_prompt(name: str, key: str) -> list[float]:
        values = [[r[key] for r in p["runs"][name] if r[key] is not None] for p in raw]
        return [statistics.median(v) for v in values if v]

    def median(values: list[float]) -> float | None:
        return statistics.median(values) if values else None

    ar_tps, rows = per_prompt("ar", "tokens_per_s"), []
    for name in names:
        tps = per_prompt(name, "tokens_per_s")
        runs = [r for p in raw for r in p["runs"][name]]
        rows.append({
            "name": name, "label": registry[name].label, "greedy": registry[name].greedy,
            "tokens_per_s": statistics.median(tps),
            "ratio_to_ar": statistics.median(t / a for t, a in zip(tps, ar_tps)),
            "alpha": median(per_prompt(name, "alpha")),
            "tokens_per_call": median(per_prompt(name, "tokens_per_call")),
            "peak_memory_mb": max(r["peak_memory_bytes"] for r in runs) / bench.MB,
            "added_memory_mb": max(r["peak_memory_bytes"] - r["memory_before_bytes"] for r in runs) / bench.MB,
            "weights_mb": weights[name] / bench.MB if name in weights else None,
            "same_as_ar": sum(bool(p["same_as_ar"][name]) for p in raw) if registry[name].greedy else None,
            "prompts": len(raw),
        })
    return rows


# ---- writing the results ----------------------------------------------------------------------


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to a temp file next to ``path``, then rename it: never a half-written file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def markdown(report: dict) -> str:
    """The results table, with what was run and on which machine."""
    s, env, cal = report["settings"], report["environment"], report["calibration"]

    def fmt(x, spec: str) -> str:
        return "–" if x is None else format(x, spec)

    lines = [
        f"# Benchmark: {report['preset']} pair, {s['prompts']} prompts",
        "",
        f"{report['methods'][0]['prompts']} prompts × {s['max_new_tokens']} new tokens (at most; EOS stops) × "
        f"{s['repeats']} repeat(s), interleaved, batch size 1, device `{report['device']}`. γ = {cal['gamma']} "
        f"({cal['chosen_by']}; c = {cal['c']:.2f}, v = {cal['v']:.2f}). Run time {report['elapsed_s'] / 60:.1f} min.",
        f"Machine: {env['cpu']}, {env['cpu cores (logical)']} cores, torch {env['torch']} "
        f"({env['torch threads']} threads), transformers {env['transformers']}, GPU: {env['cuda']}.",
        "",
        "| method | tokens/s | × our AR | α | tokens / target call | peak memory (MB) | weights (MB) | same output as AR |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in report["methods"]:
        same = "n/a (sampled)" if r["same_as_ar"] is None else f"{r['same_as_ar']}/{r['prompts']}"
        lines.append(f"| {r['label']} | {r['tokens_per_s']:.1f} | {r['ratio_to_ar']:.2f} | {fmt(r['alpha'], '.2f')} | "
                     f"{fmt(r['tokens_per_call'], '.2f')} | {r['peak_memory_mb']:,.0f} | {fmt(r['weights_mb'], ',.1f')} | {same} |")
    lines += ["", "tokens/s: median over prompts (prefill included). × our AR: median over prompts of the per-prompt "
              "ratio, measured in this run. α: accepted ÷ examined draft tokens. Peak memory: "
              f"{report['memory_kind']} of the whole process (every model loaded so far); weights: the method's own "
              "models. Same output: prompts whose greedy tokens equal our AR's exactly."]
    if report["failed"]:
        lines += ["", "Failed (left out): " + "; ".join(f"`{k}`: {v}" for k, v in report["failed"].items()) + "."]
    if report["not_available"]:
        lines += ["", "Not available yet: " + "; ".join(f"`{k}`, {v}" for k, v in report["not_available"].items()) + "."]
    return "\n".join(lines) + "\n"


def report_name(device: str | torch.device, preset: str, prompts: str) -> str:
    """The default name of a report's files, ``<device type>-<preset>-<prompts>``: ``make bench`` → cpu-offline-chat."""
    return f"{torch.device(device).type}-{preset}-{prompts}"


def write_report(report: dict, out: Path, name: str | None = None) -> dict[str, Path]:
    """Write ``<out>/<name>.json``, ``.md`` and ``.png``; name defaults to :func:`report_name`."""
    from . import viz

    name = name or report_name(report["device"], report["preset"], report["settings"]["prompts"])
    paths = {ext: Path(out) / f"{name}.{ext}" for ext in ("json", "md", "png")}
    rows = report["methods"]
    same = [None if r["same_as_ar"] is None else r["same_as_ar"] / r["prompts"] for r in rows]
    fig = viz.benchmark_bars([r["label"] for r in rows], [r["ratio_to_ar"] for r in rows], [r["tokens_per_s"] for r in rows],
                             same, [r["weights_mb"] for r in rows],
                             f"{report['preset']} pair on {report['device']}: {report['settings']['prompts']} prompts",
                             memory_label="weights of the method's models (MB)")
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=120)
    viz.plt.close(fig)
    write_atomic(paths["json"], json.dumps(_json_safe(report), indent=1, allow_nan=False).encode())
    write_atomic(paths["md"], markdown(report).encode())
    write_atomic(paths["png"], png.getvalue())
    return paths


# ---- the command line -------------------------------------------------------------------------


def _method_list(text: str) -> list[str] | None:
    return [m.strip() for m in text.split(",") if m.strip()] or None


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The settings; ``parse_args([])`` gives the defaults (5 chat prompts × 64 tokens × 1 repeat)."""
    p = argparse.ArgumentParser(prog="python -m specdec_core.bench", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--preset", default="offline", choices=sorted(PRESETS), help="the model pair")
    p.add_argument("--prompts", default="chat", choices=["tutorial", "chat", "heldout", "in_domain", "code", "humaneval"], help="prompt set")
    p.add_argument("--n-prompts", type=int, default=5, help="use the first N prompts of the set")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--repeats", type=int, default=1, help="timed calls per method and prompt")
    p.add_argument("--methods", type=_method_list, default=None, help="comma list; None: all (ar always runs)")
    p.add_argument("--gamma", type=int, default=None, help="draft tokens per step; None: theory.best_gamma")
    p.add_argument("--feature-gamma", type=int, default=2, help="draft tokens per step of the feature drafter")
    p.add_argument("--lookup-tokens", type=int, default=4, help="tokens per step of prompt lookup")
    p.add_argument("--temperature", type=float, default=0.7, help="of the sampled speculative run")
    p.add_argument("--seed", type=int, default=0, help="of the sampled speculative run")
    p.add_argument("--block-size", type=int, default=16, help="Jacobi block size")
    p.add_argument("--out", default="results", help="folder for <name>.json, .md and .png")
    p.add_argument("--name", default=None, help="file name; None: <device>-<preset>-<prompts>")
    p.add_argument("--list", action="store_true", help="list the methods and exit")
    args = p.parse_args(argv)
    for flag in ("n_prompts", "max_new_tokens", "repeats", "lookup_tokens", "block_size", "gamma", "feature_gamma"):
        if getattr(args, flag) is not None and getattr(args, flag) < 1:
            p.error(f"--{flag.replace('_', '-')} must be >= 1, got {getattr(args, flag)}")
    if args.temperature <= 0:
        p.error("--temperature must be > 0 (it is the sampled run; the greedy runs are always there)")
    return args


def main(argv: Sequence[str] | None = None, pair: Pair | None = None, methods: dict[str, Method] | None = None,
         prompt_texts: Sequence[str] | None = None, progress: bool = True) -> int:
    args = parse_args(argv)
    registry = methods if methods is not None else build_methods(gamma=4, lookup_tokens=args.lookup_tokens)
    if args.list:
        print("\n".join(f"{name:14s} {method.label}" for name, method in registry.items()))
        print("\n".join(f"{name:14s} {why}: not available yet" for name, why in NOT_AVAILABLE.items()))
        return 0
    try:  # check the method names before loading anything
        select_methods(registry, args.methods)
    except ValueError as err:
        print(f"error: {err}")
        return 2
    report = run(args, pair, methods, prompt_texts, progress)
    paths = write_report(report, Path(args.out), args.name)
    print(markdown(report))
    print("wrote " + ", ".join(str(p) for p in paths.values()))
    return 0
