"""Speculative sampling is exact: greedy equals AR, and sampled outputs follow the target's law.

The statistical tests use tiny random Llamas whose output layers are scaled up, so the target p
and the draft q disagree a lot (TV ≥ 0.2): near-uniform toys would give a test with no power.
The same test must FAIL for deliberately broken variants of the accept rule (kept below).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from specdec_core import ar
from specdec_core import speculative as spec
from specdec_core.drafters import LookupFirst, ModelDrafter, NGramDrafter
from specdec_core.exactness import chi_square_pvalue, empirical_law, exact_law
from specdec_core.sampling import logits_to_probs, sample
from specdec_core.speculative import speculative_generate
from specdec_core.toy import tiny_llama

VOCAB = 8
PROMPT = torch.tensor([[2, 5, 3]])


@pytest.fixture(scope="module")
def toy_pair():
    target = tiny_llama(vocab_size=VOCAB, seed=0, logit_scale=20.0)
    draft = tiny_llama(vocab_size=VOCAB, seed=1, logit_scale=20.0)
    return target, draft


def exact_two_token_law(target, prompt: torch.Tensor) -> np.ndarray:
    return exact_law(target, prompt, n_tokens=2)


def sampled_counts(target, draft, n: int, gamma: int, seed: int) -> np.ndarray:
    gen = torch.Generator().manual_seed(seed)
    drafter = ModelDrafter(draft)  # one drafter reused across calls, as a student would

    def draw():
        return speculative_generate(target, drafter, PROMPT, 2, gamma=gamma, temperature=1.0, generator=gen).new_tokens

    return empirical_law(draw, (VOCAB, VOCAB), n)


@torch.inference_mode()
def test_toy_pair_disagrees_enough(toy_pair):
    target, draft = toy_pair
    p = target(PROMPT).logits[0, -1].softmax(-1)
    q = draft(PROMPT).logits[0, -1].softmax(-1)
    assert 0.5 * (p - q).abs().sum() >= 0.2  # otherwise the tests below have no power


@pytest.mark.parametrize("gamma", [1, 2])
def test_sampling_matches_target_law(toy_pair, gamma):
    target, draft = toy_pair
    counts = sampled_counts(target, draft, n=1500, gamma=gamma, seed=1234 + gamma)
    assert chi_square_pvalue(counts, exact_two_token_law(target, PROMPT)) > 0.001


exact_verify = spec.verify


def verify_resample_from_p(drafted, q, p, generator=None):
    """BROKEN: at a rejection, draw from p instead of the residual (p − q)⁺."""
    n, _, kind = exact_verify(drafted, q, p, generator)
    return (n, int(sample(p[n], generator)), kind) if kind == "resampled" else (n, _, kind)


def verify_always_accept(drafted, q, p, generator=None):
    """BROKEN: accept every guess (the output is the draft's law)."""
    return drafted.numel(), int(sample(p[drafted.numel()], generator)), "bonus"


@pytest.mark.parametrize("broken", [verify_resample_from_p, verify_always_accept])
def test_broken_variants_fail_the_same_test(toy_pair, monkeypatch, broken):
    target, draft = toy_pair
    law = exact_two_token_law(target, PROMPT)
    monkeypatch.setattr(spec, "verify", broken)
    counts = sampled_counts(target, draft, n=800, gamma=2, seed=99)
    assert chi_square_pvalue(counts, law) < 0.001


@torch.inference_mode()
def test_first_position_acceptance_is_sum_of_min(toy_pair):
    """Measured α at draft position 1 ≈ Σ_x min(p(x), q(x)) for that position (exact here)."""
    target, draft = toy_pair
    p = target(PROMPT).logits[0, -1].softmax(-1)
    q = draft(PROMPT).logits[0, -1].softmax(-1)
    beta = float(torch.minimum(p, q).sum().detach())
    gen = torch.Generator().manual_seed(7)
    drafter = ModelDrafter(draft)
    n, hits = 1000, 0
    for _ in range(n):
        out = speculative_generate(target, drafter, PROMPT, 1, gamma=1, temperature=1.0, generator=gen)
        hits += out.stats.accepted_lengths[0]
    sigma = (beta * (1 - beta) / n) ** 0.5
    assert abs(hits / n - beta) < 4 * sigma


@pytest.mark.parametrize("gamma", [1, 3, 5])
@pytest.mark.parametrize("seed", [0, 1])
def test_greedy_equals_ar(gamma, seed):
    target = tiny_llama(vocab_size=32, seed=seed, logit_scale=3.0)
    draft = tiny_llama(vocab_size=32, seed=seed + 10, logit_scale=3.0)
    ref = ar.generate(target, PROMPT, 40).new_tokens
    padded = 0  # verifies run γ + 1 wide with fewer guesses: a lookup that found less, the budget's end
    for drafter in (ModelDrafter(draft), ModelDrafter(target), NGramDrafter(32)):
        out = speculative_generate(target, drafter, PROMPT, 40, gamma=gamma)
        assert out.new_tokens == ref
        assert all(s.gamma == gamma for s in out.stats.steps)
        padded += sum(len(s.drafted) < s.gamma for s in out.stats.steps)
    assert padded > 0, "no step was padded: the test must verify short drafts too"
    # drafting with the target itself: every guess accepted, γ+1 tokens per verify
    out = speculative_generate(target, ModelDrafter(target), PROMPT, 40, gamma=gamma)
    assert out.stats.alpha == 1.0
    assert out.stats.target_calls == -(-40 // (gamma + 1))


def test_eos_inside_a_block_stops_exactly_there():
    target = tiny_llama(vocab_size=32, seed=3, logit_scale=3.0)
    ref = ar.generate(target, PROMPT, 40).new_tokens
    eos = ref[6]  # a token the greedy output reaches at position 6 (its first occurrence or earlier)
    expected = ar.generate(target, PROMPT, 40, eos_token_id=eos).new_tokens
    out = speculative_generate(target, ModelDrafter(target), PROMPT, 40, gamma=5, eos_token_id=eos)
    assert out.new_tokens == expected and out.new_tokens[-1] == eos


@pytest.mark.parametrize("n", [0, 1, 2, 7, 13])
def test_exactly_max_new_tokens(toy_pair, n):
    target, draft = toy_pair
    gen = torch.Generator().manual_seed(0)
    out = speculative_generate(target, ModelDrafter(draft), PROMPT, n, gamma=4, temperature=1.0, generator=gen)
    assert len(out.new_tokens) == n


def test_reproducible_with_a_seed(toy_pair):
    target, draft = toy_pair

    def run():
        gen = torch.Generator().manual_seed(42)
        return speculative_generate(target, ModelDrafter(draft), PROMPT, 20, gamma=3, temperature=0.8, top_k=5, generator=gen).new_tokens

    assert run() == run()


def test_bad_input_raises(toy_pair):
    target, draft = toy_pair
    with pytest.raises(ValueError, match="gamma"):
        speculative_generate(target, ModelDrafter(draft), PROMPT, 5, gamma=0)
    with pytest.raises(ValueError, match="batch size"):
        speculative_generate(target, ModelDrafter(draft), PROMPT.repeat(2, 1), 5)
    with pytest.raises(ValueError, match="empty"):
        speculative_generate(target, ModelDrafter(draft), PROMPT[:, :0], 5)


def test_stats_are_consistent(toy_pair):
    target, draft = toy_pair
    gen = torch.Generator().manual_seed(5)
    out = speculative_generate(target, ModelDrafter(draft), PROMPT, 30, gamma=3, temperature=1.0, generator=gen)
    s = out.stats
    assert s.target_calls == len(s.steps) == len(s.accepted_lengths)
    assert sum(s.accepted_lengths) + s.target_calls >= 30  # each step emits accepted + 1
    assert 0.0 <= s.alpha <= 1.0
    assert s.draft_calls >= s.target_calls


def test_ngram_drafter_copies_what_followed():
    drafter = NGramDrafter(vocab_size=10, max_ngram=2)
    drafter.begin(lambda x: logits_to_probs(x, 0.0), None)
    tokens, q = drafter.propose(torch.tensor([[1, 2, 3, 4, 5, 1, 2]]), 3)
    assert tokens.tolist() == [3, 4, 5]
    assert torch.equal(q.argmax(-1), tokens)
    tokens, _ = drafter.propose(torch.tensor([[7, 8, 9]]), 3)
    assert tokens.numel() == 0


# ---------------------------------------------------------------- gamma="auto"
def test_auto_gamma_follows_the_measured_alpha_and_stays_exact():
    from specdec_core.theory import AutoGamma

    target = tiny_llama(seed=0, logit_scale=3.0)
    prompt = torch.tensor([[1, 5, 9, 2]])
    reference = ar.generate(target, prompt, 24).new_tokens
    v = lambda n: 1.0 + 0.02 * n  # noqa: E731  (a GPU-like verify cost: more guesses are nearly free)
    # step_s = 1 s: drafting is nearly free next to a target step, whatever the load on the machine
    perfect = speculative_generate(target, ModelDrafter(target), prompt, 24, gamma=AutoGamma(v, 1.0, max_gamma=6))
    assert perfect.new_tokens == reference and perfect.stats.alpha == 1.0
    assert max(perfect.stats.gammas) == 6 > perfect.stats.gammas[0]  # every guess kept: γ climbs to the cap (the last step: to the budget)
    poor = speculative_generate(target, ModelDrafter(tiny_llama(seed=7, logit_scale=3.0)), prompt, 24,
                                gamma=AutoGamma(v, 1.0, max_gamma=6))
    assert poor.new_tokens == reference
    assert max(poor.stats.gammas[-3:]) < 6  # guesses mostly rejected: γ comes down
    assert AutoGamma(v, 1.0, alpha0=0.9).choose(24) > AutoGamma(v, 1.0, alpha0=0.1).choose(24)
    assert AutoGamma(v, 1.0, alpha0=0.9).choose(2) == 2  # never more guesses than the budget allows
    with pytest.raises(ValueError, match="auto"):
        speculative_generate(target, ModelDrafter(target), prompt, 4, gamma="fast")
    with pytest.raises(ValueError, match="cost model"):
        speculative_generate(target, ModelDrafter(target), prompt, 4, gamma="auto")


def test_lookup_first_copies_where_it_can_and_stays_exact():
    target = tiny_llama(seed=0, logit_scale=3.0)
    prompt = torch.tensor([[3, 4, 5, 6, 7, 3, 4, 5, 6, 7, 3, 4]])  # a context that repeats itself
    reference = ar.generate(target, prompt, 20).new_tokens
    for fallback in (ModelDrafter(tiny_llama(seed=1, logit_scale=3.0)), NGramDrafter(32)):
        both = LookupFirst(NGramDrafter(32, max_ngram=3, min_ngram=3), fallback)
        out = speculative_generate(target, both, prompt, 20, gamma=3)
        assert out.new_tokens == reference
    model = ModelDrafter(tiny_llama(seed=1, logit_scale=3.0))
    both = LookupFirst(NGramDrafter(32, max_ngram=3, min_ngram=3), model)
    speculative_generate(target, both, prompt, 20, gamma=3)
    assert both.calls == model.calls  # the lookup costs no model call
    law = exact_law(target, prompt, n_tokens=2, temperature=1.0)
    gen = torch.Generator().manual_seed(0)

    def draw() -> list[int]:
        drafter = LookupFirst(NGramDrafter(32, 3, 3), ModelDrafter(tiny_llama(seed=1, logit_scale=3.0)))
        return speculative_generate(target, drafter, prompt, 2, gamma=3, temperature=1.0, generator=gen).new_tokens

    assert chi_square_pvalue(empirical_law(draw, law.shape, 2000), law) > 1e-3
