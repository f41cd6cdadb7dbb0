"""Lookahead decoding (Fu, Bailis, Stoica, Zhang 2024): Jacobi's n-grams verified in the same forward.

Plain Jacobi decoding (lesson 07) throws away the wrong tokens of every iteration, yet right n-grams
often appear in a state before they settle. Lookahead decoding keeps them and checks them, with no
draft model. Each step is ONE target forward over three branches, after the current token c (the last
one emitted, not yet in the cache, at position P):

    lookahead branch   a window of W columns × (N − 1) levels: a 2-D Jacobi iteration. Level l,
                       column j sits at position P + 1 + j + l and sees c, level-0 columns ≤ j and
                       column j of levels 1..l (itself included). The last level's outputs become the
                       next step's last level; the oldest level drops out — the window slides one
                       column per step whatever was accepted.
    n-gram pool        each column's diagonal (level 0 … level N − 2, the new output) is an n-gram;
                       the pool keeps at most G per first token, least recently seen dropped, fed by
                       the window and by the accepted output (and, if asked, the prompt).
    verification       the pool's n-grams that start with c: their N − 1 followers as guesses at
                       P + 1 … P + N − 1, merged into a trie (:class:`~specdec_core.tree.Tree`); each
                       sees c and its own ancestors only — never the window.

       c | L0 L0 L0 | L1 L1 L1 | cand cand cand …        one forward, width 1 + W(N−1) + trie nodes

The trie is verified like a token tree (greedy: follow the target's argmax; sampled: the one-hot rule,
since the candidates are deterministic), its accepted path kept in the cache by ``Decoder.keep`` and
everything else dropped. So greedy output equals AR's and sampled output has the target's law.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterable

import torch
from transformers import PreTrainedModel

from .generation import Clock, Generation, eos_set, tokens_per_call
from .lm import Decoder, check_inputs
from .lookahead_shapes import ShapeSearch, match_lengths
from .ngram_pool import NGramPool
from .sampling import Warp
from .tree import Tree, tree_mask, verify_tree, verify_tree_greedy

Levels = list[list[int]]  # the window: levels[l][j], level 0 the oldest


def candidate_tree(candidates: list[tuple[int, ...]]) -> tuple[Tree, list[list[int]]]:
    """The candidates (tails that followed the current token) as a trie: shared prefixes become one node.
    Returns the tree (siblings "topk": deterministic guesses, tried in the candidates' order) and, per
    candidate, its nodes from the root's child down."""
    tokens: list[int] = []
    parents: list[int] = []
    index: dict[tuple[int, int], int] = {}  # (parent node, token) → node
    paths = []
    for tail in candidates:
        node, path = -1, []
        for token in tail:
            if (node, token) not in index:
                index[(node, token)] = len(tokens)
                tokens.append(token)
                parents.append(node)
            node = index[(node, token)]
            path.append(node)
        paths.append(path)
    return Tree(torch.tensor(tokens, dtype=torch.long), parents), paths  # host: the trie's tokens, Python ints


def window_mask(width: int, levels: int) -> tuple[torch.Tensor, torch.Tensor]:
    """[c, level 0 (``width`` columns), level 1, …] as (offsets [1 + width·levels] from c's position,
    mask bool [same, same]): level l, column j at offset 1 + j + l sees c, level-0 columns ≤ j and column j
    of levels 1..l."""
    n = 1 + width * levels
    offsets = torch.zeros(n, dtype=torch.long)  # host: filled cell by cell below, moved once per step
    mask = torch.zeros(n, n, dtype=torch.bool)  # host: as the offsets
    mask[:, 0] = True
    for level in range(levels):
        for j in range(width):
            row = 1 + level * width + j
            offsets[row] = 1 + j + level
            mask[row, 1 : 2 + j] = True  # level 0, columns 0..j
            for k in range(1, level + 1):
                mask[row, 1 + k * width + j] = True  # column j of levels 1..l
    return offsets, mask


def step_inputs(current: int, levels: Levels, tree: Tree) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The one forward of a step: (ids [n], offsets [n] from c's position, mask bool [n, n]) for
    [c, window level by level, trie nodes]. The window and the trie see c and never each other."""
    width = len(levels[0]) if levels else 0
    w_offsets, w_mask = window_mask(width, len(levels))
    t_depths, t_mask = tree_mask(tree)  # [c, nodes…]: row 0 is c
    nw, nt = w_offsets.numel(), len(tree)
    mask = torch.zeros(nw + nt, nw + nt, dtype=torch.bool)  # host: assembled from host blocks, moved once
    mask[:nw, :nw] = w_mask
    mask[nw:, 0] = True
    mask[nw:, nw:] = t_mask[1:, 1:]
    ids = torch.tensor([current] + [t for level in levels for t in level] + tree.tokens.tolist(),  # host: Python ints
                       dtype=torch.long)
    return ids, torch.cat([w_offsets, t_depths[1:]]), mask


def slide(levels: Levels, outputs: list[int], depth: int) -> tuple[Levels, list[tuple[int, ...]]]:
    """After a forward: the new window (the last level's ``outputs`` become the last level; once the window
    holds ``depth`` = N − 1 levels the oldest drops out) and the n-grams it completed, one per column:
    (level 0, level 1, …, level N − 2, output) of that column."""
    if len(levels) < depth:  # still filling: the window grows a level
        return levels + [outputs], []
    grams = [tuple(level[j] for level in levels) + (outputs[j],) for j in range(len(outputs))]
    return levels[1:] + [outputs], grams


def first_level(prompt: list[int], width: int, seed: int = 0) -> list[int]:
    """Level 0 of a new window: ``width`` tokens drawn from the prompt (lade starts the same way)."""
    rng = random.Random(seed)
    return [rng.choice(prompt) for _ in range(width)]


@torch.inference_mode()
def lookahead_generate(
    model: PreTrainedModel,
    input_ids: torch.Tensor,
    max_new_tokens: int,
    *,
    shape="auto",
    costs=None,
    prompt_ngrams: bool = False,
    temperature: float = 0.0,
    top_k: int | None = None,
    top_p: float | None = None,
    eos_token_id: int | Iterable[int] | None = None,
    generator: torch.Generator | None = None,
    tokenizer=None,
) -> Generation:
    """Generate with lookahead decoding. input_ids [1, T]. ``shape``: (W, N, G) — window width, n-gram
    size, candidates per token — or "auto": explore with the largest shape of
    :data:`~specdec_core.lookahead_shapes.MENU`, then keep the one the cost model ``costs`` predicts
    fastest from the run's own pool hits (:class:`~specdec_core.lookahead_shapes.ShapeSearch`).
    ``prompt_ngrams``: seed the pool with the prompt's n-grams (prompt lookup's material). Greedy output
    equals ``ar.generate``'s; sampled output has the target's law. stats: target_calls (one per step),
    tokens_per_call, accepted_lengths, pool_hits (steps with a candidate), candidates, verify_widths
    (tokens per forward), shapes (per step), draft_time (the host's pool and window work), verify_time."""
    check_inputs(model, input_ids, max_new_tokens)
    search = ShapeSearch.for_run(shape, costs)
    width, n, size = search.shape
    stops, device, warp = eos_set(eos_token_id), model.device, Warp(temperature, top_k, top_p)
    context = input_ids[0].tolist()
    pool = NGramPool(n, max(size, 1))  # G = 0: nothing is verified, the pool idles
    if prompt_ngrams:
        pool.add(context)
    levels: Levels = [first_level(context, width)] if width else []
    dec = Decoder(model)
    new: list[int] = []
    steps = []
    host_time, marks = 0.0, []
    clock = Clock(device)  # the forward's time: events on a GPU, read after the run (no wait inside a step)
    if len(context) > 1:
        dec.prefill(input_ids[:, :-1].to(device))
    while len(new) < max_new_tokens:
        t0 = time.perf_counter()
        current, root, window = context[-1], len(context) - 1, [list(level) for level in levels]
        candidates = [tail[: n - 1] for tail in pool.candidates(current)[:size]]
        tree, paths = candidate_tree(candidates)
        ids, offsets, mask = step_inputs(current, levels, tree)
        t1, verify_start = time.perf_counter(), clock.mark()
        wide = ids.numel() > 1  # else the AR shape (W = 0, no candidate): a plain decode step, nothing to keep
        if wide:
            logits = dec.step_masked(ids.view(1, -1).to(device), root + offsets, mask)[0]  # [n_in, V]
        else:
            logits = dec.step(ids.view(1, 1).to(device))[0]
        nw = ids.numel() - len(tree)
        rows = [0] + list(range(nw, ids.numel()))  # c and the trie: the tree's [root, nodes…]
        if warp.greedy:
            path, nxt = verify_tree_greedy(tree, logits[rows])
        else:
            path, nxt = verify_tree(tree, warp(logits[rows]), generator)
        if wide:
            dec.keep([0] + [nw + i for i in path])
        choice = logits.argmax(-1).tolist()
        marks.append((verify_start, clock.mark()))
        t2 = time.perf_counter()
        if levels:
            last = len(levels) - 1
            levels, grams = slide(levels, [choice[1 + last * width + j] for j in range(width)], n - 1)
            for gram in grams:
                pool.remember(gram[0], gram[1:])
        emitted = []
        for token in tree.tokens[path].tolist() + [nxt]:
            emitted.append(token)
            new.append(token)
            if token in stops or len(new) == max_new_tokens:
                break
        context += emitted
        pool.add(context[-(len(emitted) + n - 1):])  # the accepted output's n-grams
        matches = match_lengths(tree, paths, [choice[r] for r in rows])
        host = (t1 - t0) + (time.perf_counter() - t2)
        host_time += host  # the host's own work: perf_counter times it exactly, on any device
        steps.append({"accepted": len(path), "candidates": len(candidates), "width": ids.numel(), "host": host,
                      "matches": matches, "paths": paths, "shape": (width, n, size),
                      "current": current, "window": window, "tails": candidates, "path": path})
        if new[-1] in stops:
            break
        if search.update(steps):  # "auto" has chosen its shape: the window and the pool follow it
            width, n, size = search.shape
            levels = [level[:width] for level in levels[-(n - 1):]] if width else []
            pool = _reshaped(pool, n, size)
    wall = clock.stop()
    verify_time = sum(clock.seconds(a, b) for a, b in marks)
    search.update(steps, final=True)  # a run shorter than the exploration chooses from what it saw (untimed)
    stats = {
        "wall_time": wall, "target_calls": len(steps), "tokens_per_call": tokens_per_call(len(new), len(steps)),
        "accepted_lengths": [s["accepted"] for s in steps], "pool_hits": sum(s["candidates"] > 0 for s in steps),
        "candidates": [s["candidates"] for s in steps], "verify_widths": [s["width"] for s in steps],
        "shapes": [s["shape"] for s in steps], "shape": search.shape, "search": search.report,
        "draft_time": host_time, "verify_time": verify_time, "steps": steps, "tree": True,
    }
    return Generation(new, tokenizer.decode(new) if tokenizer is not None else None, stats)


def _reshaped(pool: NGramPool, n: int, size: int) -> NGramPool:
    """The pool for a new (N, G): every tail cut to N − 1 tokens, at most G per token, recency kept."""
    out = NGramPool(n, max(size, 1))
    for first, tails in pool.follows.items():
        for tail in tails:
            out.remember(first, tail[: n - 1])
    return out
