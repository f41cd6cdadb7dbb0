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
- Memory: after the timed runs (untimed), each method ALONE in a fresh Python process (``bench/fresh.py``):
  it loads the pair, prepares the method, frees every weight the method's models do not hold, warms up
  as here, resets the peak and generates once on the longest prompt: CPU peak RSS (interpreter +
  libraries + that method's models + KV cache and activations) or CUDA max allocated.
  ``--no-fresh-memory`` skips it. The probe around each timed call (``process_peak_mb``) reads the
  WHOLE process, which holds every model loaded so far; it stays in the JSON, labelled so, not in the
  table. ``weights`` counts only the method's own models (shared tensors once).
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

from .. import costmodel, engines, envinfo, theory
from .. import prompts as prompt_sets
from ..drafters import ModelDrafter
from ..generation import Timer
from ..memory import MB, weight_bytes
from ..models import PRESETS, Pair, chat_ids, load_pair
from ..progress import tqdm
from ..records import RunStats, SpecStats, TreeStats
from ..speculative import speculative_generate
from .engine import engine_rows
from .fresh import INCLUDES, FreshProbeError, Job, Loaded, build_pair, keep_only, measure
from .harness import classify, interleaved, noise_band
from .methods import NOT_AVAILABLE, Method, build_methods, eos_id, estimate_seconds
from .probes import memory_probe
from .report import SCHEMA_VERSION

# ---- the run ----------------------------------------------------------------------------------

FRESH_START_S = 20.0  # a fresh process's imports and loading of the offline pair on 2 busy cores (rough, for the estimate)


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
                                                             gamma=4, eos_token_id=eos_id(pair)).stats.alpha)
        gamma = max(v, key=lambda g: theory.speedup(alpha, g, c, v[g]))
        info.update(alpha_at_gamma_4=alpha, chosen_by="argmax over γ of S(α, γ, c, v(γ + 1))")
    return info | {"gamma": gamma, "v": v.get(gamma, v[max_gamma])}


def _num(x) -> float | None:
    """A JSON-safe number: None for a missing or non-finite value."""
    return None if x is None or not math.isfinite(x) else float(x)


def _prediction(stats: RunStats, costs: costmodel.CostModel) -> dict | None:
    """The cost model's prediction for one call of a drafting method (None for the others)."""
    if not isinstance(stats, (SpecStats, TreeStats)):
        return None
    return asdict(costmodel.predict(stats, costs, tree=isinstance(stats, TreeStats)))


def _shape_ran(stats: RunStats) -> object:
    """The tree or lookahead shape a run ran last (None for the other methods)."""
    return (stats.shapes or [stats.shape])[-1] if isinstance(stats, TreeStats) else None


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
        prompt_texts: Sequence[str] | None = None, progress: bool = True, log: Callable[[str], None] = print,
        fresh_pair: dict | None = None) -> dict:
    """Run the benchmark with the settings of :func:`parse_args` and return the report (JSON-ready).
    ``pair``, ``methods`` and ``prompt_texts`` replace the preset, the registry and the prompt set.
    ``fresh_pair``: how a fresh process rebuilds a ``pair`` given here (``fresh.build_pair``; default: the
    preset when ``pair`` is None, else no fresh-process memory); it rebuilds the standard registry
    (``build_methods``) with this run's settings, so a method of a custom ``methods`` that is not there is not measured."""
    if fresh_pair is None and pair is None:
        fresh_pair = {"preset": args.preset}
    started = time.perf_counter()
    pair = pair if pair is not None else load_pair(args.preset)
    choice = engines.choose(pair, progress=progress) if "auto" in (args.engine, args.spec_engine) else None
    engine_name = choice.ar if args.engine == "auto" else args.engine
    log(choice.line() if choice is not None else f"every method on {engine_name}")
    pair = on_engine(pair, engine_name)  # every method, the baselines included, on the same forwards: our AR's
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
    # each method alone in a fresh process afterwards: start-up and loading, its preparation, a warm-up and one call
    fresh_guess = (len(names) * FRESH_START_S + estimate_seconds(cal["target_step_s"], names, 1, 1, n, warm_n)
                   if args.fresh_memory and fresh_pair is not None else 0.0)
    log(f"{len(names)} methods × {len(inputs)} prompts × {repeats} repeat(s) × {n} tokens, γ = {cal['gamma']} "
        f"({cal['chosen_by']}); one target step {cal['target_step_s'] * 1e3:.0f} ms → expected run time ≈ "
        f"{guess / 60:.1f} min (rough)" + (f", then ≈ {fresh_guess / 60:.1f} min for each method's memory alone in a "
                                          "fresh process (--no-fresh-memory skips it)" if fresh_guess else ""))

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
                        "target_calls": r.result.stats.target_calls, "alpha": _num(getattr(r.result.stats, "alpha", None)),
                        "tokens_per_call": _num(r.result.tokens_per_call), "peak_memory_bytes": r.peak_memory_bytes,
                        "memory_before_bytes": r.memory_before_bytes, "prediction": _prediction(r.result.stats, costs),
                        "shape": _shape_ran(r.result.stats)}
                       for r in timed[name]] for name in names}
        outputs = {name: list(timed[name][-1].result.new_tokens) for name in names}
        same = {name: (outputs[name] == outputs["ar"]) if registry[name].greedy else None for name in names}
        raw.append({"prompt": texts[i], "prompt_tokens": int(ids.shape[1]), "runs": runs, "same_as_ar": same,
                    "outputs": outputs, "texts": {k: pair.tokenizer.decode(v) for k, v in outputs.items()}})
    bar.close()

    band = noise_band([[r["tokens_per_s"] for r in p["runs"][name]] for p in raw for name in names])
    weights = {name: weight_bytes(*registry[name].models(pair)) for name in names if registry[name].models is not None}
    settings = {"gamma": cal["gamma"], "lookup_tokens": args.lookup_tokens, "temperature": args.temperature,
                "seed": args.seed, "block_size": args.block_size, "feature_gamma": args.feature_gamma,
                "costs": cal["cost_model"]}
    fresh = fresh_memory(args, names, max(inputs, key=lambda x: x.shape[1]), fresh_pair, settings, warm_n,
                         pair.device, progress, log, engine=engine_name)
    rows = summarise(raw, registry, names, weights, band, fresh)
    engine = None
    if args.spec_engine != "none" and "ar" in names:
        spec_name = choice.spec if args.spec_engine == "auto" else args.spec_engine
        log(f"engine rows: our AR ({engine_name}), and AR and the best exact method on {spec_name}")
        engine = engine_rows(pair, registry, rows, inputs, n, repeats, on_engine(pair, spec_name), spec_name, log)
    return {
        "schema": SCHEMA_VERSION, "settings": vars(args), "device": str(pair.device), "preset": pair.preset,
        "engines": {"ar": engine_name, "spec": engine["engine"] if engine else None,
                    "choice": choice.as_json() if choice is not None else None},
        "environment": envinfo.environment(), "calibration": cal, "estimate_s": guess, "warmup_s": warm,
        "elapsed_s": time.perf_counter() - started, "memory_kind": memory_probe(pair.device).kind,
        "fresh_memory": fresh,
        "noise_band": _num(band), "methods": rows, "engine": engine, "failed": failed,
        "not_available": NOT_AVAILABLE,
        "prompts": raw,
    }


def fresh_memory(args: argparse.Namespace, names: Sequence[str], ids: torch.Tensor, fresh_pair: dict | None,
                 settings: dict, warm_n: int, device: torch.device, progress: bool = True,
                 log: Callable[[str], None] = print, engine: str = "fast") -> dict:
    """Each method alone in a fresh process (``bench/fresh.py``), on ``ids`` (the longest prompt), after a
    ``warm_n``-token warm-up as in the timed runs; untimed. ``methods``: name → ``FreshPeak.as_json()``;
    ``failed``: name → why; ``skipped``: why nothing was measured (None when it ran)."""
    n = args.max_new_tokens
    out = {"includes": INCLUDES, "prompt_tokens": int(ids.shape[1]), "max_new_tokens": n, "warmup_tokens": warm_n,
           "methods": {}, "failed": {}, "skipped": None}
    if not args.fresh_memory:
        return out | {"skipped": "--no-fresh-memory"}
    if fresh_pair is None:
        return out | {"skipped": "the pair was built in memory, and no fresh_pair says how a fresh process loads it"}
    known = build_methods(**{k: v for k, v in settings.items() if k != "costs"})
    for name in tqdm(names, desc="fresh-process memory", unit="method", disable=not progress):
        if name not in known:
            out["failed"][name] = "not in the registry a fresh process rebuilds (methods.build_methods)"
            continue
        try:
            out["methods"][name] = measure(method_job(name, pair=fresh_pair, prompt_ids=ids[0].tolist(), max_new_tokens=n,
                                                      engine=engine, registry=settings, warmup_tokens=warm_n,
                                                      device=str(device))).as_json()
        except FreshProbeError as err:
            out["failed"][name] = str(err)
            log(f"{name}: no fresh-process memory: {err}")
    return out


# ---- one method alone in a fresh process (bench/fresh.py) ------------------------------------------


def method_job(method: str, *, pair: dict, prompt_ids: Sequence[int], max_new_tokens: int, engine: str = "fast",
               registry: dict | None = None, warmup_tokens: int = 0, device: str | None = None) -> Job:
    """A job for one method of ``methods.build_methods(**registry)`` (``registry["costs"]``: a cost model's
    JSON) on the pair ``pair`` describes (:func:`build_pair`), on ``engine`` (:func:`on_engine`)."""
    return Job("specdec_core.bench.runner:method_recipe",
               {"method": method, "pair": pair, "engine": engine, "registry": registry or {"gamma": 4},
                "prompt_ids": [int(i) for i in prompt_ids], "max_new_tokens": max_new_tokens,
                "warmup_tokens": warmup_tokens, "device": device, "label": method})


def method_recipe(method: str, pair: dict, engine: str, registry: dict, prompt_ids: list[int], max_new_tokens: int,
                  warmup_tokens: int, device: str | None, label: str) -> Loaded:
    """Load the pair, prepare ``method``, free every weight its models do not hold (:func:`keep_only`)."""
    p = build_pair(pair, device)
    p = on_engine(p, engine)
    settings = dict(registry)
    costs = costmodel.CostModel.from_json(settings.pop("costs")) if settings.get("costs") else None
    entry = build_methods(**settings, costs=costs)[method]
    if entry.prepare is not None:
        entry.prepare(p)
    ids = torch.tensor([prompt_ids], device=p.device)
    everything = [p.target, p.draft, p.plain().target, p.plain().draft]
    if entry.models is None:
        holds, about = everything, "the whole pair (the method does not say which models it runs)"
    else:
        holds = entry.models(p)
        freed = keep_only(holds, everything)
        about = f"{entry.label}: {len(holds)} model(s) kept, {freed / MB:,.0f} MB of the pair's other weights freed"
    return Loaded(lambda: entry.fn(p, ids, max_new_tokens), holds, p.device,
                  (lambda: entry.fn(p, ids, warmup_tokens)) if warmup_tokens else None, about)


def summarise(raw: list[dict], registry: dict[str, Method], names: Sequence[str], weights: dict[str, int],
              band: float = math.nan, fresh: dict | None = None) -> list[dict]:
    """One row per method from the raw per-prompt records (the module docstring defines each number);
    ``verdict`` classifies its ratio to our AR against the run's noise band (:func:`harness.classify`);
    ``fresh``: :func:`fresh_memory`'s record, whose figures become the row's ``fresh_*_mb`` (None: not measured)."""
    measured = (fresh or {}).get("methods", {})

    def mb(name: str, key: str) -> float | None:
        return measured[name][key] / MB if name in measured else None

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
            "fresh_peak_mb": mb(name, "peak_bytes"), "fresh_loaded_mb": mb(name, "loaded_bytes"),
            "fresh_added_mb": mb(name, "added_bytes"), "fresh_baseline_mb": mb(name, "baseline_bytes"),
            # the probe around the timed calls: the WHOLE process, every model loaded so far (not in the table)
            "process_peak_mb": max(r["peak_memory_bytes"] for r in runs) / MB,
            "process_added_mb": max(r["peak_memory_bytes"] - r["memory_before_bytes"] for r in runs) / MB,
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


def on_engine(pair: Pair, engine: str) -> Pair:
    """``pair`` on ``engine``: "fast" (``Pair.fast``: prepacked, dynamic cache), "plain" (eager), or one of
    ``engines.CANDIDATES`` by name."""
    return pair.fast() if engine == "fast" else pair.plain() if engine == "plain" else engines.on_engine(pair, engine)


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
    p.add_argument("--engine", default="auto", choices=["auto", "fast", "plain", *engines.CANDIDATES, *engines.COMPILED],
                   help="the engine of the main table, our AR's: auto: the fastest AR engine measured here "
                        "(specdec_core.engines, cached per machine; pinned under SPECDEC_QUICK); fast: every model as "
                        "fast.twin (prepacked, dynamic cache); plain: eager PyTorch; or a named engine")
    p.add_argument("--spec-engine", default="auto", choices=["auto", "none", *engines.CANDIDATES, *engines.COMPILED],
                   help="the engine rows (a second phase): AR and the table's fastest method with an exact rule on this engine, "
                        "beside our AR; auto: the engine where speculation is predicted fastest here; none: skip them")
    p.add_argument("--out", default="results", help="folder for <name>.json, .md and .png")
    p.add_argument("--name", default=None, help="file name; None: <device>-<preset>-<prompts>")
    p.add_argument("--no-fresh-memory", dest="fresh_memory", action="store_false",
                   help="skip each method's peak memory alone in a fresh process (run after the timed runs)")
    p.add_argument("--list", action="store_true", help="list the methods and exit")
    args = p.parse_args(argv)
    for flag in ("n_prompts", "max_new_tokens", "repeats", "lookup_tokens", "block_size", "gamma", "feature_gamma"):
        if getattr(args, flag) is not None and getattr(args, flag) < 1:
            p.error(f"--{flag.replace('_', '-')} must be >= 1, got {getattr(args, flag)}")
    if args.temperature <= 0:
        p.error("--temperature must be > 0 (it is the sampled run; the greedy runs are always there)")
    return args
