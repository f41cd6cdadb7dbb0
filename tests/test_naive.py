"""The tutorial's naive method (specdec_core.naive) on toy models with a toy word-level tokenizer."""

from __future__ import annotations

import math

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from specdec_core import ar, naive
from specdec_core.toy import tiny_llama

WORDS = ["<s>", "</s>"] + (
    "the a cat dog sat on mat and ran to park big small red blue it is was very happy sad fast slow "
    "tree house bird sun moon day night"
).split()
PROMPT = "the cat sat on the"


@pytest.fixture(scope="module")
def tok():
    """32 whole words, one id each; decode joins them with spaces, so text round-trips exactly."""
    vocab = {w: i for i, w in enumerate(WORDS)}
    assert len(vocab) == 32
    backend = Tokenizer(models.WordLevel(vocab, unk_token="the"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<s>", eos_token="</s>")


@pytest.fixture(scope="module")
def draft():
    return tiny_llama(seed=1, logit_scale=5.0)


@pytest.fixture(scope="module")
def target():
    return tiny_llama(seed=2, num_layers=3, logit_scale=5.0)


def hand_average_log_likelihood(model, ids, start=1):
    """Plain Python: softmax by hand for each position, log of the next token's probability."""
    logits = model(input_ids=ids).logits[0].tolist()
    ids = ids[0].tolist()
    terms = []
    for t in range(start, len(ids)):
        row = logits[t - 1]
        m = max(row)
        log_z = m + math.log(sum(math.exp(x - m) for x in row))
        terms.append(row[ids[t]] - log_z)
    return sum(terms) / len(terms)


def test_average_log_likelihood_equals_hand_computation(target):
    ids = torch.tensor([[2, 4, 6, 7, 2, 8, 9, 3]])
    with torch.no_grad():
        for start in (1, 3, 7):
            expected = hand_average_log_likelihood(target, ids, start)
            assert naive.average_log_likelihood(target, ids, start) == pytest.approx(expected, abs=1e-5)
    with pytest.raises(ValueError, match="start"):
        naive.average_log_likelihood(target, ids, start=8)
    with pytest.raises(ValueError, match="T >= 2"):
        naive.token_log_probs(target, torch.tensor([[3]]))


def test_prompt_included_vs_generated_only(target):
    prompt = torch.tensor([[2, 4, 6, 7, 2]])
    new = [8, 9, 3, 11]
    ids = torch.cat([prompt, torch.tensor([new])], dim=1)
    lp = naive.token_log_probs(target, ids)  # 8 scores: tokens 1..8
    included = naive.average_log_likelihood(target, ids)
    generated = naive.generated_log_likelihood(target, prompt, new)
    # generated-only = mean over the last 4 tokens; prompt-included mixes in the 4 prompt tokens
    assert generated == pytest.approx(lp[-4:].mean().item(), abs=1e-6)
    assert included == pytest.approx(lp.mean().item(), abs=1e-6)
    assert included == pytest.approx((lp[:4].sum().item() + 4 * generated) / 8, abs=1e-5)
    assert abs(included - generated) > 1e-3  # the prompt's tokens shift the tutorial's score
    with pytest.raises(ValueError, match="no generated tokens"):
        naive.generated_log_likelihood(target, prompt, [])


def test_output_is_the_drafts_own_text(draft, target, tok):
    gen = naive.naive_generate(draft, target, PROMPT, 12, tokenizer=tok)
    ids = tok(PROMPT, return_tensors="pt").input_ids
    draft_alone = ar.generate(draft, ids, 12, eos_token_id=tok.eos_token_id)
    target_alone = ar.generate(target, ids, 12, eos_token_id=tok.eos_token_id)
    assert gen.new_tokens == draft_alone.new_tokens
    assert gen.text == tok.decode(draft_alone.new_tokens, skip_special_tokens=True)
    assert gen.text != tok.decode(target_alone.new_tokens, skip_special_tokens=True)  # the toys disagree
    # the tutorial's returned string is prompt + answer
    assert gen.stats.draft_text == tok.decode(ids[0].tolist() + gen.new_tokens, skip_special_tokens=True)


def test_target_only_changes_the_score_never_the_text(draft, target, tok):
    other_target = tiny_llama(seed=9, logit_scale=5.0)
    a = naive.naive_generate(draft, target, PROMPT, 10, tokenizer=tok)
    b = naive.naive_generate(draft, other_target, PROMPT, 10, tokenizer=tok)
    assert a.text == b.text and a.new_tokens == b.new_tokens
    assert a.stats.score != pytest.approx(b.stats.score, abs=1e-4)


def test_scores_match_the_scorers(draft, target, tok):
    gen = naive.naive_generate(draft, target, PROMPT, 10, tokenizer=tok)
    scored = torch.tensor([gen.stats.scored_ids])
    assert scored[0].tolist() == tok(gen.stats.draft_text).input_ids  # re-tokenized text
    assert gen.stats.score == pytest.approx(naive.average_log_likelihood(target, scored), abs=1e-5)
    n_prompt = len(tok(PROMPT).input_ids)
    assert gen.stats.prompt_tokens == n_prompt
    only = naive.average_log_likelihood(target, scored, start=n_prompt)
    assert gen.stats.score_generated_only == pytest.approx(only, abs=1e-5)
    assert gen.stats.target_calls == 0 and gen.stats.score_calls == 1  # the target scores, it emits nothing
    text, score = naive.tutorial_speculative_decoding(draft, target, tok, tok, PROMPT, 10)
    assert (text, score) == (gen.stats.draft_text, pytest.approx(gen.stats.score, abs=1e-6))


def test_first_token_distributions(draft, target):
    ids = torch.tensor([[2, 4, 6, 7]])
    q, p = naive.first_token_distributions(draft, target, ids)
    with torch.no_grad():
        assert torch.allclose(q, draft(input_ids=ids).logits[0, -1].softmax(-1), atol=1e-6)
        assert torch.allclose(p, target(input_ids=ids).logits[0, -1].softmax(-1), atol=1e-6)
    assert naive.total_variation(p, q) > 0.1  # two different toys: different distributions
    q0, p0 = naive.first_token_distributions(draft, target, ids, temperature=0.0)
    assert q0.max() == 1.0 and p0.max() == 1.0


def test_total_variation_and_empirical_distribution():
    p = torch.tensor([0.5, 0.5, 0.0])
    assert naive.total_variation(p, p) == 0.0
    assert naive.total_variation(p, torch.tensor([0.0, 0.0, 1.0])) == pytest.approx(1.0)
    assert naive.total_variation(p, torch.tensor([0.25, 0.25, 0.5])) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="different supports"):
        naive.total_variation(p, torch.ones(4) / 4)
    emp = naive.empirical_distribution([0, 2, 2, 1], 4)
    assert emp.tolist() == [0.25, 0.25, 0.5, 0.0]
    # many samples from p: the empirical TV shrinks towards 0 (fixed seed)
    draws = torch.multinomial(p, 20000, replacement=True, generator=torch.Generator().manual_seed(0))
    assert naive.total_variation(naive.empirical_distribution(draws, 3), p) < 0.01


def test_threshold_first_token_exact():
    q = torch.tensor([0.7, 0.2, 0.1])
    p = torch.tensor([0.1, 0.3, 0.6])
    r, a = naive.threshold_first_token(q, p, float("inf"))  # reject everything: the target writes
    assert a == 0.0 and torch.allclose(r, p.double())
    r, a = naive.threshold_first_token(q, p, float("-inf"))  # accept everything: the draft's output
    assert a == pytest.approx(1.0) and torch.allclose(r, q.double())
    # keep only tokens with log p >= log 0.25 (ids 1 and 2): A = 0.3, r = q·keep + 0.7·p
    r, a = naive.threshold_first_token(q, p, math.log(0.25))
    assert a == pytest.approx(0.3)
    assert torch.allclose(r, torch.tensor([0.07, 0.41, 0.52], dtype=torch.float64))
    assert r.sum().item() == pytest.approx(1.0)
    assert naive.total_variation(r, p.double()) > 0.05  # still not the target's distribution


def test_threshold_outcome():
    out = naive.threshold_outcome(
        scores=[-1.0, -2.0, -3.0, -0.5],
        threshold=-1.5,
        draft_times=[1.0] * 4,
        score_times=[0.5] * 4,
        target_times=[10.0] * 4,
        draft_is_target=[False, False, False, True],
    )
    assert out["accepted"] == pytest.approx(0.5)  # -1.0 and -0.5 pass
    assert out["speedup"] == pytest.approx(40.0 / (6.0 + 20.0))
    assert out["target_output"] == pytest.approx(0.75)  # the 2 rejected + the kept draft equal to the target's
    assert naive.threshold_accepts([-1.0, -2.0], -1.0).tolist() == [True, False]


def test_threshold_sweep_trades_acceptance_for_distance():
    q = torch.tensor([0.6, 0.3, 0.1, 0.0])
    p = torch.tensor([0.1, 0.2, 0.3, 0.4])
    rates, dists = naive.threshold_sweep(q, p, [float("-inf"), math.log(0.15), math.log(0.25), float("inf")])
    assert rates == pytest.approx([1.0, 0.4, 0.1, 0.0])
    assert dists[0] == pytest.approx(naive.total_variation(q, p)) and dists[-1] == 0.0
    assert all(d > 0 for d, a in zip(dists, rates) if a > 0)  # any acceptance leaves the target's law
    # speculative sampling accepts 1 - TV(p, q) = 0.4 of the drafts with distance 0; the threshold
    # rule accepting as much is far from p
    assert dists[1] > 0.1


def test_lesson_panels_build_and_draw():
    """The lesson 01 / 02 widgets: built over the pure functions, they draw without error."""
    import matplotlib

    matplotlib.use("Agg")
    from specdec_core.viz import widgets

    class Tok:
        def decode(self, ids):
            return f"<{ids[0]}>"

    panel = widgets.sampling_panel(torch.randn(40, generator=torch.Generator().manual_seed(0)), Tok(), top=8)
    assert len(panel.children) == 3
    q = torch.tensor([0.6, 0.3, 0.1, 0.0])
    p = torch.tensor([0.1, 0.2, 0.3, 0.4])
    panel = widgets.threshold_panel([-1.0, -2.5], [-0.8, -1.2], [1.0, 1.0], [0.2, 0.2], [5.0, 5.0], [False, False], q, p)
    whole, token = panel.children[0].children
    whole.value, token.value = -0.5, -1.5  # moving a slider re-runs the pure functions and redraws
    assert (whole.value, token.value) == (-0.5, -1.5)


def test_score_text_splits_prompt_and_answer(target, tok):
    out = naive.score_text(target, tok, PROMPT + " dog ran to the park", PROMPT)
    ids = torch.tensor([tok(PROMPT + " dog ran to the park").input_ids])
    assert out["scored_ids"] == ids[0].tolist() and out["prompt_tokens"] == 5
    assert out["score"] == pytest.approx(naive.average_log_likelihood(target, ids), abs=1e-5)
    answer = naive.generated_log_likelihood(target, ids[:, :5], ids[0, 5:])
    assert out["score_generated_only"] == pytest.approx(answer, abs=1e-5)


def test_best_threshold_accuracy():
    assert naive.best_threshold_accuracy([-1.0, -0.5], [-3.0, -2.0]) == 1.0  # separable
    assert naive.best_threshold_accuracy([-1.0, -0.2], [-3.0, -0.5]) == 0.75  # one bad text scores high
    assert naive.best_threshold_accuracy([-2.0, -1.0], [-1.5, -0.5]) == 0.5  # interleaved: no threshold helps
    assert naive.best_threshold_accuracy([-1.0], [-1.0]) == 0.5  # identical scores: a coin
