"""bench.trees.tau_by_budget: τ pooled over the prompts (all tokens ÷ all target calls), not the median of
the prompts' τ, which a short answer pins. Bookkeeping on a toy pair, untimed."""

from __future__ import annotations

import pytest
from test_benchmark import PROMPTS, toy_pair

from specdec_core.bench import trees
from specdec_core.generation import Generation
from specdec_core.records import TreeStats, TreeStep


def test_tau_is_pooled_over_the_prompts(monkeypatch):
    # prompt 0: 8 tokens in 5 calls (τ 1.6); prompt 1: 40 tokens in 20 calls (2.0); prompt 2: 30 in 20 (1.5)
    runs = iter([(8, 5), (40, 20), (30, 20)])

    def fake(target, drafter, ids, n, **kwargs):
        tokens, calls = next(runs)
        return Generation(list(range(tokens)), "", TreeStats(target_calls=calls))  # tokens_per_call = tokens ÷ calls

    monkeypatch.setattr(trees, "tree_generate", fake)
    (row,) = trees.tau_by_budget(toy_pair(), PROMPTS[:3], [4], [0.5, 0.2, 0.1, 0.05], max_new_tokens=8)
    assert row["tau"] == pytest.approx(78 / 45)  # the median of the three τ would be 1.6
    assert row["taus"] == pytest.approx([1.6, 2.0, 1.5]) and row["nodes"] == 4


def test_budget_runs_keep_every_drawable_setting_and_its_trees():
    """Lesson 04b's panel data: one greedy tree run per (budget, depth) that a tree with ≤ top_k children a
    node can have (2 nodes never reach depth 3), each step's tree of exactly ``budget`` nodes (or fewer:
    a toy draft repeats itself and the tree keeps distinct siblings) with an accepted path inside it."""
    import torch

    from specdec_core.drafters import ModelDrafter
    from specdec_core.models import chat_ids

    pair = toy_pair()
    ids = chat_ids(pair.tokenizer, PROMPTS[0], pair.device)
    runs = trees.budget_runs(pair, ModelDrafter(pair.draft), ids, 12, budgets=(2, 4), depths=(1, 3), top_k=2)
    assert sorted(runs) == [(2, 1), (4, 3)]  # no tree of 2 nodes has depth 3; depth 1 holds ≤ 2 nodes
    ref = runs[(4, 3)]
    for step in ref.stats.steps:
        assert len(step.drafted) <= 4 and len(step.parents) == len(step.drafted)
        assert all(0 <= j < len(step.drafted) for j in step.path)
        assert step.path == sorted(step.path) and step.accepted == len(step.path)
    assert torch.equal(torch.tensor(runs[(2, 1)].new_tokens), torch.tensor(ref.new_tokens))  # greedy: same text


def test_the_tree_panel_draws_a_recorded_step():
    """viz.trees.step_picture on a recorded step: a figure whose tree marks the accepted path; the panel
    opens on the step that accepted the most (the first of them)."""
    from specdec_core.viz import trees as vt

    steps = [TreeStep([5, 6, 7], [-1, -1, 0], [0, 2], 9, 4, 4), TreeStep([5, 6, 7], [-1, -1, 1], [1, 2], 9, 4, 4),
             TreeStep([5], [-1], [], 9, 4, 2)]
    assert vt.best_step(steps) == 0 and vt.best_step([]) == 0

    class Tok:
        def decode(self, ids):
            return " ".join(f"t{i}" for i in ids)

    fig = vt.step_picture(steps[0], Tok(), "step 0")
    left = fig.axes[0]
    green = [line for line in left.lines if line.get_color() == "#2a9d8f"]
    assert len(green) == 2  # the two edges of the accepted path root → 0 → 2
    vt.plt.close(fig)


def test_side_by_side_rows_carry_short_labels_and_verdicts():
    """Lesson 04b's and 07b's tables: each method's label without its explanations, verdicts in the table's
    words; the numbers pass through, a shape in parentheses stays, a method the report lacks is left out."""
    report = {"noise_band": 0.1, "methods": [
        {"name": "tree_feature", "label": "our token tree, feature drafter (EAGLE-2's dynamic tree), budget and depth auto",
         "ratio_to_ar": 0.81, "verdict": "slower", "tokens_per_call": 1.76, "predicted": 1.03,
         "prediction_verdict": "outside: over-predicted"},
        {"name": "tree", "label": "our token tree, model draft, (3, 2, 1)", "ratio_to_ar": 1.0, "verdict": "a tie",
         "prediction_verdict": "within the noise band"},
        {"name": "lookahead_prompt", "label": "lookahead decoding, pool seeded from the prompt, shape chosen on the warm-up",
         "ratio_to_ar": 1.18, "verdict": "faster"}]}
    rows = trees.side_by_side({"chat": report}, ["tree_feature", "tree", "lookahead_prompt", "spec"])
    assert [r["label"] for r in rows] == ["tree, feature drafter, dynamic, budget auto", "tree, model draft, (3, 2, 1)",
                                          "lookahead, seeded pool, shape auto"]
    assert [(r["verdict"], r["prediction_verdict"]) for r in rows] == [
        ("slower", "over-predicted"), ("tie", "in band"), ("faster", None)]
    assert (rows[0]["ratio"], rows[0]["tau"], rows[0]["predicted"], rows[0]["band"]) == (0.81, 1.76, 1.03, 0.1)
    assert trees.short_label("our speculative, best drafter (lookup, else feature), γ auto") == \
        "speculative, best drafter, γ auto"
