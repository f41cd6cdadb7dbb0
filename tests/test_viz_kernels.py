"""viz.kernels' figure: one panel per linear, one solid line per kernel at its median µs against M, its floor dashed
in the same colour; an empty probe is a clear error."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pytest

from specdec_core.viz.kernels import kernel_times


def row(linear: str, kernel: str, m: int, median_us: float, floor_us: float) -> dict:
    return {"linear": linear, "out_features": 96, "in_features": 64, "kernel": kernel, "m": m,
            "median_s": median_us * 1e-6, "lo_s": 0.9 * median_us * 1e-6, "hi_s": 1.1 * median_us * 1e-6,
            "floor_s": floor_us * 1e-6}


ROWS = ([row("lm_head", "f16", m, t, 50.0) for m, t in ((1, 100.0), (5, 400.0), (17, 1600.0))]
        + [row("lm_head", "bf16 prepacked", m, t, 50.0) for m, t in ((1, 60.0), (5, 70.0), (17, 120.0))]
        + [row("mlp.up_proj", "f16", m, t, 2.0) for m, t in ((1, 4.0), (5, 9.0), (17, 30.0))])


def test_lines_and_floors_follow_the_rows():
    fig = kernel_times(ROWS, "toy")
    try:
        head, mlp = fig.axes
        lines = {ln.get_label(): ln for ln in head.get_lines()}
        assert [round(y, 6) for y in lines["f16"].get_ydata()] == [100.0, 400.0, 1600.0]
        assert list(lines["bf16 prepacked"].get_xdata()) == [1, 5, 17]
        assert [round(y, 6) for y in lines["bf16 prepacked"].get_ydata()] == [60.0, 70.0, 120.0]
        floor = lines["_floor f16"]
        assert floor.get_linestyle() == "--" and [round(y, 6) for y in floor.get_ydata()] == [50.0, 50.0]
        assert floor.get_color() == lines["f16"].get_color()
        assert list(floor.get_xdata()) == [1, 17]
        assert head.get_title() == "lm_head (96 × 64)" and mlp.get_title().startswith("mlp.up_proj")
        assert [round(y, 6) for y in {ln.get_label(): ln for ln in mlp.get_lines()}["_floor f16"].get_ydata()] == [2.0, 2.0]
        assert head.get_yscale() == "log"
        legend = [t.get_text() for t in head.get_legend().get_texts()]
        assert legend == ["f16", "bf16 prepacked", "dashed: its floor"]
    finally:
        plt.close(fig)


def test_an_empty_probe_is_a_clear_error():
    with pytest.raises(ValueError, match="at least one row"):
        kernel_times([])
