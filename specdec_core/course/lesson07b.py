"""Checkers for lesson 07b's exercise: one lookahead step's mask and positions, and the n-gram pool.

    check_lookahead_mask(lookahead_mask)
        # lookahead_mask(W, N, G) -> (offsets long [n], mask bool [n, n]), n = 1 + (W + G)(N − 1), over
        #   [c, window level 0 (W columns), level 1, …, level N − 2, candidate 0 (N − 1 tokens), candidate 1, …]
    check_ngram_pool(Pool)
        # Pool(n, size) with remember(first, tail), add(tokens), candidates(token) -> tails, most recent first

The mask is compared with :func:`specdec_core.lookahead.step_inputs` (the candidates as disjoint chains of a
:class:`~specdec_core.tree.Tree`), the pool with :class:`specdec_core.ngram_pool.NGramPool`, on hand-made and
seeded random cases. The references are computed first; while the answer runs, every function of
:mod:`specdec_core.lookahead`, the pool's methods and ``tree.tree_mask`` are blocked (an answer that calls them
scores nothing). A wrong answer that equals a common mistake gets a hint naming it.
"""

from __future__ import annotations

import inspect
import random
from collections.abc import Callable
from typing import Any

import torch

from .. import lookahead as LA
from .. import tree as T
from ..ngram_pool import NGramPool
from .checks import Checks
from .grading import blocked

RANDOM_CASES = 25
SHAPE = (3, 4, 2)  # the hand-made case: W = 3 columns, N = 4 (three levels), G = 2 candidates of three tokens


def library() -> tuple[str, ...]:
    """What an answer may not call: every function of ``specdec_core.lookahead``, the pool's methods, the tree mask."""
    own = [f"specdec_core.lookahead.{name}" for name, fn in vars(LA).items()
           if inspect.isfunction(fn) and fn.__module__ == LA.__name__]
    pool = [f"specdec_core.ngram_pool.NGramPool.{name}" for name, fn in vars(NGramPool).items() if inspect.isfunction(fn)]
    return (*own, *pool, "specdec_core.tree.tree_mask")


def _unaided(fn: Callable) -> Callable:
    """``fn`` run with the library blocked (the references are computed outside)."""
    def run(*args):
        with blocked(*library()):
            return fn(*args)
    return run


# --- the mask and the offsets -----------------------------------------------------------------------

def reference_mask(W: int, N: int, G: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The library's (offsets, mask) for a full window (N − 1 levels) and G disjoint candidates of N − 1 tokens."""
    depth = N - 1
    parents = [-1 if k == 0 else g * depth + k - 1 for g in range(G) for k in range(depth)]
    tree = T.Tree(torch.zeros(len(parents), dtype=torch.long), parents)
    _, offsets, mask = LA.step_inputs(0, [[0] * W for _ in range(depth)], tree)
    return offsets, mask


def layout(W: int, N: int, G: int) -> dict[str, torch.Tensor]:
    """Per input: ``kind`` (0 c, 1 window, 2 candidate), ``level`` and ``column`` (window), ``cand`` and ``k``
    (the candidate and the token's place in it); -1 where it does not apply."""
    depth = N - 1
    rows = [(0, -1, -1, -1, -1)] + [(1, lv, j, -1, -1) for lv in range(depth) for j in range(W)]
    rows += [(2, -1, -1, g, k) for g in range(G) for k in range(depth)]
    return dict(zip(("kind", "level", "column", "cand", "k"), torch.tensor(rows).T))


def _as(out: Any, n: int) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    try:
        offsets, mask = out
        offsets, mask = torch.as_tensor(offsets).long().flatten(), torch.as_tensor(mask).bool()
    except (TypeError, ValueError, RuntimeError):
        return None, None
    return (offsets if offsets.shape == (n,) else None), (mask if mask.shape == (n, n) else None)


def wrong_masks(W: int, N: int, G: int) -> dict[str, torch.Tensor]:
    """Common wrong masks for one shape, each with what it gets wrong."""
    right = reference_mask(W, N, G)[1]
    p = layout(W, N, G)
    win, ver = p["kind"] == 1, p["kind"] == 2
    row_lv, col_lv = p["level"][:, None], p["level"][None, :]
    row_j, col_j = p["column"][:, None], p["column"][None, :]
    both_win = win[:, None] & win[None, :]
    n = right.shape[0]
    tril = torch.ones(n, n, dtype=torch.bool).tril()
    reading = right.clone()
    reading[both_win] = tril[both_win]
    return {
        "a verification row that sees the window: a candidate sees c and its own earlier tokens only, or it "
        "computes its logits from a context that is not the sequence it guesses": right | (ver[:, None] & win[None, :]),
        "a causal mask over the window in reading order: a level row then sees a later column of the levels "
        "below it (level l, column j sees level-0 columns ≤ j and column j of levels 1..l)": reading,
        "a level row that sees a later column of level 0: level l, column j sees level 0 up to column j only, "
        "as if it were token j + l + 1 of a sequence": right | (both_win & (row_lv > 0) & (col_lv == 0)),
        "a row that sees its column at a level above its own: level l sees column j of levels 1..l, never l + 1":
            right | (both_win & (col_j == row_j) & (col_lv > row_lv)),
        "a level row that sees only its own column: it also sees level 0's columns before j":
            right & ~(both_win & (row_lv > 0) & (col_lv == 0) & (col_j < row_j)),
        "candidates that see each other (one causal block over all of them): each candidate is its own causal "
        "block, an alternative for the same positions": right | (ver[:, None] & ver[None, :] & tril),
        "a window row that sees a candidate: the window sees c and the window only": right | (win[:, None] & ver[None, :]),
        "the transposed mask: row = the token that attends, column = what it sees": right.T.clone(),
    }


def _hint(got: torch.Tensor, wrong: dict[str, torch.Tensor], default: str) -> str:
    return next((f"you built {what}" for what, mask in wrong.items() if torch.equal(got, mask)), default)


def _window_offset_hint(got: torch.Tensor, p: dict[str, torch.Tensor]) -> str:
    win = p["kind"] == 1
    j, lv = p["column"][win], p["level"][win]
    if torch.equal(got[win], j + lv):
        return "positions off by one: c is at offset 0, so level 0, column 0 is at 1 (1 + j + l)"
    if torch.equal(got[win], 1 + j):
        return "level l guesses l positions further than level 0 in its column: offset 1 + j + l, not 1 + j"
    if torch.equal(got, torch.arange(len(got))):
        return "offsets by index: the window's offsets follow columns and levels, not the order of the input"
    return "c at 0; level l, column j at 1 + j + l"


def _candidate_offset_hint(got: torch.Tensor, p: dict[str, torch.Tensor], N: int) -> str:
    ver = p["kind"] == 2
    k, g = p["k"][ver], p["cand"][ver]
    if torch.equal(got[ver], k):
        return "positions off by one: a candidate's first token follows c, at offset 1 (token k at 1 + k)"
    if torch.equal(got[ver], 1 + g * (N - 1) + k) or torch.equal(got, torch.arange(len(got))):
        return "each candidate starts again at offset 1: the candidates are alternatives for the same positions"
    return "candidate token k (k = 0 … N − 2) at offset 1 + k, whichever candidate it belongs to"


def check_lookahead_mask(fn: Callable) -> None:
    """Test ``fn(W, N, G) -> (offsets, mask)`` against :func:`specdec_core.lookahead.step_inputs`."""
    W, N, G = SHAPE
    want_off, want = reference_mask(W, N, G)
    p = layout(W, N, G)
    n = want.shape[0]
    fn = _unaided(fn)
    with Checks("lookahead_mask") as c:
        off, mask = _as(c.call(fn, W, N, G), n)
        c.expect(off is not None and mask is not None, f"offsets [{n}] and a mask [{n}, {n}] for (W, N, G) = {SHAPE}",
                 "n = 1 + (W + G)(N − 1): c, then W columns × (N − 1) levels, then G candidates of N − 1 tokens")
        if off is None or mask is None:
            return
        win, ver = p["kind"] == 1, p["kind"] == 2
        c.expect(int(off[0]) == 0 and torch.equal(off[win], want_off[win]), "c at offset 0; level l, column j at 1 + j + l",
                 _window_offset_hint(off, p))
        c.expect(torch.equal(off[ver], want_off[ver]), "every candidate's tokens at offsets 1 … N − 1",
                 _candidate_offset_hint(off, p, N))
        c.expect(bool(mask[:, 0].all()) and bool(mask.diagonal().all()), "every row sees c and itself",
                 "column 0 (c) and the diagonal are True in every row")
        c.expect(not mask[0, 1:].any(), "c sees only itself (and the cache)", "row 0: only column 0 is True")
        wrong = wrong_masks(W, N, G)
        c.expect(not (mask[ver][:, win]).any(), "no verification row sees the window",
                 "a verification row that sees the window reads guesses that are not the sequence it verifies: "
                 "a candidate sees c and its own earlier tokens only")
        c.expect(not (mask[win][:, ver]).any(), "no window row sees a candidate", "the window sees c and the window only")
        c.expect(torch.equal(mask[ver][:, ver], want[ver][:, ver]), "each candidate is causal and sees no other candidate",
                 _hint(mask, wrong, "candidate g's token k sees tokens 0 … k of candidate g, nothing of the others"))
        c.expect(torch.equal(mask[win][:, win], want[win][:, win]),
                 "level l, column j sees level-0 columns 0 … j and column j of levels 1 … l",
                 _hint(mask, wrong, "a level row that sees a later column, a later level, or misses level 0's "
                                    "earlier columns: lade's j_make_causal_mask_multilevel"))
        c.expect(torch.equal(mask, want), "the whole mask equals the library's",
                 _hint(mask, wrong, "row = the token that attends, column = what it sees"))
        rng = random.Random(72)
        ok = True
        for _ in range(RANDOM_CASES):
            w, nn, g = rng.randint(1, 6), rng.randint(2, 5), rng.randint(0, 4)
            ref_off, ref_mask = reference_mask(w, nn, g)
            got_off, got_mask = _as(c.call(fn, w, nn, g), ref_off.numel())
            ok &= got_off is not None and got_mask is not None and torch.equal(got_off, ref_off) and torch.equal(got_mask, ref_mask)
        c.expect(ok, f"matches the library on {RANDOM_CASES} random shapes (W 1-6, N 2-5, G 0-4)",
                 "fix the ✗ above first" if c.failed else
                 "N = 2 (one level, one-token candidates) and G = 0 (no candidates) are shapes too")


# --- the pool ---------------------------------------------------------------------------------------

Ops = list[tuple]  # ("remember", first, tail) or ("add", tokens)
NOT_TAILS = ("not a list of tails",)  # stands for what candidates returned when it is not a list of sequences


def replay(make: Callable, n: int, size: int, ops: Ops, queries: list[int]) -> list[list[tuple[int, ...]]] | None:
    """``make(n, size)``, the operations applied in order, then ``candidates(q)`` of each query as lists of
    int tuples (None when a result is not a list of sequences)."""
    pool = make(n, size)
    for op, *args in ops:
        getattr(pool, op)(*[list(a) if isinstance(a, list) else a for a in args])
    out = []
    for q in queries:
        tails = pool.candidates(q)
        try:
            out.append([tuple(int(t) for t in tail) for tail in tails])
        except TypeError:
            return None
    return out


def _random_ops(rng: random.Random, n: int) -> Ops:
    ops: Ops = []
    for _ in range(rng.randint(1, 8)):
        if rng.random() < 0.5:
            ops.append(("add", [rng.randrange(4) for _ in range(rng.randint(1, 8))]))
        else:
            ops.append(("remember", rng.randrange(4), tuple(rng.randrange(4) for _ in range(rng.randint(1, n - 1)))))
    return ops


def check_ngram_pool(make: Callable) -> None:
    """Test ``make(n, size)`` (a class) against :class:`specdec_core.ngram_pool.NGramPool`."""
    student = _unaided(lambda *args: replay(make, *args))

    def ask(n: int, size: int, ops: Ops, queries: list[int]):
        want = replay(NGramPool, n, size, ops, queries)  # first, unblocked
        got = c.call(student, n, size, ops, queries)
        return (got if got is not None else [[NOT_TAILS]] * len(queries)), want

    a, b = ("remember", 5, (1, 2)), ("remember", 5, (3, 4))
    with Checks("ngram_pool") as c:
        got, want = ask(3, 2, [a, b], [5, 42])
        if not c.expect(got[0] != [NOT_TAILS], "candidates returns a list of tails",
                        "return a list of tuples of token ids (a list per token, [] for a token never seen)"):
            return
        c.expect(got[0] == want[0], "candidates lists the most recent tail first",
                 "you return them oldest first: the most recent first (reverse the arrival order)"
                 if got[0] == want[0][::-1] else "keep each token's tails in arrival order; return them newest first")
        c.expect(got[1] == [], "a token never seen has no candidates", "return [] (not None, no KeyError)")
        got, want = ask(3, 2, [a, b, ("remember", 5, (6, 7))], [5])
        c.expect(got == want, "a third tail (G = 2) drops the least recently seen one",
                 "LRU evicting the newest: drop the least recently seen tail (the oldest), keep the new one"
                 if got == [[(3, 4), (1, 2)]] else "you dropped (3, 4), not the least recently seen (1, 2)"
                 if got == [[(6, 7), (1, 2)]] else
                 f"keep at most G = size tails per token (you kept {len(got[0])})" if len(got[0]) > 2 else
                 "append the new tail, then drop the oldest while there are more than size")
        got, want = ask(3, 3, [a, b, a], [5])
        c.expect(got == want, "a tail seen again becomes the most recent, and is kept once",
                 "it is kept twice: remove the old copy before adding it again" if len(got[0]) > 2 else
                 "a tail seen again must move to the front (most recent), not stay where it was"
                 if got == [[(3, 4), (1, 2)]] else "remove it where it was, then add it as the most recent")
        got, want = ask(3, 2, [a, ("remember", 9, (1, 1)), b], [5, 9])
        c.expect(got == want, "each first token keeps its own G tails",
                 "G counts per first token: token 9's tail must not push out token 5's")
        got, want = ask(3, 2, [("add", [1, 2, 3, 1, 2, 4])], [1, 2, 3, 4])
        c.expect(got[0] == want[0] and got[2] == want[2], "add remembers every n-gram, keyed by its first token",
                 "for each i: remember(tokens[i], tuple(tokens[i + 1 : i + n])), in order")
        c.expect(got[1] == want[1] and got[3] == [], "a cut-off tail at the end (2 → (4,)) does not displace a full one",
                 "a tail shorter than n − 1 is skipped when the token already has a longer one"
                 if len(got[1]) > len(want[1]) else "the last token has nothing after it: no entry for it"
                 if got[3] else "a tail of n − 1 tokens that arrived earlier stays")
        got, want = ask(4, 2, [("add", [7, 8])], [7])
        c.expect(got == want, "a sequence shorter than n still gives its (shorter) tail",
                 "the last tokens of a sequence give shorter tails: keep one when the token has no longer tail")
        rng = random.Random(71)
        ok = True
        for _ in range(RANDOM_CASES):
            n, size = rng.randint(2, 4), rng.randint(1, 3)
            ops = _random_ops(rng, n)
            want = replay(NGramPool, n, size, ops, [0, 1, 2, 3, 9])
            ok &= c.call(student, n, size, ops, [0, 1, 2, 3, 9]) == want
        c.expect(ok, f"matches the library on {RANDOM_CASES} random sequences of add and remember (n 2-4, G 1-3)",
                 "fix the ✗ above first" if c.failed else
                 "remember: skip a short tail if a longer one is known, move a known tail to the end, keep the last "
                 "size; add: every i; candidates: newest first")


__all__ = ["check_lookahead_mask", "check_ngram_pool", "reference_mask", "wrong_masks"]
