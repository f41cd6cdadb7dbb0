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


class Verdict(tuple):
    """``(n_accepted, next_token, kind)``, as every accept rule returns it, plus ``drafted``: the guesses as
    ints when the rule read them in its own host transfer (the loop then reads nothing more), else None."""

    drafted: list[int] | None = None

    def __new__(cls, n: int, token: int, kind: str, drafted: list[int] | None = None) -> Verdict:
        verdict = super().__new__(cls, (n, token, kind))
        verdict.drafted = drafted
        return verdict


def greedy_outcome(drafted: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """The greedy accept test on the device, no host sync: drafted [k], logits [k+1, V] → [k + 2] int64
    = (n accepted, the next token, the k guesses): what a step must bring to the host, in one tensor."""
    k = drafted.numel()
    choice = logits.argmax(-1)  # [k+1]
    n = (drafted.to(choice.device) == choice[:k]).long().cumprod(0).sum()  # guesses before the first mismatch
    # choice[n] with a 0-dim tensor index would read n on the host (a hidden .item()); gather stays on the device
    return torch.cat([n.view(1), choice.gather(0, n.view(1)), drafted.to(choice.device).view(-1).long()])


def verify_greedy(drafted: torch.Tensor, logits: torch.Tensor) -> Verdict:
    """:func:`verify` at temperature 0, where p and q are one-hot: keep the guesses while they equal the
    target's argmax; the next token is the target's argmax after them (the residual of a one-hot p is p).
    drafted [k], logits [k+1, V] → (n_accepted, next_token, kind), with ``.drafted`` the guesses as ints.
    No distribution is built, and the count, the token and the guesses come to the host together, in
    ONE transfer (:func:`greedy_outcome`)."""
    n, token, *guesses = greedy_outcome(drafted, logits).tolist()
    return Verdict(n, token, "bonus" if n == len(guesses) else "resampled", guesses)
