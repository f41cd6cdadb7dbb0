"""Lesson 09's closing table: per prompt category, what made decoding faster, rendered from the reports.

    reports = load_reports(results_dir(), "cpu", "offline")      # category → report (make bench)
    markdown(reports, load_gpu_reports(results_dir()))            # the table, then one sentence per category

Columns of :func:`table` (every ratio a median over prompts of per-prompt tokens/s ratios, with its verdict:
faster / slower / a tie against the run's noise band, :func:`harness.classify`):

    fastest exact method      our exact method (output = our AR's on every prompt) with the highest ratio
                              to our AR in the report's main table
    method on the engine      the engine rows' fastest method with an exact rule on the speculation engine ÷
                              that engine's AR (``specdec_core.engines``: where speculation is predicted fastest),
                              marked ⚠ k/n where its tokens were the engine AR's on only k of n prompts
    engine AR                 AR on that engine ÷ our AR (the fastest AR engine measured on the machine,
                              the report's baseline engine; they may be the same engine)
    together                  the method on the engine ÷ our AR: both gains at once
    llama.cpp AR              llama.cpp's greedy decoding of the same target ÷ our AR (f32 and f16 GGUF)
    GPU                       Leviathan's S at the category's α with the latest GPU report's measured c
                              and v: a prediction from that machine's costs, not a run of these prompts
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from .. import theory
from .engine import OURS_EXACT
from .harness import classify
from .lookahead_eval import chosen_shapes
from .report import ReportError, engine_name, load_report, report_name

CATEGORIES = {"chat": "chat", "copy": "copy", "heldout": "held-out", "code": "code"}  # report name → row label
NO_ENGINE = "engine rows not measured in this report: run `make bench`"
LLAMA = {"f32": "llamacpp_ar", "f16": "llamacpp_ar_f16"}
DRAFTS = {"spec": "the standalone draft model", "spec_feature": "the feature drafter on the target's hidden states",
          "spec_best": "lookup where the context repeats, else the feature drafter", "tree": "a token tree of the draft model",
          "tree_feature": "a token tree of the feature drafter", "tree_lookup": "a tree of copies from the context",
          "lookup": "copies from the context", "lookahead_prompt": "lookahead with copies from the context",
          "lookahead": "lookahead's n-gram pool", "jacobi": "the target's own parallel guesses"}  # who drafted


def load_reports(folder: Path | str, device: str, preset: str) -> dict[str, dict]:
    """The category reports ``make bench`` wrote in ``folder`` (``<device>-<preset>-<category>.json``); a
    missing or unreadable one (an older schema) is left out."""
    out = {}
    for category in CATEGORIES:
        try:
            out[category] = load_report(Path(folder) / f"{report_name(device, preset, category)}.json")
        except ReportError:
            continue
    return out


def load_gpu_reports(folder: Path | str) -> list[dict]:
    """Every ``gpu-*.json`` in ``folder`` (gpu-check's scale reports, :mod:`.gpureport`)."""
    return [json.loads(p.read_text()) for p in sorted(Path(folder).glob("gpu-*.json"))]


def band_of(entry: dict, key: str = "noise_band") -> float:
    """A report's (or its engine phase's, ``key="band"``) noise band; NaN when it has none: one run per
    prompt, so no verdict (a NaN is stored as None in the JSON)."""
    band = entry.get(key)
    return math.nan if band is None else float(band)


def fastest_exact(report: dict) -> dict | None:
    """Our fastest exact method: a row of :data:`engine.OURS_EXACT` whose output equals our AR's on every prompt."""
    rows = [r for r in report["methods"] if r["name"] in OURS_EXACT and r["same_as_ar"] == r["prompts"]]
    return max(rows, key=lambda r: r["ratio_to_ar"], default=None)


def ratio(x: float, band: float, unit: str = "") -> str:
    """``1.23× (faster)``, or with ``unit=" our AR"`` ``1.23× our AR (faster)``: a ratio to a baseline and its verdict
    against ``band``; three decimals where two would hide which side of the band's edge it lies on."""
    digits = 3 if not math.isnan(band) and abs(abs(x - 1) - band) < 0.005 else 2
    return f"{x:.{digits}f}×{unit} ({classify(x, band)})"


def baseline(report: dict) -> str:
    """What "our AR" is in this report: the engine its main table ran on (chosen by measurement since
    ``specdec_core.engines``; older reports ran f32, prepacked or eager)."""
    chosen = (report.get("engines") or {}).get("ar")
    return chosen or {"fast": "f32 prepacked", "plain": "f32 eager"}.get(report["settings"].get("engine", "plain"), "f32")


def engine_cells(report: dict) -> list[str]:
    """The three engine columns: the method on the engine ÷ engine AR, engine AR ÷ our AR, both ÷ our AR."""
    engine = report.get("engine")
    if engine is None:
        return [NO_ENGINE, "–", "–"]
    band = band_of(engine, "band")
    gain = f"{engine_name(engine)}: {ratio(engine['engine_gain']['median'], band)}"
    if not engine.get("method"):
        return [f"no exact method ran on {engine_name(engine)}", gain, "–"]
    return [f"`{engine['method']}`: {ratio(engine['method_gain']['median'], band)}{kept(engine)}{band_note(band)}", gain,
            ratio(engine["together"]["median"], band)]


def band_note(band: float) -> str:
    """`` (band ±7%)``: the engine phase's own noise band, which its verdicts use; nothing for a single run."""
    return "" if math.isnan(band) else f" (band ±{band:.0%})"


def kept(engine: dict) -> str:
    """`` ⚠ 1/4`` where the engine's method gave the engine AR's tokens on fewer than all prompts (a rounding
    engine can flip a near-tie: the report's engine rows say which), else nothing."""
    k = engine.get("same_as_engine_ar")
    return "" if k is None or k == engine["prompts"] else f" ⚠ {k}/{engine['prompts']}"


def llama_cell(report: dict) -> str:
    """llama.cpp's greedy rows ÷ our AR, or "not installed" when the report has none."""
    rows = {r["name"]: r for r in report["methods"]}
    found = [f"{p} {ratio(rows[n]['ratio_to_ar'], band_of(report))}" for p, n in LLAMA.items() if n in rows]
    return "; ".join(found) if found else "not installed"


def latest_gpu(gpu_reports: list[dict]) -> dict | None:
    """The newest full (not tiny) gpu-scale report, by its machine's date."""
    full = [g for g in gpu_reports if g.get("kind") == "gpu-scale" and not g.get("tiny")]
    return max(full, key=lambda g: g["machine"]["date"], default=None)


def gpu_speedup(gpu: dict, alpha: float) -> tuple[dict, int, float] | None:
    """(pair, best γ, S) for the report's first measured pair (a preset's first): Leviathan's S at ``alpha``
    with the pair's measured c and its target's v(γ + 1), over the γ whose verify width was measured."""
    pairs = sorted(gpu.get("pairs", []), key=lambda p: p.get("preset") is None)
    for pair in pairs:
        v = {int(n): x for n, x in gpu["models"].get(pair["target"], {}).get("v", {}).items() if int(n) >= 2}
        if v:
            s, gamma = max((theory.speedup(alpha, n - 1, pair["c"], x), n - 1) for n, x in v.items())
            return pair, gamma, s
    return None


def gpu_cell(report: dict, gpu: dict | None) -> str:
    """The GPU column: S at this category's α of the standalone draft (`spec`) with the GPU's c and v."""
    if gpu is None:
        return "no GPU report yet"
    where = f"{gpu['machine']['name']}, {gpu['machine']['date'][:10]}"
    spec = next((r for r in report["methods"] if r["name"] == "spec"), None)
    if spec is None or spec.get("alpha") is None:
        return f"{where}: no α of `spec` in this category"
    found = gpu_speedup(gpu, spec["alpha"])
    if found is None:
        return f"{where}: no pair with a measured v"
    pair, gamma, s = found
    return f"{where}: S ≈ {s:.2f}× (γ {gamma}) at α {spec['alpha']:.2f}, c {pair['c']:.2f} ({pair['target']} / {pair['draft']})"


def table(reports: dict[str, dict], gpu_reports: list[dict]) -> str:
    """One Markdown row per category report (the columns: this module's docstring) and a legend."""
    if not reports:
        return "No benchmark reports: run `make bench`.\n"
    gpu = latest_gpu(gpu_reports)
    head = ["category", "fastest exact method (× our AR)", "method on the engine (× engine AR)",
            "engine AR (× our AR)", "together (× our AR)", "llama.cpp AR (× our AR)", "GPU (predicted)"]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---|" * (len(head) - 1)]
    for category, rep in reports.items():
        best = fastest_exact(rep)
        first = "none" if best is None else f"`{best['name']}`: {ratio(best['ratio_to_ar'], band_of(rep))}"
        cells = [CATEGORIES.get(category, category), first, *engine_cells(rep), llama_cell(rep), gpu_cell(rep, gpu)]
        lines.append("| " + " | ".join(cells) + " |")
    ours = ", ".join(sorted({baseline(r) for r in reports.values()}))
    lines += ["", f"Our AR: {ours}, the baseline of each report's main table. Each ratio is a median over prompts, "
              "its verdict taken against that run's noise band (the engine columns: the engine phase's own band). "
              "Exact: the target's greedy tokens on every prompt (⚠ k/n: on k of n). GPU: Leviathan's S at the category's α of `spec` "
              "(measured on the CPU) with the GPU report's c and v(γ + 1), best γ — a prediction, not a run."]
    return "\n".join(lines) + "\n"


def plain_lookahead(report: dict, name: str) -> bool:
    """Whether every timed call of a lookahead row ran with no window and no candidates (shape (0, n, 0)): one-token
    steps through lookahead's loop, nothing drafted."""
    shapes = chosen_shapes(report, name) if name.startswith("lookahead") else []
    return bool(shapes) and all(w == 0 and g == 0 for w, _, g in shapes)


def why(row: dict, report: dict | None = None) -> str:
    """What the cost model says about one row: who drafted, its τ (and α) against its step's d·c + v + o."""
    alpha = "" if row.get("alpha") is None else f" (α = {row['alpha']:.2f})"
    drafted = f"drafted by {DRAFTS.get(row['name'], 'its drafter')}"
    if report is not None and plain_lookahead(report, row["name"]):
        drafted = "at a shape with no window and no candidates (one-token steps through lookahead's loop)"
    text = f"{drafted}, it confirmed "
    p = row.get("prediction")
    if p is None:
        tpc = row.get("tokens_per_call")
        return text + (f"{tpc:.2f} tokens per target call{alpha}" if tpc else "an unrecorded number of tokens per call")
    return text + (f"{p['tokens_per_call']:.2f} tokens per target call{alpha} for a step of d·c {p['draft']:.2f} + "
                   f"v {p['v']:.2f} + o {p['overhead']:.2f} target steps, so the cost model predicted {p['speedup']:.2f}×")


def sentence(category: str, report: dict) -> str:
    """One sentence on what made decoding faster in one category, every comparison a verdict of the numbers."""
    name = CATEGORIES.get(category, category)
    band, best = band_of(report), fastest_exact(report)
    if best is None:
        head = f"**{name}**: none of ours kept AR's tokens on every prompt"
    else:
        verdict, x = classify(best["ratio_to_ar"], band), f"{best['ratio_to_ar']:.2f}×"
        if verdict == "faster":
            head = f"**{name}**: `{best['name']}` decoded faster than our AR ({x}, outside the noise band ±{band:.0%})"
        elif verdict in ("a tie", "slower"):
            head = (f"**{name}**: none of our exact methods was faster than our AR beyond the noise band (±{band:.0%}); the "
                    f"fastest, `{best['name']}`, was {'a tie' if verdict == 'a tie' else 'slower'} ({x})")
        else:
            head = f"**{name}**: the fastest exact method, `{best['name']}`, ran {x} our AR, measured once per prompt: no verdict"
        head += f": {why(best, report)}"
    engine = report.get("engine")
    if engine is None:
        return f"{head}; {NO_ENGINE}."
    b = band_of(engine, "band")
    tail = f"AR on {engine_name(engine)} ran {ratio(engine['engine_gain']['median'], b)} against our AR"
    if engine.get("method"):
        tail += f", and `{engine['method']}` on it {ratio(engine['together']['median'], b, ' our AR')}"
    return f"{head}; {tail}."


def sentences(reports: dict[str, dict]) -> list[str]:
    """:func:`sentence` for every category report."""
    return [sentence(category, rep) for category, rep in reports.items()]


def markdown(reports: dict[str, dict], gpu_reports: list[dict]) -> str:
    """The table, then one sentence per category as a list."""
    return table(reports, gpu_reports) + "\n" + "".join(f"- {s}\n" for s in sentences(reports))
