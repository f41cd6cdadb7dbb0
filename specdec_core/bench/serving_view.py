"""Lesson 10's reading of the serving report (``results/serving-cpu.json``, ``bench/serving.py``): where and when
it was measured, each verdict rendered from the numbers and the report's noise band, the load sweep's table,
and the lesson's one live comparison (batched AR against batched speculation at a small B).

    report = read()                          # None when make serving has not run here
    display(Markdown(where(report)))         # machine, date, engine, settings
    gain_markdown(report); adaptive_markdown(report); load_markdown(report)
    live = live_comparison(target, draft, prompts, batch=4, new_tokens=24)

A verdict word ("pays", "loses", "a tie") comes from :func:`harness.classify` on a ratio and the band: outside
1 ± band it is a difference, inside it is noise, and a report of one repeat has no band and says so.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import partial
from pathlib import Path

import torch
from transformers import PreTrainedModel

from .. import assets
from ..ar import generate
from ..batch import generate_batch
from ..batch_speculative import speculative_generate_batch
from ..drafters import ModelDrafter
from ..files import read_report
from ..progress import tqdm
from ..speculative import speculative_generate
from .harness import Spread, classify, interleaved, noise_band
from .serving import FILE, SCHEMA, batched, cycled

MAKE = "make serving"
WORDS = {"faster": "pays", "slower": "loses", "a tie": "ties with batched AR (within the noise band)",
         "single run": "(no verdict: one repeat)"}


def default_path() -> Path:
    return assets.results_dir() / FILE


def read(path: Path | str | None = None) -> dict | None:
    """The serving report; None when the file is absent (``make serving`` has not run). A file of another schema
    or not JSON is an error that says to run ``make serving`` again."""
    return read_report(path if path is not None else default_path(), SCHEMA, MAKE, "ar")


def missing_markdown(path: Path | str | None = None) -> str:
    return (f"**No serving report here yet** (`{path or default_path()}`): run `{MAKE}` (about ten minutes on two "
            "cores), then run this notebook again. The live comparison below runs without it.")


def band(report: dict) -> float:
    """The report's noise band (NaN when one repeat measured none: JSON stores it as null)."""
    value = report.get("noise_band")
    return math.nan if value is None else float(value)


def verdict(ratio: float, noise: float) -> str:
    """"pays", "loses", a tie or no verdict, for a speed ratio against batched AR (> 1: faster) and a band."""
    return WORDS[classify(ratio, noise)]


def where(report: dict) -> str:
    """One line: the machine, the date, the engine (and why), the threads and the sweep's settings."""
    s = report["settings"]
    noise = band(report)
    return (f"Measured on **{report['machine']['cpu']}**, {report['date'][:16].replace('T', ' ')} UTC, on "
            f"`{report['engine']['name']}` — {report['engine']['why']} — with {report['threads']} thread(s): B ∈ "
            f"{s['batches']}, γ ∈ {s['gammas']}, {s['new_tokens']} tokens a row, {s['repeats']} interleaved repeats; "
            + (f"noise band ±{noise:.0%}." if not math.isnan(noise) else "one repeat, so no noise band: no verdicts."))


def throughput_markdown(report: dict) -> str:
    """Summed and per-sequence tokens/s at the largest B against B = 1, and the roofline's turn."""
    rows = report["ar"]
    first, last = rows[0], rows[-1]
    summed = last["tokens_per_s"]["median"] / first["tokens_per_s"]["median"]
    per_seq = last["tokens_per_s_per_seq"]["median"] / first["tokens_per_s_per_seq"]["median"]
    step = last["step_s"]["median"] / first["step_s"]["median"]
    turn, costs = report["roofline_turn"], report.get("costs", {})
    inputs = (f" (from {costs['bandwidth'] / 1e9:.1f} GB/s read and {costs['flops_per_s'] / 1e9:.1f} GFLOP/s computed "
              "here)" if costs.get("bandwidth") and costs.get("flops_per_s") else "")
    return (f"From B = {first['batch']} to B = {last['batch']} the summed throughput grows **{summed:.1f}×** while "
            f"each sequence keeps {per_seq:.0%} of its own speed: the step costs {step:.1f}× as long for "
            f"{last['batch'] // first['batch']}× the rows. The roofline turns at **B* ≈ {turn:.1f}** tokens per "
            f"forward on this machine{inputs}: below it a step reads weights, above it it computes.")


def gain_markdown(report: dict) -> str:
    """Per B the best fixed γ's measured gain and its verdict; the crossover (measured, predicted) and the
    prediction's median error."""
    noise, cross = band(report), report["crossover"]
    parts = []
    for b in [r["batch"] for r in report["ar"]]:
        best = max((r for r in report["spec"] if r["batch"] == b), key=lambda r: r["gain"]["median"])
        g = best["gain"]["median"]
        parts.append(f"B = {b}: γ = {best['gamma']} at {g:.2f}× {verdict(g, noise)}")
    measured, predicted = cross["measured"], cross["predicted"]
    said = lambda b: "none in the measured range" if b is None else f"B = {b}"  # noqa: E731
    err = report["prediction_error"]
    return ("Speculation's best fixed γ against batched AR: " + "; ".join(parts) + ". "
            f"Crossover (the first B where no γ gains): measured **{said(measured)}**, predicted from the cost table "
            f"at α = {cross['alpha']:.2f}: **{said(predicted)}**. The prediction's median error over B and γ is "
            f"**{err['median']:.0%}** ({err['median_tau']:.0%} with the run's own τ in place of E(α, γ)).")


def adaptive_markdown(report: dict) -> str:
    """Adaptive γ against max(best fixed γ, off) at every B, within the noise band or not."""
    if not report.get("adaptive_check"):
        return f"Adaptive γ was not run: {report.get('adaptive_note') or 'the report has no adaptive rows'}."
    noise = band(report)
    rows = report["adaptive_check"]
    lines = "; ".join(f"B = {r['batch']}: {r['ratio_to_best']:.2f}×" for r in rows)
    if math.isnan(noise):
        return f"Adaptive γ against the better of on and off, one repeat (no noise band, no verdict): {lines}."
    below = [str(r["batch"]) for r in rows if r["ratio_to_best"] < 1 - noise]
    above = [str(r["batch"]) for r in rows if r["ratio_to_best"] > 1 + noise]
    said = ([f"It falls below the better choice beyond the noise band at B = {', '.join(below)}."] if below else []) + (
        [f"It beats the better choice beyond the noise band at B = {', '.join(above)}."] if above else [])
    return (f"Adaptive γ against the better of on and off: {lines}. "
            + (" ".join(said) or "It stays within the noise band of the better choice at every B."))


def load_rows(report: dict) -> list[dict]:
    """The load sweep's rows (each: rate, mode and the run's median TTFT, median TPOT, throughput); [] when the
    report has none."""
    load = report.get("load")
    return list(load.get("rows", [])) if isinstance(load, dict) else list(load or [])


def load_markdown(report: dict) -> str:
    """The load sweep as a table per rate and mode (off, on, adaptive), throughput against "off" at the same rate
    with its verdict in the report's noise band; or a line saying this report has no load sweep."""
    rows = load_rows(report)
    if not rows:
        return (f"This report has no load sweep yet (its `load` entry is empty): run `{MAKE}` again to fill it.")
    noise, order = band(report), {"off": 0, "on": 1, "adaptive": 2}
    off = {r["rate"]: r["throughput"] for r in rows if r["mode"] == "off"}
    out = ["| requests/s | speculation | median TTFT | median TPOT | tokens/s | × off |", "|---:|---|---:|---:|---:|---|"]
    for r in sorted(rows, key=lambda r: (r["rate"], order.get(r["mode"], 3))):
        mode = f"on, γ = {r['gamma']}" if r["mode"] == "on" else r["mode"]
        ratio = r["throughput"] / off[r["rate"]] if off.get(r["rate"]) else math.nan
        said = "" if r["mode"] == "off" or math.isnan(ratio) else f"{ratio:.2f}×, {verdict(ratio, noise)}"
        out.append(f"| {r['rate']:.2f} | {mode} | {1e3 * r['median_ttft']:.0f} ms | {1e3 * r['median_tpot']:.0f} ms "
                   f"| {r['throughput']:.1f} | {said} |")
    return "\n".join(out)


def live_comparison(target: PreTrainedModel, draft: PreTrainedModel, prompts: Sequence[torch.Tensor], *,
                    batch: int = 4, new_tokens: int = 24, gamma: int = 2, repeats: int = 3,
                    progress: bool = True) -> dict:
    """Batched AR against batched speculation (the draft model, ``gamma``) on ``batch`` rows (``prompts`` [1, Tᵢ]
    cycled), timed by the interleaved harness: tokens/s of each call (all rows, prefill included), the ratio,
    its verdict in the run's noise band, and how many rows equal their own batch-1 run (``ar.generate`` and
    ``speculative_generate``, greedy)."""
    if batch < 1 or new_tokens < 1 or repeats < 1:
        raise ValueError(f"batch, new_tokens and repeats must be >= 1, got {batch}, {new_tokens}, {repeats}")
    rows = cycled(prompts, batch)
    calls = {"batched AR": partial(batched, partial(generate_batch, target, rows, new_tokens)),
             "batched speculation": partial(batched, lambda: speculative_generate_batch(
                 target, ModelDrafter(draft), rows, new_tokens, gamma=gamma))}
    bar = tqdm(total=2 * (repeats + 1), desc=f"B = {batch}, interleaved", disable=not progress)
    runs = interleaved(calls, repeats=repeats, warmup=1, device=target.device, on_call=lambda _: bar.update(1))
    bar.update(2)  # the untimed warm-up pair
    bar.close()
    alone_ar = [generate(target, r, new_tokens).new_tokens for r in rows]
    alone_spec = [speculative_generate(target, ModelDrafter(draft), r, new_tokens, gamma=gamma).new_tokens for r in rows]
    speed = {name: Spread.of([r.tokens_per_s for r in rs]) for name, rs in runs.items()}
    ratio = speed["batched speculation"].median / speed["batched AR"].median
    noise = noise_band([[r.tokens_per_s for r in rs] for rs in runs.values()])
    return {"batch": batch, "gamma": gamma, "new_tokens": new_tokens, "repeats": repeats, "speed": speed,
            "ratio": ratio, "noise_band": noise, "verdict": verdict(ratio, noise),
            "equal_ar": sum(g.new_tokens == a for g, a in zip(runs["batched AR"][0].result.rows, alone_ar)),
            "equal_spec": sum(g.new_tokens == a for g, a in zip(runs["batched speculation"][0].result.rows, alone_spec))}


def live_markdown(live: dict) -> str:
    b, speed = live["batch"], live["speed"]
    noise = live["noise_band"]
    return (f"B = {b} rows, {live['new_tokens']} tokens each, {live['repeats']} interleaved repeats: batched AR "
            f"**{speed['batched AR'].median:.1f}** tokens/s, batched speculation (γ = {live['gamma']}) "
            f"**{speed['batched speculation'].median:.1f}** tokens/s (all rows, prefill included), "
            f"{live['ratio']:.2f}×: speculation {live['verdict']}"
            + (f" (noise band ±{noise:.0%})" if not math.isnan(noise) else "") + ". Rows equal to their own batch-1 "
            f"run: AR {live['equal_ar']} of {b}, speculation {live['equal_spec']} of {b}."
            + ("" if live["equal_ar"] == live["equal_spec"] == b else
               " A row that differs breaks exactness on f32 (the f32 check below: one batch); on a rounding engine "
               "a batch's width can flip a near-tie (`width_drift.py` tests one)."))
