"""The feature head's calibration: the ECE of synthetic pairs (calibrated → ~0, over-confident → large),
the curve's bins, the pairs collected from greedy tree runs, and the reliability plot."""

from __future__ import annotations

import random

import pytest
import torch

from specdec_core.calibration import calibration_pairs, reliability
from specdec_core.feature_drafter import FeatureDrafter, FeatureHead
from specdec_core.toy import tiny_llama


def _synthetic(n: int, truth, seed: int = 0) -> list[tuple[float, bool]]:
    """n pairs: q uniform on [0, 1], accepted with probability truth(q)."""
    rng = random.Random(seed)
    return [(q, rng.random() < truth(q)) for q in (rng.random() for _ in range(n))]


def test_a_calibrated_draft_has_an_ece_near_zero():
    curve = reliability(_synthetic(20000, lambda q: q))
    assert curve.ece < 0.02 and curve.total == 20000 and sum(curve.counts) == 20000
    assert all(abs(g) < 0.05 for g in curve.gaps)


def test_an_over_confident_draft_has_a_large_ece_and_lies_below_the_diagonal():
    curve = reliability(_synthetic(20000, lambda q: q / 2))  # claims q, is accepted half as often
    assert curve.ece == pytest.approx(0.25, abs=0.02)  # E|q/2 − q| = E[q]/2 for q uniform
    assert all(g < 0 for g in curve.gaps[2:])


def test_the_bins_and_the_formula_by_hand():
    pairs = [(0.05, False), (0.15, True), (0.95, True), (1.0, True), (0.9, False)]
    curve = reliability(pairs, bins=2)
    assert curve.edges == [0.0, 0.5, 1.0] and curve.counts == [2, 3]
    assert curve.confidence[0] == pytest.approx(0.1) and curve.accept_rate == [0.5, pytest.approx(2 / 3)]
    assert curve.ece == pytest.approx(2 / 5 * 0.4 + 3 / 5 * abs(2 / 3 - 2.85 / 3))
    empty = reliability([], bins=4)
    assert empty.total == 0 and empty.confidence == [None] * 4 and empty.ece != empty.ece  # nan
    with pytest.raises(ValueError, match="probability"):
        reliability([(1.5, True)])


def test_pairs_from_greedy_tree_runs_count_every_tested_node():
    target = tiny_llama(vocab_size=8, hidden_size=32, logit_scale=20.0)
    torch.manual_seed(100)
    drafter = FeatureDrafter(target, FeatureHead(d=32, n_heads=4, ffn=64).eval(), torch.arange(8))
    prompts = [torch.tensor([[2, 5, 3]]), torch.tensor([[1, 6, 2, 7]])]
    pairs = calibration_pairs(target, drafter, prompts, 12)
    assert pairs and drafter.calibration is None  # restored
    assert all(0 <= q <= 1 for q, _ in pairs) and any(a for _, a in pairs)
    assert reliability(pairs).total == len(pairs)
    with pytest.raises(TypeError, match="calibration"):
        calibration_pairs(target, object(), prompts, 4)


def test_the_reliability_plot_draws():
    from specdec_core.viz.calibration import reliability_plot

    fig = reliability_plot(reliability(_synthetic(500, lambda q: q * 0.8)), title="toy")
    assert len(fig.axes) == 2
