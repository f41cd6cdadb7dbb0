"""Matplotlib figures of the course. Each function takes plain data and returns a Figure.

Sections, one per lesson; add new figures at the end of your lesson's section.
"""

from __future__ import annotations

import matplotlib

matplotlib.use(matplotlib.get_backend())  # keep the notebook's inline backend
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

__all__ = ["plt", "Figure"]


# ---------------------------------------------------------------- lesson 03: speculative sampling
STEP_COLOURS = {"accepted": "#9be29b", "rejected": "#f4a3a3", "resampled": "#ffd27f", "bonus": "#9cc8ff"}


def speculative_steps(tokenizer, steps: list[dict], max_steps: int = 6) -> Figure:
    """Draw speculative steps as coloured tokens: green accepted, red rejected (in italics),
    orange the target's replacement drawn from the residual, blue the bonus token."""
    steps = steps[:max_steps]
    width_in = 11.0
    fig, ax = plt.subplots(figsize=(width_in, 0.55 * len(steps) + 0.8))
    fig.subplots_adjust(left=0.01, right=0.99, top=0.95, bottom=0.02)
    ax.set_axis_off()
    # x in units of one monospace character (10 pt DejaVu Sans Mono is ≈ 0.6 × 10 pt wide)
    chars = width_in * 0.98 * 72 / 6.0
    ax.set_xlim(0, chars)
    ax.set_ylim(len(steps) + 0.5, -0.8)
    for row, step in enumerate(steps):
        n = step["accepted"]
        pieces = [(t, "accepted") for t in step["drafted"][:n]]
        pieces += [(t, "rejected") for t in step["drafted"][n : n + 1]]
        pieces.append((step["next"], step["kind"]))
        x = 9.0
        ax.text(0.0, row, f"step {row + 1}", va="center", fontsize=9, family="monospace")
        for token, kind in pieces:
            label = repr(tokenizer.decode([token]))[1:-1] or "·"
            ax.text(x, row, label, va="center", fontsize=10, family="monospace",
                    fontstyle="italic" if kind == "rejected" else "normal",
                    bbox=dict(boxstyle="round,pad=0.25", fc=STEP_COLOURS[kind], ec="none"))
            x += len(label) + 1.5
    for i, (kind, colour) in enumerate(STEP_COLOURS.items()):
        ax.text(9.0 + 14 * i, -0.6, kind, fontsize=9, bbox=dict(boxstyle="round", fc=colour, ec="none"))
    return fig


def law_comparison(exact, counts, labels=None, title: str = "") -> Figure:
    """Bars: the exact probabilities vs the empirical frequencies of the same outcomes."""
    import numpy as np

    exact = np.asarray(exact, float).ravel()
    freq = np.asarray(counts, float).ravel() / max(np.sum(counts), 1)
    idx = np.arange(exact.size)
    fig, ax = plt.subplots(figsize=(10, 3.2))
    ax.bar(idx - 0.2, exact, width=0.4, label="target, exact")
    ax.bar(idx + 0.2, freq, width=0.4, label="speculative, sampled")
    if labels is not None:
        ax.set_xticks(idx, labels, rotation=60, fontsize=8)
    ax.set_ylabel("probability")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    return fig


def speedup_curves(alphas, c: float, v: float, max_gamma: int = 10, points=()) -> Figure:
    """Leviathan's S(α, γ) = E(α, γ)/(γc + v) against γ for several α; measured points on top."""
    from .theory import speedup

    gammas = list(range(1, max_gamma + 1))
    fig, ax = plt.subplots(figsize=(7, 4))
    for a in alphas:
        ax.plot(gammas, [speedup(a, g, c, v) for g in gammas], label=f"α = {a:.2f}")
    for p in points:
        ax.plot(p.gamma, p.measured_speedup, "ko")
        ax.annotate(f"measured\nα={p.alpha:.2f}", (p.gamma, p.measured_speedup), fontsize=8,
                    xytext=(5, 5), textcoords="offset points")
    ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax.set_xlabel("γ (draft tokens per step)")
    ax.set_ylabel("speed-up over plain decoding")
    ax.set_title(f"S = E(α, γ) / (γc + v),  c = {c:.2f}, v = {v:.2f}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------- lesson 01: autoregressive baseline
def kv_cache_latency(lengths, with_cache, without_cache, token_times: dict | None = None) -> Figure:
    """Left: seconds for ONE next token vs context length, with and without the KV cache.
    Right (optional): per-token latency of two generate runs, ``{"label": [seconds per token]}``."""
    panels = 2 if token_times else 1
    fig, axes = plt.subplots(1, panels, figsize=(5.5 * panels, 3.6), squeeze=False)
    ax = axes[0, 0]
    ax.plot(lengths, [t * 1e3 for t in without_cache], "o-", color="#d62728", label="no cache: re-run everything")
    ax.plot(lengths, [t * 1e3 for t in with_cache], "o-", color="#1f77b4", label="KV cache: run 1 token")
    ax.set_xlabel("context length (tokens)")
    ax.set_ylabel("ms for the next token")
    ax.set_ylim(bottom=0)
    ax.set_title("one decode step")
    ax.legend(fontsize=8)
    if token_times:
        ax = axes[0, 1]
        for label, times in token_times.items():
            ax.plot(range(1, len(times) + 1), [t * 1e3 for t in times], ".-", label=label)
        ax.set_xlabel("new token #")
        ax.set_ylabel("ms")
        ax.set_ylim(bottom=0)
        ax.set_title("a whole generation, token by token")
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def weights_vs_kv_cache(lengths, weight_bytes: int, kv_bytes_per_token: int, measured: dict | None = None,
                        title: str = "") -> Figure:
    """Memory of the weights (flat) and of the KV cache (linear in tokens); measured caches as dots."""
    fig, ax = plt.subplots(figsize=(6.5, 3.6))
    mb = 1024**2
    ax.plot(lengths, [weight_bytes / mb] * len(lengths), color="grey", label="weights")
    ax.plot(lengths, [n * kv_bytes_per_token / mb for n in lengths], color="#1f77b4", label="KV cache (formula)")
    if measured:
        ax.plot(list(measured), [b / mb for b in measured.values()], "o", color="#ff7f0e", label="KV cache (measured)")
    ax.set_xlabel("tokens in the context (batch 1)")
    ax.set_ylabel("MB")
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def next_token_bars(probs, labels, title: str = "") -> Figure:
    """A bar chart of a next-token distribution over the given (already selected) tokens."""
    fig, ax = plt.subplots(figsize=(9, 3.2))
    ax.bar(range(len(probs)), probs, color="#1f77b4")
    ax.set_xticks(range(len(labels)), labels, rotation=60, fontsize=8)
    ax.set_ylabel("probability")
    ax.set_ylim(0, 1)
    ax.set_title(title)
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------- lesson 02: the naive method
def first_token_histograms(bars: dict, labels, title: str = "") -> Figure:
    """Grouped bars, one group per token: ``{"series name": [probability per token]}``."""
    import numpy as np

    idx = np.arange(len(labels))
    width = 0.8 / max(len(bars), 1)
    fig, ax = plt.subplots(figsize=(11, 3.6))
    for i, (name, values) in enumerate(bars.items()):
        ax.bar(idx + (i - (len(bars) - 1) / 2) * width, values, width=width, label=name)
    ax.set_xticks(idx, labels, rotation=60, fontsize=8)
    ax.set_ylabel("probability")
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def score_bars(prompt_labels, scores: dict, title: str = "") -> Figure:
    """Average log-likelihood per prompt for several texts: ``{"text kind": [score per prompt]}``."""
    import numpy as np

    idx = np.arange(len(prompt_labels))
    width = 0.8 / max(len(scores), 1)
    fig, ax = plt.subplots(figsize=(10, 3.6))
    for i, (name, values) in enumerate(scores.items()):
        ax.bar(idx + (i - (len(scores) - 1) / 2) * width, values, width=width, label=name)
    ax.set_xticks(idx, prompt_labels, fontsize=8)
    ax.set_ylabel("avg log-likelihood (nats/token)")
    ax.axhline(0, color="black", lw=0.5)
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def threshold_tradeoff(draft_scores, target_scores, threshold: float, rates, distances, current, spec_rate: float) -> Figure:
    """Left: the five drafts' scores (and the target's own answers') against the threshold.
    Right: one-token drafts, exact — acceptance rate vs TV(output, target) as the threshold moves;
    the current threshold as a dot, speculative sampling (lesson 03) as a star at distance 0."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(11.5, 3.8))
    n = len(draft_scores)
    left.bar([i - 0.2 for i in range(n)], draft_scores, width=0.4, color="C0", label="draft's answer")
    left.bar([i + 0.2 for i in range(n)], target_scores, width=0.4, color="C1", label="target's own answer")
    left.axhline(threshold, color="black", ls="--", label=f"threshold {threshold:.2f}")
    left.set_xticks(range(n), [f"prompt {i + 1}" for i in range(n)], fontsize=8)
    left.set_ylabel("score (nats/token)")
    left.set_title("whole drafts: kept if their score ≥ threshold")
    left.legend(fontsize=8)
    right.plot(rates, distances, "-", color="grey")
    right.plot([current[0]], [current[1]], "o", color="#d62728", ms=9, label="this threshold")
    right.plot([spec_rate], [0.0], "*", color="#2ca02c", ms=14, label="speculative sampling (lesson 03)")
    right.set_xlabel("share of drafts accepted (speed)")
    right.set_ylabel("TV(output, target)")
    right.set_xlim(-0.02, 1.02)
    right.set_ylim(-0.02, 1.02)
    right.set_title("one-token drafts, exact: curve over all thresholds on log p(x)")
    right.legend(fontsize=8)
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------- lesson 05: NF4 quantization
QUANT_COLOURS = {"nf4": "#1f77b4", "fp4": "#ff7f0e", "int4": "#2ca02c", "fp32": "grey", "nf4+dq": "#9467bd"}


def nf4_levels(scaled, codes: dict, bins: int = 120) -> Figure:
    """Histogram of block-scaled weights (values in [-1, 1]) with each code book's 16 levels drawn
    on it, one panel per code book: ``codes = {"nf4": tensor[16], ...}``."""
    import numpy as np

    values = np.asarray(scaled, float).ravel()
    fig, axes = plt.subplots(len(codes), 1, figsize=(10, 2.3 * len(codes)), sharex=True, squeeze=False)
    for ax, (name, code) in zip(axes[:, 0], codes.items()):
        ax.hist(values, bins=bins, range=(-1, 1), color="#cccccc")
        for level in sorted(set(np.asarray(code, float).tolist())):
            if -1.0 <= level <= 1.0:
                ax.axvline(level, color=QUANT_COLOURS.get(name, "black"), lw=1.2)
        ax.set_ylabel("count")
        ax.set_title(f"{name}: its levels on the weights, each block divided by its absmax", fontsize=10)
    axes[-1, 0].set_xlabel("weight / absmax of its block")
    fig.tight_layout()
    return fig


def quantization_tradeoff(rows: dict, highlight: dict | None = None) -> Figure:
    """Left: relative error vs block size; right: bits per weight vs block size. ``rows`` maps a
    label to ``nf4.tradeoff`` dicts (one per block size); ``highlight`` marks one point."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.6))
    for label, series in rows.items():
        sizes = [r["blocksize"] for r in series]
        colour = QUANT_COLOURS.get(label.replace(" ", ""), QUANT_COLOURS.get(label.split()[0]))
        style = "--" if "dq" in label else "-"
        left.plot(sizes, [r["relative_error"] for r in series], "o" + style, color=colour, label=label, ms=4)
        right.plot(sizes, [r["bits_per_parameter"] for r in series], "o" + style, color=colour, label=label, ms=4)
    if highlight is not None:
        left.plot(highlight["blocksize"], highlight["relative_error"], "o", ms=12, mfc="none", mec="red", mew=2)
        right.plot(highlight["blocksize"], highlight["bits_per_parameter"], "o", ms=12, mfc="none", mec="red", mew=2)
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("block size (weights per absmax)")
        ax.legend(fontsize=8)
    left.set_ylabel("rms error / rms weight")
    left.set_title("error grows with the block size")
    right.set_ylabel("bits per weight")
    right.axhline(4, color="grey", lw=0.8, ls=":")
    right.set_title("the absmax constants cost bits")
    fig.tight_layout()
    return fig


def quantization_results(results: list[dict]) -> Figure:
    """Bars: perplexity and memory (MB) per variant; ``results`` rows have name, perplexity, bytes."""
    names = [r["name"] for r in results]
    colours = [QUANT_COLOURS.get(n.lower().replace(" ", ""), QUANT_COLOURS.get(n.lower().split()[0], "#8c564b"))
               for n in names]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.4))
    left.bar(names, [r["perplexity"] for r in results], color=colours)
    left.set_ylabel("perplexity (lower is better)")
    left.set_title("held-out text")
    right.bar(names, [r["bytes"] / 1e6 for r in results], color=colours)
    right.set_ylabel("MB of weights")
    right.set_title("memory footprint")
    for ax in (left, right):
        ax.tick_params(axis="x", labelsize=8, rotation=20)
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------- lesson 07: Jacobi decoding
JACOBI_COLOURS = {"wrong": "#f6d5d5", "right": "#b9e4b9", "fixed": "#2e8b57", "after EOS": "#e6e6e6"}


def label_cells(ax, states, dark, label) -> None:
    """Write each state's tokens (``label``: id → text, spaces as ·, at most 6 characters) into its grid
    cells; white on the cells where ``dark[j, i]`` is true."""
    for j, state in enumerate(states):
        for i, token in enumerate(state):
            text = repr(label(token))[1:-1].replace(" ", "·")[:6] or "∅"
            ax.text(i, j, text, ha="center", va="center", fontsize=7, family="monospace",
                    color="white" if dark[j, i] else "black")


def jacobi_trajectory(states, truth, fixed, label=None, title: str = "") -> Figure:
    """One block's Jacobi trajectory as a grid: rows = iterations (0 = the guess), columns = positions.

    states: K+1 lists of n token ids; truth: the block's fixed point (shorter after an EOS); fixed:
    per state, how many leading tokens the convergence test has fixed (``jacobi.fixed_counts``);
    label: token id → text written in the cells (e.g. ``lambda t: tokenizer.decode([t])``).
    Colours: dark green fixed, light green right but not yet known to be, red wrong.
    """
    import numpy as np
    from matplotlib.colors import ListedColormap

    rows, n = len(states), len(states[0])
    kinds = list(JACOBI_COLOURS)
    grid = np.zeros((rows, n), dtype=int)
    for j, state in enumerate(states):
        for i, token in enumerate(state):
            if i >= len(truth):
                grid[j, i] = kinds.index("after EOS")
            elif i < fixed[j]:
                grid[j, i] = kinds.index("fixed")
            else:
                grid[j, i] = kinds.index("right" if token == truth[i] else "wrong")
    fig, ax = plt.subplots(figsize=(max(6.0, 0.72 * n + 1.2), max(2.6, 0.3 * rows + 1.3)))
    ax.imshow(grid, cmap=ListedColormap(list(JACOBI_COLOURS.values())), vmin=0, vmax=len(kinds) - 1, aspect="auto")
    if label is not None:
        label_cells(ax, states, grid == kinds.index("fixed"), label)
    ax.set_xticks(range(n), [str(i + 1) for i in range(n)], fontsize=8)
    ax.set_yticks(range(rows), [str(j) for j in range(rows)], fontsize=8)
    ax.set_xlabel("position in the block")
    ax.set_ylabel("iteration (0 = guess)")
    handles = [plt.Rectangle((0, 0), 1, 1, fc=c) for c in JACOBI_COLOURS.values()]
    ax.legend(handles, kinds, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    ax.set_title(title or f"{n} tokens in {rows - 1} iterations")
    fig.tight_layout()
    return fig


def jacobi_vs_ar(prompt_labels, tokens_per_iteration: dict, time_ratio: dict) -> Figure:
    """Grouped bars per prompt: tokens per iteration (AR = 1) and Jacobi's wall-clock ÷ AR's (lower is
    better). ``tokens_per_iteration`` and ``time_ratio`` map a setting (e.g. ``"block 16"``) to one
    value per prompt."""
    import numpy as np

    idx = np.arange(len(prompt_labels))
    width = 0.8 / max(len(tokens_per_iteration), 1)
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 3.8))
    for k, name in enumerate(tokens_per_iteration):
        left.bar(idx + k * width - 0.4 + width / 2, tokens_per_iteration[name], width, label=name)
        right.bar(idx + k * width - 0.4 + width / 2, time_ratio[name], width, label=name)
    left.axhline(1.0, color="grey", lw=0.8, ls="--")
    right.axhline(1.0, color="grey", lw=0.8, ls="--")
    left.set_ylabel("tokens per iteration (AR = 1)")
    left.set_title("tokens per forward pass")
    right.set_ylabel("Jacobi time ÷ AR time")
    right.set_title("wall-clock (below 1 = faster than AR)")
    for ax in (left, right):
        ax.set_xticks(idx, prompt_labels, rotation=20, fontsize=8, ha="right")
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------- lesson 09: everything side by side
def benchmark_bars(labels, ratio_to_ar, tokens_per_s, same_as_ar, memory_mb, title: str = "",
                   memory_label: str = "weights (MB)") -> Figure:
    """Two horizontal bar panels, one row per method: speed relative to our AR (dashed line at 1,
    tokens/s written on the bar) and memory (``None``: no bar). Colour: green = same greedy output as
    AR on every prompt, orange = on some, red = on none, grey = sampled (``same_as_ar`` None; else a
    fraction of prompts)."""
    def colour(share):
        if share is None:
            return "#b0b0b0"
        return "#5cb85c" if share == 1 else ("#f0ad4e" if share > 0 else "#d9534f")

    n = len(labels)
    colours = [colour(s) for s in same_as_ar]
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 0.42 * n + 1.6), sharey=True,
                                      gridspec_kw={"width_ratios": [3, 2]})
    rows = list(range(n))[::-1]  # first method on top
    left.barh(rows, ratio_to_ar, color=colours)
    left.axvline(1.0, color="black", lw=0.8, ls="--")
    for y, r, t in zip(rows, ratio_to_ar, tokens_per_s):
        left.text(r, y, f" {t:.1f} tok/s", va="center", fontsize=8)
    left.set_yticks(rows, labels, fontsize=8)
    left.set_xlabel("speed ÷ our AR (same run; > 1 is faster)")
    left.set_xlim(0, max(list(ratio_to_ar) + [1.0]) * 1.45)
    handles = [plt.Rectangle((0, 0), 1, 1, fc=colour(s)) for s in (1, 0.5, 0, None)]
    fig.legend(handles, ["same output as AR", "same on some prompts", "different", "sampled"], fontsize=8,
               loc="lower center", ncol=4, frameon=False)
    right.barh(rows, [m or 0 for m in memory_mb], color=colours)
    for y, m in zip(rows, memory_mb):
        if m is not None:
            right.text(m, y, f" {m:,.0f}" if m >= 10 else f" {m:.2g}", va="center", fontsize=8)
    right.set_xlim(0, max([m or 0 for m in memory_mb] + [1.0]) * 1.25)
    right.set_xlabel(memory_label)
    fig.suptitle(title or "every method side by side")
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    return fig


# ---------------------------------------------------------------- lesson 06: quantized speculative decoding
def quantized_bars(names, weight_mb, ar_tokens_per_s, spec_tokens_per_s, title: str = "") -> Figure:
    """Left: weight memory (MB) of each variant's target + draft. Right: tokens/s of its target
    alone (AR) and of speculative decoding with its draft, side by side."""
    import numpy as np

    idx = np.arange(len(names))
    fig, (left, right) = plt.subplots(1, 2, figsize=(11.5, 3.6))
    bars = left.bar(idx, weight_mb, color=["grey", "#1f77b4", "#9467bd", "#8c564b"][: len(names)])
    for bar, mb in zip(bars, weight_mb):
        left.text(bar.get_x() + bar.get_width() / 2, mb, f"{mb:,.0f}", ha="center", va="bottom", fontsize=8)
    left.set_ylabel("MB of weights (target + draft)")
    left.set_title("memory")
    right.bar(idx - 0.2, ar_tokens_per_s, 0.4, label="target alone (AR)", color="#7f7f7f")
    right.bar(idx + 0.2, spec_tokens_per_s, 0.4, label="speculative", color="#2ca02c")
    right.set_ylabel("tokens / s (median)")
    right.set_title("speed")
    right.legend(fontsize=8)
    for ax in (left, right):
        ax.set_xticks(idx, names, fontsize=8, rotation=10)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def precision_grid(names, alpha, tokens_per_s, memory_mb, chosen=None) -> Figure:
    """Three target × draft grids (rows: target precision, columns: draft precision): greedy α,
    predicted speculative tokens/s, and MB of weights; ``chosen`` = (row, column) is outlined."""
    import numpy as np

    panels = [("α (greedy acceptance)", alpha, "{:.2f}", "Greens"),
              ("speculative tokens/s (predicted)", tokens_per_s, "{:.1f}", "Blues"),
              ("MB of weights", memory_mb, "{:,.0f}", "Greys")]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    short = [n.replace(" (", "\n(") for n in names]
    for ax, (title, grid, fmt, cmap) in zip(axes, panels):
        grid = np.asarray(grid, float)
        ax.imshow(grid, cmap=cmap, aspect="auto", vmin=min(0.0, grid.min()), vmax=grid.max() * 1.4 or 1.0)
        for (i, j), value in np.ndenumerate(grid):
            ax.text(j, i, fmt.format(value), ha="center", va="center", fontsize=9)
        if chosen is not None:
            ax.add_patch(plt.Rectangle((chosen[1] - 0.5, chosen[0] - 0.5), 1, 1, fill=False, ec="red", lw=2.5))
        ax.set_xticks(range(len(names)), short, fontsize=7)
        ax.set_yticks(range(len(names)), short, fontsize=7)
        ax.set_xlabel("draft")
        ax.set_title(title, fontsize=10)
    axes[0].set_ylabel("target")
    fig.tight_layout()
    return fig
