"""The figure of lesson 01b: the engine ladder, tokens/s per rung against the ceiling the memory floor sets.
It takes plain rows and returns a Figure."""

from __future__ import annotations

import math
from collections.abc import Sequence

from .base import Figure, plt

ENGINE_COLOURS = {"ours": "#1f77b4", "peer": "#ff7f0e", "ceiling": "black"}


def engine_ladder(rows: Sequence[dict], title: str = "") -> Figure:
    """One bar per rung: its tokens/s (median, with the min–max whiskers when ``lo`` and ``hi`` are given) and,
    as a black dash over it, the ceiling its memory floor allows (1000 ÷ ``floor_ms`` tokens/s: every weight read
    once per token at the machine's bandwidth), labelled with MBU = measured ÷ ceiling.

    rows: dicts with ``rung`` (str), ``tokens_per_s`` (float), optional ``lo`` / ``hi`` (floats), ``floor_ms``
    (float, or None for a row without a floor), ``kind`` ("ours", default, or "peer": another program, hatched)."""
    if not rows:
        raise ValueError("engine_ladder needs at least one row (the ladder measured nothing)")
    names = [r["rung"] for r in rows]
    speed = [float(r["tokens_per_s"]) for r in rows]
    kinds = [r.get("kind", "ours") for r in rows]
    fig, ax = plt.subplots(figsize=(max(6.0, 1.2 * len(rows) + 2), 3.8))
    x = list(range(len(rows)))
    bars = ax.bar(x, speed, color=[ENGINE_COLOURS[k] for k in kinds], alpha=0.85)
    for bar, kind in zip(bars, kinds):
        if kind == "peer":
            bar.set_hatch("//")
    spread = [(i, r) for i, r in enumerate(rows) if r.get("lo") is not None and r.get("hi") is not None]
    if spread:
        ax.errorbar([i for i, _ in spread], [speed[i] for i, _ in spread],
                    yerr=[[speed[i] - r["lo"] for i, r in spread], [r["hi"] - speed[i] for i, r in spread]],
                    fmt="none", ecolor="grey", capsize=3, lw=1)
    ceilings = [1e3 / r["floor_ms"] if r.get("floor_ms") else math.nan for r in rows]
    drawn = False
    for i, (ceiling, s) in enumerate(zip(ceilings, speed)):
        if math.isfinite(ceiling):
            ax.hlines(ceiling, i - 0.4, i + 0.4, colors=ENGINE_COLOURS["ceiling"], lw=2,
                      label=None if drawn else "memory floor (weights ÷ bandwidth)")
            ax.annotate(f"MBU {s / ceiling:.0%}", (i, ceiling), textcoords="offset points", xytext=(0, 3),
                        ha="center", fontsize=8)
            drawn = True
    top = max([s for s in speed if math.isfinite(s)] + [c for c in ceilings if math.isfinite(c)] + [1.0])
    ax.set_ylim(0, 1.15 * top)
    ax.set_xticks(x)
    ax.set_xticklabels(names, rotation=20, ha="right", fontsize=9)
    ax.set_ylabel("tokens/s (decode, median)")
    ax.set_title(title or "the engine ladder: tokens/s against the memory floor", fontsize=10)
    if drawn:
        ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    return fig


def verify_costs(rows: Sequence[dict], gamma: int | None = None, title: str = "") -> Figure:
    """v(n) against n, one line per engine: what a verify of n − 1 guesses costs in one-token forwards on it. A
    flat line (v ≈ 1) makes guesses nearly free to check; a line that climbs with n eats what they save.

    rows: dicts with ``engine`` (str) and ``v`` ({n: v(n)}, n ≥ 1); ``gamma``: marks n = γ + 1 (the γ the
    speculation engine was chosen at) with a dotted line."""
    if not rows:
        raise ValueError("verify_costs needs at least one engine's v(n) (nothing was measured: a pinned choice?)")
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    for r in rows:
        ns = sorted(r["v"])
        ax.plot(ns, [r["v"][n] for n in ns], "o-", ms=3, label=r["engine"])
    ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    if gamma is not None:
        ax.axvline(gamma + 1, color="black", lw=0.8, ls=":", label=f"n = γ + 1 = {gamma + 1}")
    ax.set_xlabel("n: tokens in one forward (a verify of n − 1 guesses)")
    ax.set_ylabel("v(n) = forward(n) ÷ forward(1)")
    ax.set_title(title or "what a verify costs, per engine", fontsize=10)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    return fig
