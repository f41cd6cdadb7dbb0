"""Checkers for lesson 03's exercises: the accept / residual / bonus step, E(α, γ) and the best γ.

    check_verify_step(verify_step)          # verify_step(drafted [k], q [k, V], p [k+1, V], generator)
                                            #   -> (n_accepted, next_token)
    check_expected_tokens(expected_tokens)  # expected_tokens(alpha, gamma) -> float
    check_best_gamma(best_gamma)            # best_gamma(alpha, c, v, max_gamma) -> int

The verify check is statistical (fixed seeds, so its verdict is deterministic): the token a correct
step emits at the first position follows p exactly, whatever q is.
"""

from __future__ import annotations

import numpy as np
import torch

from .. import theory
from ..exactness import chi_square_pvalue
from .checks import Checks

TRIALS = 4000


def _toy_distributions() -> tuple[torch.Tensor, torch.Tensor]:
    """A target p and a draft q over 5 tokens that disagree a lot (TV = 0.45)."""
    p = torch.tensor([[0.50, 0.20, 0.15, 0.10, 0.05], [0.10, 0.60, 0.10, 0.10, 0.10], [0.2] * 5])
    q = torch.tensor([[0.10, 0.10, 0.20, 0.15, 0.45], [0.25, 0.25, 0.25, 0.15, 0.10]])
    return p, q


def _emitted_first_tokens(fn, p, q, seed: int) -> tuple[list[int], list[int]]:
    """Run the step TRIALS times with fresh draft tokens x ~ q; return (first emitted token, n accepted)."""
    gen = torch.Generator().manual_seed(seed)
    firsts, accepted = [], []
    for _ in range(TRIALS):
        drafted = torch.multinomial(q, 1, generator=gen).squeeze(-1)  # [k]
        n, nxt = fn(drafted, q, p, gen)
        firsts.append(int(drafted[0]) if n >= 1 else int(nxt))
        accepted.append(int(n))
    return firsts, accepted


def check_verify_step(fn) -> None:
    """Test a student's accept / residual / bonus step."""
    p, q = _toy_distributions()
    with Checks("verify_step") as c:
        # greedy: one-hot p and q; the draft's 2 guesses are right, wrong
        one_hot = lambda ids, v=5: torch.nn.functional.one_hot(torch.tensor(ids), v).float()  # noqa: E731
        n, nxt = c.call(fn, torch.tensor([3, 1]), one_hot([3, 1]), one_hot([3, 4, 0]), torch.Generator().manual_seed(0))
        c.expect((int(n), int(nxt)) == (1, 4), "greedy: keeps the matching guess, then emits the target's token",
                 "accept while u < p(x)/q(x); at the first rejection draw from max(0, p - q), normalised")
        n, nxt = c.call(fn, torch.tensor([3, 1]), one_hot([3, 1]), one_hot([3, 1, 2]), torch.Generator().manual_seed(0))
        c.expect((int(n), int(nxt)) == (2, 2), "greedy: all guesses right → the bonus token from p[k]",
                 "when all k guesses are accepted, draw the bonus token from the last row p[k]")
        firsts, accepted = _emitted_first_tokens(lambda *a: c.call(fn, *a), p, q, seed=3)
        counts = np.bincount(firsts, minlength=5)
        c.expect(chi_square_pvalue(counts, p[0].numpy()) > 1e-3,
                 "sampling: the first emitted token follows the target's p exactly",
                 "a rejected guess must be replaced by a draw from the residual max(0, p - q), not from p or q")
        beta = float(torch.minimum(p[0], q[0]).sum())
        rate = float(np.mean([a >= 1 for a in accepted]))
        c.expect(abs(rate - beta) < 4 * (beta * (1 - beta) / TRIALS) ** 0.5,
                 f"sampling: the first guess is accepted at rate Σ min(p, q) = {beta:.2f}",
                 "accept guess x with probability min(1, p(x) / q(x)) — one uniform number per guess")


def check_expected_tokens(fn) -> None:
    """Test E(α, γ) = (1 − α^(γ+1)) / (1 − α) on a grid, including α = 0 and α = 1."""
    with Checks("expected_tokens") as c:
        grid = [(a, g) for a in (0.0, 0.3, 0.55, 0.9) for g in (1, 4, 7)]
        got = [float(c.call(fn, a, g)) for a, g in grid]
        ref = [theory.expected_tokens(a, g) for a, g in grid]
        c.expect(np.allclose(got, ref, rtol=1e-6), "E(α, γ) matches Leviathan's Eq. 1 for α < 1",
                 "E = 1 + α + α² + … + α^γ = (1 − α^(γ+1)) / (1 − α): the accepted guesses plus one token")
        one = float(c.call(fn, 1.0, 4))
        c.expect(abs(one - 5.0) < 1e-9, "E(1, γ) = γ + 1 (no division by zero)",
                 "at α = 1 every guess is accepted: handle it before dividing by 1 − α")


def check_best_gamma(fn) -> None:
    """Test the γ that maximises S = E(α, γ) / (γc + v)."""
    with Checks("best_gamma") as c:
        cases = [(0.8, 0.05, 1.0), (0.55, 0.17, 1.6), (0.9, 0.02, 1.0), (0.3, 0.3, 1.0)]
        got = [int(c.call(fn, a, cc, v, 16)) for a, cc, v in cases]
        ref = [theory.best_gamma(a, cc, v, 16) for a, cc, v in cases]
        c.expect(got == ref, f"best γ for {len(cases)} (α, c, v) settings: {ref}",
                 "try every γ in 1..max_gamma and keep the one with the largest E(α, γ) / (γc + v)")
