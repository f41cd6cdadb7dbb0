"""The kernel probe's figure (``specdec_core.bench.kernels``): the time of one product y = x Wᵀ against the rows M it
multiplies, one line per kernel, each kernel's memory floor dashed beside it. A line that stays flat pays little for
a verify's extra rows; one that climbs serves a row at a time. It takes plain rows and returns a Figure."""

from __future__ import annotations

from collections.abc import Sequence

from .base import Figure, plt


def kernel_times(rows: Sequence[dict], title: str = "") -> Figure:
    """One panel per linear: µs per product (median, min–max as a band) against M, one solid line per kernel, and
    its floor (weight bytes ÷ bandwidth) as a dashed line in the same colour (labelled ``_floor <kernel>``, out of the
    legend); log scales (times span 100×).

    rows: dicts with ``linear`` (str), ``kernel`` (str), ``m`` (int), ``median_s``, ``floor_s`` (floats, seconds),
    optional ``lo_s`` / ``hi_s``, ``out_features`` / ``in_features`` (the panel's title) — the probe's rows."""
    if not rows:
        raise ValueError("kernel_times needs at least one row (the probe measured nothing: every kernel unavailable?)")
    linears = list(dict.fromkeys(r["linear"] for r in rows))
    fig, axes = plt.subplots(1, len(linears), figsize=(6.4 * len(linears), 4.0), squeeze=False)
    for ax, linear in zip(axes[0], linears):
        mine = [r for r in rows if r["linear"] == linear]
        for i, kernel in enumerate(dict.fromkeys(r["kernel"] for r in mine)):
            pts = sorted((r for r in mine if r["kernel"] == kernel), key=lambda r: r["m"])
            ms = [r["m"] for r in pts]
            colour = f"C{i % 10}"
            ax.plot(ms, [1e6 * r["median_s"] for r in pts], "o-", ms=3, color=colour, label=kernel)
            if all(r.get("lo_s") is not None and r.get("hi_s") is not None for r in pts):
                ax.fill_between(ms, [1e6 * r["lo_s"] for r in pts], [1e6 * r["hi_s"] for r in pts], color=colour, alpha=0.08)
            # "_…": left out of the legend (one entry below says what every dashed line is)
            ax.plot([ms[0], ms[-1]], [1e6 * pts[0]["floor_s"]] * 2, "--", lw=1, color=colour, label=f"_floor {kernel}")
        ax.plot([], [], "--", lw=1, color="grey", label="dashed: its floor")
        shape = f" ({mine[0]['out_features']:,} × {mine[0]['in_features']:,})" if "out_features" in mine[0] else ""
        ax.set_title(f"{linear}{shape}", fontsize=10)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(sorted({r["m"] for r in mine}), [str(m) for m in sorted({r["m"] for r in mine})])
        ax.set_xlabel("M: rows in one product (a verify of M − 1 guesses)")
        ax.set_ylabel("µs per product (median; dashed: the kernel's floor)")
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.suptitle(title or "y = x Wᵀ per kernel: time against rows, beside its memory floor", fontsize=10)
    fig.tight_layout()
    return fig
