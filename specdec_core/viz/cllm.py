"""Figures and tables of lesson 08 (a small CLLM fine-tune). Each function takes plain data.

- a training log of :func:`specdec_core.train.cllm_finetune.train` (lists ``step``, ``loss``, ``consistency``,
  ``ar``, ``after_error_acc``, ``ar_acc``; ``seconds``) → :func:`training_curves`;
- the shipped reference run (``drafts/cllm/training-log.json`` and ``eval.json``) →
  :func:`load_reference`, :func:`eval_table`;
- rows of :func:`specdec_core.bench.cllm_eval.compare` → :func:`before_after_bars`, :func:`iteration_cost`;
- two trajectories of one block (base model, CLLM) → :func:`trajectory_before_after`.

Speeds are ratios to the base model's greedy AR decoding (> 1 is faster); accuracies are shares.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path

from ..jacobi import fixed_counts
from .base import Figure, plt
from .drafts import moving_average
from .parallel import JACOBI_COLOURS, jacobi_vs_ar, label_cells

__all__ = ["load_reference", "training_curves", "eval_table", "before_after_bars", "iteration_cost",
           "trajectory_before_after"]

LOSS_COLOURS = {"loss": "#444444", "consistency": "#d62728", "ar": "#1f77b4", "after_error_acc": "#2ca02c",
                "ar_acc": "#1f77b4"}
FAST_FORWARD = "#f2b134"  # tokens fixed in a jump: beyond the one every iteration fixes


# ---------------------------------------------------------------- the reference run


def load_reference(folder: Path | str | None = None) -> tuple[dict, dict]:
    """(training log, evaluation report) of the shipped adapter: ``training-log.json`` (the run's
    meta — ``trajectories``, ``recipe``, ``threads`` — and its log lists) and ``eval.json`` (keys
    ``heldout``: :func:`~specdec_core.bench.cllm_eval.summary`, ``rows``, ``humaneval``)."""
    from ..assets import CLLM_DIR

    folder = Path(folder) if folder is not None else CLLM_DIR
    out = []
    for name, command in (("training-log.json", "train"), ("eval.json", "evaluate")):
        path = folder / name
        if not path.exists():
            raise FileNotFoundError(
                f"{path} is missing: restore it with `git checkout -- specdec_core/drafts` or recreate it with "
                f"`python -m specdec_core.train cllm {command}` (see specdec_core/train/__main__.py)")
        out.append(json.loads(path.read_text()))
    return out[0], out[1]


# ---------------------------------------------------------------- training curves


def smoothed_curve(ax, steps, values, colour: str, label: str, window: int) -> None:
    """Plot values over steps (finite ones only): faint raw values and their moving average over `window`."""
    pairs = [(s, v) for s, v in zip(steps, values) if v is not None and math.isfinite(v)]
    if not pairs:
        return
    xs, ys = [p[0] for p in pairs], [p[1] for p in pairs]
    if window > 1:
        ax.plot(xs, ys, color=colour, alpha=0.2, lw=0.8)
        ax.plot(xs, moving_average(ys, window), color=colour, label=f"{label} (moving average, {window} steps)")
    else:
        ax.plot(xs, ys, "o-", color=colour, ms=3, label=label)


def training_curves(log: dict, ar_weight: float | None = None, smooth: int | None = None, title: str = "") -> Figure:
    """Three panels over the training steps of a CLLM fine-tune log.

    Left: the loss L = L_cons + w · L_AR and its AR part w · L_AR (w = ``ar_weight``, else the log's
    ``recipe["ar_weight"]``, else 10). Middle: L_cons, the KL per masked-in position. Right: how often
    the model's top token is the fixed point's at a position after a wrong token (``after_error_acc``:
    what Jacobi needs to fast-forward) and at the greedy answer's positions (``ar_acc``: 1 = the model
    still produces its original output). Moving averages over ``smooth`` steps (default: 1/25 of the run).
    """
    if not log.get("step"):
        raise ValueError("the log has no training step yet")
    w = ar_weight if ar_weight is not None else float(log.get("recipe", {}).get("ar_weight", 10.0))
    steps = log["step"]
    window = smooth or max(1, len(steps) // 25)
    fig, (left, middle, right) = plt.subplots(1, 3, figsize=(13.5, 3.5))
    smoothed_curve(left, steps, log["loss"], LOSS_COLOURS["loss"], "L = L_cons + w·L_AR", window)
    smoothed_curve(left, steps, [w * a for a in log["ar"]], LOSS_COLOURS["ar"], f"w·L_AR (w = {w:g})", window)
    left.set_ylabel("loss")
    left.set_title("the training loss", fontsize=10)
    smoothed_curve(middle, steps, log["consistency"], LOSS_COLOURS["consistency"], "L_cons", window)
    middle.set_ylabel("KL per masked-in position (nats)")
    middle.set_title("consistency: any state → the fixed point", fontsize=10)
    smoothed_curve(right, steps, log["after_error_acc"], LOSS_COLOURS["after_error_acc"], "after a wrong token", window)
    smoothed_curve(right, steps, log["ar_acc"], LOSS_COLOURS["ar_acc"], "on the greedy answer (AR)", window)
    right.set_ylim(0, 1.02)
    right.set_ylabel("top token = the fixed point's")
    right.set_title("accuracy", fontsize=10)
    for ax in (left, middle, right):
        ax.set_xlabel("training step")
        ax.legend(fontsize=7)
    seconds = float(log.get("seconds", 0.0))
    took = f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"
    fig.suptitle(title or f"{len(steps)} steps in {took}", fontsize=11)
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------- the evaluation


def eval_table(report: dict) -> str:
    """A plain-text table of an ``eval.json`` report: base model vs CLLM on the held-out prompts
    (and HumanEval when the report has it)."""
    s, rows = report["heldout"], report.get("rows", [])

    def total(key: str) -> str:
        return str(sum(r[key] for r in rows)) if rows else "–"

    lines = [
        ("tokens per Jacobi iteration", f"{s['base_tokens_per_iteration']:.2f}", f"{s['cllm_tokens_per_iteration']:.2f}"),
        ("Jacobi speed ÷ AR speed (1 = AR; one run, no noise band)", f"{s['base_jacobi_vs_ar']:.2f}",
         f"{s['cllm_jacobi_vs_ar']:.2f}"),
        ("fast-forwarded tokens", total("base_fast_forward"), str(s["fast_forwarded"])),
        ("stationary tokens", total("base_stationary"), str(s["stationary"])),
        ("same greedy output as the base model", "–", f"{s['same_output']} of {s['prompts']}"),
        ("median drift (first differing token)", "–", f"{s['median_drift']:g}"),
    ]
    if "humaneval" in report:
        h = report["humaneval"]
        lines.append((f"HumanEval passed (first {h['problems']})", str(h["base_passed"]), str(h["cllm_passed"])))
        if "base_parses" in h:
            lines.append(("HumanEval answers whose code parses", str(h["base_parses"]), str(h["cllm_parses"])))
    width = max(len(line[0]) for line in lines)
    engine = report.get("engine", "plain")  # reports before the fast path timed the plain modules
    title = f"held-out prompts: {s['prompts']} ({engine} forwards)"
    head = f"{title:<{width}}  {'base':>8}  {'CLLM':>8}"
    return "\n".join([head, "-" * len(head)] + [f"{a:<{width}}  {b:>8}  {c:>8}" for a, b, c in lines])


def _per_token_ratio(jacobi_s: float, tokens: int, ar_s: float, ar_tokens: int) -> float:
    """Jacobi's time per token ÷ AR's (< 1: faster). The CLLM's answer can differ in length from AR's."""
    return (jacobi_s / max(tokens, 1)) / (ar_s / max(ar_tokens, 1))


def before_after_bars(rows: Sequence[dict], label_chars: int = 24) -> Figure:
    """Per held-out prompt (rows of ``bench.cllm_eval.compare``): tokens per Jacobi iteration, base vs CLLM,
    and each one's time per token ÷ greedy AR's (below 1 is faster than AR)."""
    labels = [r["prompt"].replace("\n", " ")[:label_chars] + "…" for r in rows]
    tpi = {"base model": [r["base_tpi"] for r in rows], "CLLM": [r["cllm_tpi"] for r in rows]}
    ratio = {"base model": [_per_token_ratio(r["base_jacobi_s"], r["ar_tokens"], r["ar_s"], r["ar_tokens"]) for r in rows],
             "CLLM": [_per_token_ratio(r["cllm_jacobi_s"], r["tokens"], r["ar_s"], r["ar_tokens"]) for r in rows]}
    fig = jacobi_vs_ar(labels, tpi, ratio)
    fig.axes[1].set_ylabel("Jacobi time per token ÷ AR's")
    return fig


def iteration_cost(rows: Sequence[dict]) -> dict:
    """What one Jacobi iteration of the base model costs, in AR steps, measured in ``compare``'s rows:
    ``cost`` = (time per Jacobi iteration) ÷ (time per AR token). Jacobi beats AR only above
    ``cost`` tokens per iteration, so that is also the break-even point. Also the total ``iterations``
    and ``ar_tokens`` it is based on."""
    iterations = sum(r["ar_tokens"] / r["base_tpi"] for r in rows)
    ar_tokens = sum(r["ar_tokens"] for r in rows)
    per_iteration = sum(r["base_jacobi_s"] for r in rows) / iterations
    per_token = sum(r["ar_s"] for r in rows) / ar_tokens
    return {"cost": per_iteration / per_token, "iterations": round(iterations), "ar_tokens": ar_tokens}


# ---------------------------------------------------------------- one block, before and after


def _draw_block(ax, states, truth, label: Callable | None, title: str) -> None:
    """One block's trajectory on ``ax``: the colours of ``viz.jacobi_trajectory``, plus the tokens
    that were fixed in a jump (fast-forwarded) in gold, from the iteration that fixed them on."""
    import numpy as np
    from matplotlib.colors import ListedColormap

    colours = {**JACOBI_COLOURS, "fast-forwarded": FAST_FORWARD}
    kinds = list(colours)
    states = [list(s) for s in states]
    rows, n = len(states), len(states[0])
    fixed = fixed_counts(states, len(truth))
    jumped = set()  # positions fixed beyond the first of their iteration
    grid = np.zeros((rows, n), dtype=int)
    for j, state in enumerate(states):
        if j:
            jumped |= set(range(fixed[j - 1] + 1, fixed[j]))
        for i, token in enumerate(state):
            if i >= len(truth):
                kind = "after EOS"
            elif i < fixed[j]:
                kind = "fast-forwarded" if i in jumped else "fixed"
            else:
                kind = "right" if token == truth[i] else "wrong"
            grid[j, i] = kinds.index(kind)
    ax.imshow(grid, cmap=ListedColormap(list(colours.values())), vmin=0, vmax=len(kinds) - 1, aspect="auto")
    if label is not None:
        label_cells(ax, states, grid == kinds.index("fixed"), label)
    ax.set_xticks(range(n), [str(i + 1) for i in range(n)], fontsize=8)
    ax.set_yticks(range(rows), [str(j) for j in range(rows)], fontsize=7)
    ax.set_ylabel("iteration")
    ax.set_title(title or f"{len(truth)} tokens in {rows - 1} iterations", fontsize=10)
    handles = [plt.Rectangle((0, 0), 1, 1, fc=c) for c in colours.values()]
    ax.legend(handles, kinds, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)


def trajectory_before_after(base_states, base_truth, cllm_states, cllm_truth, label: Callable | None = None,
                            titles: tuple[str, str] | None = None) -> Figure:
    """The same block decoded by Jacobi iteration with the base model (top) and with the CLLM (bottom).

    ``*_states``: the K+1 states of the block (lists of n ids, row 0 = the guess); ``*_truth``: each
    model's own fixed point for it (its greedy output; shorter after an EOS). ``label``: token id →
    text for the cells. Dark green: fixed one token per iteration, gold: fixed in a jump
    (fast-forwarded), light green: right but not yet fixed (a stationary token if it stays right).
    """
    rows = (len(base_states), len(cllm_states))
    n = len(base_states[0])
    titles = titles or (f"base model: {len(base_truth)} tokens in {rows[0] - 1} iterations",
                        f"CLLM: {len(cllm_truth)} tokens in {rows[1] - 1} iterations")
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(max(6.0, 0.72 * n + 2.4), 0.3 * sum(rows) + 2.6),
                                      gridspec_kw={"height_ratios": [max(r, 2) for r in rows]})
    _draw_block(top, base_states, list(base_truth), label, titles[0])
    _draw_block(bottom, cllm_states, list(cllm_truth), label, titles[1])
    bottom.set_xlabel("position in the block")
    fig.tight_layout()
    return fig
