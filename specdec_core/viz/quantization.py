"""Figures of lessons 05–06: NF4 quantization and quantized speculative decoding.
Each function takes plain data and returns a Figure."""

from __future__ import annotations

from .base import Figure, plt

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
