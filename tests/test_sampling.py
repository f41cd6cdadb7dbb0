"""logits_to_probs and sample: the properties every decoding method relies on."""

import pytest
import torch

from specdec_core.sampling import logits_to_probs, sample

LOGITS = torch.tensor([2.0, 1.0, 0.5, 0.0, -1.0, 3.0])


def test_temperature_zero_is_one_hot_argmax():
    probs = logits_to_probs(LOGITS, temperature=0.0)
    assert probs.tolist() == [0, 0, 0, 0, 0, 1]


def test_plain_softmax_at_temperature_one():
    assert torch.allclose(logits_to_probs(LOGITS), LOGITS.softmax(-1))


def test_low_temperature_sharpens_high_flattens():
    assert logits_to_probs(LOGITS, 0.5).max() > logits_to_probs(LOGITS, 1.0).max() > logits_to_probs(LOGITS, 2.0).max()


@pytest.mark.parametrize("k", [1, 2, 4])
def test_top_k_keeps_k_tokens_renormalised(k):
    probs = logits_to_probs(LOGITS, 1.0, top_k=k)
    kept = probs > 0
    assert kept.sum() == k
    assert torch.equal(kept.nonzero().flatten().sort().values, LOGITS.topk(k).indices.sort().values)
    assert torch.isclose(probs.sum(), torch.tensor(1.0))
    full = LOGITS.softmax(-1)
    assert torch.allclose(probs[kept], full[kept] / full[kept].sum())


@pytest.mark.parametrize("p", [0.3, 0.6, 0.9, 0.99])
def test_top_p_keeps_the_smallest_set_reaching_p(p):
    probs = logits_to_probs(LOGITS, 1.0, top_p=p)
    full = LOGITS.softmax(-1)
    kept = probs > 0
    ordered = full.sort(descending=True).values
    n = int((ordered.cumsum(0) < p).sum()) + 1  # smallest prefix whose mass reaches p
    assert kept.sum() == n
    assert full[kept].sum() >= p - 1e-6
    assert torch.isclose(probs.sum(), torch.tensor(1.0))


def test_top_p_always_keeps_the_top_token():
    probs = logits_to_probs(torch.tensor([10.0, 0.0, 0.0]), 1.0, top_p=0.01)
    assert probs.tolist() == [1.0, 0.0, 0.0]


def test_batched_rows_are_warped_independently():
    logits = torch.stack([LOGITS, LOGITS.flip(0)])
    probs = logits_to_probs(logits, 0.7, top_k=3, top_p=0.9)
    assert torch.allclose(probs[0], logits_to_probs(LOGITS, 0.7, top_k=3, top_p=0.9))
    assert torch.allclose(probs[1], logits_to_probs(LOGITS.flip(0), 0.7, top_k=3, top_p=0.9))


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="temperature"):
        logits_to_probs(LOGITS, -1.0)
    with pytest.raises(ValueError, match="top_k"):
        logits_to_probs(LOGITS, 1.0, top_k=0)
    with pytest.raises(ValueError, match="top_p"):
        logits_to_probs(LOGITS, 1.0, top_p=1.5)


def test_sample_is_reproducible_and_follows_probs():
    probs = logits_to_probs(LOGITS, 1.0)
    draws = lambda seed: sample(probs.expand(20000, -1), torch.Generator().manual_seed(seed))  # noqa: E731
    assert torch.equal(draws(1), draws(1))
    assert not torch.equal(draws(1), draws(2))
    freq = torch.bincount(draws(3), minlength=6).float() / 20000
    assert (freq - probs).abs().max() < 0.015
    assert sample(probs, torch.Generator().manual_seed(0)).shape == ()
