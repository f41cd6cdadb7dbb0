"""Multi-block Jacobi decoding: exactly the greedy output for any block size, number of blocks,
activation share and recycling; one block in flight is plain Jacobi decoding, iteration for iteration."""

from __future__ import annotations

import random

import pytest
import torch

from specdec_core import ar, jacobi
from specdec_core.jacobi_multiblock import _window_size, jacobi_generate_multiblock
from specdec_core.toy import tiny_llama


def cases(count: int = 6):
    for seed in range(count):
        rng = random.Random(seed)
        yield tiny_llama(12, seed=seed, logit_scale=4.0), torch.tensor([[rng.randrange(12) for _ in range(rng.randint(1, 20))]])


@pytest.mark.parametrize("block_size, blocks, activation, recycle", [
    (1, 2, 0.85, 0), (4, 2, 0.85, 0), (7, 3, 0.0, 0), (16, 2, 0.5, 4), (5, 2, 1.0, 3)])
def test_multiblock_is_exact(block_size, blocks, activation, recycle):
    for model, ids in cases():
        reference = ar.generate(model, ids, 30, eos_token_id=5).new_tokens
        got = jacobi_generate_multiblock(model, ids, 30, block_size=block_size, blocks=blocks,
                                         activation=activation, recycle=recycle, eos_token_id=5)
        assert got.new_tokens == reference
        assert sum(got.stats["fixed"]) >= len(reference) and got.stats["iterations"] == len(got.stats["widths"])


def test_one_block_in_flight_is_plain_jacobi():
    for model, ids in cases():
        for block_size in (1, 4, 16):
            plain = jacobi.jacobi_generate(model, ids, 30, block_size=block_size)
            one = jacobi_generate_multiblock(model, ids, 30, block_size=block_size, blocks=1)
            assert one.new_tokens == plain.new_tokens and one.stats["fixed"] == plain.stats["fixed"]


def test_the_window_grows_by_a_block_once_the_real_one_is_far_enough():
    # 16-token blocks, two in flight, activation 0.5: 7 fixed of the first block → only its rest
    assert _window_size(done=7, window=9, remaining=100, n=16, blocks=2, activation=0.5) == 9
    assert _window_size(done=8, window=8, remaining=100, n=16, blocks=2, activation=0.5) == 24  # joins
    assert _window_size(done=8, window=24, remaining=100, n=16, blocks=2, activation=0.5) == 24  # two in flight
    assert _window_size(done=8, window=8, remaining=10, n=16, blocks=2, activation=0.5) == 10  # max_new_tokens
    model, ids = next(cases(1))
    wide = jacobi_generate_multiblock(model, ids, 30, block_size=6, blocks=3, activation=0.0)
    assert max(wide.stats["widths"][1:]) > 6 + 1  # a later forward reads more than one block


def test_bad_settings_are_refused():
    model, ids = next(cases(1))
    for kwargs in ({"block_size": 0}, {"blocks": 0}, {"activation": 1.5}):
        with pytest.raises(ValueError, match="need block_size"):
            jacobi_generate_multiblock(model, ids, 8, **kwargs)
