"""viz.engine's ladder figure: one bar per rung at its tokens/s, the memory floor's ceiling drawn over each rung
that has one, MBU written beside it, a peer hatched; an empty ladder is a clear error."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pytest

from specdec_core.viz.engine import engine_ladder

ROWS = [
    {"rung": "eager f32", "tokens_per_s": 10.0, "lo": 9.0, "hi": 11.0, "floor_ms": 50.0},
    {"rung": "static f16", "tokens_per_s": 16.0, "lo": 15.0, "hi": 18.0, "floor_ms": 25.0},
    {"rung": "llama.cpp f16", "tokens_per_s": 30.0, "floor_ms": None, "kind": "peer"},
]


def test_bars_ceilings_and_labels_follow_the_rows():
    fig = engine_ladder(ROWS, "toy")
    ax = fig.axes[0]
    try:
        assert [round(p.get_height(), 6) for p in ax.patches] == [10.0, 16.0, 30.0]
        assert [t.get_text() for t in ax.get_xticklabels()] == ["eager f32", "static f16", "llama.cpp f16"]
        assert [p.get_hatch() for p in ax.patches] == [None, None, "//"]
        ceilings = sorted(round(float(seg[0][1]), 6) for coll in ax.collections for seg in coll.get_segments()
                          if len(seg) == 2 and seg[0][1] == seg[1][1])  # horizontal dashes: 1000 / floor_ms
        assert ceilings == [20.0, 40.0]
        notes = sorted(t.get_text() for t in ax.texts)
        assert notes == ["MBU 40%", "MBU 50%"]  # 16 of 40, 10 of 20; the peer has no floor
        assert ax.get_ylim()[1] >= 40.0
        assert [t.get_text() for t in ax.get_legend().get_texts()] == ["memory floor (weights ÷ bandwidth)"]
    finally:
        plt.close(fig)


def test_a_wrong_ceiling_would_be_seen():
    """The floor is drawn where the row says: halve one floor_ms and its dash doubles."""
    rows = [dict(ROWS[0], floor_ms=25.0)]
    fig = engine_ladder(rows)
    try:
        ys = [float(seg[0][1]) for coll in fig.axes[0].collections for seg in coll.get_segments()
              if len(seg) == 2 and seg[0][1] == seg[1][1]]
        assert ys == [40.0] and [t.get_text() for t in fig.axes[0].texts] == ["MBU 25%"]
    finally:
        plt.close(fig)


def test_an_empty_ladder_is_a_clear_error():
    with pytest.raises(ValueError, match="at least one row"):
        engine_ladder([])


def test_verify_costs_draws_one_line_per_engine_at_its_measured_v():
    from specdec_core.viz.engine import verify_costs

    rows = [{"engine": "static f16", "v": {1: 1.0, 3: 1.8, 5: 2.5}}, {"engine": "static bf16", "v": {1: 1.0, 3: 1.0, 5: 1.02}}]
    fig = verify_costs(rows, gamma=4)
    ax = fig.axes[0]
    try:
        lines = {ln.get_label(): ln for ln in ax.get_lines()}
        assert list(lines["static f16"].get_ydata()) == [1.0, 1.8, 2.5]
        assert list(lines["static bf16"].get_xdata()) == [1, 3, 5]
        assert "n = γ + 1 = 5" in lines
    finally:
        plt.close(fig)
    with pytest.raises(ValueError, match="pinned"):
        verify_costs([])
