"""``python -m specdec_core.bench.serving --out results/`` (make serving): lesson 10's sweeps → results/serving-cpu.json.

    python -m specdec_core.bench.serving --out results/        # B = 1 … 32, γ ∈ {1, 2, 4} and adaptive: ~10 min, 2 cores
    python -m specdec_core.bench.serving --quick               # B = 1, 2, 4, γ ∈ {1, 2}, 6 tokens: seconds (SPECDEC_QUICK)

On our AR's engine (``engines.ours``; a batch needs the static cache, so a non-static choice runs at its precision
on the static engine, and the report says so), greedy, the same chat prompts cycled to B rows, no EOS (every row
makes ``new_tokens``):

1. **the cost model under load** (``batch_forwards.measure``): t(B, n) at every B and every verify width n = γ + 1,
   d(B), a compute rate and the bandwidth — the roofline's turn B* (``load_costs.LoadCosts.roofline_turn``);
2. **batched AR** at each B: tokens/s summed and per sequence, the step time against B;
3. **speculation** (the course's draft model) at each B with each fixed γ and with γ chosen per step
   (``load_costs.AdaptiveGamma``), beside the prediction: gain = speculation's tokens/s ÷ batched AR's in the same
   round, predicted from the cost table with τ = E(α, γ) (α measured in the run) and with the run's own τ;
4. the crossover B (measured and predicted), the prediction's median error, and whether adaptive γ stays within
   the noise band of the better of "always on" and "off" at every B.

Every call runs inside :func:`~specdec_core.bench.harness.interleaved` (a short untimed warm-up pass first), so the
repeats of every (B, method) interleave; numbers are medians with min–max. Throughput is the decode's: the
prefill (AR's ``ttft``; speculation's prefill is the same forward, so its time is taken from the AR run of the same
B and round) is left out. The ``"load"`` entry is the continuous-batching sweep (``bench/load_sweep.py``: requests
at a few rates, speculation off / on / adaptive; filled by ``main``, ``None`` from :func:`sweep` alone).
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path

import torch
from transformers import PreTrainedModel

from .. import engines, envinfo, machine
from ..batch import generate_batch
from ..batch_speculative import speculative_generate_batch
from ..drafters import ModelDrafter
from ..files import write_json
from ..generation import Generation
from ..load_costs import AdaptiveGamma, LoadCosts, batch_tau
from ..progress import tqdm
from ..records import SpecStats
from . import batch_forwards, load_sweep
from .harness import Run, Spread, interleaved, noise_band

SCHEMA = 1
BATCHES = (1, 2, 4, 8, 16, 32)
GAMMAS = (1, 2, 4)
NEW_TOKENS = 48
REPEATS = 3
ROUNDS = 5  # rounds of the forwards' table
QUICK = {"batches": (1, 2, 4), "gammas": (1, 2), "new_tokens": 6, "repeats": 1, "rounds": 1, "matmul_rows": 64,
         "overhead_steps": 2}
FILE = "serving-cpu.json"


@dataclass
class Batched(Generation):
    """One batched call as the harness times it: every row's tokens in ``new_tokens``, each row's own
    Generation in ``rows``."""

    rows: list[Generation] = field(default_factory=list)


def batched(fn: Callable[[], list[Generation]]) -> Batched:
    rows = fn()
    return Batched([t for g in rows for t in g.new_tokens], rows=rows)


def cycled(prompts: Sequence[torch.Tensor], batch: int) -> list[torch.Tensor]:
    """B rows: the prompts [1, Tᵢ] in turn, cycled (row b is prompt b mod len(prompts))."""
    if not prompts:
        raise ValueError("the sweep needs at least one prompt")
    return [prompts[b % len(prompts)] for b in range(batch)]


def serving_engine(ar_engine: str) -> tuple[str, str]:
    """(the engine the batches run on, why): our AR's engine when it is static, else the static engine at its
    precision (BatchDecoder holds B rows in the static cache; the compiled step has no batch yet)."""
    kind, _, rung = ar_engine.partition(" ")
    if kind == "static":
        return ar_engine, f"our AR's engine ({ar_engine})"
    return f"static {rung}", f"our AR runs on {ar_engine}; a batch needs the static cache: static {rung}, its precision"


def spread(values: Sequence[float]) -> dict:
    return asdict(Spread.of(values))


def pooled_alpha(rows: Sequence[Generation]) -> float:
    """α over every row's steps together (accepted ÷ examined guesses, ``SpecStats.alpha``)."""
    return SpecStats(steps=[s for g in rows for s in g.stats.steps]).alpha


def ar_row(batch: int, runs: list[Run], costs: LoadCosts) -> dict:
    """Batched AR at B: decode tokens/s summed and per sequence, and the step (decode seconds ÷ steps)."""
    steps = [max(len(g) for g in r.result.rows) - 1 for r in runs]
    decode = [r.result.rows[0].stats.wall_time - r.result.rows[0].stats.ttft for r in runs]
    tokens = [sum(len(g) - 1 for g in r.result.rows) for r in runs]
    rate = [n / s for n, s in zip(tokens, decode)]
    return {"batch": batch, "tokens_per_s": spread(rate), "tokens_per_s_per_seq": spread([x / batch for x in rate]),
            "step_s": spread([s / n for s, n in zip(decode, steps)]), "forward_s": costs.forward(batch, 1),
            "prefill_s": spread([r.result.rows[0].stats.ttft for r in runs])}


def row_alphas(runs: list[Run]) -> list[float]:
    """Each row's α (``SpecStats.alpha`` of its steps), the median over the runs; a row that examined nothing in
    every run is left out."""
    per_row = zip(*([SpecStats(steps=g.stats.steps).alpha for g in r.result.rows] for r in runs))
    medians = [statistics.median(a for a in alphas if a == a) if any(a == a for a in alphas) else None
               for alphas in per_row]  # a == a: not NaN
    return [a for a in medians if a is not None]


def spec_row(batch: int, gamma: int | str, runs: list[Run], ar_runs: list[Run], costs: LoadCosts) -> dict:
    """Speculation at B (fixed γ, or "adaptive"): decode tokens/s, its gain over the same round's AR, α, τ and,
    for a fixed γ, the predictions with their errors: τ from the rows' α (``load_costs.batch_tau``: the slowest
    row's E(α_b, γ)), and the run's own τ."""
    prefill = [r.result.rows[0].stats.ttft for r in ar_runs]
    decode = [r.result.rows[0].stats.wall_time - p for r, p in zip(runs, prefill)]
    rate = [len(r.result.new_tokens) / s for r, s in zip(runs, decode)]
    ar_rate = [sum(len(g) - 1 for g in r.result.rows) / (r.result.rows[0].stats.wall_time - r.result.rows[0].stats.ttft)
               for r in ar_runs]
    steps = [max(len(g.stats.steps) for g in r.result.rows) for r in runs]
    alpha = statistics.median(pooled_alpha(r.result.rows) for r in runs)
    tau = statistics.median(len(r.result.new_tokens) / (batch * n) for r, n in zip(runs, steps))
    row = {"batch": batch, "gamma": gamma, "tokens_per_s": spread(rate),
           "tokens_per_s_per_seq": spread([x / batch for x in rate]), "gain": spread([s / a for s, a in zip(rate, ar_rate)]),
           "alpha": alpha, "tau": tau, "steps": statistics.median(steps),
           "gammas_chosen": sorted({s.gamma for r in runs for g in r.result.rows for s in g.stats.steps})}
    if isinstance(gamma, int):
        alphas = row_alphas(runs) or [alpha]
        row["predicted"] = costs.gain(batch, gamma, alpha, tau=batch_tau(alphas, gamma))
        row["predicted_tau"] = costs.gain(batch, gamma, alpha, tau=tau)
        row["error"] = row["gain"]["median"] / row["predicted"] - 1
        row["error_tau"] = row["gain"]["median"] / row["predicted_tau"] - 1
    return row


def sweep(target: PreTrainedModel, draft: PreTrainedModel, prompts: Sequence[torch.Tensor], *,
          calibration: torch.Tensor | None = None, batches: Sequence[int] = BATCHES, gammas: Sequence[int] = GAMMAS,
          new_tokens: int = NEW_TOKENS, repeats: int = REPEATS, rounds: int = ROUNDS, params: int | None = None,
          engine: str = "", matmul_rows: int = batch_forwards.MATMUL_ROWS, overhead_steps: int = 24,
          bandwidth: float | None = None, progress: bool = True) -> dict:
    """Every number of the report (module docstring) for ``target`` and ``draft`` on their engine, the ``prompts``
    ([1, Tᵢ] each) cycled to B rows; ``calibration`` [1, T]: a held-out prompt whose untimed batch-1 run gives the
    adaptive policy its prior α0 (default: the first prompt). Returns the report's dict (:func:`write`)."""
    if new_tokens < 2 or repeats < 1 or not gammas or min(gammas) < 1:
        raise ValueError(f"new_tokens >= 2, repeats >= 1 and gammas >= 1 needed, got {new_tokens}, {repeats}, {list(gammas)}")
    batches, gammas = sorted(set(batches)), sorted(set(gammas))
    longest = max(p.shape[-1] for p in prompts)
    context = int(statistics.median(p.shape[-1] for p in prompts)) + new_tokens // 2  # a row's cache mid-answer
    costs = batch_forwards.measure(target, draft, batches, sorted({1, *(g + 1 for g in range(1, max(gammas) + 1))}),
                                   context, longest + new_tokens + max(gammas) + 1, rounds, params, engine,
                                   matmul_rows, overhead_steps, bandwidth)
    calibration = prompts[0] if calibration is None else calibration
    alpha0 = pooled_alpha(speculative_generate_batch(target, ModelDrafter(draft), [calibration], new_tokens, gamma=max(gammas)))
    alpha0 = 0.5 if alpha0 != alpha0 else alpha0  # NaN: nothing examined
    refused = policy_note(target, draft, prompts[0], costs, alpha0)

    def calls(n: int) -> dict[str, Callable[[], Generation]]:
        """Every (method, B) call, each making n tokens a row."""
        out: dict[str, Callable[[], Generation]] = {}
        for b in batches:
            rows = cycled(prompts, b)
            out[f"ar {b}"] = partial(batched, partial(generate_batch, target, rows, n))
            for g in [*gammas, *(["adaptive"] if refused is None else [])]:
                out[f"spec {g} {b}"] = partial(batched, lambda rows=rows, g=g: speculative_generate_batch(
                    target, ModelDrafter(draft), rows, n, gamma=AdaptiveGamma(costs, alpha0) if g == "adaptive" else g))
        return out

    interleaved(calls(2), repeats=1, warmup=0, device=target.device)  # warm-up pass, untimed: every shape once
    timed = calls(new_tokens)
    bar = tqdm(total=len(timed) * repeats, desc="serving sweep", disable=not progress)
    runs = interleaved(timed, repeats=repeats, warmup=0, device=target.device, on_call=lambda _: bar.update(1))
    bar.close()
    ar = [ar_row(b, runs[f"ar {b}"], costs) for b in batches]
    costs.step_s = {row["batch"]: row["step_s"]["median"] for row in ar}  # the AR loop's step: o(B) = step − t(B, 1)
    spec = [spec_row(b, g, runs[f"spec {g} {b}"], runs[f"ar {b}"], costs) for b in batches for g in gammas]
    adaptive = None if refused else [spec_row(b, "adaptive", runs[f"spec adaptive {b}"], runs[f"ar {b}"], costs)
                                       for b in batches]
    band = noise_band([[r.tokens_per_s for r in rs] for rs in runs.values()])
    settings = {"new_tokens": new_tokens, "repeats": repeats, "rounds": rounds, "batches": batches, "gammas": gammas,
                "context": context, "greedy": True, "alpha0": alpha0}
    return summary(costs, ar, spec, adaptive, band, refused, settings)


def policy_note(target: PreTrainedModel, draft: PreTrainedModel, prompt: torch.Tensor, costs: LoadCosts,
                alpha0: float) -> str | None:
    """None when the batched loop takes a per-step policy as ``gamma=`` (issue 58 item 4), else why adaptive γ is
    not run (tried on one row, two tokens: the loop's own refusal)."""
    try:
        speculative_generate_batch(target, ModelDrafter(draft), [prompt], 2, gamma=AdaptiveGamma(costs, alpha0))
    except (TypeError, ValueError) as err:
        return f"adaptive γ not run: speculative_generate_batch does not take a policy yet ({err})"
    return None


def summary(costs: LoadCosts, ar: list[dict], spec: list[dict], adaptive: list[dict] | None, band: float,
            note: str | None, settings: dict) -> dict:
    """The report's numbers: the rows, the crossover (measured: the first B where every fixed γ's median gain is
    below 1; predicted: where every fixed γ's prediction is), the median |error| of each prediction, and
    per B whether adaptive γ's tokens/s reach max(best fixed γ, AR) within the noise band (None: one repeat)."""
    batches = [row["batch"] for row in ar]
    best = {b: max(r["gain"]["median"] for r in spec if r["batch"] == b) for b in batches}
    predicted = {b: max(r["predicted"] for r in spec if r["batch"] == b) for b in batches}
    alpha = statistics.median(r["alpha"] for r in spec)
    checks = None
    if adaptive is not None:
        checks = []
        for a, base in zip(adaptive, ar):
            bar = max([base["tokens_per_s"]["median"]] + [r["tokens_per_s"]["median"] for r in spec if r["batch"] == a["batch"]])
            ratio = a["tokens_per_s"]["median"] / bar
            checks.append({"batch": a["batch"], "ratio_to_best": ratio,
                           "within_band": None if band != band else ratio >= 1 - band})
    return {
        "ar": ar, "spec": spec, "adaptive": adaptive, "adaptive_note": note, "adaptive_check": checks,
        "crossover": {"measured": next((b for b in batches if best[b] < 1), None), "predicted": next((b for b in batches if predicted[b] < 1), None),
                      "alpha": alpha, "best_gain": {str(b): g for b, g in best.items()}},
        "roofline_turn": costs.roofline_turn(),
        "prediction_error": {"median": statistics.median(abs(r["error"]) for r in spec),
                             "median_tau": statistics.median(abs(r["error_tau"]) for r in spec)},
        "noise_band": band, "costs": costs.as_json(), "settings": settings,
        "load": None,  # the continuous-batching load sweep: main fills it (load_sweep.from_batch_sweep)
    }


def report(results: dict, engine: str, why: str, prompts: Sequence[str]) -> dict:
    """``results`` with the machine, the date, the engine, the threads and the prompts' texts."""
    return {"schema": SCHEMA, "machine": {"cpu": machine.cpu_name(), "environment": envinfo.environment()},
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "engine": {"name": engine, "why": why}, "threads": torch.get_num_threads(), "prompts": list(prompts),
            **results}


def write(doc: dict, out: Path | str) -> Path:
    """The report as ``out/serving-cpu.json``, written atomically."""
    return write_json(doc, Path(out) / FILE, indent=1)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="results/", help="folder of serving-cpu.json (default results/)")
    p.add_argument("--quick", action="store_true", help="B = 1, 2, 4, γ ∈ {1, 2}, 6 tokens, one repeat (also SPECDEC_QUICK=1)")
    p.add_argument("--batches", default=None, help=f"comma-separated B (default {','.join(map(str, BATCHES))})")
    p.add_argument("--gammas", default=None, help=f"comma-separated fixed γ (default {','.join(map(str, GAMMAS))})")
    p.add_argument("--new-tokens", type=int, default=None, help=f"tokens per row (default {NEW_TOKENS})")
    p.add_argument("--repeats", type=int, default=None, help=f"interleaved repeats (default {REPEATS})")
    args = p.parse_args(argv)
    from ..models import chat_ids, load_pair
    from ..prompts import CHAT, HELDOUT

    quick = args.quick or os.environ.get("SPECDEC_QUICK") == "1"
    kw = dict(QUICK) if quick else {}
    for name, value in (("batches", args.batches), ("gammas", args.gammas)):
        if value:
            kw[name] = tuple(int(x) for x in value.split(","))
    kw.update({k: v for k, v in (("new_tokens", args.new_tokens), ("repeats", args.repeats)) if v is not None})
    pair = load_pair()
    name, why = serving_engine(engines.choose(pair).ar)
    ours = engines.on_engine(pair, name)
    texts = list(CHAT)
    prompts = [chat_ids(pair.tokenizer, t, pair.device) for t in texts]
    results = sweep(ours.target, ours.draft, prompts, calibration=chat_ids(pair.tokenizer, HELDOUT[0], pair.device),
                    params=sum(p.numel() for p in pair.plain().target.parameters()), engine=name, **kw)
    results["load"] = load_sweep.from_batch_sweep(results, ours.target, ours.draft, prompts, quick=quick)
    path = write(report(results, name, why, texts), args.out)
    for row in results["ar"]:
        print(f"B = {row['batch']:3d}  AR {row['tokens_per_s']['median']:8.1f} tokens/s summed, "
              f"step {1e3 * row['step_s']['median']:.1f} ms")
    print(f"crossover B: measured {results['crossover']['measured']}, predicted {results['crossover']['predicted']}; "
          f"roofline turn B* = {results['roofline_turn']:.1f}; prediction's median error "
          f"{results['prediction_error']['median']:.0%} (with the run's τ: {results['prediction_error']['median_tau']:.0%})")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
