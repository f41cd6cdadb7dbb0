"""Leviathan et al.'s back-of-the-envelope model of speculative decoding (its inputs are measured by
``costmodel``: c and v(n) of this machine).

    α  acceptance rate: probability that the target accepts a draft token (E[Σ min(p, q)])
    γ  draft tokens per step
    c  cost ratio: time of one draft step ÷ time of one target decode step
    v  verify cost: time of one target forward over γ+1 tokens ÷ one target decode step
       (≈ 1 on a GPU, where a forward is memory-bound; > 1 on a CPU, where more rows cost more)

    E(α, γ) = (1 − α^(γ+1)) / (1 − α)       expected tokens per target call     (Eq. 1)
    S = τ / (d·c + v + o)                   wall-time speed-up over plain decoding: ONE function,
                                            :func:`predicted_speedup`, for every prediction

τ tokens per target call, d guesses per step at c each, o the loop's overhead (all in target steps).
Leviathan's S(α, γ, c, v) = E(α, γ) / (γ·c + v) (Thm 3.8 with v = 1) is the case τ = E, d = γ, o = 0.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol


def alpha_for_theory(alpha: float) -> float:
    """A measured α as the formulas take it: NaN (no draft token was examined, so nothing was
    learned) counts as 0, and rounding outside [0, 1] is clipped. The one rule for a NaN α."""
    return 0.0 if math.isnan(alpha) else min(max(alpha, 0.0), 1.0)


def expected_tokens(alpha: float, gamma: int) -> float:
    """E(α, γ): mean tokens one speculative step emits (accepted guesses + 1). In [1, γ+1]."""
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    if gamma < 0:
        raise ValueError(f"gamma must be >= 0, got {gamma}")
    if alpha == 1.0:
        return float(gamma + 1)
    return (1.0 - alpha ** (gamma + 1)) / (1.0 - alpha)  # geometric series 1 + α + … + α^γ


VerifyCost = float | Callable[[int], float]  # v, or v(n) for a forward over n = γ + 1 tokens


def predicted_speedup(tokens_per_call: float, draft: float, v: float, overhead: float = 0.0) -> float:
    """THE speed-up of the course: S = τ / (d·c + v + o). A step emits τ tokens and costs its drafting
    ``draft`` (= d·c), its verify ``v`` and the loop's own ``overhead``, all in target decode steps; plain
    decoding emits 1 per step. Every prediction in the package (theory, costmodel, bench, viz) calls it."""
    cost = draft + v + overhead
    if cost <= 0:
        raise ValueError(f"a step must cost something: draft {draft} + v {v} + overhead {overhead} <= 0")
    return tokens_per_call / cost


def speedup(alpha: float, gamma: int, c: float, v: VerifyCost = 1.0) -> float:
    """Leviathan's S(α, γ, c, v): :func:`predicted_speedup` with τ = E(α, γ), γ guesses at c each and one
    verify over γ + 1 tokens. ``v``: a number, or the machine's v(n) (docs/reference.md#speedup)."""
    return predicted_speedup(expected_tokens(alpha, gamma), gamma * c, v(gamma + 1) if callable(v) else v)


def best_gamma(alpha: float, c: float, v: VerifyCost = 1.0, max_gamma: int = 16) -> int:
    """The γ in 1..max_gamma that maximises S (Leviathan §3.5 does the same numerically)."""
    return max(range(1, max_gamma + 1), key=lambda g: speedup(alpha, g, c, v))


def break_even_alpha(c: float, v: VerifyCost, max_gamma: int = 8, tol: float = 1e-6) -> float:
    """The smallest α at which the best γ in 1..max_gamma gives S = 1 (no gain, no loss), by bisection
    (S grows with α). ``inf`` when even α = 1 does not pay: (γ + 1) ≤ γc + v for every γ."""

    def best_s(a: float) -> float:
        return max(speedup(a, g, c, v) for g in range(1, max_gamma + 1))

    if best_s(1.0) < 1.0:
        return math.inf
    if best_s(0.0) >= 1.0:
        return 0.0
    lo, hi = 0.0, 1.0
    while hi - lo > tol:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if best_s(mid) < 1.0 else (lo, mid)
    return hi


# ---- γ chosen for the machine, step by step ---------------------------------------------------


class Chooser(Protocol):
    """How a method picks each step's shape from what its run measured so far — γ (:class:`AutoGamma`), a
    tree's topology (``tree_shapes.ShapeChooser``), lookahead's (W, N, G) (``lookahead_shapes.ShapeSearch``).
    The loop asks before each step and tells it the step's record after:

        shape = chooser.choose(left)      # left: tokens the budget still allows
        ... the step ...
        chooser.update(step)              # the step's record (records.SpecStep, TreeStep, LookaheadStep)
    """

    def choose(self, left: int) -> Any: ...

    def update(self, step: Any) -> None: ...


def asks_auto(knob: str, value: Any, costs: Any, otherwise: str) -> bool:
    """Whether ``value`` asks for the adaptive chooser ("auto"), which needs the machine's cost model
    ``costs``; any other string is an error saying what ``knob`` takes (``otherwise``, besides "auto")."""
    if not isinstance(value, str):
        return False
    if value != "auto":
        raise ValueError(f'{knob} must be "auto" or {otherwise}, got {value!r}')
    if costs is None:
        raise ValueError(f'{knob}="auto" needs the machine\'s cost model: pass '
                         'costs=costmodel.load_or_measure(target, "my target") (measured once, then cached)')
    return True


@dataclass
class FixedGamma:
    """The same γ every step: a :class:`Chooser` that learns nothing."""

    max_gamma: int

    def choose(self, left: int) -> int:
        return self.max_gamma

    def update(self, step: Any) -> None:
        pass


class AutoGamma:
    """γ chosen before each step (a :class:`Chooser`): the γ ≤ ``max_gamma`` that maximises S for the machine's
    verify cost ``v`` (a number or v(n)) and the α and c measured so far in the same generation, from a prior
    worth ``prior`` guesses (α₀ = 0.5, c₀ = 0.1): α is accepted ÷ examined guesses, c the drafter's seconds per
    guess ÷ one target step ``step_s``. (transformers' assisted generation adapts ``num_assistant_tokens`` by a
    rule of thumb: +2 after a step that kept every guess, −1 otherwise.) Choosing γ from the past never changes
    the output law: each step's accept/residual rule is exact for whatever γ it was given."""

    def __init__(self, v: VerifyCost, step_s: float, max_gamma: int = 8, alpha0: float = 0.5, c0: float = 0.1,
                 prior: int = 4) -> None:
        if max_gamma < 1:
            raise ValueError(f"max_gamma must be >= 1, got {max_gamma}")
        self.v, self.step_s, self.max_gamma = v, step_s, max_gamma
        self.examined, self.accepted = float(prior), alpha0 * prior  # the prior counts as `prior` guesses
        self.drafted, self.draft_s = float(prior), c0 * step_s * prior

    @property
    def alpha(self) -> float:
        return self.accepted / self.examined

    @property
    def c(self) -> float:
        return self.draft_s / self.drafted / self.step_s

    def choose(self, left: int) -> int:
        """The γ for the next step (at most ``left``, the tokens the budget still allows)."""
        return min(best_gamma(self.alpha, self.c, self.v, self.max_gamma), max(left, 1))

    def update(self, step: Any) -> None:
        """After a step (a ``records.SpecStep``): the guesses the accept test looked at and kept, the guesses
        drafted and their time."""
        self.examined += min(step.accepted + 1, len(step.drafted))
        self.accepted += step.accepted
        self.drafted += len(step.drafted)
        self.draft_s += step.draft_s
