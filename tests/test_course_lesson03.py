"""Lesson 03's checkers accept the reference and reject wrong answers."""

import pytest

from specdec_core import theory
from specdec_core.accept import verify
from specdec_core.course.checks import CheckFailed
from specdec_core.course.lesson03 import check_best_gamma, check_expected_tokens, check_verify_step
from specdec_core.sampling import sample, uniform


def reference(drafted, q, p, generator):
    n, nxt, _ = verify(drafted, q, p, generator)
    return n, nxt


def resample_from_p(drafted, q, p, generator):
    n, nxt, kind = verify(drafted, q, p, generator)
    return (n, int(sample(p[n], generator))) if kind == "resampled" else (n, nxt)


def always_accept(drafted, q, p, generator):
    return drafted.numel(), int(sample(p[-1], generator))


def accept_if_p_above_half(drafted, q, p, generator):  # a plausible-looking but wrong rule
    for i, x in enumerate(drafted.tolist()):
        if p[i, x] < 0.5 * uniform(generator) + 0.25:
            residual = (p[i] - q[i]).clamp(min=0)
            return i, int(sample(residual / residual.sum(), generator))
    return drafted.numel(), int(sample(p[-1], generator))


def test_verify_reference_passes(capsys):
    check_verify_step(reference)
    assert "✗" not in capsys.readouterr().out


@pytest.mark.parametrize("mutant", [resample_from_p, always_accept, accept_if_p_above_half])
def test_verify_mutants_fail(mutant, capsys):
    with pytest.raises(CheckFailed):
        check_verify_step(mutant)
    assert "✗" in capsys.readouterr().out


def test_verify_stub_fails(capsys):
    def stub(*args):
        raise NotImplementedError

    with pytest.raises(CheckFailed):
        check_verify_step(stub)
    assert "replace `raise NotImplementedError`" in capsys.readouterr().out


def test_expected_tokens_checker():
    check_expected_tokens(theory.expected_tokens)
    with pytest.raises(CheckFailed):
        check_expected_tokens(lambda a, g: (1 - a**g) / (1 - a) if a < 1 else g)  # off by one
    with pytest.raises(CheckFailed):
        check_expected_tokens(lambda a, g: (1 - a ** (g + 1)) / (1 - a))  # divides by zero at α = 1


def test_best_gamma_checker():
    check_best_gamma(theory.best_gamma)
    with pytest.raises(CheckFailed):
        check_best_gamma(lambda a, c, v, m: max(range(1, m + 1), key=lambda g: theory.expected_tokens(a, g) / (g * c + 1)))
    with pytest.raises(CheckFailed):
        check_best_gamma(lambda a, c, v, m: m)
