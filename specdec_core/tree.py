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
:func:`accept` is this verification for token trees and lookahead decoding alike. A forward runs at a
width fixed before the tree is drawn (a fixed shape's n + 1; an auto shape's, the next width of the menu
``widths.WIDTHS``), a smaller tree padded with nodes that see only themselves and are never kept.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch
from transformers import PreTrainedModel

from .generation import Clock, Generation, Output
from .lm import Decoder, check_inputs
from .records import TreeStats, TreeStep
from .sampling import Warp, sample, uniforms
from .tree_shapes import ShapeChooser, node_depths, sibling_trials

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
        return node_depths(self.parents)

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


def trie(sequences: Iterable[Sequence[int]], budget: int | None = None,
         device: torch.device | str = "cpu") -> tuple[Tree, list[list[int]]]:
    """Guessed continuations merged into a tree where they share a prefix (siblings in the order first met,
    "topk": deterministic guesses), of at most ``budget`` nodes. Returns the tree and, per sequence, its
    nodes from the root's child down (cut where the budget ran out)."""
    tokens: list[int] = []
    parents: list[int] = []
    index: dict[tuple[int, int], int] = {}  # (parent node, token) → node
    paths = []
    for seq in sequences:
        node, path = -1, []
        for token in seq:
            if (node, token) not in index:
                if len(tokens) == budget:
                    break
                index[(node, token)] = len(tokens)
                tokens.append(token)
                parents.append(node)
            node = index[(node, token)]
            path.append(node)
        paths.append(path)
    return Tree(torch.tensor(tokens, dtype=torch.long, device=device), parents), paths


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


def greedy_path(tree: Tree, tokens: list[int], choice: list[int]) -> tuple[list[int], int]:
    """The greedy walk on the host: ``tokens`` the tree's (ints), ``choice`` the target's argmax at [root,
    nodes…]. At each node, the child equal to the argmax there; the bonus is the argmax at the last one."""
    path, node = [], -1
    while (nxt := next((c for c in tree.children(node) if tokens[c] == choice[node + 1]), None)) is not None:
        path.append(nxt)
        node = nxt
    return path, choice[node + 1]


def verify_tree_greedy(tree: Tree, logits: torch.Tensor) -> tuple[list[int], int]:
    """Greedy verification. logits [N + 1, V] of [root, nodes…] → (the accepted path's nodes, next token)
    (the argmaxes and the tree's tokens come to the host together, in one transfer)."""
    both = torch.cat([logits.argmax(-1), tree.tokens.to(logits.device)]).tolist()  # the one device→host transfer
    return greedy_path(tree, both[len(tree) + 1 :], both[: len(tree) + 1])


def verify_tree(tree: Tree, p: torch.Tensor, generator: torch.Generator | None = None,
                tokens: list[int] | None = None) -> tuple[list[int], int]:
    """Sampled verification, exact for how ``tree.siblings`` were drawn (module docstring). p [N + 1, V]:
    the target's warped distributions at [root, nodes…]; ``tokens``: the tree's, if already on the host.
    Returns (the accepted path's nodes, next token)."""
    tokens = tree.tokens.tolist() if tokens is None else tokens
    path, node = [], -1
    while True:
        p_here, kids, accepted = p[node + 1].clone(), tree.children(node), None
        u = uniforms(len(kids), generator, p.device).tolist() if kids else []
        q_left = tree.q[kids[0]].to(p.device).clone() if kids and tree.siblings != "topk" else None
        for c, u_c in zip(kids, u):
            x = tokens[c]
            if q_left is None:  # "topk": q is one-hot at x, so accept with p(x), else p(x) ← 0
                q_c = torch.zeros_like(p_here)
                q_c[x] = 1.0
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


def padded(ids: torch.Tensor, offsets: torch.Tensor, mask: torch.Tensor, width: int
           ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A forward's inputs — ids [n], offsets [n] from the root's position, mask bool [n, n] — padded to the
    fixed ``width``: each pad repeats ids[0] at offset 0 and sees only itself (an identity row and column),
    so no real row sees a pad, and :func:`accept` never keeps one."""
    n = ids.numel()
    if n > width:
        raise ValueError(f"{n} tokens do not fit this run's forward of width {width}: a drafter must stay "
                         "within the shape it is given (its node budget)")
    full = torch.eye(width, dtype=torch.bool)  # host: built here, moved once by Decoder.step_masked
    full[:n, :n] = mask
    return torch.cat([ids, ids[:1].expand(width - n)]), torch.cat([offsets, offsets.new_zeros(width - n)]), full


def accept(dec: Decoder, tree: Tree, logits: torch.Tensor, rows: list[int], warp: Warp,
           generator: torch.Generator | None) -> tuple[list[int], int, list[int], list[int]]:
    """THE tree verification (token trees and lookahead): logits [n, V] of one forward whose rows ``rows``
    are [root, nodes…]; greedy or sampled (module docstring), then the cache keeps the root and the
    accepted path. Returns (path, next token, the argmax of every row, the tree's tokens): greedy, ONE
    device→host transfer brings all of it."""
    n = logits.shape[0]
    host = torch.cat([logits.argmax(-1), tree.tokens.to(logits.device)]).tolist()  # the one device→host transfer
    choice, tokens = host[:n], host[n:]
    if warp.greedy:
        path, nxt = greedy_path(tree, tokens, [choice[r] for r in rows])
    elif tree.siblings != "topk" and tree.q is None:
        raise TypeError("a sampled tree with random siblings needs q, the distribution each node was drawn from")
    else:
        path, nxt = verify_tree(tree, warp(logits[rows]), generator, tokens=tokens)
    dec.keep([rows[0]] + [rows[1 + i] for i in path])
    return path, nxt, choice, tokens


def tree_step(dec: Decoder, drafter, context: torch.Tensor, shape, width: int, warp: Warp,
              generator: torch.Generator | None, clock: Clock) -> tuple[list[int], TreeStep]:
    """One step: the drafter's tree for ``shape``, ONE target forward of ``width`` over [root, nodes…,
    pads] with the tree mask, :func:`accept`. ``dec`` holds context [1, T] but its last token (the root).
    Returns (the accepted guesses and the target's next token, the step's record)."""
    t0 = clock.mark()
    tree = drafter.propose_tree(context, shape)
    t1 = clock.mark()
    depths, mask = tree_mask(tree)
    ids = torch.cat([context[0, -1:], tree.tokens.to(context.device)])
    ids, offsets, mask = padded(ids, depths, mask, width)
    logits = dec.step_masked(ids.view(1, -1), context.shape[1] - 1 + offsets, mask)[0]  # [width, V]
    path, nxt, _, drafted = accept(dec, tree, logits, list(range(len(tree) + 1)), warp, generator)
    drafter.accepted_path(path)
    if drafter.wants_hidden:
        drafter.observe(dec.hidden[0, [0] + [1 + i for i in path]])
    step = TreeStep(drafted, list(tree.parents), path, nxt, width, len(tree) + 1, sibling_trials(tree, path),
                    len(shape), marks=(t0, t1, clock.mark()))
    return [drafted[i] for i in path] + [nxt], step


@torch.inference_mode()
def tree_generate(target: PreTrainedModel, drafter, input_ids: torch.Tensor, max_new_tokens: int, *, shape="auto",
                  costs=None, temperature: float = 0.0, top_k: int | None = None, top_p: float | None = None,
                  eos_token_id: int | Iterable[int] | None = None, generator: torch.Generator | None = None,
                  tokenizer=None) -> Generation:
    """Speculative decoding with token trees: a loop of :func:`tree_step` (same output law as sampling
    ``target`` alone; the same tokens at temperature 0). ``shape``: branching factors per depth (e.g. (3, 2, 1):
    three candidates for the first token, two for the second under each, …), a topology, or "auto" — the
    shape with the best predicted speed-up on this machine (:class:`tree_shapes.ShapeChooser`, from the cost
    model ``costs`` and the run's acceptance). A fixed shape's forward is its n + 1 tokens; an auto step's is
    the chosen tree padded to the next menu width (``widths.WIDTHS``: 7 nodes → 8, 9 → 16), the width its
    predicted speed-up priced. stats: :class:`~specdec_core.records.TreeStats`."""
    check_inputs(target, input_ids, max_new_tokens)
    chooser, warp = ShapeChooser.for_run(shape, costs), Warp(temperature, top_k, top_p)
    drafter.begin(warp, generator)
    dec = Decoder(target, keep_hidden=drafter.wants_hidden, layers=drafter.hidden_layers)
    context, out, steps = input_ids.to(target.device), Output(max_new_tokens, eos_token_id), []
    clock = Clock(target.device)  # phase marks: events on a GPU, read after the run (no wait inside a step)
    if context.shape[1] > 1:
        dec.prefill(context[:, :-1])
        if drafter.wants_hidden:
            drafter.observe(dec.hidden[0])
    while not out.done:
        topo = chooser.choose(out.left)
        tokens, step = tree_step(dec, drafter, context, topo, chooser.width_of(topo), warp, generator, clock)
        step.draft_s = clock.seconds(*step.marks[:2])  # the verify's host read came later: no wait
        chooser.update(step)
        steps.append(step)
        context = torch.cat([context, torch.tensor([out.emit(tokens)], device=context.device)], dim=1)
    stats = TreeStats(clock.stop(), len(steps), draft_calls=drafter.calls, steps=steps)
    for s in steps:
        s.verify_s = clock.seconds(*s.marks[1:])
    return Generation(out.tokens, tokenizer.decode(out.tokens) if tokenizer is not None else None, stats)
