"""Lesson 04c's figures: acceptance per draft position for each drafter, and self-speculation's α per depth L′."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from .base import Figure, plt


def acceptance_by_position(curves: Mapping[str, Sequence[float]], title: str = "") -> Figure:
    """One line per drafter: α at draft position (or tree depth) 1, 2, … (``curves``: label → values; NaN
    positions, where nothing was examined, are left out)."""
    fig, ax = plt.subplots(figsize=(6.5, 3.4))
    for label, alphas in curves.items():
        points = [(i + 1, a) for i, a in enumerate(alphas) if a is not None and not math.isnan(a)]
        if points:
            ax.plot(*zip(*points), marker="o", label=label)
    ax.set(xlabel="draft position (tree: depth)", ylabel="α: accepted ÷ examined", ylim=(0, 1.05), title=title)
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def alpha_by_depth(alphas: Mapping[int, float], total_layers: int, chosen: Sequence[int] = (), title: str = "") -> Figure:
    """Self-speculation: greedy α of the early exit after L′ of ``total_layers`` layers (``alphas``: L′ → α); the
    subset the search chose (``chosen``, layer indices) is named in the legend."""
    fig, ax = plt.subplots(figsize=(6.5, 3.2))
    depths = sorted(alphas)
    ax.bar([str(d) for d in depths], [alphas[d] for d in depths], color="#1f77b4", label="early exit after L′ layers")
    if chosen:
        ax.plot([], [], " ", label=f"search chose {len(chosen)} layers: {list(chosen)}")
    ax.set(xlabel=f"L′ (of {total_layers} layers)", ylabel="greedy α", ylim=(0, 1.05), title=title)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
