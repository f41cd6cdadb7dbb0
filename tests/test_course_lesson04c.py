"""Lesson 04c: the in-model drafters' measurement (bench/in_model.py) on toy models — α per position for chains
and trees, c per position, what a drafter adds and cost to train, rows for methods not trained yet, the
table — and the exercise's checkers: right answers pass, each common wrong one fails with its hint, calling
the library fails. Each check is shown to catch a deliberately broken variant."""

from __future__ import annotations

import math

import pytest
import torch

from specdec_core import costmodel, self_draft, theory
from specdec_core.ar import generate as ar_generate
from specdec_core.assets import AssetMissingError
from specdec_core.bench import in_model
from specdec_core.bench.methods import Method
from specdec_core.course import CheckFailed, check_alpha_per_position, check_predicted_speedup
from specdec_core.drafters import ModelDrafter
from specdec_core.models import Pair
from specdec_core.records import SpecStats, SpecStep, TreeStats, TreeStep
from specdec_core.speculative import speculative_generate
from specdec_core.toy import tiny_llama, toy_tokenizer
from specdec_core.tree import tree_generate


def same(a: list[float], b: list[float]) -> bool:
    return len(a) == len(b) and all((math.isnan(x) and math.isnan(y)) or abs(x - y) < 1e-12 for x, y in zip(a, b))


# ---- α per position: chains pooled, trees per depth ------------------------------------------------

def chain(*accepted: int, gamma: int = 3) -> SpecStats:
    return SpecStats(steps=[SpecStep([0] * gamma, a, 0, "bonus", gamma) for a in accepted])


def tree_run(*trials: list[tuple[int, int]]) -> TreeStats:
    return TreeStats(steps=[TreeStep([0, 0], [-1, 0], [], 0, 3, 3, list(t)) for t in trials])


def test_chains_are_pooled_over_runs_before_dividing() -> None:
    runs = [chain(3, 3), chain(0)]  # position 1: 2 of 3 accepted pooled (a mean of per-run rates: 1/2)
    assert same(in_model.alpha_per_position(runs), [2 / 3, 1.0, 1.0])
    mean_of_runs = lambda rs: [sum(r.alpha_per_position[i] for r in rs) / len(rs) for i in range(3)]  # noqa: E731
    assert not same(mean_of_runs(runs), in_model.alpha_per_position(runs))  # the check catches the broken rule


def per_depth_right(runs):
    return in_model.alpha_per_position(runs)


def per_depth_unconditional(runs):
    """Broken: accepted at depth d ÷ every step (not only those that reached depth d)."""
    steps = [s for r in runs for s in r.steps]
    depth = max(len(s.trials) for s in steps)
    return [sum(len(s.trials) > d and s.trials[d][1] >= 0 for s in steps) / len(steps) for d in range(depth)]


@pytest.mark.parametrize("fn, ok", [(per_depth_right, True), (per_depth_unconditional, False)])
def test_a_trees_depth_counts_the_steps_that_reached_it(fn, ok) -> None:
    # step 1: depth 1 accepted (rank 1), depth 2 rejected; step 2: depth 1 rejected; step 3: two depths accepted
    runs = [tree_run([(2, 1), (1, -1)], [(3, -1)]), tree_run([(2, 0), (2, 0), (1, -1)])]
    assert same(fn(runs), [2 / 3, 1 / 2, 0.0]) is ok


def test_a_mix_of_chains_and_trees_is_refused() -> None:
    with pytest.raises(TypeError, match="not a mix"):
        in_model.alpha_per_position([chain(1), tree_run([(1, 0)])])


def test_cost_per_position_divides_by_the_paths_depth() -> None:
    stats = chain(1, 2, gamma=4)
    stats.steps[0].draft_s = stats.steps[1].draft_s = 0.02
    assert in_model.cost_per_position(stats, 0.01) == pytest.approx(0.5)  # 2 steps drafting 0.02 s: 2 steps ÷ 4
    tree = TreeStats(steps=[TreeStep([0] * 4, [-1, -1, 0, 2], [], 0, 5, 5, [], draft_s=0.03)])
    assert in_model.path_depth(tree) == 3  # node 3's parent is 2, whose parent is 0
    assert in_model.cost_per_position(tree, 0.01) == pytest.approx(1.0)


def test_training_cost_and_parameters_added() -> None:
    log = {"model": {"seconds": 30.0}, "feature": {"seconds": 20.0}}
    assert in_model.training_cost("spec", log) == 30.0 and in_model.training_cost("spec_feature", log) == 20.0
    assert in_model.training_cost("spec_self", log) == 0.0  # nothing trained
    assert in_model.training_cost("spec_medusa", log) is None  # not logged: never a made-up 0
    target = tiny_llama(32, num_layers=4, seed=0)
    assert in_model.parameters_added([target, self_draft.prefix(target, 2)], target) == 0  # a view of the target
    draft = tiny_llama(32, num_layers=1, seed=1)
    assert in_model.parameters_added([target, draft], target) == sum(p.numel() for p in draft.parameters())


# ---- the comparison on toys --------------------------------------------------------------------------

def missing_heads(pair: Pair) -> None:
    raise AssetMissingError("the Medusa heads file is missing (/home/x/specdec_core/drafts/medusa-heads.safetensors): "
                            "remake it with `python -m specdec_core.train draft --kind medusa`")


@pytest.fixture(scope="module")
def toy():
    target = tiny_llama(32, hidden_size=64, num_layers=4, seed=11, logit_scale=3.0)
    pair = Pair(target, tiny_llama(32, seed=1, num_layers=1), toy_tokenizer(32), "toy", torch.device("cpu"))
    registry = {
        "ar": Method(lambda p, ids, n: ar_generate(p.target, ids, n), "ar"),
        "spec": Method(lambda p, ids, n: speculative_generate(p.target, ModelDrafter(p.draft), ids, n, gamma=3), "spec",
                       models=lambda p: [p.target, p.draft]),
        "spec_self": Method(lambda p, ids, n: speculative_generate(p.target, ModelDrafter(self_draft.prefix(p.target, 2)),
                                                                   ids, n, gamma=2), "self", models=lambda p: [p.target]),
        "spec_medusa": Method(lambda p, ids, n: 1 / 0, "weights not shipped", prepare=missing_heads),
        "tree_medusa": Method(lambda p, ids, n: tree_generate(p.target, ModelDrafter(p.draft), ids, n, shape=(2, 1)),
                              "a tree standing in for Medusa's"),
    }
    return pair, registry


def test_every_drafter_row_is_measured_exact_and_a_missing_method_says_not_trained(toy) -> None:
    pair, registry = toy
    names = ("spec", "spec_feature", "spec_medusa", "tree_medusa", "spec_self")
    rows = in_model.compare(pair, {"chat": ["a b", "c d e"], "copy": ["f g"]}, registry, names, max_new_tokens=8,
                            repeats=2, progress=False)
    assert [(r.category, r.name) for r in rows] == [(c, n) for c in ("chat", "copy") for n in names]
    by = {(r.category, r.name): r for r in rows}
    for name in ("spec", "tree_medusa", "spec_self"):
        row = by["chat", name]
        assert row.available and row.same_as_ar == row.prompts == 2  # greedy: the target's own tokens
        assert row.tau >= 1 and row.c > 0 and row.vs_ar > 0 and not math.isnan(row.band)
        assert math.isnan(row.vs_reference)  # no feature head in this registry: no ratio, never a made-up one
        assert row.verdict in ("faster", "slower", "a tie")
    for name in ("spec_feature", "spec_medusa"):  # not in the registry; its weights not shipped (never run)
        assert not by["chat", name].available and by["chat", name].verdict.startswith(in_model.NOT_TRAINED)
    reason = by["copy", "spec_medusa"].reason  # the loader's message says how to make them, with no machine path
    assert "--kind medusa" in reason and "(medusa-heads.safetensors)" in reason and "/home" not in reason
    tree_alphas = by["chat", "tree_medusa"].alpha_per_position
    assert 1 <= len(tree_alphas) <= 2 and all(0 <= a <= 1 for a in tree_alphas)  # shape (2, 1): at most 2 deep
    text = in_model.table(rows)
    assert text.count("\n") == len(rows) + 1 and "not trained yet" in text


def test_the_ratio_is_taken_round_by_round() -> None:
    tps = {"ar": [[10.0, 20.0, 40.0]], "x": [[11.0, 18.0, 44.0]]}  # round by round: 1.1, 0.9, 1.1
    assert in_model._ratio(tps, "x", "ar") == pytest.approx(1.1)
    ratio_of_medians = 18.0 / 20.0  # broken: the medians' ratio mixes a fast round of one with a slow one of the other
    assert ratio_of_medians != pytest.approx(in_model._ratio(tps, "x", "ar"))


def test_bad_input_says_what_to_do(toy) -> None:
    pair, registry = toy
    with pytest.raises(ValueError, match="no 'ar'"):
        in_model.compare(pair, {"chat": ["a"]}, {k: v for k, v in registry.items() if k != "ar"}, progress=False)
    with pytest.raises(ValueError, match="at least one prompt"):
        in_model.compare(pair, {"chat": []}, registry, progress=False)
    with pytest.raises(ValueError, match="repeats"):
        in_model.compare(pair, {"chat": ["a"]}, registry, repeats=0, progress=False)


# ---- the exercise's checkers ---------------------------------------------------------------------------

def right_alphas(drafted, accepted):
    examined, ok = [0] * max(drafted), [0] * max(drafted)
    for d, a in zip(drafted, accepted):
        for i in range(min(a + 1, d)):
            examined[i], ok[i] = examined[i] + 1, ok[i] + (i < a)
    return [x / e if e else math.nan for x, e in zip(ok, examined)]


def right_speedup(alphas, c, v, overhead):
    tau, run = 1.0, 1.0
    for a in alphas:
        run *= a
        tau += run
    return tau / (len(alphas) * c + v + overhead)


def test_right_answers_pass(capsys) -> None:
    check_alpha_per_position(right_alphas)
    check_predicted_speedup(right_speedup)
    assert "✗" not in capsys.readouterr().out


@pytest.mark.parametrize("wrong, hint", [
    (lambda d, a: [sum(x > i for x in a) / len(a) for i in range(max(d))], "EXAMINED"),
    (lambda d, a: [1.0] * max(d), "first rejected guess"),
    (lambda d, a: [0.0 if math.isnan(x) else x for x in right_alphas(d, a)], "NaN"),
    (lambda d, a: SpecStats(steps=[SpecStep([0] * x, y, 0, "bonus", x) for x, y in zip(d, a)]).alpha_per_position,
     "blocked"),  # calls the library
])
def test_wrong_alphas_fail_with_their_hint(wrong, hint, capsys) -> None:
    with pytest.raises(CheckFailed):
        check_alpha_per_position(wrong)
    assert hint in capsys.readouterr().out


@pytest.mark.parametrize("wrong, hint", [
    (lambda al, c, v, o: sum((sum(al) / len(al)) ** k for k in range(len(al) + 1)) / (len(al) * c + v + o), "MEAN α"),
    (lambda al, c, v, o: (right_speedup(al, c, v, o) * (len(al) * c + v + o) - 1) / (len(al) * c + v + o), "starts at 1"),
    (lambda al, c, v, o: right_speedup(al, c, v, o) * (len(al) * c + v + o) / (c + v + o), "γ·c"),
    (lambda al, c, v, o: theory.predicted_speedup(1 + sum(al), len(al) * c, v, o), "blocked"),  # the library
])
def test_wrong_speedups_fail_with_their_hint(wrong, hint, capsys) -> None:
    with pytest.raises(CheckFailed):
        check_predicted_speedup(wrong)
    assert hint in capsys.readouterr().out


def test_the_block_is_lifted_after_a_check() -> None:
    with pytest.raises(CheckFailed):
        check_alpha_per_position(lambda d, a: [1.0] * max(d))
    assert same(chain(1).alpha_per_position, [1.0, 0.0, math.nan])


def test_costs_to_train_read_the_registrys_models(toy) -> None:
    pair, registry = toy
    rows = {r["name"]: r for r in in_model.costs_to_train(pair, registry)}
    assert rows["spec"]["parameters"] == sum(p.numel() for p in pair.draft.parameters())
    assert rows["spec_self"]["parameters"] == 0 and rows["spec_self"]["seconds"] == 0.0
    assert rows["spec_medusa"]["parameters"] is None and rows["spec_feature"]["parameters"] is None  # not available


def priced(name: str, vs_reference: float, tau: float, draft: float, v: float) -> in_model.InModelRow:
    pred = costmodel.Prediction(tau, draft, v, 0.1, theory.predicted_speedup(tau, draft, v, 0.1))
    return in_model.InModelRow("code", name, name, vs_reference=vs_reference, band=0.05, prediction=pred)


def test_the_goal_line_names_the_term_that_keeps_a_drafter_below_the_feature_head() -> None:
    ref = priced("spec_feature", 1.0, tau=2.5, draft=0.3, v=1.3)
    cheap_but_blind = priced("spec_medusa", 0.7, tau=1.4, draft=0.1, v=1.3)  # drafts cheaply, guesses badly
    assert in_model.limiting_term(cheap_but_blind, ref)[0].startswith("α")
    dear = priced("spec_self", 0.6, tau=2.4, draft=1.5, v=1.3)  # guesses well, drafts dearly
    assert in_model.limiting_term(dear, ref)[0].startswith("c")
    line = in_model.goal_line([ref, cheap_but_blind, dear])
    assert "spec_medusa" in line and "slower" in line and "α (through τ)" in line  # the best of the two, and why
    level = priced("tree_medusa", 0.97, tau=2.5, draft=0.3, v=1.3)  # inside the band: a tie
    assert "level with the feature head" in in_model.goal_line([ref, cheap_but_blind, level])
    ahead = priced("tree_medusa", 1.2, tau=2.5, draft=0.3, v=1.3)
    assert "above the feature head" in in_model.goal_line([ref, ahead])
    # broken: a verdict read off the ratio alone (below 1 = below) would call the tie a loss
    assert level.vs_reference < 1 and level.verdict_reference == "a tie"
    assert "no in-model drafter" in in_model.goal_line([ref])
