"""Lesson 07b's checkers: the right answers pass, each common wrong one fails with its hint, and an answer
that calls the library (``specdec_core.lookahead``, the n-gram pool) fails."""

from __future__ import annotations

import pytest
import torch

from specdec_core import lookahead as L
from specdec_core.course import CheckFailed
from specdec_core.course.lesson07b import check_lookahead_mask, check_ngram_pool, reference_mask, wrong_masks
from specdec_core.ngram_pool import NGramPool
from specdec_core.tree import Tree


def right_mask(W, N, G):
    depth = N - 1
    n = 1 + (W + G) * depth
    offsets, mask = torch.zeros(n, dtype=torch.long), torch.eye(n, dtype=torch.bool)
    mask[:, 0] = True
    for lv in range(depth):
        for j in range(W):
            row = 1 + lv * W + j
            offsets[row] = 1 + j + lv
            mask[row, 1 : 2 + j] = True
            for k in range(1, lv + 1):
                mask[row, 1 + k * W + j] = True
    start = 1 + W * depth
    for g in range(G):
        first = start + g * depth
        for k in range(depth):
            offsets[first + k] = 1 + k
            mask[first + k, first : first + k + 1] = True
    return offsets, mask


class RightPool:
    def __init__(self, n, size):
        self.n, self.size, self.follows = n, size, {}

    def remember(self, first, tail):
        entries = self.follows.setdefault(first, [])
        if len(tail) < self.n - 1 and any(len(e) > len(tail) for e in entries):
            return
        if tail in entries:
            entries.remove(tail)
        entries.append(tail)
        if len(entries) > self.size:
            entries.pop(0)

    def add(self, tokens):
        for i in range(len(tokens) - 1):
            self.remember(tokens[i], tuple(tokens[i + 1 : i + self.n]))

    def candidates(self, token):
        return self.follows.get(token, [])[::-1]


def test_right_answers_pass(capsys):
    check_lookahead_mask(right_mask)
    check_ngram_pool(RightPool)
    assert "✗" not in capsys.readouterr().out


def test_the_reference_is_the_library_and_every_wrong_mask_differs_from_it():
    assert all(torch.equal(a, b) for a, b in zip(right_mask(3, 4, 2), reference_mask(3, 4, 2)))
    right = reference_mask(3, 4, 2)[1]
    assert all(not torch.equal(m, right) for m in wrong_masks(3, 4, 2).values())


# computed here, unblocked: wrong_masks reads the library, which is blocked while a mutant runs
WRONG = {(W, N, G): wrong_masks(W, N, G) for W in range(1, 7) for N in range(2, 6) for G in range(5)}


def _with_mask(name):
    def fn(W, N, G):
        return right_mask(W, N, G)[0], next(m for k, m in WRONG[W, N, G].items() if k.startswith(name))
    return fn


def _with_offsets(change):
    def fn(W, N, G):
        offsets, mask = right_mask(W, N, G)
        return change(offsets, W, N), mask
    return fn


def _candidates_in_a_row(offsets, W, N):
    out = offsets.clone()
    start = 1 + W * (N - 1)
    out[start:] = 1 + torch.arange(len(out) - start)
    return out


def _calls_the_library(W, N, G):
    parents = [-1 if k == 0 else g * (N - 1) + k - 1 for g in range(G) for k in range(N - 1)]
    _, offsets, mask = L.step_inputs(0, [[0] * W] * (N - 1), Tree(torch.zeros(len(parents), dtype=torch.long), parents))
    return offsets, mask


def _window_mask_then_own_candidates(W, N, G):
    offsets, mask = right_mask(W, N, G)
    nw = 1 + W * (N - 1)
    mask[:nw, :nw] = L.window_mask(W, N - 1)[1]
    return offsets, mask


@pytest.mark.parametrize("wrong, hint", [
    (_with_mask("a verification row"), "a verification row that sees the window"),
    (_with_mask("a causal mask over the window"), "sees a later column"),
    (_with_mask("a level row that sees a later column"), "a level row that sees a later column of level 0"),
    (_with_mask("a row that sees its column at a level above"), "a level above its own"),
    (_with_mask("a level row that sees only its own column"), "only its own column"),
    (_with_mask("candidates that see each other"), "one causal block over all of them"),
    (_with_mask("a window row that sees a candidate"), "the window sees c and the window only"),
    (_with_mask("the transposed"), "transposed"),
    (_with_offsets(lambda o, W, N: torch.where(o > 0, o - 1, o)), "positions off by one"),
    (_with_offsets(lambda o, W, N: torch.cat([o[:1], o[1 : 1 + W * (N - 1)] - torch.arange(N - 1).repeat_interleave(W),
                                              o[1 + W * (N - 1):]])), "l positions further"),
    (_with_offsets(_candidates_in_a_row), "starts again at offset 1"),
    (_with_offsets(lambda o, W, N: torch.arange(len(o))), "by index"),
    (_calls_the_library, "blocked while grading"),
    (_window_mask_then_own_candidates, "blocked while grading"),
])
def test_wrong_masks_fail_with_their_hint(wrong, hint, capsys):
    with pytest.raises(CheckFailed):
        check_lookahead_mask(wrong)
    assert hint in capsys.readouterr().out


def _pool(**changes):
    return type("WrongPool", (RightPool,), changes)


def _keeps_the_oldest(self, first, tail):
    entries = self.follows.setdefault(first, [])
    if tail not in entries and len(entries) < self.size:
        entries.append(tail)


def _no_refresh(self, first, tail):
    entries = self.follows.setdefault(first, [])
    if tail not in entries:
        entries.append(tail)
    del entries[: -self.size]


def _duplicates(self, first, tail):
    entries = self.follows.setdefault(first, [])
    entries.append(tail)
    del entries[: -self.size]


def _global_cap(self, first, tail):
    RightPool.remember(self, first, tail)
    order = self.__dict__.setdefault("order", [])
    order.append((first, tail))
    while sum(map(len, self.follows.values())) > self.size:
        old_first, old_tail = order.pop(0)
        if old_tail in self.follows[old_first]:
            self.follows[old_first].remove(old_tail)


def _short_displaces(self, first, tail):
    entries = self.follows.setdefault(first, [])
    if tail in entries:
        entries.remove(tail)
    entries.append(tail)
    del entries[: -self.size]


class Subclassed(NGramPool):
    pass


@pytest.mark.parametrize("wrong, hint", [
    (_pool(remember=_keeps_the_oldest), "LRU evicting the newest"),
    (_pool(candidates=lambda self, t: list(self.follows.get(t, []))), "oldest first"),
    (_pool(remember=_no_refresh), "must move to the front"),
    (_pool(remember=_duplicates), "kept twice"),
    (_pool(remember=_global_cap), "per first token"),
    (_pool(remember=_short_displaces), "a tail shorter than n − 1 is skipped"),
    (_pool(add=lambda self, ts: [self.remember(ts[i], tuple(ts[i + 1 : i + self.n])) for i in range(len(ts) - self.n + 1)]),
     "shorter tails"),
    (_pool(candidates=lambda self, t: self.follows.get(t)), "[] for a token never seen"),
    (Subclassed, "blocked while grading"),
    (_pool(add=lambda self, ts: NGramPool.add(self, ts)), "blocked while grading"),
])
def test_wrong_pools_fail_with_their_hint(wrong, hint, capsys):
    with pytest.raises(CheckFailed):
        check_ngram_pool(wrong)
    assert hint in capsys.readouterr().out


def test_the_library_works_again_after_a_check():
    with pytest.raises(CheckFailed):
        check_ngram_pool(Subclassed)
    pool = NGramPool(3, 2)
    pool.add([1, 2, 3])
    assert pool.candidates(1) == [(2, 3)] and L.window_mask(2, 1)[1].shape == (3, 3)
