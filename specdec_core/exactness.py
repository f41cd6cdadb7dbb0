"""Checking that a sampler follows a model's distribution: the exact law by enumeration, and
empirical counts to compare with it (chi-square, total variation). Used by lesson 03 and its tests.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from transformers import PreTrainedModel

from .sampling import logits_to_probs


@torch.inference_mode()
def exact_law(model: PreTrainedModel, prompt: torch.Tensor, n_tokens: int = 2, temperature: float = 1.0,
              top_k: int | None = None, top_p: float | None = None) -> np.ndarray:
    """P(t_1..t_n | prompt) by enumerating every continuation: an array [V]*n, each step warped as the
    samplers warp it (temperature → top-k → top-p, :func:`~specdec_core.sampling.logits_to_probs`).
    Only for toy vocabularies (V^n forward rows)."""
    vocab = model.get_output_embeddings().weight.shape[0]
    law = np.ones([1])
    seqs = prompt.to(model.device)  # [B, T]: every prefix so far, on the model's device
    tokens = torch.arange(vocab, device=seqs.device)
    for _ in range(n_tokens):
        probs = logits_to_probs(model(seqs).logits[:, -1], temperature, top_k, top_p).double()  # [B, V]
        law = (law[:, None] * probs.cpu().numpy()).ravel()  # host: the law is a NumPy array, read once per step
        seqs = torch.cat([seqs.repeat_interleave(vocab, 0), tokens.repeat(seqs.shape[0]).view(-1, 1)], 1)
    return law.reshape([vocab] * n_tokens)


def empirical_law(draw: Callable[[], list[int]], shape: tuple[int, ...], n: int) -> np.ndarray:
    """Counts of ``n`` calls of ``draw()`` (each returns len(shape) token ids), as an array ``shape``."""
    counts = np.zeros(shape)
    for _ in range(n):
        counts[tuple(draw()[: len(shape)])] += 1
    return counts


def chi_square_pvalue(counts: np.ndarray, law: np.ndarray) -> float:
    """Pearson chi-square p-value of ``counts`` against ``law``, pooling cells whose expected count is
    below 5 (the test's usual validity rule)."""
    expected = law.ravel() * counts.sum()
    observed = counts.ravel()
    small = expected < 5
    exp = np.append(expected[~small], expected[small].sum())
    obs = np.append(observed[~small], observed[small].sum())
    keep = exp > 0
    obs, exp = obs[keep], exp[keep] * obs[keep].sum() / exp[keep].sum()
    stat, df = float(((obs - exp) ** 2 / exp).sum()), len(obs) - 1
    if df < 1:
        return float("nan")
    # P(χ²_df ≥ stat), the chi-square distribution's upper tail: the regularised upper incomplete gamma
    half = torch.tensor([df / 2, stat / 2], dtype=torch.float64)  # host: two Python floats in, one float out
    return float(torch.special.gammaincc(half[0], half[1]))


def repeated_pvalues(draw: Callable[[], list[int]], law: np.ndarray, n: int, runs: int) -> list[float]:
    """Chi-square p-values of ``runs`` independent experiments of ``n`` draws each. For an exact
    sampler they are uniform on [0, 1] (a p below 0.05 then happens one time in 20); for a broken one
    they pile up near 0 — a histogram says more than one p-value."""
    return [chi_square_pvalue(empirical_law(draw, law.shape, n), law) for _ in range(runs)]


def total_variation(p: np.ndarray | torch.Tensor, q: np.ndarray | torch.Tensor) -> float:
    """TV(p, q) = ½ Σ_x |p(x) − q(x)| ∈ [0, 1] for two distributions over the same outcomes (arrays or
    tensors of one shape; counts are normalised first). 0: identical; 1: disjoint — the most any
    event's probability can differ between p and q."""
    p, q = (x.detach().double().cpu().numpy()  # host: NumPy arithmetic on two small distributions
            if isinstance(x, torch.Tensor) else np.asarray(x, float) for x in (p, q))
    if p.shape != q.shape:
        raise ValueError(f"distributions over different supports: {tuple(p.shape)} vs {tuple(q.shape)}")
    p, q = p.ravel(), q.ravel()
    return 0.5 * float(np.abs(p / p.sum() - q / q.sum()).sum())


def beta(p: torch.Tensor, q: torch.Tensor) -> float:
    """β = Σ_x min(p(x), q(x)) = 1 − TV(p, q): the probability that speculative sampling accepts one
    guess drawn from q against p (docs/reference.md#notation)."""
    return float(torch.minimum(p.double(), q.double()).sum())


def first_guess_acceptance(target: PreTrainedModel, drafter, prompt: torch.Tensor, n: int,
                           generator: torch.Generator, **warp) -> tuple[float, float]:
    """(share accepted, its standard error) over ``n`` speculative steps of ONE guess at the first
    position after ``prompt``; ``warp``: temperature, top_k, top_p. A correct drafter's share is β
    of the warped p and q; an efficiency bug shows as a share well below it."""
    from .speculative import speculative_generate

    hits = sum(speculative_generate(target, drafter, prompt, 1, gamma=1, generator=generator, **warp)
               .stats.accepted_lengths[0] for _ in range(n))
    share = hits / n
    return share, max(share * (1 - share), 1e-12) ** 0.5 / n**0.5
