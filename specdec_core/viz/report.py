"""The benchmark's figure (lesson 09 and ``make bench``)."""

from __future__ import annotations

from .base import Figure, plt


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
