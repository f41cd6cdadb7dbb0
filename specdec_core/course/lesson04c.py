"""Checkers for lesson 04c's exercise: acceptance per draft position from a run's steps, and the speed-up it
predicts, on plain lists.

    check_alpha_per_position(alpha_per_position)
        # alpha_per_position(drafted, accepted) -> [α_1, …, α_G]   (G = max(drafted); NaN where none examined)
        #   drafted[s], accepted[s]: guesses drafted and accepted at step s
    check_predicted_speedup(predicted_speedup)
        # predicted_speedup(alphas, c, v, overhead) -> S = τ / (γ·c + v + o), τ = 1 + Σ_k α_1 ⋯ α_k, γ = len(alphas)

Both are compared with the library (``SpecStats.alpha_per_position``, ``theory.predicted_speedup``) on hand-made
and seeded random cases, the library blocked while the answer runs (an answer that calls it scores nothing); a
wrong answer that equals a common mistake gets that mistake's hint.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch

from .. import theory
from ..records import SpecStats, SpecStep
from .checks import Checks
from .grading import blocked

RANDOM_CASES = 25
LIBRARY = ("specdec_core.theory.expected_tokens", "specdec_core.theory.speedup", "specdec_core.theory.predicted_speedup",
           "specdec_core.costmodel.predict")


@contextmanager
def _no_library() -> Iterator[None]:
    """The library's functions blocked, and ``SpecStats.alpha_per_position`` (a property) raising, inside."""
    saved = SpecStats.alpha_per_position

    def refuse(self):
        raise RuntimeError("SpecStats.alpha_per_position is blocked while your answer runs: write it yourself")

    SpecStats.alpha_per_position = property(refuse)
    try:
        with blocked(*LIBRARY):
            yield
    finally:
        SpecStats.alpha_per_position = saved


def reference_alphas(drafted: list[int], accepted: list[int]) -> list[float]:
    """The library's α per position for steps of ``drafted`` guesses with ``accepted`` of them accepted."""
    steps = [SpecStep([0] * d, a, 0, "resampled" if a < d else "bonus", d) for d, a in zip(drafted, accepted)]
    return SpecStats(steps=steps).alpha_per_position


def reference_speedup(alphas: list[float], c: float, v: float, overhead: float) -> float:
    """τ = 1 + α_1 + α_1 α_2 + … (a guess counts only if every one before it was accepted), then theory's S."""
    tau = 1 + sum(math.prod(alphas[: k + 1]) for k in range(len(alphas)))
    return theory.predicted_speedup(tau, len(alphas) * c, v, overhead)


def _same(got, want: list[float]) -> bool:
    try:
        got = [float(x) for x in got]
    except (TypeError, ValueError):
        return False
    return len(got) == len(want) and all((math.isnan(a) and math.isnan(b)) or abs(a - b) < 1e-9
                                         for a, b in zip(got, want))


def random_steps(gen: torch.Generator, n: int, gamma: int) -> tuple[list[int], list[int]]:
    """n steps: each drafted 1..γ guesses (a drafter may run short) and accepted 0..drafted of them."""
    drafted = torch.randint(1, gamma + 1, (n,), generator=gen).tolist()
    return drafted, [int(torch.randint(0, d + 1, (1,), generator=gen)) for d in drafted]


def check_alpha_per_position(fn: Callable) -> None:
    """Test ``fn(drafted, accepted) -> list of α per position`` against ``SpecStats.alpha_per_position``."""
    drafted, accepted = [3, 3, 3, 3], [0, 3, 1, 2]
    want = reference_alphas(drafted, accepted)

    def run(d, a):
        with _no_library():
            return c.call(fn, d, a)

    with Checks("alpha_per_position") as c:
        got = run(drafted, accepted)
        c.expect(_same(got, want), "four steps of γ = 3: α per position is 3/4, 2/3, 1/2",
                 "divide by the steps that EXAMINED position i (those that accepted every guess before it), not by "
                 "all the steps" if _same(got, [3 / 4, 2 / 4, 1 / 4]) else
                 "the first rejected guess was examined too: a step that accepted a guesses examined a + 1 of them"
                 if _same(got, [1.0, 1.0, 1.0]) else
                 "position i (from 0) is examined when accepted >= i, accepted when accepted > i")
        got = run([2, 2], [2, 2])
        c.expect(_same(got, [1.0, 1.0]), "all accepted: α = 1 at every position",
                 "a step that accepted all its guesses examined each of them once")
        got = run([1, 4], [1, 1])
        c.expect(_same(got, reference_alphas([1, 4], [1, 1])),
                 "a step with fewer guesses (the drafter ran short) examines only those it drafted",
                 "position i of a step exists only when i < drafted[s]; a position nobody examined is NaN")
        got = run([3, 3], [0, 0])
        c.expect(_same(got, [0.0, math.nan, math.nan]), "nothing examined past a rejection: NaN there, not 0",
                 "return float('nan') where no step examined the position (0 would claim it was tried and failed)")
        gen = torch.Generator().manual_seed(43)
        ok = True
        for _ in range(RANDOM_CASES):
            d, a = random_steps(gen, int(torch.randint(1, 12, (1,), generator=gen)), int(torch.randint(1, 6, (1,), generator=gen)))
            ok &= _same(run(d, a), reference_alphas(d, a))
        c.expect(ok, f"matches the library on {RANDOM_CASES} random runs", "one list per position, of length max(drafted)")


def check_predicted_speedup(fn: Callable) -> None:
    """Test ``fn(alphas, c, v, overhead) -> S`` against τ = 1 + Σ_k Π_{i≤k} α_i and theory's S."""

    def run(*args):
        with _no_library():
            out = c.call(fn, *args)
        try:
            return float(out)
        except (TypeError, ValueError):
            return math.nan

    with Checks("predicted_speedup") as c:
        alphas, cost, v, o = [0.9, 0.5, 0.2], 0.1, 1.2, 0.1
        want = reference_speedup(alphas, cost, v, o)
        got = run(alphas, cost, v, o)
        mean = sum(alphas) / len(alphas)
        geometric = theory.expected_tokens(mean, len(alphas)) / (len(alphas) * cost + v + o)
        c.expect(math.isclose(got, want, rel_tol=1e-9), "falling α per position: τ = 1 + α₁ + α₁α₂ + α₁α₂α₃",
                 "that is Leviathan's E with the MEAN α: with α per position, guess k counts with α₁ ⋯ α_k"
                 if math.isclose(got, geometric, rel_tol=1e-6) else
                 "every step also adds the target's own token: τ starts at 1"
                 if math.isclose(got, (want * (len(alphas) * cost + v + o) - 1) / (len(alphas) * cost + v + o), rel_tol=1e-6)
                 else "the step drafts γ = len(alphas) guesses at c each: it costs γ·c + v + o target steps"
                 if math.isclose(got, want * (len(alphas) * cost + v + o) / (cost + v + o), rel_tol=1e-6)
                 else "τ ÷ (γ·c + v + o), τ = 1 + Σ_k α₁ ⋯ α_k")
        got = run([0.0, 0.7], 0.05, 1.0, 0.0)
        c.expect(math.isclose(got, 1 / 1.1, rel_tol=1e-9), "α₁ = 0: nothing past the first guess ever counts",
                 "a guess after a rejected one is never accepted: multiply, do not add, the α's")
        got = run([], 0.1, 1.0, 0.0)
        c.expect(math.isclose(got, 1.0, rel_tol=1e-9), "no guesses: plain decoding, S = 1 / v", "γ = 0: τ = 1, cost v + o")
        gen = torch.Generator().manual_seed(44)
        ok = True
        for _ in range(RANDOM_CASES):
            k = int(torch.randint(1, 8, (1,), generator=gen))
            a = torch.rand(k, generator=gen).tolist()
            cost, v, o = (float(x) for x in torch.rand(3, generator=gen) * torch.tensor([0.3, 2.0, 0.3]))
            ok &= math.isclose(run(a, cost, v + 1, o), reference_speedup(a, cost, v + 1, o), rel_tol=1e-9)
        c.expect(ok, f"matches the formula on {RANDOM_CASES} random cases", "τ ÷ (len(alphas)·c + v + overhead)")


__all__ = ["check_alpha_per_position", "check_predicted_speedup", "reference_alphas", "reference_speedup"]
