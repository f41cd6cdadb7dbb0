"""Lesson 08's checkers pass the reference answers and reject wrong ones (pure tensors: no model)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from specdec_core.cllm import masked_kl
from specdec_core.course.checks import CheckFailed
from specdec_core.course.lesson08 import (
    check_consistency_kl,
    check_first_wrong_mask,
    reference_consistency_kl,
    reference_first_wrong_mask,
)
from specdec_core.generation import common_prefix as correct_prefix


def test_references_pass(capsys):
    check_first_wrong_mask(reference_first_wrong_mask)
    check_consistency_kl(reference_consistency_kl)
    out = capsys.readouterr().out
    assert "✗" not in out
    for name, n in [("first_wrong_mask", 8), ("consistency_kl", 8)]:
        assert f"All {n} checks of {name} passed." in out


def test_references_agree_with_masked_kl():
    gen = torch.Generator().manual_seed(1)
    for _ in range(20):
        L, V = int(torch.randint(1, 10, (1,), generator=gen)), 9
        truth = torch.randint(0, V, (L,), generator=gen)
        state = torch.where(torch.rand(L, generator=gen) < 0.3, (truth + 1) % V, truth)
        t, s = torch.randn(L, V, generator=gen).log_softmax(-1), torch.randn(L, V, generator=gen).log_softmax(-1)
        kl, mask = masked_kl(t, s, state, truth)
        assert torch.equal(reference_first_wrong_mask(state, truth), mask)
        torch.testing.assert_close(reference_consistency_kl(t, s, state, truth), kl.sum() / max(int(mask.sum()), 1))


def test_other_correct_answers_pass(capsys):
    """A loop, a cumulative sum, F.kl_div and boolean indexing are all fine."""

    def mask_loop(state, truth):
        out, wrong = [], False
        for i in range(len(truth)):
            out.append(wrong)
            wrong = wrong or bool(state[i] != truth[i])
        return torch.tensor(out, dtype=torch.bool)

    def mask_cumsum(state, truth):
        wrong = (state != truth).long().cumsum(0)
        return torch.cat([torch.zeros(1, dtype=torch.bool), wrong[:-1] > 0])

    def kl_div(teacher, student, state, truth):
        mask = mask_cumsum(state, truth)
        if not mask.any():
            return torch.zeros(())
        per_pos = F.kl_div(student, teacher, log_target=True, reduction="none").sum(-1)
        return per_pos[mask].mean()

    check_first_wrong_mask(mask_loop)
    check_first_wrong_mask(mask_cumsum)
    check_consistency_kl(kl_div)
    assert "✗" not in capsys.readouterr().out


def _mask_mutant(kind):
    def fn(state, truth):
        L = len(truth)
        if kind == "wrong_tokens":  # state != truth: misses right tokens after the first wrong one
            return state != truth
        if kind == "argmax":  # argmax of an all-False tensor is 0: the fixed point gets a mask
            return torch.arange(L) > int((state != truth).int().argmax())
        if kind == "off_by_one":  # counts the wrong token's own position
            return torch.arange(L) >= correct_prefix(state, truth)
        if kind == "int_tensor":
            return (torch.arange(L) > correct_prefix(state, truth)).long()
        if kind == "fixed_length":
            return torch.arange(8) > correct_prefix(state, truth)
        if kind == "in_place":
            state[:] = truth
            return torch.arange(L) > correct_prefix(state, truth)
        if kind == "crash":
            raise RuntimeError("oops")
        raise AssertionError(kind)

    return fn


@pytest.mark.parametrize("kind", ["wrong_tokens", "argmax", "off_by_one", "int_tensor", "fixed_length", "in_place",
                                  "crash"])
def test_mask_mutants_fail(kind, capsys):
    with pytest.raises(CheckFailed):
        check_first_wrong_mask(_mask_mutant(kind))
    assert "✗" in capsys.readouterr().out


def _kl_mutant(kind):
    def fn(teacher, student, state, truth):
        L = len(truth)
        mask = reference_first_wrong_mask(state, truth)
        if kind == "off_by_one":
            mask = torch.arange(L) >= correct_prefix(state, truth)
        if kind == "wrong_tokens":
            mask = state != truth
        count = max(int(mask.sum()), 1)
        forward = (teacher.exp() * (teacher - student)).sum(-1)
        if kind == "reverse":
            return ((student.exp() * (student - teacher)).sum(-1) * mask).sum() / count
        if kind == "no_mask":
            return forward.mean()
        if kind == "sum":
            return (forward * mask).sum()
        if kind == "mean_over_all":
            return (forward * mask).sum() / L
        if kind == "probabilities":  # the log-probs taken for probabilities
            return ((teacher * (teacher - student)).sum(-1) * mask).sum() / count
        if kind == "vocab_mean":
            return ((teacher.exp() * (teacher - student)).mean(-1) * mask).sum() / count
        if kind == "cross_entropy":
            return ((-(teacher.exp() * student).sum(-1)) * mask).sum() / count
        if kind == "nan_when_empty":
            return (forward * mask).sum() / mask.sum()
        if kind == "item":
            return float((forward * mask).sum() / count)
        if kind == "detached":
            return ((forward * mask).sum() / count).detach()
        if kind == "masked_after_mean":  # the mask applied to the average, not per position
            return forward.mean() * mask.any()
        if kind == "in_place":
            student.zero_()
            return (forward * mask).sum() / count
        if kind in ("off_by_one", "wrong_tokens"):
            return (forward * mask).sum() / count
        raise AssertionError(kind)

    return fn


@pytest.mark.filterwarnings("ignore:Converting a tensor with requires_grad")
@pytest.mark.parametrize("kind", ["reverse", "no_mask", "sum", "mean_over_all", "probabilities", "vocab_mean",
                                  "cross_entropy", "nan_when_empty", "item", "detached", "masked_after_mean",
                                  "in_place", "off_by_one", "wrong_tokens"])
def test_kl_mutants_fail(kind, capsys):
    with pytest.raises(CheckFailed):
        check_consistency_kl(_kl_mutant(kind))
    assert "✗" in capsys.readouterr().out


@pytest.mark.parametrize("kind, words", [("reverse", "reverse KL"), ("no_mask", "every position"),
                                         ("sum", "SUM"), ("mean_over_all", "not by L"),
                                         ("probabilities", "log-probabilities used as probabilities"),
                                         ("vocab_mean", "mean over the vocabulary"), ("cross_entropy", "cross-entropy"),
                                         ("off_by_one", "off by one"), ("wrong_tokens", "state != truth")])
def test_kl_hint_names_the_mistake(kind, words, capsys):
    with pytest.raises(CheckFailed):
        check_consistency_kl(_kl_mutant(kind))
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("✗ forward KL"))
    assert words in line, line


def test_checks_are_deterministic(capsys):
    check_consistency_kl(reference_consistency_kl)
    check_first_wrong_mask(reference_first_wrong_mask)
    first = capsys.readouterr().out
    check_consistency_kl(reference_consistency_kl)
    check_first_wrong_mask(reference_first_wrong_mask)
    assert capsys.readouterr().out == first


# ----------------------------------------------------------------------------- the lesson's figures (viz_cllm)


def _row(**changes):
    row = dict(prompt="Write a Python function that reverses a list.", tokens=60, ar_tokens=64, base_tpi=1.0,
               cllm_tpi=2.0, base_fast_forward=1, cllm_fast_forward=20, base_stationary=0, cllm_stationary=4,
               ar_s=6.4, base_jacobi_s=12.8, cllm_jacobi_s=6.0, drift=10, same_output=False)
    return {**row, **changes}


def test_iteration_cost_and_table():
    import matplotlib

    matplotlib.use("Agg")
    from specdec_core.viz import cllm as viz_cllm

    rows = [_row(), _row(ar_s=3.2, base_jacobi_s=6.4)]
    cost = viz_cllm.iteration_cost(rows)
    assert cost["iterations"] == 128 and cost["ar_tokens"] == 128
    assert cost["cost"] == pytest.approx(2.0)  # 0.1 s per iteration ÷ 0.05 s per AR token
    report = {"heldout": {"prompts": 2, "base_tokens_per_iteration": 1.0, "cllm_tokens_per_iteration": 2.0,
                          "base_jacobi_vs_ar": 0.5, "cllm_jacobi_vs_ar": 1.07, "fast_forwarded": 40, "stationary": 8,
                          "median_drift": 10, "same_output": 0},
              "rows": rows, "humaneval": {"problems": 5, "base_passed": 2, "cllm_passed": 1}}
    table = viz_cllm.eval_table(report)
    assert "1.00      2.00" in table and "HumanEval passed (first 5)" in table and "0 of 2" in table
    assert "(plain forwards)" in table and "(fast forwards)" in viz_cllm.eval_table(report | {"engine": "fast"})
    viz_cllm.before_after_bars(rows)
    viz_cllm.plt.close("all")


def test_curves_and_trajectory_figures(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    from specdec_core.viz import cllm as viz_cllm

    log = {"step": [0, 1, 2], "loss": [30.0, 29.0, 28.5], "consistency": [8.0, 7.5, 7.0], "ar": [2.2, 2.15, 2.1],
           "after_error_acc": [0.0, 0.05, 0.1], "ar_acc": [1.0, 1.0, 0.98], "seconds": 9.0}
    assert "3 steps in 9 s" in viz_cllm.training_curves(log)._suptitle.get_text()
    with pytest.raises(ValueError):
        viz_cllm.training_curves({**log, "step": []})
    truth = list(range(10, 16))
    base = [[9] * 6] + [truth[:k] + [9] * (6 - k) for k in range(1, 7)]
    cllm = [[9] * 6, [10, 11, 12, 5, 14, 15], truth]
    fig = viz_cllm.trajectory_before_after(base, truth, cllm, truth, label=str)
    assert [ax.get_title() for ax in fig.axes] == ["base model: 6 tokens in 6 iterations", "CLLM: 6 tokens in 2 iterations"]
    viz_cllm.plt.close("all")
    with pytest.raises(FileNotFoundError, match="python -m specdec_core.train cllm train"):
        viz_cllm.load_reference(tmp_path)
