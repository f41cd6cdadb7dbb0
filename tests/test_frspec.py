"""FR-Spec for a standalone draft: its output layer keeps S rows, the guesses stay in S, greedy output
is the target's, and the sampled law is exactly the target's (a q that ignores S is caught)."""

from __future__ import annotations

import pytest
import torch

from specdec_core import ar
from specdec_core.drafters import ModelDrafter
from specdec_core.exactness import chi_square_pvalue, empirical_law, exact_law
from specdec_core.frspec import reduced_head
from specdec_core.speculative import speculative_generate
from specdec_core.toy import tiny_llama

VOCAB = 8
KEPT = torch.tensor([0, 2, 3, 5])
PROMPT = torch.tensor([[2, 5, 3]])


def models(seed: int = 0):
    target = tiny_llama(vocab_size=VOCAB, hidden_size=32, seed=seed, logit_scale=20.0)
    draft = tiny_llama(vocab_size=VOCAB, hidden_size=32, num_layers=1, seed=seed + 7, logit_scale=4.0)
    return target, draft


def test_the_reduced_copy_computes_the_kept_columns_and_leaves_the_draft_alone():
    _, draft = models()
    small = reduced_head(draft, KEPT)
    ids = torch.tensor([[1, 4, 6]])
    with torch.no_grad():
        full, kept = draft(ids).logits, small(ids).logits
    assert kept.shape[-1] == KEPT.numel() and torch.allclose(kept, full[..., KEPT], atol=1e-6)
    assert draft.get_output_embeddings().weight.shape[0] == VOCAB  # the original is unchanged


def test_a_fast_twin_reduces_too_and_stays_packed():
    """The fast path's twin (prepacked oneDNN weights, which cannot be deep-copied) gets the same rows."""
    from specdec_core.fast import PackedLinear, available, twin

    if not available(torch.device("cpu")):
        pytest.skip("this torch build has no oneDNN")
    _, draft = models()
    small = reduced_head(twin(draft), KEPT)
    ids = torch.tensor([[1, 4, 6]])
    with torch.no_grad():
        full, kept = draft(ids).logits, small(ids).logits
    assert isinstance(small.get_output_embeddings(), PackedLinear)
    assert torch.allclose(kept, full[..., KEPT], atol=1e-5)


@pytest.mark.parametrize("rung", ["int8", "int8-bf16"])
def test_an_int8_engine_reduces_too_and_keeps_its_int8_products(rung):
    """On an int8 engine the output layer has no float weight: the reduced head keeps the same int8 rows and scales,
    so each kept column is bitwise the full layer's."""
    from specdec_core.precision import Int8Linear, at_precision

    _, draft = models()
    engine = at_precision(draft, rung)
    small = reduced_head(engine, KEPT)
    ids = torch.tensor([[1, 4, 6]])
    with torch.no_grad():
        full, kept = engine(ids).logits, small(ids).logits
    assert isinstance(small.get_output_embeddings(), Int8Linear)
    assert kept.shape[-1] == KEPT.numel() and torch.equal(kept, full[..., KEPT])
    assert engine.get_output_embeddings().out_features == VOCAB  # the engine is unchanged


@pytest.mark.parametrize("seed", [0, 1])
def test_greedy_equals_ar_and_guesses_stay_in_the_set(seed):
    target, draft = models(seed)
    prompt = torch.randint(0, VOCAB, (1, 5), generator=torch.Generator().manual_seed(seed))
    out = speculative_generate(target, ModelDrafter(draft, KEPT), prompt, 16, gamma=3)
    assert out.new_tokens == ar.generate(target, prompt, 16).new_tokens
    assert {t for s in out.stats.steps for t in s.drafted} <= set(KEPT.tolist())


def _law(drafter_cls=ModelDrafter):
    target, draft = models()
    drafter = drafter_cls(draft, KEPT)
    gen = torch.Generator().manual_seed(7)

    def draw():
        return speculative_generate(target, drafter, PROMPT, 2, gamma=2, temperature=1.0, generator=gen).new_tokens

    return chi_square_pvalue(empirical_law(draw, (VOCAB, VOCAB), 1500), exact_law(target, PROMPT, n_tokens=2))


def test_sampling_with_the_reduced_set_matches_the_target_law():
    assert _law() > 0.001


def test_a_q_that_ignores_the_set_fails_the_same_test():
    class Broken(ModelDrafter):  # claims mass on tokens it never proposes
        def guess(self, logits):
            q, token = super().guess(logits)
            return torch.full_like(q, 1.0 / VOCAB), token

    assert _law(Broken) < 1e-4
