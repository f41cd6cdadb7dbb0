"""Leviathan et al.'s back-of-the-envelope model of speculative decoding (its inputs are measured by
``costmodel``: c and v(n) of this machine).

    α  acceptance rate: probability that the target accepts a draft token (E[Σ min(p, q)])
    γ  draft tokens per step
    c  cost ratio: time of one draft step ÷ time of one target decode step
    v  verify cost: time of one target forward over γ+1 tokens ÷ one target decode step
       (≈ 1 on a GPU, where a forward is memory-bound; > 1 on a CPU, where more rows cost more)

    E(α, γ) = (1 − α^(γ+1)) / (1 − α)       expected tokens per target call     (Eq. 1)
    S(α, γ, c, v) = E(α, γ) / (γ·c + v)     wall-time speed-up over plain decoding (Thm 3.8 with v = 1)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from transformers import PreTrainedModel



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


def verify_cost(v: VerifyCost, gamma: int) -> float:
    """The verify cost of γ guesses: ``v`` itself, or ``v(γ + 1)`` (e.g. ``costmodel.CostModel.v``)."""
    return v(gamma + 1) if callable(v) else v


def speedup(alpha: float, gamma: int, c: float, v: VerifyCost = 1.0) -> float:
    """S = E(α, γ) / (γc + v(γ + 1)): one step costs γ draft steps plus one verify over γ + 1 tokens,
    and emits E tokens, where plain decoding emits one token per unit of time. ``v``: a number, or the
    machine's v(n) (docs/reference.md#speedup)."""
    return expected_tokens(alpha, gamma) / (gamma * c + verify_cost(v, gamma))


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



@dataclass
class Point:
    """One speculative run next to the AR baseline on the same prompt (lesson 03's widget)."""

    gamma: int
    temperature: float
    alpha: float
    tokens_per_call: float
    measured_speedup: float  # AR wall time ÷ speculative wall time, same prompt and length
    predicted_speedup: float  # E(α, γ) / (γc + v) with the measured α, c, v


def speedup_point(
    target: PreTrainedModel,
    drafter,
    input_ids: torch.Tensor,
    gamma: int,
    temperature: float,
    c: float,
    v: VerifyCost,
    ar_seconds_per_token: float,
    max_new_tokens: int = 32,
    seed: int = 0,
) -> Point:
    """Run speculative decoding once and put the measurement next to Leviathan's prediction from
    the draft's cost ``c`` and the verify cost ``v`` (a number or the machine's v(n), e.g.
    ``costmodel.CostModel.v``)."""
    from .speculative import speculative_generate

    gen = torch.Generator().manual_seed(seed)
    out = speculative_generate(target, drafter, input_ids, max_new_tokens, gamma=gamma, temperature=temperature,
                               generator=gen)
    alpha = out.stats["alpha"]
    measured = ar_seconds_per_token * len(out) / out.stats["wall_time"] if len(out) else float("nan")
    return Point(gamma, temperature, alpha, out.stats["tokens_per_call"], measured,
                 speedup(alpha_for_theory(alpha), gamma, c, v))
