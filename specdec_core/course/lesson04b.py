"""Checkers for lesson 04b's exercise: a token tree's mask and positions, and its greedy verification,
on plain lists and tensors.

    check_tree_mask(tree_mask)
        # tree_mask(parents, root_position) -> (positions long [N + 1], mask bool [N + 1, N + 1])
        #   over [root, node 0, …]: node i at root_position + depth(i); row i sees its ancestors, the root, itself
    check_verify_tree_greedy(verify_tree_greedy)
        # verify_tree_greedy(tokens, parents, choice) -> (path: list of node indices, next token)
        #   choice [N + 1]: the target's argmax at [root, node 0, …]

Both are compared with :mod:`specdec_core.tree` on hand-made and seeded random trees, with the library's
functions blocked while the answer runs (an answer that calls them scores nothing). When the mask is wrong,
the hint names the mistake if it equals a common wrong one.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .. import tree as T
from .checks import Checks
from .grading import blocked

RANDOM_CASES = 25
LIBRARY = ("specdec_core.tree.tree_mask", "specdec_core.tree.verify_tree_greedy", "specdec_core.tree.verify_tree",
           "specdec_core.tree.tree_generate", "specdec_core.costmodel.tree_shape")


def _unaided(fn: Callable) -> Callable:
    """``fn`` run with the library's tree functions blocked (the references are computed outside)."""
    def run(*args):
        with blocked(*LIBRARY):
            return fn(*args)
    return run


def random_parents(gen: torch.Generator, n: int) -> list[int]:
    """An ancestor-closed tree of n nodes: node i's parent is drawn among -1 (the root) and 0..i-1."""
    return [int(torch.randint(-1, i, (1,), generator=gen)) if i else -1 for i in range(n)]


def _reference(parents: list[int], root: int) -> tuple[torch.Tensor, torch.Tensor]:
    depths, mask = T.tree_mask(T.Tree(torch.zeros(len(parents), dtype=torch.long), parents))
    return root + depths, mask


def _as(out, n: int):
    try:
        positions, mask = out
        positions, mask = torch.as_tensor(positions).long().flatten(), torch.as_tensor(mask).bool()
    except (TypeError, ValueError, RuntimeError):
        return None, None
    return (positions if positions.shape == (n + 1,) else None), (mask if mask.shape == (n + 1, n + 1) else None)


def check_tree_mask(fn: Callable) -> None:
    """Test ``fn(parents, root_position) -> (positions, mask)`` against :func:`specdec_core.tree.tree_mask`."""
    parents, root = [-1, -1, 0, 0, 3], 20
    want_pos, want_mask = _reference(parents, root)
    fn = _unaided(fn)
    with Checks("tree_mask") as c:
        pos, mask = _as(c.call(fn, parents, root), len(parents))
        c.expect(pos is not None and mask is not None, "positions [N + 1] and a mask [N + 1, N + 1] over [root, nodes…]",
                 "return (positions, mask): one entry per node plus one for the root, which comes first")
        if pos is None or mask is None:
            return
        c.expect(torch.equal(pos, want_pos), "siblings share a position: root + depth",
                 "by index (root + i) is the classic bug: node i's position is the root's plus its depth"
                 if torch.equal(pos, root + torch.arange(len(parents) + 1)) else
                 "the root sits at root_position; a node one deeper than its parent")
        c.expect(bool(mask[:, 0].all()), "every node sees the root", "column 0 (the root) is True in every row")
        c.expect(bool(mask.diagonal().all()), "every node sees itself", "set mask[i, i] = True")
        c.expect(not mask[2, 1] and not mask[1, 2], "siblings never see each other",
                 "a lower-triangular (causal) mask lets node 1 see its sibling node 0: use the parents, not the order"
                 if torch.equal(mask, torch.ones_like(mask).tril()) else "only ancestors: follow parents up to the root")
        c.expect(torch.equal(mask, want_mask), "each node sees exactly its ancestors, the root and itself",
                 "row = the node that attends, column = what it sees (is it transposed?)"
                 if torch.equal(mask.T, want_mask) else "row 1 + i: the root, itself and every ancestor of node i")
        gen = torch.Generator().manual_seed(41)
        ok = True
        for _ in range(RANDOM_CASES):
            p = random_parents(gen, int(torch.randint(1, 12, (1,), generator=gen)))
            r = int(torch.randint(0, 100, (1,), generator=gen))
            pos, mask = _as(c.call(fn, p, r), len(p))
            ok &= pos is not None and mask is not None and torch.equal(pos, _reference(p, r)[0]) and torch.equal(mask, _reference(p, r)[1])
        c.expect(ok, f"matches the library on {RANDOM_CASES} random trees (1-11 nodes)",
                 "a node's parent may come anywhere before it, not only right before it")


def check_verify_tree_greedy(fn: Callable) -> None:
    """Test ``fn(tokens, parents, choice) -> (path, next_token)`` against greedy tree verification."""

    def reference(tokens: list[int], parents: list[int], choice: list[int]) -> tuple[list[int], int]:
        logits = torch.nn.functional.one_hot(torch.tensor(choice), 64).float()
        return T.verify_tree_greedy(T.Tree(torch.tensor(tokens), parents), logits)

    def run(tokens, parents, choice):
        out = c.call(fn, tokens, parents, choice)
        try:
            path, nxt = out
            return [int(i) for i in path], int(nxt)
        except (TypeError, ValueError):
            return None

    fn = _unaided(fn)
    with Checks("verify_tree_greedy") as c:
        tokens, parents = [7, 8, 9, 10, 11], [-1, -1, 0, 0, 3]
        got = run(tokens, parents, [8, 5, 12, 3, 3, 4])
        c.expect(got == ([1], 12), "the target's argmax is the SECOND child of the root: accepted (a chain would stop)",
                 "try every child of the current node, not only the first")
        got = run(tokens, parents, [7, 10, 1, 1, 11, 9])
        c.expect(got == ([0, 3, 4], 9), "a path accepted to its leaf; the next token is the argmax at the leaf",
                 "after node i, look up choice[1 + i]: the row of the node itself, not of its parent")
        got = run(tokens, parents, [3, 1, 1, 1, 1, 1])
        c.expect(got == ([], 3), "nothing matches: an empty path and the target's own token at the root",
                 "return ([], choice[0]) when no child of the root equals it")
        got = run([7, 7], [-1, -1], [7, 2, 5])
        c.expect(got is not None and got[0] == [0] and got[1] == 2, "of two equal siblings the first tried is kept",
                 "children in order: stop at the first that matches")
        gen = torch.Generator().manual_seed(42)
        ok = True
        for _ in range(RANDOM_CASES):
            n = int(torch.randint(1, 12, (1,), generator=gen))
            p = random_parents(gen, n)
            toks = torch.randint(0, 4, (n,), generator=gen).tolist()
            choice = torch.randint(0, 4, (n + 1,), generator=gen).tolist()
            ok &= run(toks, p, choice) == reference(toks, p, choice)
        c.expect(ok, f"matches the library on {RANDOM_CASES} random trees", "walk down from the root: at each node, "
                 "the child equal to choice[1 + node] (choice[0] at the root); stop where none is")


__all__ = ["check_tree_mask", "check_verify_tree_greedy", "random_parents"]
