"""The kernel probe (bench.kernels): every kernel's product equals f32's within its dtype's tolerance, each kernel's
weights rotate over more than the stated multiple of the last-level cache, rows carry the documented fields, a time
that beats its floor is flagged, and a kernel that cannot run is reported with its reason. Times come from a fake
clock: nothing here asserts a wall-clock value."""

from __future__ import annotations

import itertools

import pytest
import torch

from specdec_core import fast, machine
from specdec_core.bench import kernels
from specdec_core.toy import tiny_llama

CACHE = 64 * 2**10  # a 64 KiB "last-level cache": rotations of a few copies, cheap


@pytest.fixture
def small_cache(monkeypatch):
    monkeypatch.setattr(machine, "last_level_cache_bytes", lambda: CACHE)


def fake_clock(step: float):
    """A clock that advances ``step`` seconds a reading: every timed call lasts exactly ``step``."""
    ticks = itertools.count()
    return lambda: next(ticks) * step


def uneven_clock(steps: list[float]):
    """A clock whose timed calls last ``steps[0]``, ``steps[1]``, … in turn (two readings a call)."""
    now, turns = [0.0], itertools.cycle(x for step in steps for x in (0.0, step))

    def clock() -> float:
        now[0] += next(turns)
        return now[0]

    return clock


def weights() -> dict[str, torch.Tensor]:
    return {"head": torch.randn(96, 64, generator=torch.Generator().manual_seed(1))}


@pytest.mark.parametrize("kernel", kernels.KERNELS)
def test_every_kernel_multiplies_like_f32(kernel):
    reason = kernels.why_not(kernel, (80, 128))
    if reason is not None:  # not on this CPU: it must say why
        assert isinstance(reason, str) and reason
        return
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(80, 128, generator=gen)
    for m in (1, 5, 17):
        x = torch.randn(m, 128, generator=gen)
        y = kernels.prepare(kernel, w).fn(x.to(kernels.ROWS_DTYPE[kernel])).float()
        ref = x @ w.T
        assert y.shape == (m, 80)
        assert ((y - ref).abs().max() / ref.abs().max()).item() <= kernels.TOLERANCE[kernel], (kernel, m)


def test_int4_is_a_cpu_kernel_of_this_torch():
    """torch 2.13 ships _weight_int4pack_mm_for_cpu: the probe must run it, not report it missing."""
    if not hasattr(torch, "_weight_int4pack_mm_for_cpu"):
        assert "no" in kernels.why_not("int4", (16, 64))
    else:
        assert kernels.why_not("int4", (16, 64)) is None
    packed, scales = kernels.int4_weight(torch.randn(16, 64))
    assert packed.dtype == torch.uint8 and packed.shape == (16, 32) and scales.shape == (64 // kernels.INT4_GROUP, 16, 2)


@pytest.mark.parametrize("kernel", ["f32", "bf16", "int8", "int4 bf16"])
def test_a_rotation_exceeds_the_multiple_of_the_cache_and_reads_each_copy_in_turn(small_cache, kernel):
    w = torch.randn(48, 32)
    rot = kernels.Rotation(kernel, w, multiple=4)
    assert rot.total_bytes > 4 * CACHE
    assert (len(rot.products) - 1) * rot.nbytes <= 4 * CACHE  # no more copies than needed
    # 48 × 32 weights: 4, 2, 1 (+ an f32 scale a row), ½ (+ a bf16 scale and zero a row per group of 32) bytes
    assert rot.nbytes == {"f32": 6144, "bf16": 3072, "int8": 1536 + 48 * 4, "int4 bf16": 768 + 48 * 2 * 2}[kernel]
    x = torch.randn(2, 32).to(kernels.ROWS_DTYPE[kernel])
    turns = []
    for _ in range(len(rot.products) + 1):
        turns.append(rot.turn)
        rot(x)
    assert turns == list(range(len(rot.products))) + [0]


def test_the_probe_rotates_every_kernel_and_rows_have_the_documented_fields(small_cache):
    ms = (1, 2, 5)
    result = kernels.probe_weights(weights(), ms=ms, rounds=3, bandwidth=1e9, clock=fake_clock(1.0))
    ran = {r["kernel"] for r in result.rows}
    assert ran | {u["kernel"] for u in result.unavailable} == set(kernels.KERNELS)
    for rot in result.rotation:
        assert rot["cache_bytes"] == CACHE and rot["total_bytes"] > rot["multiple"] * CACHE
    assert {r["kernel"] for r in result.rotation} == ran
    assert len(result.rows) == len(ran) * len(ms)
    for row in result.rows:
        assert tuple(row) == kernels.ROW_FIELDS
        assert (row["linear"], row["out_features"], row["in_features"]) == ("head", 96, 64)
        assert row["n"] == 3 and row["median_s"] == pytest.approx(1.0) and row["v"] == pytest.approx(1.0)
        assert row["floor_s"] == pytest.approx(row["weight_bytes"] / 1e9)
        assert row["beats_floor"] is False
    assert result.warnings == []
    assert result.v["head"]["f32"] == pytest.approx({1: 1.0, 2: 1.0, 5: 1.0})
    text = kernels.table(result)
    assert "head (96 × 64)" in text and "f32 prepacked" in text and "WARNING" not in text


def test_a_time_below_its_floor_is_flagged_and_warned(small_cache):
    result = kernels.probe_weights(weights(), kernels=("f32", "int8"), ms=(1, 3), rounds=2, bandwidth=1e9,
                                   clock=fake_clock(1e-12))  # 1 ps a product: faster than any memory
    assert result.rows and all(r["beats_floor"] for r in result.rows)
    assert len(result.warnings) == 1 and "rotation failed" in result.warnings[0]
    assert "4 of 4 rows" in result.warnings[0] and "larger than the last-level cache" not in result.warnings[0]
    assert "WARNING" in kernels.table(result) and "!" in kernels.table(result)


def test_v_kernel_is_the_median_of_same_round_ratios():
    times = {("l", "k", 1): [1.0, 2.0, 4.0], ("l", "k", 5): [2.0, 6.0, 4.0]}
    assert kernels.v_kernel(times) == {"l": {"k": {1: 1.0, 5: 2.0}}}  # ratios 2, 3, 1


def test_timed_rounds_warms_up_once_and_shuffles_each_round():
    seen = []
    calls = {name: (lambda name=name: seen.append(name)) for name in "abcdef"}
    times = kernels.timed_rounds(calls, rounds=4, seed=3, clock=fake_clock(0.5))
    assert all(ts == [0.5] * 4 for ts in times.values())
    assert len(seen) == 5 * 6 and all(seen.count(n) == 5 for n in calls)
    orders = {tuple(seen[i:i + 6]) for i in range(0, 30, 6)}
    assert len(orders) > 1  # not the same order every round


def test_unavailable_kernels_are_reported_with_a_reason(small_cache, monkeypatch):
    monkeypatch.setattr(fast, "packs", lambda dtype: False)
    monkeypatch.delattr(torch, "_weight_int4pack_mm_for_cpu", raising=False)
    result = kernels.probe_weights(weights(), kernels=("f32", "bf16 prepacked", "int4"), ms=(1, 2), rounds=1,
                                   bandwidth=1e9, clock=fake_clock(1.0))
    reasons = {u["kernel"]: u["reason"] for u in result.unavailable}
    assert set(reasons) == {"bf16 prepacked", "int4"}
    assert "bf16" in reasons["bf16 prepacked"] and "_weight_int4pack_mm_for_cpu" in reasons["int4"]
    assert {r["kernel"] for r in result.rows} == {"f32"}
    text = kernels.table(result)
    assert "not available: bf16 prepacked on head" in text and "not available: int4 on head" in text


def test_int4_on_a_width_off_its_group_says_so():
    assert "multiple of the int4 group" in kernels.why_not("int4", (16, 40))
    assert "multiple of 16" in kernels.why_not("int4", (40, 64))
    assert kernels.why_not("nonsense").startswith("unknown kernel")


def test_shapes_come_from_the_model():
    model = tiny_llama(vocab_size=40, hidden_size=32)
    got = kernels.linear_weights(model)
    assert {n: tuple(w.shape) for n, w in got.items()} == {"lm_head": (40, 32), "mlp.up_proj": (64, 32)}
    assert torch.equal(got["mlp.up_proj"], model.model.layers[0].mlp.up_proj.weight)
    with pytest.raises(KeyError, match="mlp.up_proj"):
        kernels.linear_weights(model, ["attn.nothing"])


def test_a_probe_without_one_row_has_no_v():
    with pytest.raises(ValueError, match="include 1"):
        kernels.probe_weights(weights(), ms=(2, 3), bandwidth=1e9)


def test_a_busy_machine_is_said_so(small_cache):
    """Rounds that differ by 4× (a shared machine): the probe warns that its medians are noisy."""
    result = kernels.probe_weights(weights(), kernels=("f32",), ms=(1,), rounds=3, bandwidth=1e15,
                                   clock=uneven_clock([1.0, 4.0]))
    assert result.noise > kernels.BUSY
    assert [w for w in result.warnings if "busy" in w]
    assert not any(r["beats_floor"] for r in result.rows)


def test_a_weight_larger_than_the_cache_that_beats_its_floor_blames_the_bandwidth(monkeypatch):
    """No cache holds a weight larger than the last-level cache: a time below its floor means the floor is low."""
    monkeypatch.setattr(machine, "last_level_cache_bytes", lambda: 1024)
    result = kernels.probe_weights(weights(), kernels=("f32",), ms=(1,), rounds=1, bandwidth=1e9, clock=fake_clock(1e-12))
    assert "larger than the last-level cache" in result.warnings[0] and "machine.bandwidth()" in result.warnings[0]
