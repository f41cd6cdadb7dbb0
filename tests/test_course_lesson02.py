"""Lesson 02's checker passes the reference answer and rejects wrong ones."""

from __future__ import annotations

import pytest
import torch

from specdec_core.course.checks import CheckFailed
from specdec_core.course.lesson02 import check_average_log_likelihood
from specdec_core.naive import average_log_likelihood as reference_average_log_likelihood


def test_reference_passes(capsys):
    check_average_log_likelihood(reference_average_log_likelihood)
    assert "All 5 checks of average_log_likelihood passed." in capsys.readouterr().out


def test_tutorial_loop_passes():
    """The tutorial's own Python loop (with a start argument added) is a correct answer."""

    @torch.no_grad()
    def loop(model, ids, start=1):
        log_probs = torch.log_softmax(model(ids).logits, dim=-1)
        total = 0.0
        for i in range(start - 1, ids.size(1) - 1):
            total += log_probs[0, i, ids[0, i + 1]].item()
        return total / (ids.size(1) - start)

    check_average_log_likelihood(loop)


def _scores(model, ids):
    with torch.no_grad():
        return model(ids).logits[0, :-1].log_softmax(-1), ids[0, 1:]


def off_by_one(model, ids, start=1):
    lp, _ = _scores(model, ids)
    return lp.gather(-1, ids[0, :-1, None]).mean().item()  # scores token t with row t


def probabilities(model, ids, start=1):
    lp, nxt = _scores(model, ids)
    return lp.exp().gather(-1, nxt[:, None])[start - 1 :].mean().item()


def summed(model, ids, start=1):
    lp, nxt = _scores(model, ids)
    return lp.gather(-1, nxt[:, None])[start - 1 :].sum().item()


def divides_by_t(model, ids, start=1):
    lp, nxt = _scores(model, ids)
    return lp.gather(-1, nxt[:, None])[start - 1 :].sum().item() / (ids.shape[1] - start + 1)


def ignores_start(model, ids, start=1):
    lp, nxt = _scores(model, ids)
    return lp.gather(-1, nxt[:, None]).mean().item()


def raw_logits(model, ids, start=1):
    with torch.no_grad():
        logits = model(ids).logits[0, :-1]
    return logits.gather(-1, ids[0, 1:, None])[start - 1 :].mean().item()


@pytest.mark.parametrize("mutant", [off_by_one, probabilities, summed, divides_by_t, ignores_start, raw_logits])
def test_mutants_fail(mutant, capsys):
    with pytest.raises(CheckFailed):
        check_average_log_likelihood(mutant)
    assert "✗" in capsys.readouterr().out
