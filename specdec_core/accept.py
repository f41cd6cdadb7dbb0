"""The accept / residual / bonus rule of speculative sampling for one chain of guesses
(:mod:`specdec_core.speculative` explains why it is exact; :mod:`specdec_core.tree` does the same for trees)."""

from __future__ import annotations

import torch

from .sampling import sample, uniforms


def verify(
    drafted: torch.Tensor,
    q: torch.Tensor,
    p: torch.Tensor,
    generator: torch.Generator | None = None,
) -> tuple[int, int, str]:
    """The accept / residual / bonus rule for one step.

    drafted [k] tokens, q [k, V] their draft distributions, p [k+1, V] the target's distributions
    at the same positions plus one more. Returns ``(n_accepted, next_token, kind)`` where kind is
    "bonus" (all k accepted, next ~ p[k]) or "resampled" (next ~ residual at the first rejection).
    All k accept tests run at once (one uniform each; those after the first rejection go unused,
    which changes no probability), with one host sync for the count.
    """
    k = drafted.numel()
    n = 0
    if k:
        rows = torch.arange(k, device=p.device)
        u = uniforms(k, generator, p.device)
        # accept x_i with probability min(1, p/q); u < 1 always, so p >= q means a sure accept
        ok = u * q[rows, drafted] < p[rows, drafted]
        n = int(ok.int().cumprod(0).sum())  # guesses accepted before the first rejection
    if n < k:
        residual = (p[n] - q[n]).clamp(min=0)
        if residual.sum() <= 0:  # p == q here: cannot be reached in exact arithmetic
            residual = p[n]
        return n, int(sample(residual / residual.sum(), generator)), "resampled"
    return k, int(sample(p[k], generator)), "bonus"


def verify_greedy(drafted: torch.Tensor, logits: torch.Tensor) -> tuple[int, int, str]:
    """:func:`verify` at temperature 0, where p and q are one-hot: keep the guesses while they equal the
    target's argmax; the next token is the target's argmax after them (the residual of a one-hot p is p).
    drafted [k], logits [k+1, V] → (n_accepted, next_token, kind). No distribution is built, and the
    count and the token come to the host together, in one sync."""
    k = drafted.numel()
    choice = logits.argmax(-1)  # [k+1]
    n = (drafted == choice[:k]).int().cumprod(0).sum()
    n, token = torch.stack([n, choice[n]]).tolist()
    return n, token, "bonus" if n == k else "resampled"
