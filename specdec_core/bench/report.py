"""The benchmark's reports: ``<name>.json`` (every number; ``schema`` says its layout), ``<name>.md``
(the table) and ``<name>.png`` (bars), each written atomically; :func:`load_report` reads one back.

Columns (also in the README): tokens/s — new tokens ÷ wall time, prefill included, median over
prompts; × our AR — per prompt the method's tokens/s ÷ our AR's in the same run, median (min–max)
over prompts; α — accepted ÷ examined draft tokens; tokens / target call — new tokens ÷ target
forwards that emit a token (AR: 1; ``generation.py`` defines it for every method); peak memory — the
method alone in a fresh process (``bench/fresh.py``: interpreter + libraries + its models + one
generation's KV cache and activations), with what that generation added in brackets; weights — the
method's own models; same output — prompts whose greedy tokens equal our AR's exactly. The JSON keeps
the probe around the timed calls as ``process_peak_mb``: the whole process, every model loaded so far.
"""

from __future__ import annotations

import io
import json
import math
import re
from pathlib import Path

import torch

from ..files import atomic_write, write_json

SCHEMA_VERSION = 2  # 2: target_calls = forwards that emit a token (AR counts its prefill), ratio min–max


class ReportError(ValueError):
    """A benchmark report this code cannot read; the message says how to make a new one."""


def load_report(path: Path | str) -> dict:
    """A report written by :func:`write_report`, checked to be of this code's :data:`SCHEMA_VERSION`."""
    path = Path(path)
    if not path.is_file():
        raise ReportError(f"no benchmark report at {path}: run `make bench` (or `python -m specdec_core.bench`)")
    report = json.loads(path.read_text())
    if report.get("schema") != SCHEMA_VERSION:
        raise ReportError(f"{path} has schema {report.get('schema')!r}, this code reads schema {SCHEMA_VERSION}: "
                          "run `make bench` to measure it again")
    return report


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
        f"(this run's calibration: {cal['chosen_by']}; c = {cal['c']:.2f}, v = {cal['v']:.2f}). Run time {report['elapsed_s'] / 60:.1f} min.",
        f"Machine: {env['cpu']}, {env['cpu cores (logical)']} cores, torch {env['torch']} "
        f"({env['torch threads']} threads), transformers {env['transformers']}, GPU: {env['cuda']}.",
        *engines_line(report),
        "",
        "| method | tokens/s | × our AR (min–max) | verdict | predicted × AR | prediction | α | tokens / target call | "
        "peak memory alone (MB) | weights (MB) | same output as AR |",
        "|---|---:|---:|---|---:|---|---:|---:|---:|---:|---|",
    ]
    for r in report["methods"]:
        same = "n/a (sampled)" if r["same_as_ar"] is None else f"{r['same_as_ar']}/{r['prompts']}"
        spread = f" ({r['ratio_min']:.2f}–{r['ratio_max']:.2f})" if "ratio_min" in r else ""
        lines.append(f"| {r['label']} | {r['tokens_per_s']:.1f} | {r['ratio_to_ar']:.2f}{spread} | {r.get('verdict', '–')} | "
                     f"{fmt(r.get('predicted'), '.2f')} | {r.get('prediction_verdict') or '–'} | {fmt(r['alpha'], '.2f')} | "
                     f"{fmt(r['tokens_per_call'], '.2f')} | {_fresh_cell(r)} | {fmt(r['weights_mb'], ',.1f')} | {same} |")
    lines += ["", "tokens/s: median over prompts (prefill included). × our AR: median over prompts of the per-prompt "
              "ratio, measured in this run (min–max over prompts). Verdict: faster / slower than our AR when the "
              "ratio lies outside 1 ± the noise band (the median run-to-run spread of one method on one prompt, "
              f"{_band(report)}), else a tie. Predicted: the cost model's S = τ / (d·c + v(n) + o) from the call's own "
              "tokens per target call τ and drafting time d·c, this machine's v at its verify widths and the loop's "
              "overhead o (costmodel.predict); prediction: whether the measured ratio lies within the noise band of it. α: accepted ÷ examined draft tokens. "
              "Tokens / target call: new tokens ÷ target forwards that emit a token (AR: 1). MB = 10⁶ bytes. "
              f"{fresh_note(report)} Weights: the method's own models. Same output: prompts whose greedy tokens "
              "equal our AR's exactly."]
    lines += engine_lines(report.get("engine"))
    if report["failed"]:
        lines += ["", "Failed (left out): " + "; ".join(f"`{k}`: {v}" for k, v in report["failed"].items()) + "."]
    if report["not_available"]:
        lines += ["", "Not available yet: " + "; ".join(f"`{k}`, {v}" for k, v in report["not_available"].items()) + "."]
    return "\n".join(lines) + "\n"


FORMATS = {"ar_eager": "eager f32", "nf4_ar": "NF4", "bnb_nf4_ar": "NF4"}  # rows in other weight formats (and llama.cpp's GGUF)


def engines_line(report: dict) -> list[str]:
    """Which engine our AR (the main table) ran on and why, from the report's ``engines`` (none in older reports)."""
    chosen = report.get("engines")
    if not chosen:
        return []
    choice = chosen.get("choice")
    why = f" — the engine choice, from its own calibration: {choice['why']}" if choice else " (named on the command line)"
    own = [FORMATS.get(r["name"], "GGUF") for r in report["methods"]
           if r["name"] in FORMATS or r["name"].startswith("llamacpp_")]
    kinds = ", ".join(dict.fromkeys(own))
    rows = f"every row but the {len(own)} in other weight formats ({kinds})" if own else "every row of the table"
    return [f"Our AR, and {rows}: **{chosen['ar']}**; the engine rows below: "
            f"**{chosen.get('spec') or 'not run'}**{why}."]


def engine_name(engine: dict) -> str:
    """The engine phase's engine: its name (``engines.CANDIDATES``), or "static <precision>" in older reports."""
    return engine.get("engine") or f"static {engine['precision']}"


def engine_lines(engine: dict | None) -> list[str]:
    """The engine rows (``bench/engine.py``'s second phase) as a few Markdown lines; none before they existed."""
    if engine is None:
        return []

    def gain(g: dict) -> str:
        return f"{g['median']:.2f}× ({g['lo']:.2f}–{g['hi']:.2f})"

    b = engine["band"]  # NaN in memory, None after the JSON round trip: one run per prompt says nothing about noise
    band = "no noise band (a single run)" if b is None or math.isnan(b) else f"noise band ±{b:.1%}"
    lines = ["", f"**Engine rows** (a second interleaved phase, {engine['prompts']} prompts, {band}): "
             f"{engine_name(engine)}. Its AR: "
             f"{gain(engine['engine_gain'])} our AR."]
    if engine.get("method"):
        lines[-1] += (f" Our exact-rule method on the target with the table's highest ratio, `{engine['method']}`, on it: {gain(engine['method_gain'])} "
                      f"the engine's AR, {gain(engine['together'])} our AR; its output equals the engine AR's on "
                      f"{engine['same_as_engine_ar']}/{engine['prompts']} prompts.")
        other = engine["prompts"] - engine["same_as_engine_ar"]
        if other and engine.get("width_drift") is not None:
            lines[-1] += (f" Of the other {other}, {engine['explained_by_rounding']} first differ at a near-tie the engine's "
                          f"rounding can flip (AR's top-2 margin below its width drift, {engine['width_drift']:.3g}); the rest "
                          "differ beyond rounding.")
    return lines


def categories(reports: dict[str, dict]) -> str:
    """Spec-Bench's view: one row per method, one column per prompt category, each cell the method's
    speed relative to our AR in that category's run (median over prompts, with its verdict)."""
    names = list(dict.fromkeys(r["name"] for rep in reports.values() for r in rep["methods"]))
    # γ can differ per category (each run calibrates its own): the label leaves it out, a line below gives it
    labels = {r["name"]: re.sub(r", γ=\d+", "", r["label"]) for rep in reports.values() for r in rep["methods"]}
    rows = {cat: {r["name"]: r for r in rep["methods"]} for cat, rep in reports.items()}
    first = next(iter(reports.values()))
    lines = [f"# Benchmark by prompt category: {first.get('preset', '?')} pair on {first.get('device', '?')}", "",
             "Each cell: the median over prompts of the method's tokens/s ÷ our AR's on that prompt, in the same run, and the verdict "
             "against that run's noise band. One run per category (`make bench`).", "",
             "| method | " + " | ".join(reports) + " |", "|---|" + "---:|" * len(reports)]
    for name in names:
        cells = [f"{rows[c][name]['ratio_to_ar']:.2f}× ({rows[c][name].get('verdict', '–')})" if name in rows[c] else "–"
                 for c in reports]
        lines.append(f"| {labels[name]} | " + " | ".join(cells) + " |")
    gammas = ", ".join(f"{cat} {rep['calibration']['gamma']}" for cat, rep in reports.items() if "calibration" in rep)
    return "\n".join(lines + ([f"\nγ of the model draft per category: {gammas}."] if gammas else [])) + "\n"


def _fresh_cell(row: dict) -> str:
    """``peak (+added)`` of the method alone in a fresh process, or – when it was not measured."""
    if row.get("fresh_peak_mb") is None:
        return "–"
    return f"{row['fresh_peak_mb']:,.0f} (+{row['fresh_added_mb']:,.0f})"


def fresh_note(report: dict) -> str:
    """What the peak-memory column holds, in one or two sentences rendered from the report."""
    fresh = report.get("fresh_memory")
    if fresh is None:
        return ("Peak memory: not in this report (written before each method was measured alone in a fresh "
                "process: run `make bench` again).")
    if fresh["skipped"]:
        return f"Peak memory alone: not measured ({fresh['skipped']})."
    measured = list(fresh["methods"].values())
    kind = measured[0]["kind"] if measured else "CPU peak RSS"
    base = sorted(m["baseline_bytes"] for m in measured)
    libs = f"; the libraries alone hold {base[len(base) // 2] / 10**6:,.0f} MB of it" if base and base[-1] else ""
    failed = ("; not measured: " + "; ".join(f"`{k}` ({v})" for k, v in fresh["failed"].items())) if fresh["failed"] else ""
    return (f"Peak memory alone: {kind} of a fresh Python process that held only that method's models, "
            f"during one generation of at most {fresh['max_new_tokens']} tokens on the longest prompt "
            f"({fresh['prompt_tokens']} tokens) after a {fresh['warmup_tokens']}-token warm-up — {fresh['includes']}{libs}; "
            f"in brackets, what that generation added to the loaded state{failed}.")


def _band(report: dict) -> str:
    band = report.get("noise_band")
    return "not measured: a single run per prompt" if band is None else f"±{band:.1%} in this run"


def report_name(device: str | torch.device, preset: str, prompts: str) -> str:
    """The default name of a report's files, ``<device type>-<preset>-<prompts>``: ``make bench`` → cpu-offline-chat."""
    return f"{torch.device(device).type}-{preset}-{prompts}"


def write_report(report: dict, out: Path, name: str | None = None) -> dict[str, Path]:
    """Write ``<out>/<name>.json``, ``.md`` and ``.png``; name defaults to :func:`report_name`."""
    from .. import viz

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
    write_json(report, paths["json"], indent=1)
    atomic_write(paths["md"], markdown(report))
    atomic_write(paths["png"], png.getvalue())
    return paths
