"""drafter_eval (drafters side by side, γ sweeps, the table), lesson 04's figures and its widget's
pure function — on toy models with a toy tokenizer. Bookkeeping only: never a wall-clock assertion."""

from __future__ import annotations

import math

import matplotlib
import pytest
import torch
from test_benchmark import PROMPTS, VOCAB, toy_pair

from specdec_core import ar, theory
from specdec_core.bench import drafters as drafter_eval
from specdec_core.bench.drafters import DrafterRow
from specdec_core.bench.harness import classify
from specdec_core.drafters import ModelDrafter, NGramDrafter
from specdec_core.feature_drafter import FeatureDrafter, FeatureHead
from specdec_core.toy import tiny_llama
from specdec_core.viz import Figure, plt
from specdec_core.viz import drafts as viz_drafts

matplotlib.use("Agg")  # figures are drawn, never shown

N_NEW = 8


@pytest.fixture(scope="module")
def pair():
    return toy_pair()


def drafters(pair) -> dict:
    """The three kinds of the lesson on the toy pair: a model draft, an (untrained) feature head with a
    reduced output set of the even token ids, and prompt lookup — each with its own γ."""
    torch.manual_seed(0)
    head = FeatureHead(d=pair.target.config.hidden_size, n_heads=4, ffn=64).eval()
    return {"model": (ModelDrafter(pair.draft), 3),
            "feature": (FeatureDrafter(pair.target, head, torch.arange(0, VOCAB, 2)), 2),
            "ngram": (NGramDrafter(VOCAB), 4)}


@pytest.fixture(scope="module")
def greedy_rows(pair):
    return drafter_eval.compare_drafters(pair, drafters(pair), PROMPTS, N_NEW)


@pytest.fixture(scope="module")
def sampled_rows(pair):
    return drafter_eval.compare_drafters(pair, drafters(pair), PROMPTS[:2], N_NEW, temperature=0.7)


def check_sane(row: DrafterRow, n_prompts: int) -> None:
    assert 0.0 <= row.alpha <= 1.0
    assert 1.0 <= row.tokens_per_call <= row.gamma + 1
    assert row.tokens_per_s > 0 and row.ar_tokens_per_s > 0 and row.speedup > 0
    assert row.c >= 0 and row.v > 0
    assert row.predicted == pytest.approx(theory.speedup(row.alpha, row.gamma, row.c, row.v), rel=1e-12)
    assert row.prompts == n_prompts
    assert set(row.as_dict()) == {f for f in DrafterRow.__dataclass_fields__} | {"verdict"}
    assert row.speedup_lo <= row.speedup <= row.speedup_hi


def test_greedy_rows_are_sane_and_equal_ar_on_every_prompt(greedy_rows):
    assert [(r.name, r.gamma, r.temperature) for r in greedy_rows] == [("model", 3, 0.0), ("feature", 2, 0.0),
                                                                       ("ngram", 4, 0.0)]
    for row in greedy_rows:
        check_sane(row, len(PROMPTS))
        assert row.same_as_ar == len(PROMPTS), row.name  # speculative decoding is exact at T = 0


def test_sampled_rows_are_sane_and_not_compared_token_by_token(sampled_rows):
    for row in sampled_rows:
        check_sane(row, 2)
        assert row.temperature == 0.7 and row.same_as_ar == -1


def test_a_draft_that_is_the_target_is_always_accepted(pair):
    (row,) = drafter_eval.compare_drafters(pair, {"self": (ModelDrafter(pair.target), 3)}, PROMPTS[:1], N_NEW)
    assert row.alpha == 1.0 and row.same_as_ar == 1
    ids = torch.tensor([pair.tokenizer(PROMPTS[0]).input_ids])
    n = len(ar.generate(pair.target, ids, N_NEW, eos_token_id=pair.tokenizer.eos_token_id))
    assert row.tokens_per_call == pytest.approx(n / math.ceil(n / 4))  # γ + 1 = 4 tokens per call until the end


def test_one_run_each_gives_no_verdict_and_repeats_give_a_band(pair, greedy_rows):
    assert all(r.verdict == "single run" and math.isnan(r.band) for r in greedy_rows)
    rows = drafter_eval.compare_drafters(pair, dict(list(drafters(pair).items())[:2]), PROMPTS[:2], N_NEW, repeats=3)
    for row in rows:
        check_sane(row, 2)
        assert row.band > 0 and row.verdict in {"faster", "slower", "a tie"}
        assert row.verdict == classify(row.speedup, row.band)
    assert len({r.band for r in rows}) == 1  # one noise band for the whole comparison


def test_gamma_sweep_gives_one_row_per_gamma(pair):
    gammas = [1, 2, 4]
    rows = drafter_eval.gamma_sweep(pair, ModelDrafter(pair.draft), PROMPTS[0], gammas, max_new_tokens=N_NEW)
    assert [r.gamma for r in rows] == gammas and [r.name for r in rows] == ["γ=1", "γ=2", "γ=4"]
    for row in rows:
        check_sane(row, 1)
        assert row.same_as_ar == 1
    assert len({r.ar_tokens_per_s for r in rows}) == 1  # one AR run shared by every γ


def test_table_has_a_header_and_one_line_per_row(greedy_rows, sampled_rows):
    rows = greedy_rows + sampled_rows
    lines = drafter_eval.table(rows).splitlines()
    assert len(lines) == 2 + len(rows)
    assert all(line.count("|") == 15 for line in lines)
    assert f"{len(PROMPTS)}/{len(PROMPTS)}" in lines[2] and "n/a (sampled)" in lines[-1]
    assert all(line.startswith(f"| {r.name} | {r.gamma} |") for line, r in zip(lines[2:], rows))


# ---------------------------------------------------------------- figures and the widget
def fake_row(gamma: int, alpha: float = 0.6, c: float = 0.1, v: float = 1.4, speedup: float = 1.2,
             name: str | None = None, temperature: float = 0.0) -> DrafterRow:
    return DrafterRow(name or f"γ={gamma}", gamma, temperature, alpha, theory.expected_tokens(alpha, gamma), 30.0,
                      25.0, speedup, c, v, theory.speedup(alpha, gamma, c, v), 1 if temperature == 0 else -1, 1)


def fake_log(steps: int = 60, evals: int = 3) -> dict:
    every = steps // evals
    run = {"step": list(range(steps)), "loss": [3.0 - i / steps for i in range(steps)],
           "train_agree": [0.2 + 0.3 * i / steps for i in range(steps)],
           "eval_step": [every * (i + 1) for i in range(evals)], "valid_agree": [0.3, 0.4, 0.45][:evals],
           "seconds": 120.0}
    return {"feature": {**run, "valid_agree2": [0.2, 0.3, 0.35][:evals]},
            "model": {**run, "valid_agree2": [float("nan")] * evals, "corpus_tokens": 1000}}


def test_training_curves_draws_each_kind():
    fig = viz_drafts.training_curves(fake_log())
    assert isinstance(fig, Figure) and len(fig.axes) == 4  # two kinds × (loss, agreement)
    feature_agreement = fig.axes[3]
    assert len(feature_agreement.get_lines()) == 3  # training (smoothed), held-out, from its own features
    assert len(fig.axes[1].get_lines()) == 2  # the standalone draft has no second pass (NaN)
    plt.close(fig)
    one = viz_drafts.training_curves({"feature": fake_log()["feature"]})
    assert len(one.axes) == 2
    plt.close(one)
    with pytest.raises(ValueError, match="no training run"):
        viz_drafts.training_curves({})


def test_smoothing_is_a_trailing_moving_average():
    assert viz_drafts.moving_average([1.0, 3.0, 5.0, 7.0], 2) == [1.0, 2.0, 4.0, 6.0]


def test_drafter_bars_and_gamma_curve(greedy_rows):
    fig = viz_drafts.drafter_bars(greedy_rows)
    assert isinstance(fig, Figure) and len(fig.axes) == 3
    assert len(fig.axes[0].patches) == 2 * len(greedy_rows)  # measured and predicted per drafter
    plt.close(fig)
    rows = [fake_row(g, speedup=s) for g, s in [(1, 1.1), (2, 1.3), (3, 1.2)]]
    fig = viz_drafts.gamma_curve(rows, 0.6, 0.1, 1.4)
    curve = fig.axes[0].get_lines()[0]
    assert list(curve.get_xdata()) == [1, 2, 3, 4, 5]
    assert curve.get_ydata()[1] == pytest.approx(theory.speedup(0.6, 2, 0.1, 1.4))
    plt.close(fig)


def test_sweep_params_are_medians():
    rows = [fake_row(1, alpha=0.5, c=0.1, v=1.2), fake_row(2, alpha=0.7, c=0.3, v=1.3), fake_row(3, alpha=0.6, c=0.2,
                                                                                                   v=1.9)]
    assert viz_drafts.sweep_params(rows) == pytest.approx((0.6, 0.2, 1.3))
    with pytest.raises(ValueError):
        viz_drafts.sweep_params([])


def test_break_even_alpha():
    # c = 0 and v = 1: any α > 0 pays; α = 0 breaks even exactly
    assert theory.break_even_alpha(0.0, 1.0) == 0.0
    a = theory.break_even_alpha(0.2, 1.4, max_gamma=8)
    assert 0 < a < 1
    assert max(theory.speedup(a, g, 0.2, 1.4) for g in range(1, 9)) == pytest.approx(1.0, abs=1e-4)
    assert theory.break_even_alpha(0.4, 1.4) > a  # a dearer draft must be better
    assert theory.break_even_alpha(1.0, 2.5, max_gamma=4) == math.inf  # (γ+1) < γc + v for every γ
    fig = viz_drafts.break_even([0.05, 0.2], [1.0, 1.4])
    assert len(fig.axes) == 2
    plt.close(fig)


def test_drafter_view_describes_the_chosen_row():
    rows = [fake_row(g, alpha=a, speedup=s) for g, a, s in [(1, 0.7, 1.1), (2, 0.6, 1.3), (3, 0.5, 1.2)]]
    fig, text = viz_drafts.drafter_view(rows, 2, "feature")
    assert isinstance(fig, Figure)
    assert "γ = 2" in text and "α = 0.60" in text and f"predicted {rows[1].predicted:.2f}×" in text
    assert "measured 1.30×" in text and f"best γ for these numbers: {theory.best_gamma(0.6, 0.1, 1.4)}" in text
    curve = fig.axes[0].get_lines()[0]
    assert curve.get_ydata()[0] == pytest.approx(theory.speedup(0.6, 1, 0.1, 1.4))  # the chosen row's α, c, v
    assert "feature" in fig.axes[0].get_title()
    plt.close(fig)
    fig, text = viz_drafts.drafter_view(rows, 6)
    assert "not measured" in text and "α = 0.60" in text  # the sweep's medians
    plt.close(fig)


def test_drafter_panel_redraws_on_a_new_drafter_and_gamma(monkeypatch):
    from specdec_core.viz import widgets

    seen = []
    real = viz_drafts.drafter_view
    monkeypatch.setattr(viz_drafts, "drafter_view", lambda rows, g, name="": seen.append((name, g)) or real(rows, g, name))
    sweeps = {"feature": [fake_row(g) for g in (1, 2, 3)], "model": [fake_row(g, alpha=0.3) for g in (1, 2, 3)]}
    panel = widgets.drafter_panel(sweeps, max_gamma=3)
    dropdown, slider = panel.children[0].children
    assert list(dropdown.options) == ["feature", "model"] and (slider.min, slider.max, slider.value) == (1, 3, 3)
    slider.value = 1
    dropdown.value = "model"
    assert seen == [("feature", 3), ("feature", 1), ("model", 1)]
    with pytest.raises(ValueError):
        widgets.drafter_panel({}, 3)


def test_speedup_point_puts_a_run_next_to_the_theory():
    target, draft = tiny_llama(seed=0, logit_scale=3.0), tiny_llama(seed=0, logit_scale=3.0)
    from specdec_core.drafters import ModelDrafter

    c, v = 0.2, lambda n: 1.0 + 0.1 * n
    point = drafter_eval.speedup_point(target, ModelDrafter(draft), torch.tensor([[1, 2, 3]]), 3, 0.0, c, v,
                                       ar_seconds_per_token=0.01, max_new_tokens=12)
    assert point.alpha == 1.0 and point.tokens_per_call == pytest.approx(12 / 3)  # the draft IS the target
    assert point.predicted_speedup == pytest.approx(theory.speedup(1.0, 3, c, v)) == pytest.approx(4 / (0.6 + 1.4))
    assert point.measured_speedup > 0


def test_acceptance_pools_every_examined_guess(pair):
    """The target as its own draft agrees everywhere (α = 1, γ + 1 tokens per call unless EOS ends a
    step); another model agrees less; the per-position α and the counts follow the run's steps."""
    same = drafter_eval.acceptance(pair.target, pair.tokenizer, ModelDrafter(pair.target), PROMPTS, gamma=3,
                                   max_new_tokens=N_NEW)
    other = drafter_eval.acceptance(pair.target, pair.tokenizer, ModelDrafter(pair.draft), PROMPTS, gamma=3,
                                    max_new_tokens=N_NEW)
    assert same["alpha"] == 1.0 and same["alpha_per_position"][0] == 1.0 and same["tokens_per_call"] > 2
    assert other["alpha"] < 0.9 and 1.0 <= other["tokens_per_call"] < same["tokens_per_call"]
    assert same["prompts"] == len(PROMPTS) and len(other["alpha_per_position"]) == 3


def _ablation_log() -> dict:
    def run(inputs, unroll, tokens, alpha):
        return {"inputs": inputs, "unroll": unroll, "fraction": tokens / 1000, "train_tokens": tokens, "seconds": 600.0,
                "valid_agree_steps": [[0.1, 0.1, 0.1], [alpha + 0.1, alpha, alpha - 0.1]],
                "heldout": {"alpha": alpha, "tokens_per_call": 1 + 2 * alpha, "prompts": 24, "max_new_tokens": 64}}
    reference = {"inputs": "fused", "unroll": 3, "fraction": 1.0, "train_tokens": 2000, "seconds": 1200.0, "steps": 900,
                 "heldout": {"alpha": 0.6, "tokens_per_call": 2.2, "prompts": 24, "max_new_tokens": 64}}  # no agreement: measured on HELDOUT only
    return {"last, two passes": run("last", 0, 1000, 0.3), "shipped head": reference,  # logged in between
            "fused, unrolled ×3": run("fused", 3, 1000, 0.5), "fused, unrolled ×3, ¼ data": run("fused", 3, 250, 0.4)}


def test_the_ablation_table_has_a_row_per_variant_with_its_numbers():
    text = viz_drafts.ablation_table(_ablation_log())
    rows = text.splitlines()[2:]
    assert len(rows) == 4 and "| last layer | two passes | 1,000 | – | 0.40 / 0.30 / 0.20 | 0.300 | 1.60 | 10 |" in rows[0]
    assert "3 layers, fused | unrolled × 3" in rows[1]
    assert rows[3] == "| shipped head | 3 layers, fused | unrolled × 3 | 2,000 | 900 | – | 0.600 | 2.20 | 20 |"


def test_the_ablation_findings_compare_runs_of_one_change_against_the_margin():
    log = _ablation_log()
    found = viz_drafts.ablation_findings(log)
    # 1536 tokens ÷ 2.0 tokens/call = 768 calls at α 0.5: a margin of 2·sqrt(.25/768) = 0.036 per run, 0.05 for two
    assert len(found) == 0  # the fixture has no ½-data run and no 'last, unrolled' run: no pair to compare
    log["fused, two passes"] = {**log["last, two passes"], "inputs": "fused"}
    log["fused, two passes"]["heldout"] = {**log["last, two passes"]["heldout"], "alpha": 0.32}
    log["fused, unrolled ×3, ½ data"] = {**log["fused, unrolled ×3"], "fraction": 0.5}
    found = viz_drafts.ablation_findings(log)
    assert [f.split(":")[0] for f in found] == [
        "three fused layers instead of the last (two passes)", "unrolled × 3 instead of two passes (fused layers)",
        "twice the data (¼ → ½ of the corpus)", "twice the data (½ → all of the corpus)"]
    assert "α 0.300 → 0.320 (a tie;" in found[0] and "α 0.320 → 0.500 (higher;" in found[1]
    assert "α 0.400 → 0.500 (higher;" in found[2] and "(a tie;" in found[3]  # ½ and all: the same α
    assert viz_drafts.compare_alpha(log["fused, unrolled ×3"], log["last, two passes"]) == "lower"
    assert 0.03 < viz_drafts.alpha_margin(log["fused, unrolled ×3"]) < 0.04


def test_the_data_curve_leaves_out_the_reference_row():  # other steps: not a point of the same-steps curve
    fig = viz_drafts.data_curve(_ablation_log())
    assert 2000 not in fig.axes[0].lines[0].get_xdata()
    plt.close(fig)


def test_the_data_curve_plots_one_recipe_in_order_of_data():
    fig = viz_drafts.data_curve(_ablation_log())
    line = fig.axes[0].lines[0]
    assert list(line.get_xdata()) == [250, 1000] and list(line.get_ydata()) == [0.4, 0.5]
    plt.close(fig)


def test_the_unrolled_mask_figure_draws_the_mask_it_is_given():
    from specdec_core.train.eagle import chain_mask

    mask = chain_mask(4, 2)
    fig = viz_drafts.unrolled_mask(mask, 4, 2)
    assert (fig.axes[0].images[0].get_array() == mask.float().numpy()).all() and len(fig.axes[0].lines) == 2
    plt.close(fig)


def test_given_the_machines_costs_each_row_carries_the_cost_models_prediction(pair):
    from specdec_core import costmodel
    cm = costmodel.CostModel({}, 0.01, {n: 1.0 + 0.1 * (n - 1) for n in range(1, 9)}, (0.009, 0.011), 1e10, 10**8,
                             overhead_s=0.001)
    rows = drafter_eval.compare_drafters(pair, dict(list(drafters(pair).items())[:1]), PROMPTS[:2], N_NEW, costs=cm)
    (row,) = rows
    assert row.prediction is not None and row.prediction.tokens_per_call == pytest.approx(row.tokens_per_call)
    assert row.prediction.v >= 1.0 and row.prediction.overhead == pytest.approx(0.1)
    assert f"{row.prediction.speedup:.2f}×" in drafter_eval.table(rows)
    assert f"measured {row.speedup:.2f}×" in row.prediction_line()
    bare = drafter_eval.compare_drafters(pair, dict(list(drafters(pair).items())[:1]), PROMPTS[:1], N_NEW)
    assert bare[0].prediction is None and "no prediction" in bare[0].prediction_line()


def test_the_compute_curve_draws_alpha_against_steps_per_recipe_on_the_whole_corpus():
    log = _ablation_log()
    for name in ("last, two passes", "fused, unrolled ×3", "fused, unrolled ×3, ¼ data"):
        log[name]["steps"] = 250
    log["shipped head"]["agree_curve"] = {"steps": [300, 600, 900], "agree": [[0.3, 0.2, 0.1], [0.5, 0.4, 0.3],
                                                                              [0.6, 0.5, 0.4]]}
    fig = viz_drafts.compute_curve(log)
    ax = fig.axes[0]
    alpha = {tuple(c.lines[0].get_xdata()): list(c.lines[0].get_ydata()) for c in ax.containers}
    assert alpha == {(250, 900): [0.5, 0.6],  # fused, unrolled ×3: the 250-step run, then the 900-step reference
                     (250,): [0.3]}  # last layer, two passes: one point; the ¼-data run is on no curve
    agree = [line for line in ax.lines if line.get_linestyle() == "--"]
    assert len(agree) == 1 and list(agree[0].get_xdata()) == [300, 600, 900]
    assert list(agree[0].get_ydata()) == [0.3, 0.5, 0.6]  # the reference's agreement at drafting step 1
    plt.close(fig)
