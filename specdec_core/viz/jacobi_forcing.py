"""Figures and tables of lesson 08b (Jacobi Forcing). Each function takes plain data.

- a noise-aware mask (:func:`specdec_core.jacobi_forcing.noise_aware_mask`) → :func:`mask_picture`;
- one packed training sequence (noisy states and fixed points per block) → :func:`packed_sequence`;
- training logs of several objectives on the same data → :func:`ablation_curves`;
- a side-by-side report of :mod:`specdec_core.bench.jf_eval` → :func:`speed_table`, :func:`quality_table`,
  :func:`speed_bars`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from .base import Figure, plt
from .cllm import smoothed_curve

__all__ = ["load_shipped", "load_reference", "mask_picture", "packed_sequence", "ablation_curves", "speed_table",
           "quality_table", "speed_bars", "data_curve"]

OBJECTIVE_COLOURS = {"cllm": "#1f77b4", "jf": "#d62728"}


def load_shipped(name: str, folder: Path | str | None = None) -> dict:
    """One JSON file of the shipped Jacobi Forcing runs (``jacobi-forcing/``), or a clear error saying
    how to get it back."""
    from ..assets import JF_DIR

    path = (Path(folder) if folder is not None else JF_DIR) / name
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: restore it with `git checkout -- specdec_core/drafts` "
                                "or recreate it with the commands in specdec_core/train/__main__.py")
    return json.loads(path.read_text())


def load_reference(folder: Path | str | None = None) -> tuple[dict[str, dict], dict]:
    """The shipped ablation (``jacobi-forcing/``): ({"cllm": log, "jf": log, …}, side-by-side report) — runs
    on the same trajectories and steps; the report of ``train cllm compare``. Further runs join the logs
    under their name: a log ``<name>-training-log.json``, or a folder ``<name>/`` written by ``train cllm
    train --out`` (e.g. ``jf-kl/``: Jacobi Forcing with the KL anchor, adapter and log)."""
    from ..assets import JF_DIR

    folder = Path(folder) if folder is not None else JF_DIR
    logs = {"cllm": load_shipped("cllm-training-log.json", folder), "jf": load_shipped("training-log.json", folder)}
    report = load_shipped("compare.json", folder)
    for path in sorted(folder.glob("*-training-log.json")):
        logs.setdefault(path.name.removesuffix("-training-log.json"), json.loads(path.read_text()))
    for path in sorted(folder.glob("*/training-log.json")):
        logs.setdefault(path.parent.name, json.loads(path.read_text()))
    return logs, report


def mask_picture(mask, prompt_len: int, lengths: Sequence[int], title: str = "") -> Figure:
    """The bool mask [S, S] of a packed sequence [prompt, noisy blocks, clean blocks]: row = the
    position that attends, column = the position it may read (dark: allowed), copies outlined."""
    m = np.asarray(mask, dtype=float)
    total = sum(lengths)
    fig, ax = plt.subplots(figsize=(5.2, 5.2))
    ax.imshow(m, cmap="Greys", vmin=0, vmax=1.4)
    names = ["prompt"] + [f"noisy {b + 1}" for b in range(len(lengths))] + [f"clean {b + 1}" for b in range(len(lengths))]
    edges = np.cumsum([prompt_len, *lengths, *lengths])
    for e in edges[:-1]:
        ax.axhline(e - 0.5, color="#d62728" if e == prompt_len + total else "#999999", lw=1.5 if e == prompt_len + total else 0.6)
        ax.axvline(e - 0.5, color="#d62728" if e == prompt_len + total else "#999999", lw=1.5 if e == prompt_len + total else 0.6)
    centres = (np.concatenate([[0], edges[:-1]]) + edges - 1) / 2
    ax.set_xticks(centres, names, rotation=90, fontsize=8)
    ax.set_yticks(centres, names, fontsize=8)
    ax.set_xlabel("may read this position")
    ax.set_ylabel("position that attends")
    ax.set_title(title or "the noise-aware mask (dark: may attend)", fontsize=10)
    fig.tight_layout()
    return fig


def packed_sequence(noisy: Sequence[Sequence[int]], clean: Sequence[Sequence[int]], levels: Sequence[float],
                    label: Callable[[int], str] | None = None, width: int = 8) -> Figure:
    """One training sequence: per block, the chosen noisy state above its fixed point; a noisy token
    that already equals the fixed point's is green, a wrong one red. ``levels``: the schedule's target
    noise level of each block (shown with the state's actual one)."""
    blocks = len(clean)
    fig, axes = plt.subplots(blocks, 1, figsize=(min(13, 0.75 * width + 2.0), 0.9 * blocks + 0.4), squeeze=False)
    for b, ax in enumerate(axes[:, 0]):
        x, y = list(noisy[b])[:width], list(clean[b])[:width]
        right = np.array([[a == c for a, c in zip(x, y)], [True] * len(y)], dtype=float)
        colours = np.where(right[..., None] > 0, [0.80, 0.93, 0.80], [0.98, 0.78, 0.78])
        colours[1] = [0.92, 0.92, 0.92]
        ax.imshow(colours, aspect="auto")
        for row, tokens in enumerate((x, y)):
            for i, t in enumerate(tokens):
                ax.text(i, row, (label(t) if label else str(t)).replace("\n", "⏎")[:10], ha="center", va="center", fontsize=7)
        actual = sum(a != c for a, c in zip(noisy[b], clean[b])) / max(len(clean[b]), 1)
        ax.set_yticks([0, 1], [f"noisy {b + 1}", f"clean {b + 1}"], fontsize=8)
        ax.set_xticks([])
        ax.set_title(f"block {b + 1}: target level {levels[b]:.2f}, chosen state's level {actual:.2f} "
                     f"(first {len(x)} of {len(clean[b])} tokens)", fontsize=8, loc="left")
    fig.tight_layout()
    return fig


def ablation_curves(logs: dict[str, dict], smooth: int | None = None, title: str = "") -> Figure:
    """Accuracy after a wrong token and AR accuracy over the steps, one colour per run (same data and
    steps): what each objective teaches. ``logs``: name → training log."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.4))
    for i, (name, log) in enumerate(logs.items()):
        colour = OBJECTIVE_COLOURS.get(name, f"C{i + 2}")
        window = smooth or max(1, len(log["step"]) // 15)
        smoothed_curve(left, log["step"], log["after_error_acc"], colour, name, window)
        smoothed_curve(right, log["step"], log["ar_acc"], colour, name, window)
    left.set_title("top token = the fixed point's, after a wrong token", fontsize=10)
    right.set_title("top token = the greedy answer's (AR accuracy)", fontsize=10)
    for ax in (left, right):
        ax.set_xlabel("training step")
        ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return fig


def speed_table(report: dict) -> str:
    """The speed part of a side-by-side report as a Markdown table (methods in the report's order)."""
    s = report["speed"]
    lines = ["| decoder | tokens/iteration | mean width | × AR | median drift (tokens) |", "|---|---|---|---|---|"]
    for name, m in s["methods"].items():
        width = "–" if m["mean_width"] is None else f"{m['mean_width']:.1f}"
        tpi = "1" if name == "ar" else f"{m['tokens_per_iteration']:.2f}"
        lines.append(f"| {name} | {tpi} | {width} | {m['vs_ar']:.2f}× | {m['median_drift']:g} |")
    return "\n".join(lines)


def quality_table(report: dict) -> str:
    """The quality part of a side-by-side report as a Markdown table, one row per model."""
    q, counts = report["quality"], report["quality"]["counts"]
    lines = [f"| model | unit tests (of {counts['heldout']}) | held-out parses | HumanEval parses (of {counts['humaneval']}) "
             f"| collapsed (of {counts['answers']}) | perplexity, domain | perplexity, docs |", "|---|---|---|---|---|---|---|"]
    for name, m in q.items():
        if name == "counts":
            continue
        lines.append(f"| {name} | {m['heldout_tests_passed']} | {m['heldout_parses']} | {m['humaneval_parses']} | "
                     f"{m['collapsed']} | {m['ppl_domain']:.3f} | {m['ppl_prose']:.2f} |")
    return "\n".join(lines)


def speed_bars(report: dict, title: str = "") -> Figure:
    """Tokens per iteration and speed against AR for every decoder of a side-by-side report."""
    methods = {k: v for k, v in report["speed"]["methods"].items() if k != "ar"}
    names = list(methods)
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.4))
    left.bar(names, [m["tokens_per_iteration"] for m in methods.values()], color="#2ca02c")
    left.set_ylabel("tokens per iteration")
    right.bar(names, [m["vs_ar"] for m in methods.values()], color="#1f77b4")
    right.axhline(1.0, color="black", lw=0.8, ls="--")
    band = report["speed"].get("noise_band")
    if band:
        right.axhspan(1 - band, 1 + band, color="#999999", alpha=0.2, label=f"AR ± noise band ({band:.0%})")
        right.legend(fontsize=7)
    right.set_ylabel("speed vs AR (× tokens/s)")
    for ax in (left, right):
        ax.tick_params(axis="x", rotation=30, labelsize=8)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return fig


def data_curve(curve: dict, title: str = "") -> Figure:
    """Tokens per iteration on the held-out requests against the trajectory tokens each adapter trained on
    (the report of ``train cllm curve``), with the base model as a dashed line."""
    points = [p for p in curve["points"] if p["trajectory_tokens"]]
    fig, ax = plt.subplots(figsize=(6, 3.6))
    for objective in sorted({p["objective"] for p in points}):
        mine = sorted((p for p in points if p["objective"] == objective), key=lambda p: p["trajectory_tokens"])
        ax.plot([p["trajectory_tokens"] for p in mine], [p["tokens_per_iteration"] for p in mine], "o-",
                color=OBJECTIVE_COLOURS.get(objective, "C2"), label=objective)
    ax.axhline(curve["base"], color="black", lw=0.8, ls="--", label="base model")
    ax.set_xscale("log")
    ax.set_xlabel("trajectory tokens trained on (answers)")
    ax.set_ylabel("tokens per iteration (held-out)")
    ax.legend(fontsize=8)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig
