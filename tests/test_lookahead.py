"""Lookahead decoding: the greedy output is AR's, every row of the one forward sees exactly what it should,
the cache after a step is a clean prefix, the sampled law is the target's (chi-square), the pool keeps
what it should — and each check fails on a broken variant (the bug zoo at the end)."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from specdec_core import ar
from specdec_core import lookahead as L
from specdec_core import lookahead_shapes as S
from specdec_core import tree as T
from specdec_core.exactness import chi_square_pvalue, exact_law
from specdec_core.lm import Decoder
from specdec_core.ngram_pool import NGramPool
from specdec_core.sampling import Warp
from specdec_core.toy import tiny_llama

SHAPES = [(3, 3, 3), (5, 4, 5), (0, 2, 2), (1, 2, 1), (2, 5, 4), (0, 2, 0)]


def cases(count: int = 6):
    for seed in range(count):
        rng = random.Random(seed)
        model = tiny_llama(12, seed=seed, logit_scale=4.0)
        yield model, torch.tensor([[rng.randrange(12) for _ in range(rng.randint(1, 20))]])


def greedy_matches_ar(shapes=SHAPES, prompt_ngrams: bool = False) -> bool:
    for model, ids in cases():
        reference = ar.generate(model, ids, 30, eos_token_id=5).new_tokens
        for shape in shapes:
            got = L.lookahead_generate(model, ids, 30, shape=shape, eos_token_id=5, prompt_ngrams=prompt_ngrams)
            if got.new_tokens != reference:
                return False
    return True


@pytest.mark.parametrize("prompt_ngrams", [False, True])
def test_greedy_lookahead_gives_ars_tokens(prompt_ngrams):
    assert greedy_matches_ar(prompt_ngrams=prompt_ngrams)


def test_every_forward_has_its_shapes_width_and_padded_ones_give_ars_tokens():
    model, ids = next(cases())
    got = L.lookahead_generate(model, ids, 30, shape=(3, 3, 3), eos_token_id=5)
    assert set(got.stats.verify_widths) == {S.width_of((3, 3, 3))}
    assert any(s.used < s.width for s in got.stats.steps)  # the pool had fewer candidates than G: pads ran
    assert got.new_tokens == ar.generate(model, ids, 30, eos_token_id=5).new_tokens


def test_the_ar_shape_takes_plain_decode_steps(monkeypatch):
    """W = 0 and no candidate: a width-1 forward is a plain decode step — no mask, keep a plain crop — so
    "auto" falling back to the AR shape costs what AR costs; greedy output stays AR's."""
    calls = {"masked": 0, "keep": 0}
    masked, keep = Decoder.step_masked, Decoder.keep

    def spy(name, fn):
        def wrapped(self, *args, **kwargs):
            calls[name] += 1
            return fn(self, *args, **kwargs)
        return wrapped

    monkeypatch.setattr(Decoder, "step_masked", spy("masked", masked))
    monkeypatch.setattr(Decoder, "keep", spy("keep", keep))
    model, ids = next(cases())
    got = L.lookahead_generate(model, ids, 20, shape=(0, 2, 0))
    assert calls["masked"] == 0 and got.new_tokens == ar.generate(model, ids, 20).new_tokens
    assert calls["keep"] == got.stats.target_calls  # a crop to what the cache held: nothing to move
    L.lookahead_generate(model, ids, 20, shape=(3, 3, 3))
    assert calls["masked"] > 0 and calls["keep"] == calls["masked"] + got.stats.target_calls  # a real window: masked


def test_candidates_are_accepted_and_the_stats_add_up():
    model = tiny_llama(12, seed=0, logit_scale=4.0)
    ids = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6]])
    got = L.lookahead_generate(model, ids, 40, shape=(3, 3, 3))
    s = got.stats
    # every step emits its accepted tokens and one more; the last one may be cut at max_new_tokens
    assert s.target_calls == len(s.steps) and 40 <= sum(s.accepted_lengths) + s.target_calls < 40 + 3
    assert got.tokens_per_call > 1.5 and s.pool_hits > 0  # this toy settles into a loop the pool learns
    assert set(s.verify_widths) == {1 + (3 + 3) * 2}  # every forward: c, the window's 2 levels, 3 tails of 2
    assert s.steps[0].used == 1 + 3  # c and a one-level window (the pool still empty): padded to the width


def test_the_window_mask_follows_lades_layout():
    offsets, mask = L.window_mask(width=3, levels=2)  # [c, L0 ×3, L1 ×3]
    assert offsets.tolist() == [0, 1, 2, 3, 2, 3, 4]
    sees = {r: mask[r].nonzero().flatten().tolist() for r in range(7)}
    assert sees[0] == [0]
    assert sees[2] == [0, 1, 2]  # level 0, column 1: c and level-0 columns 0..1
    assert sees[5] == [0, 1, 2, 5]  # level 1, column 1: c, level-0 columns 0..1, itself


def _row_sequences(context: list[int], levels, tree) -> list[list[int]]:
    """What each row of a step's forward should see, as a plain sequence (the reference, no mask)."""
    ids, offsets, mask = L.step_inputs(context[-1], levels, tree)
    return [context[:-1] + [int(ids[j]) for j in mask[r].nonzero().flatten()] for r in range(ids.numel())]


def rows_see_what_they_should(step_inputs=L.step_inputs) -> bool:
    """Every row's logits from the one masked forward equal a causal forward over what that row should
    see — for the window rows and the trie rows alike — and positions agree with sequence lengths."""
    model = tiny_llama(16, seed=1, logit_scale=3.0)
    context = [3, 1, 4, 1, 5, 9, 2]
    levels = [[6, 5, 3], [5, 8, 9]]
    tree, _ = L.candidate_tree([(2, 6), (2, 7), (8,)])
    dec = Decoder(model)
    dec.prefill(torch.tensor([context[:-1]]))
    ids, offsets, mask = step_inputs(context[-1], levels, tree)
    logits = dec.step_masked(ids.view(1, -1), len(context) - 1 + offsets, mask)[0]
    for r, seq in enumerate(_row_sequences(context, levels, tree)):
        ref = model(torch.tensor([seq])).logits[0, -1]
        if not torch.allclose(logits[r], ref, atol=1e-4):
            return False
    return True


def test_every_row_of_the_forward_sees_exactly_what_it_should():
    assert rows_see_what_they_should()


def cache_is_clean_after_a_step() -> bool:
    """After a step whose accepted candidate shares its first token with a rejected one, the next logits
    equal a fresh prefill's: the cache holds exactly the context and the accepted path."""
    model = tiny_llama(16, seed=2, logit_scale=4.0)
    context = [3, 1, 4, 1, 5, 9, 2, 6]
    greedy = ar.generate(model, torch.tensor([context]), 3).new_tokens
    wrong = (greedy[1] + 1) % 16
    tree, _ = L.candidate_tree([(greedy[0], wrong), tuple(greedy[:2]), (4,)])  # nodes: g0, wrong, g1, 4
    dec = Decoder(model)
    dec.prefill(torch.tensor([context[:-1]]))
    ids, offsets, mask = L.step_inputs(context[-1], [[1, 2, 3]], tree)
    nw, n = ids.numel() - len(tree), ids.numel()
    ids, offsets, mask = T.padded(ids, offsets, mask, n + 3)  # three pads after the trie: never kept
    logits = dec.step_masked(ids.view(1, -1), len(context) - 1 + offsets, mask)[0]
    path, nxt, _, _ = T.accept(dec, tree, logits, [0] + list(range(nw, n)), Warp(0.0), None)  # keeps c + path
    assert path == [0, 2] and tree.tokens[path].tolist() + [nxt] == greedy
    after = dec.step(torch.tensor([[nxt]]))[0, -1]
    fresh = model(torch.tensor([context + greedy])).logits[0, -1]
    return torch.allclose(after, fresh, atol=1e-4)


def test_after_a_step_the_cache_is_a_clean_prefix():
    assert cache_is_clean_after_a_step()


def test_the_pool_keeps_the_g_most_recent_and_g1_is_jacobis_recycling():
    pool = NGramPool(3, size=2)
    for tail in [(1, 2), (3, 4), (1, 2), (5, 6)]:
        pool.remember(7, tail)
    assert pool.candidates(7) == [(5, 6), (1, 2)]  # (3, 4) least recently seen: dropped
    assert pool.continuation(7, 1) == [5]
    one = NGramPool(3)
    one.add([1, 2, 3, 1, 4])
    assert one.candidates(1) == [(2, 3)]  # the cut-off (1, 4) does not displace the full n-gram


def test_the_windows_ngrams_are_its_columns_diagonals():
    levels = [[1, 2, 3], [4, 5, 6]]
    new, grams = L.slide(levels, [7, 8, 9], depth=2)
    assert new == [[4, 5, 6], [7, 8, 9]] and grams == [(1, 4, 7), (2, 5, 8), (3, 6, 9)]
    filling, none = L.slide([[1, 2, 3]], [4, 5, 6], depth=2)
    assert filling == [[1, 2, 3], [4, 5, 6]] and none == []


def test_the_pools_ngrams_match_an_uncached_window_run():
    """The window's outputs in a run equal those of the same window computed without a cache, step by step."""
    model = tiny_llama(12, seed=4, logit_scale=4.0)
    prompt = [3, 1, 4, 1, 5]
    recorded = []
    original = L.slide
    try:
        L.slide = lambda levels, outputs, depth: (recorded.append((levels, outputs)), original(levels, outputs, depth))[1]
        out = L.lookahead_generate(model, torch.tensor([prompt]), 4, shape=(3, 3, 0)).new_tokens  # G = 0: one token a step
    finally:
        L.slide = original
    assert [len(levels) for levels, _ in recorded] == [1, 2, 2, 2]  # filling, then full: n-grams from step 2 on
    for i, (levels, outputs) in enumerate(recorded):
        context = prompt + out[:i]
        reference = []
        for j in range(len(levels[0])):  # the last level's column j sees c, level-0 columns ≤ j, column j above
            seq = context + levels[0][: j + 1] + [level[j] for level in levels[1:]]
            reference.append(int(model(torch.tensor([seq])).logits[0, -1].argmax()))
        assert outputs == reference


V = 6
WARPS = {"T=1": dict(temperature=1.0), "T=0.7, top-p 0.9": dict(temperature=0.7, top_p=0.9)}


def _law_pvalue(warp: dict, n: int = 1500) -> tuple[float, int]:
    target = tiny_llama(vocab_size=V, seed=0, logit_scale=2.5)
    prompt = torch.tensor([[2, 3, 2, 3, 2, 3]])
    gen, counts, hits = torch.Generator().manual_seed(1), np.zeros((V, V, V)), 0
    for _ in range(n):
        got = L.lookahead_generate(target, prompt, 3, shape=(2, 3, 2), prompt_ngrams=True, generator=gen, **warp)
        counts[tuple(got.new_tokens)] += 1
        hits += sum(got.stats.accepted_lengths)
    return chi_square_pvalue(counts, exact_law(target, prompt, 3, **warp)), hits


@pytest.mark.parametrize("warp", list(WARPS))
def test_sampled_lookahead_follows_the_targets_law(warp):
    p, accepted = _law_pvalue(WARPS[warp])
    assert accepted > 200 and p > 1e-3  # candidates were accepted often, and the law is the target's


# --- the bug zoo: each broken variant is caught by the check above it --------------------------


def _first_candidate(tree):
    """BUG: the first candidate is taken whole, without verification."""
    path, node = [], -1
    while tree.children(node):
        node = tree.children(node)[0]
        path.append(node)
    return path, node


def test_a_pool_entry_accepted_without_verification_is_caught(monkeypatch):
    def walk(tree, tokens, choice):
        path, node = _first_candidate(tree)
        return path, choice[node + 1]

    def sampled(tree, p, generator=None, tokens=None):
        path, node = _first_candidate(tree)
        return path, int(torch.multinomial(p[node + 1], 1, generator=generator))

    monkeypatch.setattr(T, "greedy_path", walk)  # the one tree verification, shared with token trees
    assert not greedy_matches_ar(shapes=[(3, 3, 3)])
    monkeypatch.setattr(T, "verify_tree", sampled)
    assert _law_pvalue(WARPS["T=1"])[0] < 1e-3


def test_a_rejected_candidates_kv_kept_is_caught(monkeypatch):
    keep = Decoder.keep

    def contiguous(self, idx, start=None):  # BUG: the slots after the first accepted node, not the path's nodes
        return keep(self, idx if len(idx) < 2 else [idx[0]] + list(range(idx[1], idx[1] + len(idx) - 1)))

    monkeypatch.setattr(Decoder, "keep", contiguous)
    assert not cache_is_clean_after_a_step()


def test_positions_off_by_one_are_caught(monkeypatch):
    def shifted(current, levels, tree):
        ids, offsets, mask = L.step_inputs(current, levels, tree)
        return ids, offsets + (offsets > 0).long(), mask

    assert not rows_see_what_they_should(shifted)


def test_a_verification_row_that_sees_the_window_is_caught():
    def leaky(current, levels, tree):
        ids, offsets, mask = L.step_inputs(current, levels, tree)
        mask = mask.clone()
        mask[-1, 1] = True  # the last trie node sees the window's first token
        return ids, offsets, mask

    assert not rows_see_what_they_should(leaky)


# --- shapes -------------------------------------------------------------------------------------


class FlatCosts:
    """A cost model whose v is ``slope`` per extra token (no overhead): steep → AR, flat → wide."""

    def __init__(self, slope: float) -> None:
        self.slope, self.step_s, self.overhead = slope, 1.0, 0.0

    def v(self, n: int, tree: bool = False) -> float:
        return 1.0 + self.slope * (n - 1)


@pytest.mark.parametrize("slope, wide", [(1.0, False), (0.0, True)])
def test_auto_shrinks_where_the_forward_is_dear_and_grows_where_it_is_cheap(slope, wide):
    model = tiny_llama(12, seed=0, logit_scale=4.0)
    ids = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6]])
    got = L.lookahead_generate(model, ids, 40, shape="auto", costs=FlatCosts(slope))
    assert got.new_tokens == ar.generate(model, ids, 40).new_tokens
    w, n, g = got.stats.shape
    assert (g > 0 and n > 2) if wide else (w, g) == (0, 0)
    assert got.stats.search["explored"] == S.EXPLORE and got.stats.shapes[0] == S.EXPLORE


def test_a_run_shorter_than_the_exploration_still_chooses():
    """The benchmark keeps the shape its warm-up chose: a warm-up answer that ends (EOS, max_new_tokens)
    before the exploration's steps still chooses from the steps it saw, so no timed run explores again."""
    model = tiny_llama(12, seed=0, logit_scale=4.0)
    ids = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6]])
    got = L.lookahead_generate(model, ids, 3, shape="auto", costs=FlatCosts(1.0))
    assert set(got.stats.shapes) == {S.EXPLORE}  # it ran with the explored shape only
    assert got.stats.search["steps"] == got.stats.target_calls < 8 and got.stats.shape in S.MENU
    assert got.stats.shape[0] == got.stats.shape[2] == 0  # a dear forward: the AR shape


def test_bad_shapes_get_clear_errors():
    model, ids = tiny_llama(12), torch.tensor([[1, 2]])
    with pytest.raises(ValueError, match="needs the machine's cost model"):
        L.lookahead_generate(model, ids, 4)
    for shape in [(3, 1, 3), (3, 3), (-1, 3, 3), "wide"]:
        with pytest.raises(ValueError, match="shape|N >= 2"):
            L.lookahead_generate(model, ids, 4, shape=shape)


@pytest.mark.offline
def test_greedy_lookahead_on_the_offline_pair_gives_ars_tokens():
    from specdec_core.models import chat_ids, load_pair

    pair = load_pair("offline")
    ids = chat_ids(pair.tokenizer, "Write a Python function that returns the n-th Fibonacci number.")
    eos = pair.tokenizer.eos_token_id
    reference = ar.generate(pair.target, ids, 32, eos_token_id=eos).new_tokens
    got = L.lookahead_generate(pair.target, ids, 32, shape=(3, 3, 3), eos_token_id=eos)
    assert got.new_tokens == reference and got.tokens_per_call > 1.0
