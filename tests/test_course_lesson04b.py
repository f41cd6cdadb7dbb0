"""Lesson 04b's checkers: the right answers pass, each common wrong one fails, and calling the library fails."""

from __future__ import annotations

import pytest
import torch

from specdec_core import tree as T
from specdec_core.course import CheckFailed, check_tree_mask, check_verify_tree_greedy


def right_mask(parents, root):
    n = len(parents)
    depth, mask = [0] * (n + 1), torch.eye(n + 1, dtype=torch.bool)
    mask[:, 0] = True
    for i, p in enumerate(parents):
        up = 1 + p if p >= 0 else 0
        depth[1 + i] = depth[up] + 1
        mask[1 + i] |= mask[up]
    return root + torch.tensor(depth), mask


def right_walk(tokens, parents, choice):
    path, node = [], -1
    while True:
        nxt = next((i for i, p in enumerate(parents) if p == node and tokens[i] == choice[node + 1]), None)
        if nxt is None:
            return path, choice[node + 1]
        path.append(nxt)
        node = nxt


def test_right_answers_pass(capsys):
    check_tree_mask(right_mask)
    check_verify_tree_greedy(right_walk)
    assert "✗" not in capsys.readouterr().out


@pytest.mark.parametrize("wrong, hint", [
    (lambda p, r: (r + torch.arange(len(p) + 1), right_mask(p, r)[1]), "by index"),
    (lambda p, r: (right_mask(p, r)[0], torch.ones(len(p) + 1, len(p) + 1).tril().bool()), "lower-triangular"),
    (lambda p, r: (right_mask(p, r)[0], right_mask(p, r)[1].T), "transposed"),
    (lambda p, r: T.tree_mask(T.Tree(torch.zeros(len(p), dtype=torch.long), p))[::-1], "runs"),  # calls the library
])
def test_wrong_masks_fail_with_their_hint(wrong, hint, capsys):
    with pytest.raises(CheckFailed):
        check_tree_mask(wrong)
    assert hint in capsys.readouterr().out


def first_child_only(tokens, parents, choice):
    path, node = [], -1
    while True:
        kids = [i for i, p in enumerate(parents) if p == node]
        if not kids or tokens[kids[0]] != choice[node + 1]:
            return path, choice[node + 1]
        path.append(kids[0])
        node = kids[0]


def stale_row(tokens, parents, choice):
    path, nxt = right_walk(tokens, parents, choice)
    return path, choice[1 + parents[path[-1]]] if path else nxt


@pytest.mark.parametrize("wrong, hint", [(first_child_only, "every child"), (stale_row, "row of the node itself"),
                                         (lambda t, p, c: T.verify_tree_greedy(T.Tree(torch.tensor(t), p),
                                                                               torch.nn.functional.one_hot(torch.tensor(c), 64).float()), "runs")])
def test_wrong_walks_fail_with_their_hint(wrong, hint, capsys):
    with pytest.raises(CheckFailed):
        check_verify_tree_greedy(wrong)
    assert hint in capsys.readouterr().out
