"""Which lookahead shape (W, N, G) pays on this machine: measured hits, priced by the cost model.

A step of lookahead decoding costs one forward of width 1 + W(N − 1) + G(N − 1) (a trie with fewer nodes
is padded), i.e. v(width) target steps, and emits 1 + (the longest candidate's match) tokens. Both sides are measured:

    τ(W, N, G)    from the run's first ``explore`` steps at :data:`EXPLORE`: per step, how many leading
                  tokens of each candidate the target confirmed (``match_lengths``); a smaller G keeps the
                  most recent G candidates, a smaller N cuts each to N − 1 tokens
    v(width)      the cost model's tree-mask v (``costmodel``), plus o and the host's own work per step

    S(W, N, G) = τ / (v(width) + o + host)            (theory.predicted_speedup; AR: W = G = 0)

The window width W changes what the pool is fed, which the exploration cannot replay: the menu ties W
to G (lade's defaults do too) or drops the window (W = 0: the pool then holds the output's own n-grams),
so the estimate for a smaller W is optimistic. At T > 0 a candidate
counts as matched where it equals the target's argmax (a proxy for its acceptance).
"""

from __future__ import annotations

import statistics

from . import theory
from .tree import Tree

Shape = tuple[int, int, int]  # (W, N, G)
EXPLORE: Shape = (5, 4, 5)  # forward width ≤ 1 + 15 + 15 = 31
MENU: tuple[Shape, ...] = ((0, 2, 0),) + tuple((w, n, g) for g in (1, 2, 3, 5) for w in (0, g) for n in (2, 3, 4))


def match_lengths(tree: Tree, paths: list[list[int]], choice: list[int], tokens: list[int] | None = None) -> list[int]:
    """Per candidate (its trie nodes ``paths``), how many leading tokens equal the target's argmax at their
    parent. choice: the argmax at [root, nodes…] (len(tree) + 1); ``tokens``: the trie's, if on the host."""
    tokens = tree.tokens.tolist() if tokens is None else tokens
    rows = [[0] + [1 + node for node in path] for path in paths]  # each node's parent's row: the root's is 0
    return [next((k for k, node in enumerate(path) if tokens[node] != choice[row[k]]), len(path))
            for path, row in zip(paths, rows)]


def width_of(shape: Shape) -> int:
    """The forward width of a step at ``shape``: c, the window's W(N − 1) and G(N − 1) candidate slots (a
    smaller window or trie is padded to it)."""
    w, n, g = shape
    return 1 + (w + g) * (n - 1)


def predicted(shape: Shape, steps: list, costs) -> tuple[float, float, float]:
    """(τ, width, S) for ``shape`` replayed on the recorded steps (``records.LookaheadStep``; module docstring)."""
    w, n, g = shape
    tau = statistics.fmean(1 + min(n - 1, max(s.matches[:g], default=0)) for s in steps)
    host = statistics.fmean(s.host for s in steps) / costs.step_s if w or g else 0.0
    return tau, width_of(shape), theory.predicted_speedup(tau, host, costs.v(width_of(shape), tree=True), costs.overhead)


class ShapeSearch:
    """The (W, N, G) of each step (a :class:`theory.Chooser`): a fixed shape, or ("auto") :data:`EXPLORE` for
    ``explore`` steps, then the menu's best predicted S (``report``: what it measured)."""

    def __init__(self, shape: Shape | None, costs=None, explore: int = 8, menu: tuple[Shape, ...] = MENU) -> None:
        self.fixed = shape is not None
        self.shape: Shape = shape if shape is not None else EXPLORE
        self.costs, self.explore, self.menu, self.seen = costs, explore, menu, []
        self.report: dict = {"auto": not self.fixed, "shape": self.shape}

    @classmethod
    def for_run(cls, shape, costs) -> ShapeSearch:
        if theory.asks_auto("shape", shape, costs, "(W, N, G)"):
            return cls(None, costs)
        if len(shape) != 3 or any(not isinstance(x, int) for x in shape) or min(shape[0], shape[2]) < 0 or shape[1] < 2:
            raise ValueError(f"shape must be (W, N, G) — window width, n-gram size, candidates per token — with W >= 0, "
                             f"N >= 2 (an n-gram is a token and its followers) and G >= 0, got {shape!r}")
        return cls(tuple(shape))

    def choose(self, left: int) -> Shape:
        return self.shape

    def update(self, step) -> None:
        """After a step (its record): at the end of the exploration, the menu's best shape is kept."""
        if not self.fixed:
            self.seen.append(step)
            if len(self.seen) == self.explore:
                self.finish()

    def finish(self) -> None:
        """The run ended: a run shorter than the exploration still chooses from the steps it had, so a caller
        that keeps the choice (the benchmark's warm-up) never makes a later run explore again."""
        if self.fixed or not self.seen:
            return
        table = {shape: predicted(shape, self.seen, self.costs) for shape in self.menu}
        best = max(table, key=lambda s: table[s][2])
        self.report = {"auto": True, "explored": self.shape, "steps": len(self.seen), "shape": best,
                       "table": {str(s): {"tau": t, "width": w, "speedup": x} for s, (t, w, x) in table.items()}}
        self.shape, self.fixed = best, True
