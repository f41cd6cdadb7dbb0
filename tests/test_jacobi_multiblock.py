"""Multi-block Jacobi decoding, ``jacobi_generate(blocks=K)``: exactly the greedy output for any block
size, number of blocks, activation share and recycling; one block in flight is plain Jacobi decoding.
Every forward has the widest window's width (K blocks: K · n), the shrinking window padded.

``jacobi_generate`` replaced two loops, the one-block ``jacobi_generate`` and ``jacobi_multiblock``'s
``jacobi_generate_multiblock``. Both are kept below, as they were, so that the merged loop is compared
with them iteration for iteration (states, tokens fixed per iteration, forward widths, recycled starts) —
and with the iteration counts the old code printed on the same toys."""

from __future__ import annotations

import random

import pytest
import torch

from specdec_core import ar, jacobi
from specdec_core.generation import eos_set
from specdec_core.jacobi import converged_count, jacobi_generate, recycle_guess, window_size
from specdec_core.lm import Decoder
from specdec_core.ngram_pool import NGramPool
from specdec_core.toy import tiny_llama


def cases(count: int = 6):
    for seed in range(count):
        rng = random.Random(seed)
        yield tiny_llama(12, seed=seed, logit_scale=4.0), torch.tensor([[rng.randrange(12) for _ in range(rng.randint(1, 20))]])


# --- the two loops jacobi_generate replaced, as they were (timing and stats left out) -------------------

def cut_at_eos(tokens: list[int], stops: set[int]) -> tuple[list[int], bool]:
    """tokens up to and including the first EOS, and whether there was one (the old loops' EOS rule)."""
    for i, token in enumerate(tokens):
        if token in stops:
            return tokens[: i + 1], True
    return tokens, False


@torch.inference_mode()
def old_one_block(model, input_ids, max_new_tokens, block_size, init="repeat", eos_token_id=None,
                  generator=None, recycle=0):
    """The one-block ``jacobi_generate`` before the merge → (tokens, trajectory, recycled)."""
    stops, prompt, decoder = eos_set(eos_token_id), input_ids, Decoder(model)
    out, trajectory, ended, recycled = [], [], False, 0
    pool = NGramPool(recycle) if recycle else None
    if pool is not None:
        pool.add(prompt[0].tolist())
    while len(out) < max_new_tokens and not ended:
        n = min(block_size, max_new_tokens - len(out))
        state = jacobi._guess(model, init, n, out[-1] if out else int(prompt[0, -1]), None, generator)
        states, done = [list(state)], 0
        while done < n and not ended:
            if pool is not None and recycle_guess(pool, state, done, out[-1] if out else int(prompt[0, -1])):
                states[-1] = list(state)
                recycled += 1
            guess = torch.tensor([state[done : n - 1]], dtype=torch.long)
            if decoder.length == 0:
                logits = decoder.prefill(torch.cat([prompt, guess], dim=1), logits_to_keep=n)
            else:
                logits = decoder.step(torch.cat([torch.tensor([[out[-1]]]), guess], dim=1))
            new = logits[0].argmax(-1).tolist()
            if pool is not None:
                pool.add(new)
            k = converged_count(state[done:], new)
            state[done:] = new
            states.append(list(state))
            fixed, ended = cut_at_eos(new[:k], stops)
            out.extend(fixed)
            done += k
            decoder.rollback(prompt.shape[1] + len(out) - 1)
        trajectory.append(states)
    return out, trajectory, recycled


@torch.inference_mode()
def old_multiblock(model, input_ids, max_new_tokens, block_size=16, blocks=2, activation=0.85, recycle=0,
                   eos_token_id=None):
    """``jacobi_multiblock.jacobi_generate_multiblock`` before the merge → (tokens, fixed, widths, recycled);
    its ``fixed`` counted the converged tokens of an iteration before the cut at an EOS."""
    stops, prompt, decoder = eos_set(eos_token_id), input_ids, Decoder(model)
    pool = NGramPool(recycle) if recycle else None
    if pool is not None:
        pool.add(prompt[0].tolist())
    out, window, fixed, widths, recycled, ended = [], [], [], [], 0, False
    while len(out) < max_new_tokens and not ended:
        newest = out[-1] if out else int(prompt[0, -1])
        size = window_size(len(out), len(window), max_new_tokens - len(out), block_size, blocks, activation)
        window += [window[-1] if window else newest] * (size - len(window))
        if pool is not None and recycle_guess(pool, window, 0, newest):
            recycled += 1
        guess = torch.tensor([window[:-1]], dtype=torch.long)
        if decoder.length == 0:
            logits = decoder.prefill(torch.cat([prompt, guess], dim=1), logits_to_keep=len(window))
        else:
            logits = decoder.step(torch.cat([torch.tensor([[newest]]), guess], dim=1))
        widths.append(guess.shape[1] + (1 if out else prompt.shape[1]))
        new = logits[0].argmax(-1).tolist()
        if pool is not None:
            pool.add(new)
        k = converged_count(window, new)
        done, ended = cut_at_eos(new[:k], stops)
        out.extend(done)
        fixed.append(k)
        window = new[k:]
        decoder.rollback(prompt.shape[1] + len(out) - 1)
    return out, fixed, widths, recycled


# --- the merged loop against them ------------------------------------------------------------------------

@pytest.mark.parametrize("block_size, init, recycle, eos", [
    (1, "repeat", 0, None), (4, "repeat", 0, 5), (16, "repeat", 0, None), (6, "random", 0, 5), (5, "pad", 0, None),
    (8, "repeat", 4, 5), (3, "random", 3, None)])
def test_one_block_is_the_old_one_block_loop_iteration_for_iteration(block_size, init, recycle, eos):
    for model, ids in cases():
        tokens, trajectory, recycled = old_one_block(model, ids, 30, block_size, init, eos,
                                                     torch.Generator().manual_seed(3), recycle)
        new = jacobi_generate(model, ids, 30, block_size=block_size, init=init, eos_token_id=eos, recycle=recycle,
                              generator=torch.Generator().manual_seed(3))
        assert new.new_tokens == tokens and new.stats.trajectory == trajectory
        assert new.stats.fixed == [min(c - b, len(tokens) - i * block_size - b) for i, states in enumerate(trajectory)
                                   for b, c in zip(jacobi.fixed_counts(states), jacobi.fixed_counts(states)[1:])
                                   if i * block_size + b < len(tokens)]
        assert new.stats.iterations == sum(len(s) - 1 for s in trajectory) == len(new.stats.widths)
        assert new.stats.recycled == recycled and set(new.stats.widths) == {block_size}


@pytest.mark.parametrize("block_size, blocks, activation, recycle, eos", [
    (1, 2, 0.85, 0, None), (4, 2, 0.85, 0, 5), (7, 3, 0.0, 0, None), (16, 2, 0.5, 4, 5), (5, 2, 1.0, 3, None),
    (6, 2, 0.5, 3, None)])
def test_several_blocks_are_the_old_multiblock_loop_iteration_for_iteration(block_size, blocks, activation,
                                                                               recycle, eos):
    for model, ids in cases():
        tokens, fixed, widths, recycled = old_multiblock(model, ids, 30, block_size, blocks, activation, recycle, eos)
        new = jacobi_generate(model, ids, 30, block_size=block_size, blocks=blocks, activation=activation,
                              recycle=recycle, eos_token_id=eos)
        # the old first forward ran with the prompt; now the prompt is prefilled first, and every forward padded
        assert new.new_tokens == tokens and new.stats.used == [widths[0] - ids.shape[1] + 1] + widths[1:]
        assert set(new.stats.widths) == {blocks * block_size} and new.stats.recycled == recycled
        assert new.stats.fixed[:-1] == fixed[:-1] and new.stats.fixed[-1] <= fixed[-1]  # now cut at the EOS
        assert sum(new.stats.fixed) == len(tokens) and new.stats.iterations == len(fixed)


# Iterations the old code took over the six toys of cases() for 30 tokens (printed by the old
# ``jacobi.jacobi_generate`` and ``jacobi_multiblock.jacobi_generate_multiblock`` before the merge).
OLD_ITERATIONS = {  # (block_size, blocks, recycle) → iterations per toy; activation 0.5
    (4, 1, 0): [13, 30, 30, 30, 30, 30],
    (16, 1, 0): [7, 29, 30, 30, 30, 29],
    (16, 1, 3): [7, 28, 30, 30, 29, 29],
    (8, 1, 4): [9, 27, 30, 30, 30, 27],
    (4, 2, 0): [12, 29, 30, 30, 30, 29],
    (6, 2, 3): [9, 28, 30, 30, 30, 29],
    (16, 2, 3): [7, 30, 30, 30, 30, 29],
    (6, 3, 3): [8, 24, 30, 30, 30, 28],
}


@pytest.mark.parametrize("key", list(OLD_ITERATIONS))
def test_iteration_counts_are_those_of_the_old_code(key):
    block_size, blocks, recycle = key
    got = [jacobi_generate(model, ids, 30, block_size=block_size, blocks=blocks, activation=0.5, recycle=recycle,
                           ).stats.iterations for model, ids in cases()]
    assert got == OLD_ITERATIONS[key]


@pytest.mark.parametrize("block_size, blocks, activation, recycle", [
    (1, 2, 0.85, 0), (4, 2, 0.85, 0), (7, 3, 0.0, 0), (16, 2, 0.5, 4), (5, 2, 1.0, 3)])
def test_multiblock_is_exact(block_size, blocks, activation, recycle):
    for model, ids in cases():
        reference = ar.generate(model, ids, 30, eos_token_id=5).new_tokens
        for init in ("repeat", "random"):
            got = jacobi_generate(model, ids, 30, block_size=block_size, blocks=blocks, activation=activation,
                                  recycle=recycle, eos_token_id=5, init=init, generator=torch.Generator().manual_seed(1))
            assert got.new_tokens == reference
            assert sum(got.stats.fixed) == len(reference) and got.stats.iterations == len(got.stats.widths)
            assert any(u < blocks * block_size for u in got.stats.used)  # padded forwards happened


def test_the_window_grows_by_a_block_once_the_real_one_is_far_enough():
    # 16-token blocks, two in flight, activation 0.5: 7 fixed of the first block → only its rest
    assert window_size(done=7, window=9, remaining=100, n=16, blocks=2, activation=0.5) == 9
    assert window_size(done=8, window=8, remaining=100, n=16, blocks=2, activation=0.5) == 24  # joins
    assert window_size(done=8, window=24, remaining=100, n=16, blocks=2, activation=0.5) == 24  # two in flight
    assert window_size(done=8, window=8, remaining=10, n=16, blocks=2, activation=0.5) == 10  # max_new_tokens
    assert window_size(done=15, window=1, remaining=100, n=16, blocks=1, activation=0.0) == 1  # one block: its rest
    model, ids = next(cases(1))
    wide = jacobi_generate(model, ids, 30, block_size=6, blocks=3, activation=0.0)
    assert max(wide.stats.used) > 6 + 1 and set(wide.stats.widths) == {18}  # a forward reads more than one block
    one = jacobi_generate(model, ids, 30, block_size=6)
    assert max(one.stats.used) <= 6 and len(one.stats.trajectory) == 5
    with pytest.raises(ValueError, match="one block in flight"):
        _ = wide.stats.trajectory


def test_bad_settings_are_refused():
    model, ids = next(cases(1))
    with pytest.raises(ValueError, match="block_size"):
        jacobi_generate(model, ids, 8, block_size=0)
    for kwargs in ({"blocks": 0}, {"activation": 1.5}):
        with pytest.raises(ValueError, match="need blocks"):
            jacobi_generate(model, ids, 8, **kwargs)
