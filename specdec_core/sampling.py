"""From logits to a token: temperature, top-k, top-p, and a reproducible draw.

Every decoding method in the course turns logits into probabilities with the same function, so a
draft and a target are always warped the same way (speculative sampling needs that: it compares
the two *warped* distributions). Temperature 0 means greedy: a one-hot vector on the argmax.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


def logits_to_probs(
    logits: torch.Tensor,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
) -> torch.Tensor:
    """Warp logits into a probability distribution over the vocabulary.

    logits: [..., V] (any leading shape). Returns float32 probabilities [..., V] summing to 1.
    temperature == 0 → one-hot on the argmax (greedy; ties go to the lowest id, like ``argmax``).
    top_k → keep the k largest logits (all tokens tied with the k-th are kept).
    top_p → keep the smallest set of most likely tokens whose mass reaches top_p (at least one).
    """
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0 (0 means greedy), got {temperature}")
    if top_k is not None and top_k < 1:
        raise ValueError(f"top_k must be >= 1 or None, got {top_k}")
    if top_p is not None and not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p must be in (0, 1] or None, got {top_p}")
    logits = logits.float()
    if temperature == 0:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).float()

    logits = logits / temperature
    if top_k is not None and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        sorted_probs = sorted_logits.softmax(-1)
        # Mass strictly before each token: a token is kept while that mass is still < top_p,
        # so the first token is always kept and the kept set just reaches top_p.
        mass_before = sorted_probs.cumsum(-1) - sorted_probs
        drop_sorted = mass_before >= top_p
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits.softmax(-1)


@dataclass(frozen=True)
class Warp:
    """:func:`logits_to_probs` with its settings fixed: ``warp(logits [..., V]) → probs [..., V]``.
    ``greedy`` (temperature 0) tells a drafter it may skip the distribution: only argmaxes matter then."""

    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None

    def __call__(self, logits: torch.Tensor) -> torch.Tensor:
        return logits_to_probs(logits, self.temperature, self.top_k, self.top_p)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def sample(probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """Draw one token id per row of ``probs`` [..., V] → [...] (int64).

    The draw happens on the generator's device, so one seed gives the same tokens on CPU and GPU.
    """
    device = generator.device if generator is not None else probs.device
    flat = probs.reshape(-1, probs.shape[-1]).to(device)
    ids = torch.multinomial(flat, 1, generator=generator).squeeze(-1)
    return ids.reshape(probs.shape[:-1]).to(probs.device)


def uniforms(n: int, generator: torch.Generator | None = None, device: torch.device | str = "cpu") -> torch.Tensor:
    """``n`` U(0, 1) numbers [n] from ``generator`` (drawn on its device), returned on ``device``."""
    where = generator.device if generator is not None else device
    return torch.rand(n, generator=generator, device=where).to(device)


def uniform(generator: torch.Generator | None = None) -> float:
    """One U(0, 1) number from ``generator`` (the accept test of speculative sampling uses it)."""
    device = generator.device if generator is not None else "cpu"
    return torch.rand((), generator=generator, device=device).item()
