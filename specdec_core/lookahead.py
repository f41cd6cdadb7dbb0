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

       c | L0 L0 L0 | L1 L1 L1 | cand cand … | pad …     one forward, width 1 + (W + G)(N − 1)

The trie is verified by the token trees' own rule (:func:`tree.accept`: greedy, follow the target's argmax;
sampled, the one-hot rule, the candidates being deterministic), its accepted path kept in the cache and the
rest — pads included, which see only themselves — dropped. So greedy output equals AR's and sampled output
has the target's law.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterable

import torch
from transformers import PreTrainedModel

from .generation import Clock, Generation, Output
from .lm import Decoder, check_inputs
from .lookahead_shapes import Shape, ShapeSearch, match_lengths, width_of
from .ngram_pool import NGramPool
from .records import LookaheadStep, TreeStats
from .sampling import Warp
from .tree import Tree, accept, padded, tree_mask, trie

Levels = list[list[int]]  # the window: levels[l][j], level 0 the oldest


def candidate_tree(candidates: list[tuple[int, ...]]) -> tuple[Tree, list[list[int]]]:
    """The candidates (tails that followed the current token) as a trie (:func:`tree.trie`): the tree and,
    per candidate, its nodes from the root's child down."""
    return trie(candidates)


def window_mask(width: int, levels: int) -> tuple[torch.Tensor, torch.Tensor]:
    """[c, level 0 (``width`` columns), level 1, …] as (offsets [1 + width·levels] from c's position,
    mask bool [same, same]): level l, column j at offset 1 + j + l sees c, level-0 columns ≤ j and column j
    of levels 1..l."""
    cell = torch.arange(width * levels)  # host: index arithmetic, moved once per step
    level, col = cell // max(width, 1), cell % max(width, 1)
    mask = torch.eye(1 + cell.numel(), dtype=torch.bool)  # host: as the cells
    mask[:, 0] = True
    mask[1:, 1:] = ((level == 0) & (col <= col[:, None])) | ((col == col[:, None]) & (level <= level[:, None]))
    return torch.cat([torch.zeros(1, dtype=torch.long), 1 + col + level]), mask  # host: as the cells


def step_inputs(current: int, levels: Levels, tree: Tree) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The one forward of a step: (ids [n], offsets [n] from c's position, mask bool [n, n]) for
    [c, window level by level, trie nodes]. The window and the trie see c and never each other."""
    width = len(levels[0]) if levels else 0
    w_offsets, w_mask = window_mask(width, len(levels))
    t_depths, t_mask = tree_mask(tree)  # [c, nodes…]: row 0 is c
    nw = w_offsets.numel()
    mask = torch.block_diag(w_mask, t_mask[1:, 1:])  # the window and the trie: blind to each other
    mask[nw:, 0] = True  # the trie sees c
    ids = torch.cat([torch.tensor([current] + [t for level in levels for t in level]),  # host: Python ints
                     tree.tokens])
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


class Window:
    """Lookahead's state between steps: the window's ``levels``, the n-gram ``pool`` and the ``shape`` they
    are built for. :meth:`fit` follows a new shape from the chooser (``"auto"`` after its exploration)."""

    def __init__(self, shape: Shape, context: list[int], prompt_ngrams: bool) -> None:
        self.shape, (width, n, size) = shape, shape
        self.pool = NGramPool(n, max(size, 1))  # G = 0: nothing is verified, the pool idles
        if prompt_ngrams:
            self.pool.add(context)
        self.levels: Levels = [first_level(context, width)] if width else []

    def fit(self, shape: Shape) -> None:
        """Cut the window to W columns and N − 1 levels, and every pool tail to N − 1 tokens, G per token."""
        if shape != self.shape:
            (width, n, size), old = shape, self.pool
            self.levels = [level[:width] for level in self.levels[-(n - 1):]] if width else []
            self.pool, self.shape = NGramPool(n, max(size, 1)), shape
            for first, tails in old.follows.items():  # recency kept
                for tail in tails:
                    self.pool.remember(first, tail[: n - 1])


def lookahead_step(dec: Decoder, win: Window, context: list[int], shape: Shape, warp: Warp,
                   generator: torch.Generator | None) -> tuple[list[int], LookaheadStep]:
    """One step at ``shape`` = (W, N, G): ONE forward of width 1 + (W + G)(N − 1) over [c, window, the
    pool's trie for c, pads], :func:`tree.accept` on c and the trie, then the window slides and the pool
    learns. ``dec`` holds ``context`` but its last token c. Returns (tokens to emit, the step's record)."""
    t0 = time.perf_counter()
    win.fit(shape)
    n, g, current, window = shape[1], shape[2], context[-1], [list(level) for level in win.levels]
    tails = [tail[: n - 1] for tail in win.pool.candidates(current)[:g]]
    tree, paths = candidate_tree(tails)
    ids, offsets, mask = step_inputs(current, window, tree)
    nw, width = ids.numel() - len(tree), width_of(shape)
    ids, offsets, mask = padded(ids, offsets, mask, width)
    rows, t1 = [0] + list(range(nw, nw + len(tree))), time.perf_counter()
    ids = ids.view(1, -1).to(dec.device)  # W = G = 0 (the AR shape): a plain decode step, no mask
    logits = (dec.step_masked(ids, len(context) - 1 + offsets, mask) if width > 1 else dec.step(ids))[0]
    path, nxt, choice, drafted = accept(dec, tree, logits, rows, warp, generator)
    t2 = time.perf_counter()
    if window:
        win.levels, grams = slide(window, choice[nw - len(window[-1]) : nw], n - 1)  # the last level's outputs
        for gram in grams:
            win.pool.remember(gram[0], gram[1:])
    tokens = [drafted[i] for i in path] + [nxt]
    win.pool.add(context[-(n - 1):] + tokens)  # the accepted output's n-grams
    matches = match_lengths(tree, paths, [choice[r] for r in rows], drafted)
    host = (t1 - t0) + (time.perf_counter() - t2)  # the host's own work: perf_counter times it on any device
    return tokens, LookaheadStep(drafted, list(tree.parents), path, nxt, width, nw + len(tree), shape=shape,
                                 current=current, window=window, tails=tails, paths=paths, matches=matches, host=host)


@torch.inference_mode()
def lookahead_generate(model: PreTrainedModel, input_ids: torch.Tensor, max_new_tokens: int, *, shape="auto",
                       costs=None, prompt_ngrams: bool = False, temperature: float = 0.0, top_k: int | None = None,
                       top_p: float | None = None, eos_token_id: int | Iterable[int] | None = None,
                       generator: torch.Generator | None = None, tokenizer=None) -> Generation:
    """Generate with lookahead decoding. input_ids [1, T]. ``shape``: (W, N, G) — window width, n-gram
    size, candidates per token — or "auto": explore with the largest shape of
    :data:`~specdec_core.lookahead_shapes.MENU`, then keep the one the cost model ``costs`` predicts
    fastest from the run's own pool hits (:class:`~specdec_core.lookahead_shapes.ShapeSearch`).
    ``prompt_ngrams``: seed the pool with the prompt's n-grams (prompt lookup's material). Greedy output
    equals ``ar.generate``'s; sampled output has the target's law. stats: a
    :class:`~specdec_core.records.TreeStats` of :class:`~specdec_core.records.LookaheadStep`: draft_time is
    the host's pool and window work, verify_time the forwards'."""
    check_inputs(model, input_ids, max_new_tokens)
    search, warp = ShapeSearch.for_run(shape, costs), Warp(temperature, top_k, top_p)
    context = input_ids[0].tolist()
    win, dec, out, steps = Window(search.shape, context, prompt_ngrams), Decoder(model), Output(max_new_tokens, eos_token_id), []
    clock = Clock(model.device)  # the forwards' time: events on a GPU, read after the run (no wait inside a step)
    if len(context) > 1:
        dec.prefill(input_ids[:, :-1].to(model.device))
    while not out.done:
        start = clock.mark()
        tokens, step = lookahead_step(dec, win, context, search.choose(out.left), warp, generator)
        step.marks = (start, clock.mark())
        search.update(step)
        steps.append(step)
        context += out.emit(tokens)
    stats = TreeStats(clock.stop(), len(steps), steps=steps)
    search.finish()  # a run shorter than the exploration chooses from what it saw
    for s in steps:
        s.draft_s, s.verify_s = s.host, clock.seconds(*s.marks)
    stats.shape, stats.search = search.shape, search.report
    return Generation(out.tokens, tokenizer.decode(out.tokens) if tokenizer is not None else None, stats)
