"""Lesson 04b: the feature head's calibration — its accept rate against its own probability."""

from __future__ import annotations

from ..calibration import Reliability
from .base import Figure, plt


def reliability_plot(curve: Reliability, title: str = "", label: str = "feature head") -> Figure:
    """Top: accept rate against the draft's own probability per bin (a bar per non-empty bin at its
    mean q, the diagonal = perfect calibration, the gap to it shaded), the ECE in the legend.
    Bottom: how many tested guesses fell in each bin (where the curve is worth reading)."""
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(6.4, 6), sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    width = curve.edges[1] - curve.edges[0]
    centres = [(a + b) / 2 for a, b in zip(curve.edges, curve.edges[1:])]
    full = [i for i, n in enumerate(curve.counts) if n]
    top.plot([0, 1], [0, 1], color="grey", ls="--", lw=1, label="calibrated (accept rate = q)")
    top.bar([centres[i] for i in full], [curve.accept_rate[i] for i in full], width=width * 0.9,
            color="#2a9d8f", alpha=0.8, label=f"{label}: ECE {curve.ece:.3f} (N = {curve.total})")
    for i in full:  # the gap between what the head claims and what the target accepts
        c, a = curve.confidence[i], curve.accept_rate[i]
        top.plot([centres[i], centres[i]], [a, c], color="#e76f51", lw=2)
    top.scatter([centres[i] for i in full], [curve.confidence[i] for i in full], color="#e76f51", s=14, zorder=3,
                label="mean q in the bin (the gap in red)")
    top.set_ylabel("accepted by the target")
    top.set_xlim(0, 1)
    top.set_ylim(0, 1)
    top.legend(fontsize=8, loc="upper left")
    top.set_title(title or "reliability: does the head's q mean what it says?", fontsize=10)
    bottom.bar(centres, curve.counts, width=width * 0.9, color="#bbbbbb")
    bottom.set_xlabel("the head's probability q of its guess (given its parent)")
    bottom.set_ylabel("guesses")
    fig.tight_layout()
    return fig
