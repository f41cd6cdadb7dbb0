"""Leviathan's formulas (docs/reference.md#speedup numbers) and the cost measurement."""

import numpy as np
import pytest
import torch

from specdec_core import theory
from specdec_core.bench import drafters as drafter_eval
from specdec_core.exactness import chi_square_pvalue, exact_law, total_variation
from specdec_core.toy import tiny_llama


def test_expected_tokens_matches_the_series_and_reference():
    for alpha in (0.0, 0.3, 0.75, 0.99):
        for gamma in (0, 1, 4, 7):
            assert theory.expected_tokens(alpha, gamma) == pytest.approx(sum(alpha**i for i in range(gamma + 1)))
    assert theory.expected_tokens(1.0, 4) == 5
    assert theory.expected_tokens(0.55, 4) == pytest.approx(2.11, abs=0.005)  # docs/reference.md#speculative-sampling example


def test_speedup_with_verify_cost_reference_example():
    # docs/reference.md#speculative-sampling: α = 0.55, γ = 4, c = 0.17, v = 1.6 → S ≈ 0.93
    assert theory.speedup(0.55, 4, 0.17, 1.6) == pytest.approx(0.93, abs=0.01)
    assert theory.speedup(0.8, 3, 0.0, 1.0) == pytest.approx(theory.expected_tokens(0.8, 3))


def test_best_gamma():
    assert theory.best_gamma(0.0, 0.1) == 1  # nothing is ever accepted
    assert theory.best_gamma(0.9, 0.01) > theory.best_gamma(0.6, 0.01) > 1
    # when α ≤ c, no γ beats plain decoding (Leviathan Cor. 3.9)
    assert theory.speedup(0.2, theory.best_gamma(0.2, 0.3), 0.3) < 1


def test_bad_arguments():
    with pytest.raises(ValueError):
        theory.expected_tokens(1.5, 3)
    with pytest.raises(ValueError):
        theory.expected_tokens(0.5, -1)


def test_exact_law_is_a_distribution_and_agrees_with_the_model():
    model = tiny_llama(vocab_size=6, logit_scale=5)
    law = exact_law(model, torch.tensor([[1, 2]]), n_tokens=2)
    assert law.shape == (6, 6) and law.sum() == pytest.approx(1.0)
    with torch.no_grad():
        first = model(torch.tensor([[1, 2]])).logits[0, -1].softmax(-1).numpy()
    assert np.allclose(law.sum(1), first, atol=1e-6)


def test_chi_square_and_tv_detect_a_wrong_law():
    rng = np.random.default_rng(0)
    law = np.array([0.5, 0.3, 0.15, 0.05])
    good = np.bincount(rng.choice(4, 2000, p=law), minlength=4)
    bad = np.bincount(rng.choice(4, 2000, p=[0.4, 0.3, 0.2, 0.1]), minlength=4)
    assert chi_square_pvalue(good, law) > 0.01 and chi_square_pvalue(bad, law) < 0.001
    assert total_variation(law, law) == 0 and total_variation([1, 0], [0, 1]) == 1


def test_speculative_panel_redraws_on_a_new_gamma():
    from specdec_core.viz.widgets import speculative_panel

    calls = []

    def run_point(gamma, temperature):
        calls.append((gamma, temperature))
        return drafter_eval.Point(gamma, temperature, 0.5, 1.5, 0.9, theory.speedup(0.5, gamma, 0.1, 1.2))

    panel = speculative_panel(run_point, c=0.1, v=1.2)
    slider = panel.children[0].children[0]
    slider.value = 6
    slider.value = 4  # cached: no second run for γ = 4
    assert calls == [(4, 0.0), (6, 0.0)]


def test_the_formulas_take_the_machines_v_of_n():
    """S with a v(n) uses the cost of verifying γ + 1 tokens at each γ; the best γ avoids a costly n."""
    v_of_n = {2: 1.2, 3: 1.3, 4: 3.0, 5: 1.4, 6: 1.5}.get
    for g in (1, 2, 3, 4, 5):
        assert theory.speedup(0.8, g, 0.05, v_of_n) == theory.speedup(0.8, g, 0.05, v_of_n(g + 1))
    assert theory.best_gamma(0.8, 0.05, 1.3, max_gamma=5) == 5  # one v for every γ: the more the better
    assert theory.best_gamma(0.8, 0.05, v_of_n, max_gamma=5) != 3  # v(4) = 3: γ = 3 is the one to avoid
    assert theory.break_even_alpha(0.05, v_of_n, max_gamma=5) < 1


def test_every_chooser_asks_for_auto_the_same_way():
    """γ, a tree's shape and lookahead's shape: "auto" needs the cost model, any other string says what the
    knob takes, and a fixed value passes through (the one helper, ``theory.asks_auto``)."""
    from specdec_core import lookahead_shapes, speculative, tree_shapes

    makers = {"gamma": lambda v: speculative._chooser(v, None),
              "tree": lambda v: tree_shapes.ShapeChooser.for_run(v, None),
              "lookahead": lambda v: lookahead_shapes.ShapeSearch.for_run(v, None)}
    for make in makers.values():
        with pytest.raises(ValueError, match="needs the machine's cost model"):
            make("auto")
        with pytest.raises(ValueError, match='must be "auto" or'):
            make("fast")
    assert speculative._chooser(3, None).choose(10) == 3
    assert lookahead_shapes.ShapeSearch.for_run((2, 3, 1), None).choose(10) == (2, 3, 1)
    assert theory.asks_auto("gamma", "auto", object(), "an int") and not theory.asks_auto("gamma", 3, None, "an int")
