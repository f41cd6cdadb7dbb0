"""Exactness where bugs hide: sampled speculative decoding at T = 0.7 with top-k and top-p, for the
model drafter, prompt lookup (one-hot q at T > 0) and the feature drafter; and the bug zoo — each
correctness bug fails the chi-square test, each efficiency bug passes it but fails the acceptance
check against β (docs/reference.md#exactness). Fixed seeds throughout."""

from __future__ import annotations

import pytest
import torch

from specdec_core import accept, ar, bug_zoo
from specdec_core.drafters import ModelDrafter, NGramDrafter
from specdec_core.exactness import beta, chi_square_pvalue, empirical_law, exact_law, first_guess_acceptance
from specdec_core.feature_drafter import FeatureDrafter, FeatureHead
from specdec_core.sampling import logits_to_probs
from specdec_core.speculative import speculative_generate
from specdec_core.toy import tiny_llama

VOCAB = 8
PROMPT = torch.tensor([[2, 5, 3, 2]])  # ends in a token seen before: prompt lookup has something to copy
WARP = {"temperature": 0.7, "top_k": 6, "top_p": 0.95}
N = 1500


@pytest.fixture(scope="module")
def toys():
    return tiny_llama(vocab_size=VOCAB, seed=0, logit_scale=8.0), tiny_llama(vocab_size=VOCAB, seed=1, logit_scale=8.0)


@pytest.fixture(scope="module")
def law(toys):
    return exact_law(toys[0], PROMPT, n_tokens=2, **WARP)


def pvalue(target, drafter, law, seed: int, gamma: int = 2, n: int = N) -> float:
    gen = torch.Generator().manual_seed(seed)

    def draw():
        return speculative_generate(target, drafter, PROMPT, 2, gamma=gamma, generator=gen, **WARP).new_tokens

    return chi_square_pvalue(empirical_law(draw, (VOCAB, VOCAB), n), law)


@torch.inference_mode()
def warped_beta(target, draft) -> float:
    p, q = (logits_to_probs(m(PROMPT).logits[0, -1], **WARP) for m in (target, draft))
    return beta(p, q)


def feature_drafter(target):
    torch.manual_seed(100)
    return FeatureDrafter(target, FeatureHead(d=32, n_heads=4, ffn=64).eval(), torch.tensor([0, 1, 2, 3, 5, 6]))


@torch.inference_mode()
def test_the_warp_leaves_the_toys_far_apart_and_cuts_something(toys):
    target, draft = toys
    p = logits_to_probs(target(PROMPT).logits[0, -1], **WARP)
    assert (p == 0).sum() >= 2  # top-k / top-p really removed tokens
    assert warped_beta(target, draft) < 0.8  # otherwise the checks below have no power


@pytest.mark.parametrize("kind", ["model", "ngram", "feature"])
def test_each_drafter_is_exact_at_a_warped_temperature(toys, law, kind):
    target, draft = toys
    drafter = {"model": lambda: ModelDrafter(draft), "ngram": lambda: NGramDrafter(VOCAB),
               "feature": lambda: feature_drafter(target)}[kind]()
    assert pvalue(target, drafter, law, seed=11) > 0.001


CORRECTNESS = {
    "argmax draft reporting its softmax": lambda d: (bug_zoo.ArgmaxDrafter(d), None),
    "draft ignores the warp but reports it": lambda d: (bug_zoo.UnwarpedDrafter(d), None),
    "residual from the wrong q": lambda d: (ModelDrafter(d), bug_zoo.verify_wrong_residual),
}


@pytest.mark.parametrize("bug", list(CORRECTNESS))
def test_correctness_bugs_fail_the_chi_square_test(toys, law, bug):
    target, draft = toys
    drafter, rule = CORRECTNESS[bug](draft)
    if rule is None:
        assert pvalue(target, drafter, law, seed=12) < 0.001
    else:
        with bug_zoo.verify_with(rule):
            assert pvalue(target, drafter, law, seed=12) < 0.001


def test_the_off_by_one_cache_changes_the_greedy_output_and_the_law(toys, law):
    # greedy on a 32-token toy (the 8-token toy's greedy answer is a short loop that hides the bug)
    big, big_draft = tiny_llama(vocab_size=32, seed=0, logit_scale=3.0), tiny_llama(vocab_size=32, seed=1, logit_scale=3.0)
    greedy_drafter = ModelDrafter(big_draft)  # built outside the block: only the target's cache is off by one
    prompt = torch.tensor([[1, 4, 6, 2, 7]])
    right = ar.generate(big, prompt, 24).new_tokens
    assert speculative_generate(big, greedy_drafter, prompt, 24, gamma=3).new_tokens == right
    target, draft = toys
    drafter = ModelDrafter(draft)
    with bug_zoo.off_by_one_cache():
        assert speculative_generate(big, greedy_drafter, prompt, 24, gamma=3).new_tokens != right
        # it only bites after a rejection, on the token after it: a subtler change, so more draws
        assert pvalue(target, drafter, law, seed=13, n=4000) < 0.001


def test_the_zoo_reaches_the_greedy_path_too():
    """At temperature 0 the loop calls ``verify_greedy``, not ``verify``: ``verify_with`` patches both."""
    big, big_draft = tiny_llama(vocab_size=32, seed=0, logit_scale=3.0), tiny_llama(vocab_size=32, seed=1, logit_scale=3.0)
    prompt = torch.tensor([[1, 4, 6, 2, 7]])
    right = ar.generate(big, prompt, 24).new_tokens
    calls = []

    def counting(drafted, q, p, generator=None):  # the right rule, counted
        calls.append(drafted.numel())
        return accept.verify(drafted, q, p, generator)

    def always_accept(drafted, q, p, generator=None):
        return drafted.numel(), int(p[-1].argmax()), "bonus"

    with bug_zoo.verify_with(counting):
        assert speculative_generate(big, ModelDrafter(big_draft), prompt, 24, gamma=3).new_tokens == right
    assert len(calls) >= 24 // 4 and sum(calls) > 0  # reached at every greedy step; still exact
    with bug_zoo.verify_with(always_accept):
        assert speculative_generate(big, ModelDrafter(big_draft), prompt, 24, gamma=3).new_tokens != right


@pytest.mark.parametrize("close", [False, True])
def test_a_correct_drafter_accepts_at_the_rate_beta(toys, close):
    target, draft = toys[0], tiny_llama(vocab_size=VOCAB, seed=0, logit_scale=6.0) if close else toys[1]
    share, se = first_guess_acceptance(target, ModelDrafter(draft), PROMPT, 1200, torch.Generator().manual_seed(5), **WARP)
    assert abs(share - warped_beta(target, draft)) < 4 * se


EFFICIENCY = {
    "p and q warped differently, reported truthfully": lambda d: (bug_zoo.HonestUnwarpedDrafter(d), None),
    "accept only if the guess equals the target's sample": lambda d: (ModelDrafter(d), bug_zoo.verify_match_target_sample),
}


@pytest.mark.parametrize("bug", list(EFFICIENCY))
def test_efficiency_bugs_stay_exact_but_fail_the_acceptance_check(toys, law, bug):
    target = toys[0]
    draft = tiny_llama(vocab_size=VOCAB, seed=0, logit_scale=6.0)  # close to the target: much to lose
    drafter, rule = EFFICIENCY[bug](draft)
    with bug_zoo.verify_with(rule) if rule is not None else _nothing():
        assert pvalue(target, drafter, law, seed=14) > 0.001  # still the target's law
        share, se = first_guess_acceptance(target, drafter, PROMPT, 1200, torch.Generator().manual_seed(6), **WARP)
    assert warped_beta(target, draft) - share > 4 * se  # but it accepts clearly less than β


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False
