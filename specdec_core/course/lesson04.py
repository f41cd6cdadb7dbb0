"""Checkers for lesson 04's exercises: the two pieces that make the best drafters cheap.

    check_prompt_lookup(prompt_lookup)
        # prompt_lookup(context: list[int], k, max_ngram=3, min_ngram=1) -> list[int]   (≤ k ids)
    check_reduced_distribution(reduced_distribution)
        # reduced_distribution(sub_logits [S], vocab_ids [S], vocab_size V, temperature) -> probs [V]

Prompt lookup is compared with ``drafters.NGramDrafter.propose`` on hand-made edge cases and on
seeded random contexts over a small vocabulary (so that n-grams repeat often). The reduced output
set (FR-Spec) is compared with what ``feature_drafter.FeatureDrafter`` does: full-vocabulary logits
that are -inf outside S, warped by ``sampling.logits_to_probs``. Everything is deterministic.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from typing import Any

import torch

from ..drafters import NGramDrafter
from ..sampling import logits_to_probs
from .checks import Checks

LOOKUP_VOCAB = 5  # a small vocabulary: random contexts repeat their n-grams
RANDOM_CASES = 300


# ----------------------------------------------------------------------------- prompt lookup


def reference_prompt_lookup(context: list[int], k: int, max_ngram: int = 3, min_ngram: int = 1) -> list[int]:
    """What :class:`~specdec_core.drafters.NGramDrafter` proposes after ``context`` (≤ k ids)."""
    drafter = NGramDrafter(max(context, default=0) + 1, max_ngram, min_ngram)
    tokens, _ = drafter.propose(torch.tensor([context], dtype=torch.long).view(1, -1), k)
    return tokens.tolist()


def _as_ids(out: Any) -> list[int] | None:
    """The student's answer as a list of ints (a tensor or tuple is fine), or None if it is not one."""
    try:
        return [int(t) for t in (out.tolist() if isinstance(out, torch.Tensor) else out)]
    except (TypeError, ValueError):
        return None


def _random_cases(seed: int = 0) -> list[tuple[list[int], int, int, int]]:
    """Seeded (context, k, max_ngram, min_ngram): lengths 0..40 over LOOKUP_VOCAB tokens."""
    rng = random.Random(seed)
    cases = []
    for _ in range(RANDOM_CASES):
        context = [rng.randrange(LOOKUP_VOCAB) for _ in range(rng.randrange(0, 41))]
        max_ngram = rng.randint(1, 4)
        cases.append((context, rng.randint(1, 6), max_ngram, rng.randint(1, max_ngram)))
    return cases


def _call(context: list[int], k: int, max_ngram: int, min_ngram: int) -> str:
    return f"prompt_lookup({context}, k={k}, max_ngram={max_ngram}, min_ngram={min_ngram})"


def check_prompt_lookup(fn: Callable[..., list[int]]) -> None:
    """Test a student's prompt lookup against ``NGramDrafter.propose``."""
    with Checks("prompt_lookup") as c:

        def run(context: list[int], k: int, max_ngram: int = 3, min_ngram: int = 1) -> list[int] | None:
            return _as_ids(c.call(fn, list(context), k, max_ngram, min_ngram))  # a copy: the context stays ours

        def expect_case(context: list[int], k: int, max_ngram: int, min_ngram: int, what: str, hint: str) -> None:
            got, ref = run(context, k, max_ngram, min_ngram), reference_prompt_lookup(context, k, max_ngram, min_ngram)
            c.expect(got == ref, what, f"{hint} ({_call(context, k, max_ngram, min_ngram)} should be {ref}, got {got})")

        expect_case([1, 2, 3, 4, 5], 3, 3, 1, "no earlier occurrence of any n-gram → []",
                    "when no n in max_ngram..min_ngram matches, return an empty list")
        expect_case([4, 8, 9, 1, 4, 8, 9], 5, 3, 1,
                    "a match near the end proposes only the tokens that follow it (fewer than k)",
                    "propose context[start + n : start + n + k]: it may hold fewer than k tokens")
        expect_case([2, 7, 7, 7, 7], 3, 3, 1, "an earlier occurrence may overlap the tail (a run of one token)",
                    "try every start from len(context) - n - 1 down to 0; only the tail itself is excluded")
        expect_case([1, 2, 5, 0, 2, 6, 1, 2], 3, 3, 1, "the longest n-gram that matches wins (n = max_ngram first)",
                    "loop n from max_ngram DOWN to min_ngram and return at the first n that matches")
        expect_case([3, 4, 1, 3, 4, 2, 3, 4], 3, 2, 1, "the latest earlier occurrence wins, not the earliest",
                    "scan start positions from the end of the context backwards")
        expect_case([1, 2, 5, 0, 2], 3, 3, 2, "no fallback below min_ngram",
                    "stop at n = min_ngram: shorter n-grams are not tried")
        short = [run([5, 5], 4), run([9], 4), run([], 4)]
        c.expect(short == [[5], [], []], "a context no longer than n skips that n ([5, 5] → [5]; [9] and [] → [])",
                 f"skip n when len(context) <= n: there is no earlier occurrence then (got {short})")
        mismatch = None
        for context, k, max_ngram, min_ngram in _random_cases():
            got, ref = run(context, k, max_ngram, min_ngram), reference_prompt_lookup(context, k, max_ngram, min_ngram)
            if got != ref:
                mismatch = f"{_call(context, k, max_ngram, min_ngram)} should be {ref}, got {got}"
                break
        c.expect(mismatch is None, f"agrees with NGramDrafter.propose on {RANDOM_CASES} seeded random contexts",
                 str(mismatch))


# ----------------------------------------------------------------------------- FR-Spec's reduced output set


def reference_reduced_distribution(
    sub_logits: torch.Tensor, vocab_ids: torch.Tensor, vocab_size: int, temperature: float
) -> torch.Tensor:
    """sub_logits [S] at vocab_ids [S] → probabilities [V]: -inf outside S, then ``logits_to_probs``
    (what ``FeatureDrafter._logits`` and its warp do)."""
    full = torch.full((vocab_size,), -math.inf)
    full.index_copy_(0, vocab_ids, sub_logits.float())
    return logits_to_probs(full, temperature)


def _as_probs(out: Any, vocab_size: int) -> torch.Tensor | None:
    """The student's answer as a float [V] tensor, or None if it has another shape or is not numeric."""
    try:
        probs = torch.as_tensor(out).float()
    except (TypeError, ValueError, RuntimeError):
        return None
    return probs if probs.shape == (vocab_size,) else None


def _toy_reduced(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, int]:
    """A reduced set of S = 12 unsorted ids out of V = 50 and its logits [S]."""
    gen = torch.Generator().manual_seed(seed)
    vocab_size = 50
    vocab_ids = torch.randperm(vocab_size, generator=gen)[:12]
    sub_logits = 2 * torch.randn(12, generator=gen)
    return sub_logits, vocab_ids, vocab_size


def check_reduced_distribution(fn: Callable[..., torch.Tensor]) -> None:
    """Test a student's reduced-output-set distribution against -inf filling + ``logits_to_probs``."""
    sub, ids, vocab = _toy_reduced()
    outside = torch.ones(vocab, dtype=torch.bool).index_fill_(0, ids, False)

    with Checks("reduced_distribution") as c:

        def run(sub_logits: torch.Tensor, vocab_ids: torch.Tensor, temperature: float) -> torch.Tensor | None:
            return _as_probs(c.call(fn, sub_logits.clone(), vocab_ids.clone(), vocab, temperature), vocab)

        def close(got: torch.Tensor | None, ref: torch.Tensor) -> bool:
            return got is not None and bool(torch.isfinite(got).all()) and torch.allclose(got, ref, atol=1e-6)

        p = run(sub, ids, 1.0)
        c.expect(p is not None and abs(float(p.sum()) - 1) < 1e-5 and bool((p >= 0).all()),
                 f"a probability vector over the whole vocabulary: shape [{vocab}], ≥ 0, sums to 1",
                 f"return a tensor of shape [vocab_size] = [{vocab}] holding a distribution"
                 + ("" if p is None else f" (got sum {float(p.sum()):.4f})"))
        at_07 = run(sub, ids, 0.7)
        c.expect(p is not None and at_07 is not None and bool((p[outside] == 0).all() and (at_07[outside] == 0).all()),
                 "exactly 0 outside the reduced set S",
                 "fill the full logits with -inf (not 0) before the softmax: a token outside S is never guessed")
        temps = (0.5, 1.0, 2.0)
        c.expect(all(close(run(sub, ids, t), reference_reduced_distribution(sub, ids, vocab, t)) for t in temps),
                 "on S: softmax(sub_logits / T) at T = 0.5, 1 and 2",
                 "divide the logits by the temperature, then normalise over S only")
        best = torch.nn.functional.one_hot(ids[sub.argmax()], vocab).float()
        c.expect(close(run(sub, ids, 0.0), best), "T = 0: a one-hot on the best token of S (its vocabulary id)",
                 "at temperature 0 put probability 1 on vocab_ids[sub_logits.argmax()], without dividing by 0")
        order = torch.argsort(ids)  # the same set, listed sorted, then reversed
        same = [run(sub[order], ids[order], 1.0), run(sub[order.flip(0)], ids[order.flip(0)], 1.0)]
        c.expect(all(close(q, reference_reduced_distribution(sub, ids, vocab, 1.0)) for q in same),
                 "any order of vocab_ids: each logit lands on its own token id",
                 "put sub_logits[i] at position vocab_ids[i] (index_copy_ or full[vocab_ids] = …); do not sort")
        big = sub + 100.0
        c.expect(close(run(big, ids, 0.5), reference_reduced_distribution(big, ids, vocab, 0.5)),
                 "no overflow for large logits (≈ 100 at T = 0.5)",
                 "use torch.softmax (it subtracts the max) instead of exp(...) / sum(exp(...))")
