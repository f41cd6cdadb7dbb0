"""Token trees (SpecInfer, Miao et al. 2024; EAGLE-2, Li et al. 2024; Sequoia, Chen et al. 2024): many
guesses checked in ONE target forward, each node attending only to its ancestors.

A chain of γ guesses is thrown away from its first wrong token on. Where the draft's first choice is
wrong its second often is right: a tree keeps several candidates per position and the target checks
them all at once. The tree is flat arrays, node i holding a token and the index of its parent:

    tokens  [N]   the guessed tokens, parents before children (parents[i] < i)
    parents [N]   -1: a child of the root — the last token of the context, which is not in the tree
    depth(i) = 1 + depth(parents[i]), the root at 0     position of node i = position of the root + depth(i)
    mask[i, j] = j is i or an ancestor of i             (the verify input is [root, nodes…])

Verification walks down from the root. Greedy: follow the child whose token is the target's argmax
at its parent; the bonus is the argmax at the last node reached. Sampled, at a node with target p and
its children x_1, x_2, … tried in order (``siblings``, how the drafter drew them):

    "iid"      x_k ~ q independently (SpecInfer):  accept with min(1, p(x)/q(x)); else p ← norm((p − q)⁺)
    "distinct" x_k ~ q without replacement (recursive rejection sampling): the same with q renormalised
               over the tokens not yet tried
    "topk"     deterministic candidates (EAGLE-2, SGLang; q one-hot): accept with the current p(x);
               else p(x) ← 0 and renormalise (a repeated sibling then has p = 0 and is skipped)

Every child rejected: sample the last p (the residual). After an accepted childless node the bonus
comes from p AT THAT NODE — not from a residual left over from its parent (EAGLE PR #47's bug).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch
from transformers import PreTrainedModel

from .generation import Clock, Generation, eos_set, tokens_per_call
from .lm import Decoder, check_inputs
from .sampling import Warp, sample, uniforms
from .tree_shapes import ShapeChooser, sibling_trials

SIBLINGS = ("iid", "distinct", "topk")


@dataclass
class Tree:
    """A drafter's guesses: ``tokens`` [N], ``parents`` [N] (see the module docstring), ``q`` [N, V] the
    draft distribution each node was drawn from (its parent's; None when deterministic or greedy) and
    how siblings were drawn (:data:`SIBLINGS`)."""

    tokens: torch.Tensor
    parents: list[int]
    q: torch.Tensor | None = None
    siblings: str = "topk"

    def __post_init__(self) -> None:
        if self.tokens.dim() != 1 or len(self.parents) != self.tokens.numel():
            raise ValueError(f"a tree needs tokens [N] and N parents, got {tuple(self.tokens.shape)} and {len(self.parents)}")
        bad = [i for i, p in enumerate(self.parents) if not -1 <= p < i]
        if bad:
            raise ValueError(f"node {bad[0]} has parent {self.parents[bad[0]]}: every parent must come before its "
                             "child (-1 for a child of the root), so the tree is ancestor-closed")
        if self.siblings not in SIBLINGS:
            raise ValueError(f"siblings must be one of {SIBLINGS}, got {self.siblings!r}")

    def __len__(self) -> int:
        return len(self.parents)

    @property
    def depths(self) -> list[int]:
        """depth(i) ≥ 1 of every node (the root is at depth 0)."""
        out: list[int] = []
        for p in self.parents:
            out.append(1 if p < 0 else out[p] + 1)
        return out

    def children(self, node: int) -> list[int]:
        """The children of ``node`` (-1: the root) in the order they are tried."""
        return [i for i, p in enumerate(self.parents) if p == node]

    def path(self, node: int) -> list[int]:
        """The nodes from the root's child down to ``node`` (empty for the root, -1)."""
        out = []
        while node >= 0:
            out.append(node)
            node = self.parents[node]
        return out[::-1]


def chain(tokens: torch.Tensor, q: torch.Tensor | None = None) -> Tree:
    """A chain of guesses as a tree of width 1 (what :func:`speculative.speculative_generate` verifies)."""
    return Tree(tokens, list(range(-1, tokens.numel() - 1)), q, "iid" if q is not None else "topk")


def tree_mask(tree: Tree) -> tuple[torch.Tensor, torch.Tensor]:
    """The verify input [root, nodes…] as (depths [N + 1], mask bool [N + 1, N + 1]): row 0 is the root;
    row 1 + i is node i and sees the root, its ancestors and itself — never a sibling or a cousin."""
    n = len(tree)
    mask = torch.eye(n + 1, dtype=torch.bool)  # host: built row by row here, moved once by Decoder.step_masked
    mask[:, 0] = True
    for i, p in enumerate(tree.parents):
        if p >= 0:
            mask[1 + i] |= mask[1 + p]
    return torch.tensor([0] + tree.depths), mask  # host: from Python ints, moved once with the mask


def verify_tree_greedy(tree: Tree, logits: torch.Tensor) -> tuple[list[int], int]:
    """Greedy verification. logits [N + 1, V] of [root, nodes…] → (the accepted path's nodes, next token):
    at each node, the child equal to the target's argmax there (the argmaxes and the tree's tokens come to
    the host together, in one transfer)."""
    n = len(tree)
    both = torch.cat([logits.argmax(-1), tree.tokens.to(logits.device)]).tolist()
    choice, tokens = both[: n + 1], both[n + 1 :]
    path, node = [], -1
    while True:
        nxt = next((c for c in tree.children(node) if tokens[c] == choice[node + 1]), None)
        if nxt is None:
            return path, choice[node + 1]
        path.append(nxt)
        node = nxt


def verify_tree(tree: Tree, p: torch.Tensor, generator: torch.Generator | None = None) -> tuple[list[int], int]:
    """Sampled verification, exact for how ``tree.siblings`` were drawn (module docstring). p [N + 1, V]:
    the target's warped distributions at [root, nodes…]. Returns (the accepted path's nodes, next token)."""
    tokens = tree.tokens.tolist()
    path, node = [], -1
    while True:
        p_here = p[node + 1].clone()
        kids = tree.children(node)
        accepted = None
        if kids:
            u = uniforms(len(kids), generator, p.device).tolist()
            q_left = None if tree.siblings == "topk" else tree.q[kids[0]].to(p.device).clone()
            for c, u_c in zip(kids, u):
                x = tokens[c]
                if tree.siblings == "topk":  # q is one-hot at x: accept with p(x), else remove x from p
                    if u_c < p_here[x]:
                        accepted = c
                        break
                    p_here[x] = 0.0
                else:
                    q_c = q_left / q_left.sum()
                    if u_c * q_c[x] < p_here[x]:  # min(1, p(x)/q(x))
                        accepted = c
                        break
                    p_here = (p_here - q_c).clamp(min=0)
                    if tree.siblings == "distinct":  # the next sibling is drawn from q without the tried ones
                        q_left[x] = 0.0
                total = p_here.sum()
                if total <= 0:  # p was entirely covered: cannot be reached in exact arithmetic
                    p_here = p[node + 1].clone()
                    break
                p_here = p_here / total
        if accepted is None:
            return path, int(sample(p_here, generator))
        path.append(accepted)
        node = accepted  # the next test (or the bonus) uses p at this node, fresh


@torch.inference_mode()
def tree_generate(
    target: PreTrainedModel,
    drafter,
    input_ids: torch.Tensor,
    max_new_tokens: int,
    *,
    shape="auto",
    costs=None,
    temperature: float = 0.0,
    top_k: int | None = None,
    top_p: float | None = None,
    eos_token_id: int | Iterable[int] | None = None,
    generator: torch.Generator | None = None,
    tokenizer=None,
) -> Generation:
    """Speculative decoding with token trees: each step the drafter proposes a tree
    (``drafter.propose_tree(context, shape)``), ONE target forward scores every node, the accepted path's
    K/V is kept (``Decoder.keep``) and the rest dropped. Same output law as sampling ``target`` alone (the
    same tokens at temperature 0). ``shape``: a tuple of branching factors per depth (e.g. (3, 2, 1): three
    candidates for the first token, two for the second under each, …) or "auto" — the shape that
    maximises the predicted speed-up on this machine (:func:`tree_shapes.best_shape` with the cost model
    ``costs`` and the acceptance measured so far in the run). stats: those of ``speculative_generate``
    plus ``tree_sizes``, ``verify_widths`` per step and ``sibling_trials`` / ``accepted_ranks`` per depth reached."""
    check_inputs(target, input_ids, max_new_tokens)
    chooser = ShapeChooser.for_run(shape, costs, drafter)
    stops, device = eos_set(eos_token_id), target.device
    warp = Warp(temperature, top_k, top_p)
    drafter.begin(warp, generator)
    wants_hidden = drafter.wants_hidden
    dec = Decoder(target, keep_hidden=wants_hidden, layers=drafter.hidden_layers)
    context = input_ids.to(device)
    clock = Clock(device)  # phase times: events on a GPU, read after the run (no wait inside a step)
    if context.shape[1] > 1:
        dec.prefill(context[:, :-1])
        if wants_hidden:
            drafter.observe(dec.hidden[0])
    new: list[int] = []
    steps, ranks, marks = [], [], []
    while len(new) < max_new_tokens:
        t0 = clock.mark()
        tree = drafter.propose_tree(context, chooser.choose(max_new_tokens - len(new)))
        t1 = clock.mark()
        path, nxt = _verify_step(dec, context, tree, warp, generator)
        drafter.accepted_path(path)
        if wants_hidden:
            drafter.observe(dec.hidden[0, [0] + [1 + i for i in path]])
        marks.append((t0, t1, clock.mark()))
        chooser.update(tree, path, clock.seconds(t0, t1))  # the verify's host reads came after t1: no wait
        ranks.extend(sibling_trials(tree, path))
        drafted = tree.tokens.tolist()
        guessed = [drafted[i] for i in path]
        steps.append({"drafted": drafted, "parents": list(tree.parents), "path": path,
                      "accepted": len(path), "next": nxt})
        emitted = []
        for token in guessed + [nxt]:
            emitted.append(token)
            new.append(token)
            if token in stops or len(new) == max_new_tokens:
                break
        context = torch.cat([context, torch.tensor([emitted], device=device)], dim=1)
        if new[-1] in stops:
            break
    wall = clock.stop()
    draft_time = sum(clock.seconds(t0, t1) for t0, t1, _ in marks)
    verify_time = sum(clock.seconds(t1, t2) for _, t1, t2 in marks)
    stats = {
        "wall_time": wall, "target_calls": len(steps), "draft_calls": drafter.calls,
        "tokens_per_call": tokens_per_call(len(new), len(steps)), "accepted_lengths": [s["accepted"] for s in steps],
        "tree_sizes": [len(s["drafted"]) for s in steps], "verify_widths": [len(s["drafted"]) + 1 for s in steps],
        "sibling_trials": ranks, "accepted_ranks": [r for _, r in ranks], "draft_time": draft_time, "verify_time": verify_time, "steps": steps, "tree": True,
        "shapes": chooser.history,
    }
    return Generation(new, tokenizer.decode(new) if tokenizer is not None else None, stats)


def _verify_step(dec: Decoder, context: torch.Tensor, tree: Tree, warp: Warp,
                 generator: torch.Generator | None) -> tuple[list[int], int]:
    """One verify: [root, nodes…] through the target with the tree's mask and positions, the accept rule,
    then the cache keeps the root and the accepted path. The cache held the context but its last token."""
    depths, mask = tree_mask(tree)
    root = context.shape[1] - 1
    ids = torch.cat([context[:, -1:], tree.tokens.view(1, -1).to(context.device)], dim=1)
    logits = dec.step_masked(ids, root + depths, mask)[0]  # [N + 1, V]
    if warp.greedy:
        path, nxt = verify_tree_greedy(tree, logits)
    else:
        if tree.siblings != "topk" and tree.q is None:
            raise TypeError("a sampled tree with random siblings needs q, the distribution each node was drawn from")
        path, nxt = verify_tree(tree, warp(logits), generator)
    dec.keep([0] + [1 + i for i in path])
    return path, nxt
