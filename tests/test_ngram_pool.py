"""The n-gram pool and Jacobi decoding with rejection recycling: the output stays exactly the greedy
output whatever the pool guesses (shown failing when a state is trusted without the convergence test)."""

from __future__ import annotations

import random

import pytest
import torch

from specdec_core import ar, jacobi
from specdec_core.ngram_pool import NGramPool
from specdec_core.toy import tiny_llama


def test_the_pool_keeps_the_latest_full_ngram_per_first_token():
    pool = NGramPool(3)
    pool.add([1, 2, 3, 4, 1, 5])
    assert pool.continuation(1, 5) == [2, 3]  # the later (1, 5) is shorter: the full n-gram stays
    assert pool.continuation(3, 1) == [4] and pool.continuation(9, 3) == []
    pool.add([1, 7, 8])
    assert pool.continuation(1, 5) == [7, 8]  # a later full n-gram replaces it
    with pytest.raises(ValueError, match="n >= 2"):
        NGramPool(1)


def cases(count: int = 8):
    for seed in range(count):
        rng = random.Random(seed)
        model = tiny_llama(12, seed=seed, logit_scale=4.0)
        yield model, torch.tensor([[rng.randrange(12) for _ in range(rng.randint(1, 20))]])


@pytest.mark.parametrize("block_size, n", [(1, 2), (4, 3), (7, 4), (16, 5)])
def test_recycling_keeps_jacobi_exact(block_size, n):
    for model, ids in cases():
        reference = ar.generate(model, ids, 30, eos_token_id=5).new_tokens
        got = jacobi.jacobi_generate(model, ids, 30, block_size=block_size, recycle=n, eos_token_id=5)
        assert got.new_tokens == reference
        assert got.stats.iterations == len(got.stats.fixed) and sum(got.stats.fixed) == len(reference)


def test_even_a_pool_of_nonsense_keeps_it_exact_and_trusting_a_state_does_not(monkeypatch):
    monkeypatch.setattr(NGramPool, "continuation", lambda self, token, k: [(token * 7 + i) % 12 for i in range(k)])
    models = list(cases(4))
    for model, ids in models:
        assert jacobi.jacobi_generate(model, ids, 24, block_size=6, recycle=3).new_tokens == ar.generate(model, ids, 24).new_tokens
    monkeypatch.setattr(jacobi, "converged_count", lambda old, new: len(new))  # a state trusted unverified
    assert any(jacobi.jacobi_generate(m, ids, 24, block_size=6, recycle=3).new_tokens != ar.generate(m, ids, 24).new_tokens
               for m, ids in models)


def test_recycling_starts_iterations_from_pool_guesses_and_can_save_some():
    model, ids = list(cases(9))[8]  # a seed where the pool finds much (fixed seeds: deterministic)
    plain = jacobi.jacobi_generate(model, ids, 30, block_size=8)
    recycled = jacobi.jacobi_generate(model, ids, 30, block_size=8, recycle=4)
    assert recycled.new_tokens == plain.new_tokens and plain.stats.recycled == 0
    assert recycled.stats.recycled > 0 and recycled.stats.iterations < plain.stats.iterations
