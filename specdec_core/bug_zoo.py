"""A zoo of speculative-sampling bugs that real implementations shipped — for lesson 03 and the tests.

Two kinds, caught by two different checks (docs/reference.md#exactness):

**Correctness bugs** change the output law; the chi-square test against the exact law catches them
(and greedy equality with AR catches the cache bug):

- :class:`ArgmaxDrafter` proposes the draft's argmax but reports its softmax as q
  (transformers #32867, fixed by #33534; jaymody/speculative-sampling #3: argmax drafts);
- :class:`UnwarpedDrafter` draws from the draft at temperature 1 with no top-k / top-p, but reports
  the warped q — q is not the law the guess was drawn from;
- :func:`verify_wrong_residual` builds the residual from the wrong q (the next token id's entry; the
  family of vllm-project/vllm #40149: the rejection sampler was not given the draft's probabilities);
- :func:`off_by_one_cache` keeps one rejected guess in the target's cache (transformers #30042: cache
  positions after accepted guesses).

**Efficiency bugs** keep the output exact but accept less; only an acceptance-rate check against
β = Σ min(p, q) catches them:

- :class:`HonestUnwarpedDrafter` draws from the unwarped draft and reports that q truthfully: exact,
  but q is further from the warped p than it needs to be;
- :func:`verify_match_target_sample` accepts a guess only if it equals a token sampled from p
  (acceptance Σ p·q instead of Σ min(p, q)).

(A q computed in bf16 and sampled as such is exact; a bias of bf16 rounding alone would need about a
million draws to show, so the zoo leaves it out.)
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from unittest import mock

import torch

from . import speculative
from .drafters import ModelDrafter
from .exactness import chi_square_pvalue, empirical_law, first_guess_acceptance
from .lm import Decoder
from .sampling import sample, uniform


class ArgmaxDrafter(ModelDrafter):
    """BUG (correctness): the guess is the argmax, but q is reported as the warped softmax."""

    def guess(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.warp(logits), logits.argmax()


class UnwarpedDrafter(ModelDrafter):
    """BUG (correctness): the guess ignores temperature / top-k / top-p; the reported q does not."""

    def guess(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.warp(logits), sample(logits.float().softmax(-1), self.generator)


class HonestUnwarpedDrafter(ModelDrafter):
    """BUG (efficiency): draws from the unwarped draft and reports that q: exact, accepts less."""

    def guess(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        q = logits.float().softmax(-1)
        return q, sample(q, self.generator)


def verify_wrong_residual(drafted: torch.Tensor, q: torch.Tensor, p: torch.Tensor,
                          generator: torch.Generator | None = None) -> tuple[int, int, str]:
    """BUG (correctness): ``speculative.verify`` with the residual built from the wrong row of q
    (each token's entry shifted by one id)."""
    for i in range(drafted.numel()):
        x = int(drafted[i])
        if uniform(generator) * q[i, x] < p[i, x]:
            continue
        residual = (p[i] - q[i].roll(-1)).clamp(min=0)  # the bug: q of the neighbouring id
        residual = residual if residual.sum() > 0 else p[i]
        return i, int(sample(residual / residual.sum(), generator)), "resampled"
    return drafted.numel(), int(sample(p[drafted.numel()], generator)), "bonus"


def verify_match_target_sample(drafted: torch.Tensor, q: torch.Tensor, p: torch.Tensor,
                               generator: torch.Generator | None = None) -> tuple[int, int, str]:
    """BUG (efficiency): accept a guess only if it equals y ~ p, else emit y. The emitted token is
    always a sample of p (exact), but a guess survives with probability Σ p·q < Σ min(p, q)."""
    for i in range(drafted.numel()):
        y = int(sample(p[i], generator))
        if int(drafted[i]) != y:
            return i, y, "resampled"
    return drafted.numel(), int(sample(p[drafted.numel()], generator)), "bonus"


class _OffByOneDecoder(Decoder):
    def rollback(self, length: int) -> None:
        super().rollback(min(length + 1, self.length) if length < self.length else length)


def greedy_rule(rule):
    """``rule`` — a sampled accept rule ``(drafted, q, p, generator)`` — as the loop's greedy rule ``(drafted,
    logits)``: at temperature 0, p is the one-hot of the target's argmax and q that of each guess. The right rule
    reduces to ``verify_greedy``; one that accepts a wrong guess changes the greedy output (bugs of the residual
    or of sampling show only at a temperature above 0)."""
    def verify_greedy(drafted: torch.Tensor, logits: torch.Tensor) -> tuple[int, int, str]:
        vocab = logits.shape[-1]
        p = torch.nn.functional.one_hot(logits.argmax(-1), vocab).float()
        q = torch.nn.functional.one_hot(drafted.long(), vocab).float()
        return rule(drafted, q, p, torch.Generator(logits.device).manual_seed(0))  # one-hot: u is never needed

    return verify_greedy


@contextmanager
def verify_with(rule) -> Iterator[None]:
    """``with verify_with(verify_wrong_residual): speculative_generate(...)`` — run the chain loop with
    another accept rule, at every temperature: the sampled path calls ``speculative.verify`` and the
    greedy path (temperature 0) ``speculative.verify_greedy``, so both are patched (the greedy one with
    :func:`greedy_rule`). Tree verification (``topology=``) has rules of its own and is not patched."""
    with mock.patch.object(speculative, "verify", rule), \
            mock.patch.object(speculative, "verify_greedy", greedy_rule(rule)):
        yield


@contextmanager
def off_by_one_cache() -> Iterator[None]:
    """BUG (correctness): inside the block, every cache that ``speculative_generate`` rolls back keeps
    one rejected token (build the drafter before the block so that only the target's cache is hit)."""
    with mock.patch.object(speculative, "Decoder", _OffByOneDecoder):
        yield


def diagnose(target, drafter, prompt: torch.Tensor, law, beta: float, rule=None, n: int = 1500,
             n_accept: int = 1200, seed: int = 0, **warp) -> dict:
    """Run both checks on one drafter (and accept ``rule``, default the right one): the chi-square p-value of ``n``
    two-token samples against the exact ``law``, and the first guess's acceptance against ``beta``. ``caught_by``
    names the checks that flag it (p < 0.001; acceptance more than 4 standard errors from β)."""
    gen = torch.Generator().manual_seed(seed)  # host: sampled paths draw from a seeded host generator
    rule = rule or speculative.verify
    with verify_with(rule):
        counts = empirical_law(lambda: speculative.speculative_generate(
            target, drafter, prompt, 2, gamma=2, generator=gen, **warp).new_tokens, law.shape, n)
        share, se = first_guess_acceptance(target, drafter, prompt, n_accept, gen, **warp)
    p = chi_square_pvalue(counts, law)
    caught = [name for name, hit in (("chi-square", p < 0.001), ("acceptance", abs(share - beta) > 4 * se)) if hit]
    return {"pvalue": p, "acceptance": share, "se": se, "beta": beta, "caught_by": caught}
