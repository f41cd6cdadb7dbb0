"""Lesson 07's checkers pass the reference answers and reject wrong ones."""

from __future__ import annotations

import pytest
import torch

from specdec_core.course.checks import CheckFailed
from specdec_core.course.lesson07 import (
    check_converged_count,
    check_jacobi_block,
    check_jacobi_iteration,
    reference_jacobi_block,
)
from specdec_core.jacobi import converged_count, jacobi_iteration


def test_references_pass(capsys):
    check_jacobi_iteration(jacobi_iteration)
    check_converged_count(converged_count)
    check_jacobi_block(reference_jacobi_block)
    out = capsys.readouterr().out
    assert "✗" not in out
    for name, n in [("jacobi_iteration", 5), ("converged_count", 6), ("jacobi_block", 5)]:
        assert f"All {n} checks of {name} passed." in out


def test_tensor_answers_pass():
    """Returning a tensor instead of a list is fine."""

    def as_tensor(model, prefix, state):
        ids = torch.cat([prefix, torch.tensor([state[:-1]])], dim=1)
        return model(input_ids=ids).logits[0, -len(state) :].argmax(-1)

    check_jacobi_iteration(as_tensor)


def _iteration_mutant(kind):
    def fn(model, prefix, state):
        if kind == "identity":
            return list(state)
        if kind == "shifted":  # feeds the whole state: every prediction one position late
            ids = torch.cat([prefix, torch.tensor([state])], dim=1)
            return model(input_ids=ids).logits[0, -len(state) :].argmax(-1).tolist()
        if kind == "prefix_only":  # every position predicted from the prefix alone
            return [int(model(input_ids=prefix).logits[0, -1].argmax())] * len(state)
        if kind == "in_place":
            state[:] = jacobi_iteration(model, prefix, state)
            return state
        if kind == "crash":
            raise RuntimeError("oops")
        raise AssertionError(kind)

    return fn


@pytest.mark.parametrize("kind", ["identity", "shifted", "prefix_only", "in_place", "crash"])
def test_iteration_mutants_fail(kind, capsys):
    with pytest.raises(CheckFailed):
        check_jacobi_iteration(_iteration_mutant(kind))
    assert "✗" in capsys.readouterr().out


def _count_mutant(kind):
    def fn(old, new):
        if kind == "all_matches":  # counts every unchanged position, not only the leading ones
            return min(sum(a == b for a, b in zip(old, new)) + 1, len(new))
        m = 0
        while m < len(new) and old[m] == new[m]:
            m += 1
        if kind == "no_plus_one":
            return m
        if kind == "no_cap":
            return m + 1
        raise AssertionError(kind)

    return fn


@pytest.mark.parametrize("kind", ["all_matches", "no_plus_one", "no_cap"])
def test_count_mutants_fail(kind):
    with pytest.raises(CheckFailed):
        check_converged_count(_count_mutant(kind))


def _block_mutant(kind):
    def fn(model, prefix, guess):
        states = [list(guess)]
        for _ in range(len(guess) + 1):
            new = jacobi_iteration(model, prefix, states[-1])
            old = states[-1]
            states.append(new)
            if kind == "one_iteration":
                return states
            if kind == "classic_stop" and new == old:  # waits for a repeated state: one iteration too many
                return states
            if kind == "no_guess":
                if converged_count(old, new) == len(new):
                    return states[1:]
        return states

    return fn


@pytest.mark.parametrize("kind", ["one_iteration", "classic_stop", "no_guess"])
def test_block_mutants_fail(kind):
    with pytest.raises(CheckFailed):
        check_jacobi_block(_block_mutant(kind))
