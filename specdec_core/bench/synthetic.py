"""Synthetic acceptance: a drafter whose acceptance rate is set, so a machine without a trained draft can
still measure what speculation costs (c, v and the loop's overhead) at a known τ.

    reference   the target's own greedy continuation of the prompt (an untimed AR run on the same engine and
                precision: :func:`reference_tokens`)
    a guess     the reference's next token with probability α, another token otherwise (seeded)
    compute     a real drafter of the draft's shape (a ``ModelDrafter``) proposes too and its guesses are thrown
                away: its forwards are paid, so c is the real draft's

Greedy verification accepts guesses up to the first wrong one, so the accepted length of a step of γ guesses is
min(G, γ) with G geometric (P(G ≥ i) = αⁱ), and the tokens per target call are exactly E(α, γ) =
(1 − α^(γ+1)) / (1 − α) in expectation (``theory.expected_tokens``). The run's measured α (``stats.alpha``) is
reported beside the asked one.
"""

from __future__ import annotations

import random

import torch
from transformers import PreTrainedModel

from ..ar import generate
from ..drafters import Drafter
from ..sampling import Warp


def reference_tokens(target: PreTrainedModel, input_ids: torch.Tensor, length: int) -> list[int]:
    """The target's greedy continuation of ``input_ids`` [1, T]: ``length`` tokens (run it untimed)."""
    return generate(target, input_ids, length).new_tokens


class OracleDrafter(Drafter):
    """Proposes the reference's tokens, each right with probability ``alpha`` (module docstring); greedy runs
    only. ``prompt_len``: the prompt's length, so a context's tail says where in the reference it is."""

    def __init__(self, reference: list[int], prompt_len: int, alpha: float, compute: Drafter | None = None,
                 vocab_size: int | None = None, seed: int = 0) -> None:
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f"alpha must be in [0, 1], got {alpha}")
        self.reference, self.prompt_len, self.alpha, self.compute = reference, prompt_len, alpha, compute
        self.vocab_size = vocab_size or max(reference, default=0) + 2
        self.seed = seed

    def begin(self, warp: Warp, generator: torch.Generator | None) -> None:
        if not warp.greedy:
            raise ValueError("the oracle drafter proposes tokens without a distribution: run it at temperature 0")
        super().begin(warp, generator)
        self.rng = random.Random(self.seed)
        if self.compute is not None:
            self.compute.begin(warp, generator)

    def propose(self, context: torch.Tensor, k: int) -> tuple[torch.Tensor, None]:
        if self.compute is not None:  # the real draft's work, its guesses discarded
            self.compute.propose(context, k)
            self.calls = self.compute.calls
        done = context.shape[1] - self.prompt_len
        truth = self.reference[done : done + k]
        guesses = [t if self.rng.random() < self.alpha else (t + 1 + self.rng.randrange(self.vocab_size - 1))
                   % self.vocab_size for t in truth]
        return torch.tensor(guesses, dtype=torch.long, device=context.device), None

    def accepted(self, n_accepted: int, n_drafted: int) -> None:
        if self.compute is not None:
            self.compute.accepted(n_accepted, n_drafted)
