"""Figures of lesson 04 (draft models: when they pay off). Each function takes plain data and returns a Figure.

Rows are :class:`specdec_core.bench.drafters.DrafterRow` (one drafter at one γ and temperature: α,
tokens per target call, speed-up over AR, the cost ratios c and v, and the predicted S). Speed-ups
are unitless ratios (> 1 is faster than the target alone); c and v are in units of one target decode
step; α is a probability.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Protocol

from .. import theory
from .base import Figure, plt

__all__ = ["training_curves", "drafter_bars", "gamma_curve", "break_even", "sweep_params",
           "drafter_view", "ablation_table", "data_curve", "unrolled_mask"]


class DrafterRow(Protocol):
    """What these figures read of a row (``bench.drafters.DrafterRow`` has it; viz imports nothing of bench/)."""

    name: str
    gamma: int
    temperature: float
    alpha: float
    tokens_per_call: float
    tokens_per_s: float
    ar_tokens_per_s: float
    speedup: float
    c: float
    v: float
    predicted: float


KIND_LABELS = {"model": "standalone draft (4 layers × 128)", "feature": "feature drafter (EAGLE head, FR-Spec)"}
KIND_COLOURS = {"model": "#1f77b4", "feature": "#d62728"}


def _finite(xs: Sequence, ys: Sequence) -> tuple[list[float], list[float]]:
    """Pairs (x, y) with y a finite number (a JSON log writes NaN as NaN or null)."""
    pairs = [(x, y) for x, y in zip(xs, ys) if y is not None and math.isfinite(y)]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def moving_average(values: Sequence[float], window: int) -> list[float]:
    """Trailing moving average over ``window`` values (shorter at the start): same length as ``values``."""
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


# ---------------------------------------------------------------- training
def training_curves(log: dict, smooth: int | None = None) -> Figure:
    """One row per drafter kind in ``log`` (``assets.DRAFTS_LOG``: keys "model" and/or "feature").

    Each kind holds lists ``step``, ``loss``, ``train_agree`` (one value per training step),
    ``eval_step``, ``valid_agree``, ``valid_agree2`` (one per evaluation) and ``seconds`` (the run's
    wall time). Left: training loss, moving average over ``smooth`` steps (default: 1/25 of the run).
    Right: greedy agreement with the target (share of positions where the draft's most likely token
    is the target's) — on training batches (smoothed) and on held-out chat answers; for "feature"
    also ``valid_agree2``, the agreement when the head reads its own predicted features (what
    drafting the 2nd, 3rd… token feeds it).
    """
    kinds = [k for k in ("model", "feature") if k in log] + [k for k in log if k not in ("model", "feature")
                                                               and isinstance(log[k], dict) and "loss" in log[k]]
    if not kinds:
        raise ValueError(f"the log has no training run (keys: {sorted(log)}); expected 'model' and/or 'feature'")
    fig, axes = plt.subplots(len(kinds), 2, figsize=(11.5, 3.3 * len(kinds)), squeeze=False)
    for (left, right), kind in zip(axes, kinds):
        run = log[kind]
        colour = KIND_COLOURS.get(kind, "#2ca02c")
        label = KIND_LABELS.get(kind, kind)
        window = smooth or max(1, len(run["loss"]) // 25)
        steps, loss = _finite(run["step"], run["loss"])
        left.plot(steps, loss, color=colour, alpha=0.2, lw=0.8)
        left.plot(steps, moving_average(loss, window), color=colour, label=f"moving average ({window} steps)")
        left.set_xlabel("training step")
        left.set_ylabel("training loss")
        minutes = float(run.get("seconds", 0.0)) / 60
        left.set_title(f"{label}: {len(run['step'])} steps in {minutes:.0f} min", fontsize=10)
        left.legend(fontsize=8)
        steps, agree = _finite(run["step"], run.get("train_agree", []))
        if agree:
            right.plot(steps, moving_average(agree, window), color=colour, alpha=0.35, label="training batches (smoothed)")
        evals, valid = _finite(run["eval_step"], run["valid_agree"])
        right.plot(evals, valid, "o-", color=colour, ms=3, label="held-out chat answers")
        evals2, valid2 = _finite(run["eval_step"], run.get("valid_agree2", []))
        if valid2:
            right.plot(evals2, valid2, "s--", color=colour, ms=3, mfc="white",
                       label="held-out, reading its own predicted features")
        right.set_ylim(0, 1)
        right.set_xlabel("training step")
        right.set_ylabel("greedy agreement with the target")
        right.set_title("does the draft's top token match the target's?", fontsize=10)
        right.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------- side by side
def drafter_bars(rows: Sequence[DrafterRow], title: str = "") -> Figure:
    """Three panels, one group of bars per row: speed-up over our AR, measured vs predicted by
    S = E(α, γ)/(γc + v) (dashed line at 1.0× = as fast as the target alone); α; tokens per target call."""
    import numpy as np

    labels = [f"{r.name}\nγ={r.gamma}" for r in rows]
    idx = np.arange(len(rows))
    fig, (speed, alpha, tpc) = plt.subplots(1, 3, figsize=(12.5, 3.6), gridspec_kw={"width_ratios": [2, 1.2, 1.2]})
    measured = speed.bar(idx - 0.2, [r.speedup for r in rows], 0.4, color="#2ca02c", label="measured")
    speed.bar(idx + 0.2, [r.predicted for r in rows], 0.4, color="#c7e9c0", ec="#2ca02c", label="predicted")
    for bar, r in zip(measured, rows):
        speed.text(bar.get_x() + bar.get_width() / 2, r.speedup, f"{r.speedup:.2f}×", ha="center", va="bottom",
                   fontsize=8)
    speed.axhline(1.0, color="black", lw=0.8, ls="--")
    speed.set_ylabel("speed ÷ target alone")
    speed.set_title("speed-up over AR (> 1 is faster)", fontsize=10)
    speed.legend(fontsize=8)
    alpha.bar(idx, [r.alpha for r in rows], 0.6, color="#1f77b4")
    alpha.set_ylim(0, 1)
    alpha.set_title("α (acceptance rate)", fontsize=10)
    tpc.bar(idx, [r.tokens_per_call for r in rows], 0.6, color="#9467bd")
    tpc.axhline(1.0, color="grey", lw=0.8, ls=":")
    tpc.set_title("tokens per target call", fontsize=10)
    for ax in (speed, alpha, tpc):
        ax.set_xticks(idx, labels, fontsize=8)
    temps = sorted({r.temperature for r in rows})
    fig.suptitle(title or f"drafters side by side, T = {', '.join(f'{t:g}' for t in temps)}")
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------- choosing γ
def sweep_params(rows: Sequence[DrafterRow]) -> tuple[float, float, float]:
    """(α, c, v) of a γ sweep: the medians over its rows — one set of numbers to draw theory's curve for."""
    if not rows:
        raise ValueError("no rows: run drafter_eval.gamma_sweep first")
    med = statistics.median
    return med(r.alpha for r in rows), med(r.c for r in rows), med(r.v for r in rows)


def gamma_curve(rows: Sequence[DrafterRow], alpha: float, c: float, v: theory.VerifyCost,
                highlight: int | None = None, title: str = "") -> Figure:
    """Measured speed-up at each γ (``rows`` from ``bench.drafters.gamma_sweep``, one row per γ) as dots,
    against theory's S(γ) = E(α, γ)/(γc + v) for the given α, c, v as a curve (γ from 1 to the largest
    measured + 2); ``v``: a number or the machine's v(n) (each γ then priced with v(γ + 1)). Stars mark
    the best γ of each; ``highlight`` rings the row with that γ."""
    gammas = sorted(r.gamma for r in rows)
    top = max(gammas + [1]) + 2
    grid = list(range(1, top + 1))
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(grid, [theory.speedup(alpha, g, c, v) for g in grid], "-", color="#1f77b4",
            label=f"theory: α = {alpha:.2f}, c = {c:.3f}, " + ("v(γ + 1)" if callable(v) else f"v = {v:.2f}"))
    best = theory.best_gamma(alpha, c, v, top)
    ax.plot(best, theory.speedup(alpha, best, c, v), "*", color="#1f77b4", ms=13, label=f"theory's best γ = {best}")
    by_gamma = sorted(rows, key=lambda r: r.gamma)
    ax.plot([r.gamma for r in by_gamma], [r.speedup for r in by_gamma], "o", color="black", label="measured")
    if rows:
        fastest = max(rows, key=lambda r: r.speedup)
        ax.plot(fastest.gamma, fastest.speedup, "*", color="black", ms=13, mfc="none",
                label=f"fastest measured γ = {fastest.gamma}")
    chosen = [r for r in rows if r.gamma == highlight]
    for r in chosen:
        ax.plot(r.gamma, r.speedup, "o", ms=15, mfc="none", mec="red", mew=2)
        ax.text(0.98, 0.04, f"γ = {r.gamma}: α = {r.alpha:.2f}, measured {r.speedup:.2f}×, predicted {r.predicted:.2f}×",
                transform=ax.transAxes, ha="right", va="bottom", fontsize=8, color="red",
                bbox=dict(boxstyle="round", fc="white", ec="red", alpha=0.8))
    ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax.set_xticks(grid)
    ax.set_xlabel("γ (draft tokens per step)")
    ax.set_ylabel("speed-up over the target alone")
    values = [theory.speedup(alpha, g, c, v) for g in grid] + [r.speedup for r in rows] + [1.0]
    ax.set_ylim(0, max(values) * 1.3)
    ax.set_title(title or "S = E(α, γ) / (γc + v) against the measured speed-up")
    ax.legend(fontsize=8, loc="upper right", ncol=2)
    fig.tight_layout()
    return fig


def drafter_view(rows: Sequence[DrafterRow], gamma: int, name: str = "") -> tuple[Figure, str]:
    """The pure part of ``widgets.drafter_panel``: one drafter's γ sweep at the chosen γ.

    The curve is theory's S for the α, c, v measured at ``gamma`` (the medians of the sweep when that
    γ was not measured), with every measured point and the chosen one ringed. Returns the figure and
    one line of text describing the row (``name``: the drafter, for the title).
    """
    row = next((r for r in rows if r.gamma == gamma), None)
    if row is None:
        alpha, c, v = sweep_params(rows)
        text = (f"γ = {gamma} was not measured (measured: {sorted(r.gamma for r in rows)}); the curve uses the "
                f"sweep's medians α = {alpha:.2f}, c = {c:.3f}, v = {v:.2f}")
    else:
        alpha, c, v = row.alpha, row.c, row.v
        text = (f"γ = {row.gamma}: α = {row.alpha:.2f}, {row.tokens_per_call:.2f} tokens per target call, "
                f"c = {row.c:.3f}, v = {row.v:.2f} → predicted {row.predicted:.2f}×, measured {row.speedup:.2f}× "
                f"({row.tokens_per_s:.1f} vs {row.ar_tokens_per_s:.1f} tokens/s); theory's best γ for these "
                f"numbers: {theory.best_gamma(alpha, c, v)}")
    where = f"the numbers measured at γ = {gamma}" if row is not None else "the sweep's median numbers"
    fig = gamma_curve(rows, alpha, c, v, highlight=gamma, title=f"{name + ': ' if name else ''}S(γ) for {where}")
    return fig, text


# ---------------------------------------------------------------- break-even
def break_even(cs: Sequence[float], vs: Sequence[theory.VerifyCost], max_gamma: int = 8) -> Figure:
    """The best achievable S (over γ in 1..max_gamma) against α, one curve per c, one panel per v (a number,
    or the machine's v(n): each γ then priced with v(γ + 1));
    where each curve crosses the dashed 1.0× line is the α a draft of that cost needs to pay off."""
    alphas = [i / 200 for i in range(201)]
    fig, axes = plt.subplots(1, len(vs), figsize=(5.2 * len(vs), 3.6), sharey=True, squeeze=False)
    for ax, v in zip(axes[0], vs):
        for c in cs:
            curve = [max(theory.speedup(a, g, c, v) for g in range(1, max_gamma + 1)) for a in alphas]
            line = ax.plot(alphas, curve, label=f"c = {c:g}")[0]
            a0 = theory.break_even_alpha(c, v, max_gamma)
            if math.isfinite(a0):
                ax.plot(a0, 1.0, "o", color=line.get_color(), ms=5)
        ax.axhline(1.0, color="black", lw=0.8, ls="--")
        ax.set_xlabel("α (acceptance rate)")
        ax.set_title("v(γ + 1) of this machine" if callable(v) else f"v = {v:.2f}", fontsize=10)
        ax.set_yscale("log")
        ax.set_yticks([0.25, 0.5, 1, 2, 4, 8], ["¼×", "½×", "1×", "2×", "4×", "8×"])
        ax.minorticks_off()
        ax.legend(fontsize=8, title="draft cost", title_fontsize=8)
    axes[0, 0].set_ylabel(f"best S over γ ≤ {max_gamma}")
    fig.suptitle("how good must a draft be? dots: break-even α")
    fig.tight_layout()
    return fig


def ablation_table(log: dict) -> str:
    """Markdown table of the feature head's ablation (``assets.ABLATION_LOG``): per variant its inputs,
    recipe, training tokens and steps, held-out agreement at drafting steps 1-3 (– where not measured),
    and α / tokens per target call on ``prompts.HELDOUT`` (greedy, γ = 3)."""
    lines = ["| variant | reads | training | tokens | steps | agreement step 1 / 2 / 3 | HELDOUT α | tokens / call "
             "| minutes |", "|---|---|---|---:|---:|---|---:|---:|---:|"]
    # the ablation's variants first, then reference rows (measured on HELDOUT only: no agreement)
    for name, run in sorted(log.items(), key=lambda item: "valid_agree_steps" not in item[1]):
        agree = " / ".join(f"{a:.2f}" for a in run["valid_agree_steps"][-1]) if "valid_agree_steps" in run else "–"
        training = f"unrolled × {run['unroll']}" if run["unroll"] else "two passes"
        reads = "3 layers, fused" if run["inputs"] == "fused" else "last layer"
        lines.append(f"| {name} | {reads} | {training} | {run['train_tokens']:,} | {run.get('steps', '–')} | {agree} | "
                     f"{run['heldout']['alpha']:.3f} | {run['heldout']['tokens_per_call']:.2f} | {run['seconds'] / 60:.0f} |")
    return "\n".join(lines)


def alpha_margin(run: dict) -> float:
    """Two standard errors of a run's HELDOUT α (binomial). Its count is the target calls
    (prompts × tokens ÷ tokens per call): every call examines at least one guess, so this is a lower
    bound on the guesses examined and the margin errs wide."""
    h = run["heldout"]
    n = h["prompts"] * h["max_new_tokens"] / h["tokens_per_call"]
    return 2 * math.sqrt(h["alpha"] * (1 - h["alpha"]) / n)


def compare_alpha(before: dict, after: dict) -> str:
    """"higher", "lower" or "a tie": the change of HELDOUT α from run ``before`` to run ``after``
    against both runs' margins (:func:`alpha_margin`, combined in quadrature)."""
    diff = after["heldout"]["alpha"] - before["heldout"]["alpha"]
    margin = math.hypot(alpha_margin(before), alpha_margin(after))
    return "higher" if diff > margin else "lower" if diff < -margin else "a tie"


def best_variant(log: dict, reference: str | None = None) -> str:
    """The ablation's best variant, or none where every variant's HELDOUT α ties the highest (:func:`compare_alpha`);
    then ``reference`` (a reference row's name in ``log``) against every variant."""
    runs = {n: r for n, r in log.items() if "valid_agree_steps" in r}  # same steps; reference rows left out
    top = max(runs, key=lambda n: runs[n]["heldout"]["alpha"])
    tied = [n for n in runs if compare_alpha(runs[n], runs[top]) == "a tie"]
    alphas = [r["heldout"]["alpha"] for r in runs.values()]
    line = (f"no best variant: all {len(runs)} lie within one margin of the highest α "
            f"(α {min(alphas):.3f}–{max(alphas):.3f})" if len(tied) == len(runs)
            else f"best variant: {top} (α {runs[top]['heldout']['alpha']:.3f})" if tied == [top]
            else f"best variants, within one margin of the highest α: {'; '.join(tied)}")
    if reference in log:
        ref = log[reference]
        said = [compare_alpha(ref, r) for r in runs.values()]
        line += (f"; against the {reference} (α {ref['heldout']['alpha']:.3f} after {ref['steps']} steps), the "
                 f"variants after {runs[top]['steps']}: " + ", ".join(f"{said.count(v)} {v}" for v in
                                                                     ("lower", "a tie", "higher") if said.count(v)))
    return line


ABLATION_QUESTIONS = [  # (what changes, recipe before, recipe after): recipes as (inputs, unroll, share of data)
    ("three fused layers instead of the last (two passes)", ("last", 0, 1.0), ("fused", 0, 1.0)),
    ("three fused layers instead of the last (unrolled × 3)", ("last", 3, 1.0), ("fused", 3, 1.0)),
    ("unrolled × 3 instead of two passes (fused layers)", ("fused", 0, 1.0), ("fused", 3, 1.0)),
    ("unrolled × 3 instead of two passes (last layer)", ("last", 0, 1.0), ("last", 3, 1.0)),
    ("twice the data (¼ → ½ of the corpus)", ("fused", 3, 0.25), ("fused", 3, 0.5)),
    ("twice the data (½ → all of the corpus)", ("fused", 3, 0.5), ("fused", 3, 1.0)),
]


def ablation_findings(log: dict) -> list[str]:
    """One sentence per question of :data:`ABLATION_QUESTIONS` whose two runs are in ``log`` (runs of
    the same steps only): HELDOUT α before → after and the verdict against the margin."""
    runs = {(r["inputs"], r["unroll"], r["fraction"]): r for r in log.values() if "valid_agree_steps" in r}
    out = []
    for what, a, b in ABLATION_QUESTIONS:
        if a in runs and b in runs:
            ra, rb = runs[a], runs[b]
            margin = math.hypot(alpha_margin(ra), alpha_margin(rb))
            out.append(f"{what}: α {ra['heldout']['alpha']:.3f} → {rb['heldout']['alpha']:.3f} "
                       f"({compare_alpha(ra, rb)}; margin ±{margin:.3f})")
    return out


def data_curve(log: dict, inputs: str = "fused", unroll: int = 3) -> Figure:
    """HELDOUT α and held-out agreement (step 1) against training tokens, for the ablation runs of
    one recipe trained on different shares of the corpus."""
    runs = [r for r in log.values()  # the ablation's runs (the reference row has other steps)
            if r["inputs"] == inputs and r["unroll"] == unroll and "valid_agree_steps" in r]
    runs.sort(key=lambda r: r["train_tokens"])
    fig, ax = plt.subplots(figsize=(6, 3.6))
    x = [r["train_tokens"] for r in runs]
    ax.plot(x, [r["heldout"]["alpha"] for r in runs], "o-", color=KIND_COLOURS["feature"], label="α on HELDOUT (γ = 3)")
    ax.plot(x, [r["valid_agree_steps"][-1][0] for r in runs], "s--", color="grey", label="held-out agreement, step 1")
    ax.set_xscale("log")
    ax.set_xlabel("training tokens")
    ax.set_ylabel("rate")
    ax.set_ylim(0, 1)
    ax.set_title(f"what more data buys ({'fused' if inputs == 'fused' else 'last'} layers, "
                 f"{'unrolled × ' + str(unroll) if unroll else 'two passes'}, same steps)")
    ax.legend(loc="lower right")
    fig.tight_layout()
    return fig


def unrolled_mask(mask, T: int, steps: int) -> Figure:
    """The training-time test's attention mask (:func:`specdec_core.train.eagle.chain_mask`) as a grid:
    rows are the chains of unrolled step ``steps``, columns the keys [real pairs | step 1 | … | itself]."""
    fig, ax = plt.subplots(figsize=(1.2 + 0.32 * (steps + 1) * T, 1.2 + 0.32 * T))
    ax.imshow(mask.float().numpy(), cmap="Greys", vmin=0, vmax=1.4)
    for j in range(1, steps + 1):
        ax.axvline(j * T - 0.5, color=KIND_COLOURS["feature"], lw=1.5)
    ax.set_xticks([j * T + (T - 1) / 2 for j in range(steps + 1)],
                  ["real pairs 0…t"] + [f"own step {j}" for j in range(1, steps)] + ["itself"][: 1 if steps else 0])
    ax.set_yticks(range(T), [f"chain t = {t}" for t in range(T)])
    ax.set_title(f"who attends to what at unrolled step {steps} (dark = attend)")
    fig.tight_layout()
    return fig


def _recipe(run: dict) -> str:
    return (f"{'3 layers, fused' if run['inputs'] == 'fused' else 'last layer'}, "
            f"{'unrolled × ' + str(run['unroll']) if run['unroll'] else 'two passes'}")


def compute_curve(log: dict) -> Figure:
    """What compute buys: HELDOUT α (γ = 3, with its binomial margin) against training steps for each recipe
    of the ablation log trained on the whole corpus — the ablation's short runs and the longer reference
    rows — and, where a run kept it (``agree_curve``), its held-out agreement at drafting step 1 along the way."""
    fig, ax = plt.subplots(figsize=(7, 3.8))
    recipes: dict[str, list[tuple[int, dict]]] = {}
    for run in log.values():
        if run.get("fraction", 1.0) == 1.0 and "heldout" in run:
            steps = run.get("steps") or run.get("recipe", {}).get("steps")
            if steps:
                recipes.setdefault(_recipe(run), []).append((steps, run))
    for i, (name, points) in enumerate(sorted(recipes.items())):
        points.sort(key=lambda p: p[0])
        colour = plt.get_cmap("tab10")(i)
        ax.errorbar([s for s, _ in points], [r["heldout"]["alpha"] for _, r in points],
                    yerr=[alpha_margin(r) for _, r in points], fmt="o-", color=colour, capsize=3,
                    label=f"{name}: α on HELDOUT")
        for _, run in points:
            if "agree_curve" in run:
                c = run["agree_curve"]
                ax.plot(c["steps"], [a[0] for a in c["agree"]], "s--", color=colour, alpha=0.6,
                        label=f"{name}: held-out agreement, step 1")
    ax.set_xlabel("training steps (batch 8 × 256 tokens)")
    ax.set_ylabel("rate")
    ax.set_ylim(0, 1)
    ax.set_title("what compute buys: the feature head's α against training steps")
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    return fig
