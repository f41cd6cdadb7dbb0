"""How the course's drafters grow token trees (``Drafter.propose_tree``; :mod:`specdec_core.tree`).

- A draft model (``ModelDrafter``) expands a whole depth in ONE forward: the nodes of depth d run side
  by side with the tree mask (each sees the context and its own ancestors), and their top-ranked tokens
  become the nodes of depth d + 1 (:func:`expand`). The candidates are the draft's deterministic top-k
  at each parent, so the verifier uses the one-hot rule ("topk") at every temperature.
- Prompt lookup (``NGramDrafter``) finds several earlier occurrences of the context's tail; their
  continuations, merged where they share a prefix, form a trie (:func:`lookup_tree`).
- The feature head (``FeatureDrafter``) grows EAGLE-2's dynamic tree (:func:`dynamic_tree`): the
  shape follows the head's own confidence, re-chosen at every step.
- Any other drafter proposes its chain, a tree of width 1 (``Drafter.propose_tree``'s default).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from .lm import Decoder
from .tree import Tree, trie
from .tree_shapes import Topology, node_depths


@torch.inference_mode()
def expand(dec: Decoder, context: torch.Tensor, topo: Topology, vocab_ids: torch.Tensor | None = None
           ) -> tuple[Tree, dict[int, int]]:
    """Fill ``topo`` with a draft model's ranked guesses. ``dec``'s cache holds a prefix of ``context``
    [1, T] (at most T − 1 tokens). Returns the tree and, for each node that was run (every node with
    children), its slot in ``dec``'s cache; the cache then holds the context and those nodes, depth by
    depth. ``vocab_ids`` [S]: the draft's reduced output layer (FR-Spec) — logits index into it."""
    T, n, parents = context.shape[1], len(topo), [p for p, _ in topo]
    depth, slots = node_depths(parents), {}
    tokens = torch.zeros(n, dtype=torch.long, device=dec.device)
    frontier = {-1: dec.step(context[:, dec.length:].to(dec.device))[0, -1]}  # the root's next-token logits
    for d in range(1, max(depth, default=0) + 1):
        level = [i for i in range(n) if depth[i] == d]
        for parent in {parents[i] for i in level}:  # fill this depth from the parents' ranked choices
            members = [i for i in level if parents[i] == parent]
            ranked = frontier[parent].topk(max(topo[i][1] for i in members) + 1).indices
            for i in members:
                tokens[i] = ranked[topo[i][1]] if vocab_ids is None else vocab_ids[ranked[topo[i][1]]]
        run = [i for i in level if i in parents]  # nodes whose children need their logits
        if not run:
            break
        start = dec.length
        visible = torch.zeros(len(run), start + len(run), dtype=torch.bool)  # host: set cell by cell, copied once
        visible[:, :T] = True  # the context
        for row, i in enumerate(run):
            visible[row, start + row] = True
            while (i := parents[i]) >= 0:  # ancestors run at earlier depths, in the cache already
                visible[row, slots[i]] = True
        out = dec.step_masked(tokens[run].view(1, -1), torch.full((len(run),), T - 1 + d, device=dec.device), visible)[0]
        for row, i in enumerate(run):
            slots[i], frontier[i] = start + row, out[row]
    return Tree(tokens, parents, None, "topk"), slots


def kept_after(path: list[int], slots: dict[int, int], context_len: int) -> list[int]:
    """The draft cache slots to keep after the target accepted ``path``: the path's nodes that were run
    (a prefix of it: a leaf was never run), to be moved right after the ``context_len`` context tokens."""
    ran = next((k for k, node in enumerate(path) if node not in slots), len(path))
    return [slots[node] - context_len for node in path[:ran]]


def lookup_tree(ids: list[int], budget: int, max_ngram: int = 3, min_ngram: int = 1, depth: int = 8,
                device: torch.device | str = "cpu") -> Tree:
    """Prompt lookup as a tree: the continuations (up to ``depth`` tokens) after the latest earlier
    occurrences of the context's last n tokens (n = max_ngram … min_ngram, longer matches first), merged
    into a trie of at most ``budget`` nodes; earlier-found continuations rank first among siblings."""
    found = (ids[start + n : start + n + depth] for n in range(max_ngram, min_ngram - 1, -1)
             for start in range(len(ids) - n - 1, -1, -1) if ids[start : start + n] == ids[-n:])  # latest first
    return trie(found, budget, device)[0]


# step(d, tokens [n], parent_rows [n], mask [n, R + n]) → log-probabilities [n, S] (see dynamic_tree)
DraftStep = Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass
class DynamicTree:
    """What :func:`dynamic_tree` kept: ``tree`` (its tokens are indices into the draft's output set S),
    ``probs`` [N] each node's own draft probability given its parent, ``scores`` [N] its cumulative
    log-probability (the sum of log q along its path: what the rerank sorted by) and ``drafted``, the
    number of candidates drafted before the rerank."""

    tree: Tree
    probs: torch.Tensor
    scores: torch.Tensor
    drafted: int


@torch.inference_mode()
def dynamic_tree(root_logp: torch.Tensor, step: DraftStep, depth: int, top_k: int, budget: int) -> DynamicTree:
    """EAGLE-2's dynamic tree (Li et al. 2024, "EAGLE-2: Faster Inference of Language Models with Dynamic
    Draft Trees"). A node's score is its cumulative draft log-probability, log Π q along its path — the
    draft's estimate of the chance that the whole path is accepted (a good estimate where the draft is
    calibrated). ``root_logp`` [S]: the draft's log-probabilities after the context.

    - Expand: the ``top_k`` best-scoring nodes of the newest depth run in ONE draft forward, each
      proposing its ``top_k`` likeliest tokens as children (k² candidates a depth; depth 1 is the root's k).
    - Rerank: of all the candidates drafted up to ``depth``, keep the ``budget`` best scores. A child
      scores at most its parent (log q ≤ 0) and ties keep the parent first, so the kept set is
      ancestor-closed without a repair step.

    ``step(d, tokens, parent_rows, mask)`` runs the n ≤ k chosen nodes of depth d: tokens [n] (indices
    into S), parent_rows [n] (each node's parent among the previous call's rows, -1: the root), mask bool
    [n, R + n] over the R nodes run in earlier calls and these (row i: its ancestors and itself), and
    returns their children's log-probabilities [n, S]. The nodes come out depth by depth, parents before
    children, siblings likeliest first; the candidates are deterministic, so verified by the one-hot rule."""
    device = root_logp.device
    k = min(top_k, root_logp.numel())
    if budget < 1 or depth < 1 or k < 1:
        empty = torch.empty(0, device=device)
        return DynamicTree(Tree(torch.empty(0, dtype=torch.long, device=device), [], None, "topk"), empty, empty, 0)
    own, tok = root_logp.topk(k)
    toks, scores, owns = [tok], [own], [own]
    parents = [torch.full((k,), -1, dtype=torch.long, device=device)]  # global ids (-1: the root)
    level_score, level_prow = own, torch.full((k,), -1, dtype=torch.long, device=device)
    offset = 0  # global id of the newest depth's first candidate
    seen = torch.zeros(0, 0, dtype=torch.bool, device=device)  # [R, R]: which run node sees which
    prev = 0  # row of the previous call's first node in ``seen``
    for d in range(1, depth):
        n = min(k, level_score.numel())
        sel = level_score.topk(n).indices  # the frontier: the best cumulative scores of the newest depth
        prow = level_prow[sel]
        R = seen.shape[0]
        mask = torch.zeros(n, R + n, dtype=torch.bool, device=device)
        if d > 1:  # a node sees what its parent saw (the parent's ancestors) and the parent itself
            mask[:, :R] = seen[prev + prow]
        mask[:, R:] = torch.eye(n, dtype=torch.bool, device=device)
        seen = torch.cat([torch.nn.functional.pad(seen, (0, n)), mask])
        logp = step(d, toks[-1][sel], prow, mask)  # [n, S]: ONE draft forward for the whole depth
        own, tok = logp.topk(k, dim=-1)  # [n, k]
        level_score = (level_score[sel][:, None] + own).flatten()  # log Π q along each child's path
        parents.append((offset + sel).repeat_interleave(k))
        offset += toks[-1].numel()
        level_prow = torch.arange(n, device=device).repeat_interleave(k)
        prev = R
        toks.append(tok.flatten())
        scores.append(level_score)
        owns.append(own.flatten())
    all_scores = torch.cat(scores)
    best = torch.sort(all_scores, descending=True, stable=True).indices[:budget]  # stable: a parent first
    kept = best.sort().values  # global ids increase depth by depth, and by rank among siblings
    index = torch.full((all_scores.numel(),), -2, dtype=torch.long, device=device)  # -2: not kept
    index[kept] = torch.arange(kept.numel(), device=device)
    par = torch.cat(parents)[kept]
    par = torch.where(par >= 0, index[par.clamp(min=0)], par)  # a dropped ancestor would show as -2: Tree refuses it
    tree = Tree(torch.cat(toks)[kept], par.tolist(), None, "topk")
    return DynamicTree(tree, torch.cat(owns)[kept].exp(), all_scores[kept], all_scores.numel())
