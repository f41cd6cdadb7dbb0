"""Synthetic acceptance (specdec_core.bench.synthetic): with the oracle drafter a greedy speculative run emits the
target's own tokens, makes one target call per step, and its tokens per call match E(α, γ) within the
statistical error of the run (fixed seeds); a drafter that is right with probability α² instead is caught."""

from __future__ import annotations

import math
import statistics

import pytest
import torch

from specdec_core.bench.synthetic import OracleDrafter, reference_tokens
from specdec_core.drafters import ModelDrafter
from specdec_core.speculative import speculative_generate
from specdec_core.theory import expected_tokens
from specdec_core.toy import tiny_llama

PROMPT = torch.tensor([[2, 5, 9, 4]])
N, GAMMA = 400, 3


def _run(alpha: float, drafter_alpha: float | None = None, seed: int = 0):
    target = tiny_llama(64, hidden_size=32, seed=11, max_position_embeddings=1024)
    ref = reference_tokens(target, PROMPT, N + GAMMA + 1)
    oracle = OracleDrafter(ref, PROMPT.shape[1], alpha if drafter_alpha is None else drafter_alpha,
                           compute=ModelDrafter(tiny_llama(64, seed=1, max_position_embeddings=1024)),
                           vocab_size=64, seed=seed)
    return ref, speculative_generate(target, oracle, PROMPT, N, gamma=GAMMA)


def _tolerance(alpha: float, steps: int) -> float:
    """3 standard errors of the mean accepted length + 1 over ``steps`` steps."""
    p = [alpha**i * (1 - alpha) for i in range(GAMMA)] + [alpha**GAMMA]  # P(accepted = i), i = 0..γ
    mean = sum((i + 1) * q for i, q in enumerate(p))
    var = sum((i + 1 - mean) ** 2 * q for i, q in enumerate(p))
    return 3 * math.sqrt(var / steps)


@pytest.mark.parametrize("alpha", [0.3, 0.6, 0.9])
def test_tokens_per_call_follow_theory_and_the_output_is_the_targets(alpha: float) -> None:
    ref, out = _run(alpha)
    steps = out.stats.target_calls
    assert out.new_tokens == ref[:N]
    assert steps == len(out.stats.steps)
    accepted = statistics.mean(min(s.accepted + 1, GAMMA + 1) for s in out.stats.steps[:-1])  # the last is cut
    assert abs(accepted - expected_tokens(alpha, GAMMA)) < _tolerance(alpha, steps - 1)
    assert abs(out.stats.alpha - alpha) < 0.1  # the measured α, beside the asked one


def test_a_drafter_right_with_probability_alpha_squared_is_caught() -> None:
    _, out = _run(0.6, drafter_alpha=0.36)
    accepted = statistics.mean(s.accepted + 1 for s in out.stats.steps[:-1])
    assert abs(accepted - expected_tokens(0.6, GAMMA)) > _tolerance(0.6, out.stats.target_calls - 1)


def test_the_oracle_refuses_sampling_and_a_bad_alpha() -> None:
    with pytest.raises(ValueError, match="alpha"):
        OracleDrafter([1, 2], 1, 1.5)
    target = tiny_llama(64, seed=11)
    with pytest.raises(ValueError, match="temperature 0"):
        speculative_generate(target, OracleDrafter([3, 4, 5], 4, 0.5), PROMPT, 2, temperature=1.0)
