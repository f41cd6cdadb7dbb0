"""How the course's drafters grow token trees (``Drafter.propose_tree``; :mod:`specdec_core.tree`).

- A draft model (``ModelDrafter``) expands a whole depth in ONE forward: the nodes of depth d run side
  by side with the tree mask (each sees the context and its own ancestors), and their top-ranked tokens
  become the nodes of depth d + 1 (:func:`expand`). The candidates are the draft's deterministic top-k
  at each parent, so the verifier uses the one-hot rule ("topk") at every temperature.
- Prompt lookup (``NGramDrafter``) finds several earlier occurrences of the context's tail; their
  continuations, merged where they share a prefix, form a trie (:func:`lookup_tree`).
- Any other drafter proposes its chain, a tree of width 1 (``Drafter.propose_tree``'s default).
"""

from __future__ import annotations

import torch

from .lm import Decoder
from .tree import Tree
from .tree_shapes import Topology


@torch.inference_mode()
def expand(dec: Decoder, context: torch.Tensor, topo: Topology, vocab_ids: torch.Tensor | None = None
           ) -> tuple[Tree, dict[int, int]]:
    """Fill ``topo`` with a draft model's ranked guesses. ``dec``'s cache holds a prefix of ``context``
    [1, T] (at most T − 1 tokens). Returns the tree and, for each node that was run (every node with
    children), its slot in ``dec``'s cache; the cache then holds the context and those nodes, depth by
    depth. ``vocab_ids`` [S]: the draft's reduced output layer (FR-Spec) — logits index into it."""
    T = context.shape[1]
    logits = dec.step(context[:, dec.length:].to(dec.device))[0, -1]  # the root's next-token logits
    n = len(topo)
    tokens = torch.zeros(n, dtype=torch.long, device=dec.device)
    parents = [p for p, _ in topo]
    kids: dict[int, list[int]] = {}
    for i, (p, _) in enumerate(topo):
        kids.setdefault(p, []).append(i)
    depth = [0] * n
    for i, p in enumerate(parents):
        depth[i] = 1 if p < 0 else depth[p] + 1
    slots: dict[int, int] = {}
    frontier_logits = {-1: logits}
    d = 1
    while True:
        level = [i for i in range(n) if depth[i] == d]
        if not level:
            break
        for parent in {parents[i] for i in level}:  # fill this depth from the parents' ranked choices
            members = kids[parent]
            ranked = frontier_logits[parent].topk(max(topo[i][1] for i in members) + 1).indices
            for i in members:
                tokens[i] = ranked[topo[i][1]] if vocab_ids is None else vocab_ids[ranked[topo[i][1]]]
        run = [i for i in level if i in kids]  # nodes whose children need their logits
        if not run:
            break
        start = dec.length
        visible = torch.zeros(len(run), start + len(run), dtype=torch.bool)
        visible[:, :T] = True  # the context
        for row, i in enumerate(run):
            visible[row, start + row] = True
            a = parents[i]
            while a >= 0:  # ancestors run at earlier depths, in the cache already
                visible[row, slots[a]] = True
                a = parents[a]
        positions = torch.tensor([T - 1 + d for _ in run])
        out = dec.step_masked(tokens[run].view(1, -1), positions, visible)[0]
        for row, i in enumerate(run):
            slots[i] = start + row
            frontier_logits[i] = out[row]
        d += 1
    return Tree(tokens, parents, None, "topk"), slots


def kept_after(path: list[int], slots: dict[int, int], context_len: int) -> list[int]:
    """The draft cache slots to keep after the target accepted ``path``: the path's nodes that were run
    (a prefix of it: a leaf was never run), to be moved right after the ``context_len`` context tokens."""
    out = []
    for node in path:
        if node not in slots:
            break
        out.append(slots[node] - context_len)
    return out


def lookup_tree(ids: list[int], budget: int, max_ngram: int = 3, min_ngram: int = 1, depth: int = 8,
                device: torch.device | str = "cpu") -> Tree:
    """Prompt lookup as a tree: the continuations (up to ``depth`` tokens) after the latest earlier
    occurrences of the context's last n tokens (n = max_ngram … min_ngram, longer matches first), merged
    into a trie of at most ``budget`` nodes; earlier-found continuations rank first among siblings."""
    tokens: list[int] = []
    parents: list[int] = []
    child: dict[tuple[int, int], int] = {}  # (parent, token) → node
    for n in range(max_ngram, min_ngram - 1, -1):
        if len(ids) <= n:
            continue
        tail = ids[-n:]
        for start in range(len(ids) - n - 1, -1, -1):  # latest match first
            if ids[start : start + n] != tail:
                continue
            node = -1
            for token in ids[start + n : start + n + depth]:
                if (node, token) not in child:
                    if len(tokens) == budget:
                        break
                    tokens.append(token)
                    parents.append(node)
                    child[(node, token)] = len(tokens) - 1
                node = child[(node, token)]
            if len(tokens) == budget:
                return Tree(torch.tensor(tokens, dtype=torch.long, device=device), parents, None, "topk")
    return Tree(torch.tensor(tokens, dtype=torch.long, device=device), parents, None, "topk")
