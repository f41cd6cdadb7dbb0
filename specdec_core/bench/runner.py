"""The benchmark: every decoding method side by side on one model pair — ``python -m specdec_core.bench``.

    python -m specdec_core.bench --out results/       # make bench: offline pair, 5 chat prompts × 64 tokens
    python -m specdec_core.bench --preset smollm2 --prompts humaneval --n-prompts 10 --max-new-tokens 128
    python -m specdec_core.bench --methods ar,spec,jacobi --gamma 3 --n-prompts 1 --max-new-tokens 16

How it measures (``bench/harness.py`` says why each step is needed):

- Every method gets the same prompts (chat-template token ids) and stops at the tokenizer's EOS.
  Methods run INTERLEAVED: for each prompt, for each repeat, every method in turn, so a slow phase of
  a shared machine hits all methods alike. One untimed warm-up call per method comes first.
- One call's tokens/s = new tokens ÷ its wall time (prefill included; the device is synchronised).
  Per method: the median over prompts of the per-prompt median over repeats.
- ``× AR``: per prompt, the method's tokens/s ÷ our AR's tokens/s on that prompt in this run; the
  median over prompts. Our AR (``ar``) always runs: it is the baseline.
- α from the method's stats where it has one; tokens per target call = new tokens ÷ target calls,
  the same definition for every method (``generation.py``); medians over prompts.
- Memory: the probe of ``bench/probes.py`` (CUDA max allocated, or the CPU process's peak RSS, reset
  before each call: it includes every model loaded so far), the max over the method's calls;
  ``weights`` counts only the method's own models (shared tensors once).
- Same output as AR: for greedy methods, on how many prompts the new tokens equal our AR's exactly.

Results (``bench/report.py``): ``<out>/<name>.json`` (every number, the settings and the machine;
``schema`` = :data:`~specdec_core.bench.report.SCHEMA_VERSION`), ``<name>.md`` (the table) and
``<name>.png`` (bars), each written atomically.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from functools import partial

import torch

from .. import costmodel, envinfo, theory
from .. import prompts as prompt_sets
from ..generation import Timer
from ..memory import MB, weight_bytes
from ..models import PRESETS, Pair, chat_ids, load_pair
from ..progress import tqdm
from ..speculative import ModelDrafter, speculative_generate
from .harness import classify, interleaved, noise_band
from .methods import NOT_AVAILABLE, Method, build_methods, eos_id, estimate_seconds
from .probes import memory_probe
from .report import SCHEMA_VERSION

# ---- the run ----------------------------------------------------------------------------------


def calibrate(pair: Pair, input_ids: torch.Tensor, gamma: int | None, max_gamma: int = 8) -> dict:
    """The machine's cost model (``specdec_core.costmodel``: one target step, v(n), the model draft's
    in-run c; cached per machine) and, unless ``gamma`` is given, α from a short greedy speculative run at
    γ = 4 and the γ ≤ ``max_gamma`` that maximises S = E(α, γ) / (γc + v(γ + 1)). ``v`` is v at the chosen
    γ; ``v_by_gamma`` keys are strings (γ → v(γ + 1))."""
    costs = costmodel.load_or_measure(pair.target, f"{pair.preset} target", {"model": ModelDrafter(pair.draft)},
                                      input_ids)
    step, c = costs.step_s, costs.c["model"]
    v = {g: costs.v(g + 1) for g in range(1, max_gamma + 1)}
    info = {"target_step_s": step, "c": c, "v_by_gamma": {str(g): x for g, x in v.items()}, "chosen_by": "--gamma",
            "cost_model": costs.as_json()}
    if gamma is None:
        alpha = theory.alpha_for_theory(speculative_generate(pair.target, ModelDrafter(pair.draft), input_ids, 24,
                                                             gamma=4, eos_token_id=eos_id(pair)).stats["alpha"])
        gamma = max(v, key=lambda g: theory.speedup(alpha, g, c, v[g]))
        info.update(alpha_at_gamma_4=alpha, chosen_by="argmax over γ of S(α, γ, c, v(γ + 1))")
    return info | {"gamma": gamma, "v": v.get(gamma, v[max_gamma])}


def _num(x) -> float | None:
    """A JSON-safe number: None for a missing or non-finite value."""
    return None if x is None or not math.isfinite(x) else float(x)


def _prediction(stats: dict, costs: costmodel.CostModel) -> dict | None:
    """The cost model's prediction for one call of a speculative method (None for the others)."""
    if "steps" not in stats or "tokens_per_call" not in stats or "draft_time" not in stats:
        return None
    return asdict(costmodel.predict(stats, costs, tree=bool(stats.get("tree"))))


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
    if args.engine == "fast":  # every method, the baselines included, on the same cheaper forwards
        pair = pair.fast()
    texts = list(prompt_texts if prompt_texts is not None else prompt_sets.get(args.prompts))[: args.n_prompts]
    if not texts:
        raise ValueError("no prompts to run: --n-prompts must be >= 1")
    inputs = [chat_ids(pair.tokenizer, text, pair.device) for text in texts]
    cal = calibrate(pair, inputs[0], args.gamma)
    costs = costmodel.CostModel.from_json(cal["cost_model"])
    registry = methods if methods is not None else build_methods(
        cal["gamma"], args.lookup_tokens, args.temperature, args.seed, args.block_size, args.feature_gamma,
        costs)
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
        def on_call(name: str, i: int = i) -> None:
            bar.set_postfix_str(f"prompt {i + 1}/{len(inputs)}: {name}")
            bar.update()

        calls = {name: partial(registry[name].fn, pair, ids, n) for name in names}
        timed = interleaved(calls, repeats=repeats, warmup=0, device=pair.device, memory=True, on_call=on_call)
        runs = {name: [{"seconds": r.seconds, "tokens_per_s": r.tokens_per_s, "new_tokens": len(r.result),
                        "target_calls": r.result.stats.get("target_calls"), "alpha": _num(r.result.stats.get("alpha")),
                        "tokens_per_call": _num(r.result.tokens_per_call), "peak_memory_bytes": r.peak_memory_bytes,
                        "memory_before_bytes": r.memory_before_bytes, "prediction": _prediction(r.result.stats, costs),
                        "shape": (r.result.stats.get("shapes") or [r.result.stats.get("shape")])[-1]}  # as it ran
                       for r in timed[name]] for name in names}
        outputs = {name: list(timed[name][-1].result.new_tokens) for name in names}
        same = {name: (outputs[name] == outputs["ar"]) if registry[name].greedy else None for name in names}
        raw.append({"prompt": texts[i], "prompt_tokens": int(ids.shape[1]), "runs": runs, "same_as_ar": same,
                    "outputs": outputs, "texts": {k: pair.tokenizer.decode(v) for k, v in outputs.items()}})
    bar.close()

    band = noise_band([[r["tokens_per_s"] for r in p["runs"][name]] for p in raw for name in names])
    weights = {name: weight_bytes(*registry[name].models(pair)) for name in names if registry[name].models is not None}
    return {
        "schema": SCHEMA_VERSION, "settings": vars(args), "device": str(pair.device), "preset": pair.preset,
        "environment": envinfo.environment(), "calibration": cal, "estimate_s": guess, "warmup_s": warm,
        "elapsed_s": time.perf_counter() - started, "memory_kind": memory_probe(pair.device).kind,
        "noise_band": _num(band), "methods": summarise(raw, registry, names, weights, band), "failed": failed,
        "not_available": NOT_AVAILABLE,
        "prompts": raw,
    }


def summarise(raw: list[dict], registry: dict[str, Method], names: Sequence[str], weights: dict[str, int],
              band: float = math.nan) -> list[dict]:
    """One row per method from the raw per-prompt records (the module docstring defines each number);
    ``verdict`` classifies its ratio to our AR against the run's noise band (:func:`harness.classify`)."""

    def per_prompt(name: str, key: str) -> list[float]:
        values = [[r[key] for r in p["runs"][name] if r[key] is not None] for p in raw]
        return [statistics.median(v) for v in values if v]

    def median(values: list[float]) -> float | None:
        return statistics.median(values) if values else None

    ar_tps, rows = per_prompt("ar", "tokens_per_s"), []
    for name in names:
        tps = per_prompt(name, "tokens_per_s")
        runs = [r for p in raw for r in p["runs"][name]]
        ratio = statistics.median(t / a for t, a in zip(tps, ar_tps))
        rows.append(_predicted(runs, ratio, band) | {
            "name": name, "label": registry[name].label, "greedy": registry[name].greedy,
            "tokens_per_s": statistics.median(tps),
            "ratio_to_ar": ratio,
            "ratio_min": min(t / a for t, a in zip(tps, ar_tps)), "ratio_max": max(t / a for t, a in zip(tps, ar_tps)),
            "verdict": "baseline" if name == "ar" else classify(ratio, band),
            "alpha": median(per_prompt(name, "alpha")),
            "tokens_per_call": median(per_prompt(name, "tokens_per_call")),
            "peak_memory_mb": max(r["peak_memory_bytes"] for r in runs) / MB,
            "added_memory_mb": max(r["peak_memory_bytes"] - r["memory_before_bytes"] for r in runs) / MB,
            "weights_mb": weights[name] / MB if name in weights else None,
            "same_as_ar": sum(bool(p["same_as_ar"][name]) for p in raw) if registry[name].greedy else None,
            "prompts": len(raw),
        })
    return rows


def _predicted(runs: list[dict], ratio: float, band: float) -> dict:
    """The row's prediction: the median over its calls of each term and of S, and whether the measured
    ratio lies within the run's noise band of it (``costmodel.Prediction.verdict``)."""
    preds = [r["prediction"] for r in runs if r.get("prediction")]
    if not preds:
        return {"predicted": None, "prediction": None, "prediction_verdict": None}
    p = costmodel.Prediction.median([costmodel.Prediction(**q) for q in preds])
    return {"predicted": p.speedup, "prediction": asdict(p), "prediction_verdict": p.verdict(ratio, band)}


# ---- the settings ------------------------------------------------------------------------------


def _method_list(text: str) -> list[str] | None:
    return [m.strip() for m in text.split(",") if m.strip()] or None


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The settings; ``parse_args([])`` gives the defaults (5 chat prompts × 64 tokens × 1 repeat)."""
    p = argparse.ArgumentParser(prog="python -m specdec_core.bench", description="Every decoding method side by side on one model pair.",
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--preset", default="offline", choices=sorted(PRESETS), help="the model pair")
    p.add_argument("--prompts", default="chat", choices=["tutorial", "chat", "heldout", "copy", "in_domain", "code", "humaneval"],
                   help="prompt set (copy: prompts that carry the text or code to work on)")
    p.add_argument("--n-prompts", type=int, default=5, help="use the first N prompts of the set")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--repeats", type=int, default=3, help="interleaved timed calls per method and prompt "
                   "(≥ 2 measure the noise band; 1: a single run, no verdict)")
    p.add_argument("--methods", type=_method_list, default=None, help="comma list; None: all (ar always runs)")
    p.add_argument("--gamma", type=int, default=None, help="draft tokens per step; None: theory.best_gamma")
    p.add_argument("--feature-gamma", type=int, default=2, help="draft tokens per step of the feature drafter")
    p.add_argument("--lookup-tokens", type=int, default=4, help="tokens per step of prompt lookup")
    p.add_argument("--temperature", type=float, default=0.7, help="of the sampled speculative run")
    p.add_argument("--seed", type=int, default=0, help="of the sampled speculative run")
    p.add_argument("--block-size", type=int, default=16, help="Jacobi block size")
    p.add_argument("--engine", default="fast", choices=["fast", "plain"],
                   help="fast: every model as fast.twin (prepacked linears on a CPU); plain: eager PyTorch")
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
