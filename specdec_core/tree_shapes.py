"""The shape of a token tree for this machine: Sequoia's dynamic programme (Chen et al. 2024) over the
measured acceptance of each sibling rank, priced by the cost model's v(n).

A *topology* names every node by its parent and its rank among its siblings (0 = the drafter's first
choice there): ``[(−1, 0), (−1, 1), (0, 0)]`` is two candidates for the first token and one for the
second under the first. A drafter fills it with its k-th best token at each parent.

Acceptance vector: ``a[k]`` = the chance that the target accepts the sibling of rank k, given that the
ones before it were rejected (measured in the run; a prior until then). If acceptances at different
depths are independent, a node is accepted with the product of ``a`` along its path, so

    E[accepted tokens] = Σ over nodes of Π_{ancestors and itself} a[rank]        (Sequoia, Eq. 3)

and the best tree of n nodes and depth ≤ D comes from the programme of :func:`best_tree`. A step
then costs the drafting (one draft forward per depth: D·c) plus one verify with the tree mask, plus the
loop's overhead o; the predicted speed-up is (1 + E) / (D·c + v(W) + o). An auto tree's verify runs the
root and the n nodes padded to the next width of the menu, W = menu_width(n + 1) (:data:`~specdec_core.widths.WIDTHS`:
1, 2, 4, …, 64), so v is priced at W: a 7-node tree pays v(8), a 9-node one v(16), never v(64) unless
it is 32 nodes or more.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from . import theory
from .widths import WIDTHS, menu_width

Topology = list[tuple[int, int]]  # (parent, rank) per node, parents before children

# node counts "auto" considers: each menu width's fullest tree (W − 1 nodes) and some between (verify n + 1 ≤ 64)
BUDGETS = tuple(sorted({1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48} | {w - 1 for w in WIDTHS if w > 1}))


def from_branching(branching: Sequence[int]) -> Topology:
    """A static tree: ``branching[d]`` children under every node of depth d (the root is depth 0)."""
    if not branching or any(b < 1 for b in branching):
        raise ValueError(f"branching factors must be >= 1 per depth, got {tuple(branching)}")
    topo: Topology = []
    frontier = [-1]
    for b in branching:
        start = len(topo)
        topo += [(parent, rank) for parent in frontier for rank in range(b)]
        frontier = list(range(start, len(topo)))
    return topo


def has_shape(budget: int, depth: int, top_k: int) -> bool:
    """Whether some tree has exactly ``budget`` nodes, depth ``depth`` and at most ``top_k`` children a node."""
    return depth >= 1 and top_k >= 1 and depth <= budget <= sum(top_k ** d for d in range(1, depth + 1))


def budget_shape(budget: int, depth: int, top_k: int) -> Topology:
    """A topology of exactly ``budget`` nodes, depth ``depth`` and at most ``top_k`` children a node: for a
    drafter that grows its own shape (EAGLE-2's dynamic tree reads only these three numbers), or a
    static tree that goes deep first (a rank-0 chain), then wide: each node, shallowest first, takes
    all its ``top_k`` children before the next one (so the root has min(top_k, budget − depth + 1))."""
    if not has_shape(budget, depth, top_k):
        raise ValueError(f"no tree of {budget} nodes has depth {depth} with at most {top_k} children a node")
    topo: Topology = [(d - 1, 0) for d in range(depth)]  # the chain: node d at depth d + 1
    level = list(range(1, depth + 1))
    kids = [1] * (depth - 1) + [0, 1]  # children so far of each node; the last entry (index -1): the root
    while len(topo) < budget:
        for parent in sorted(range(-1, len(topo)), key=lambda i: 0 if i < 0 else level[i]):  # shallow first
            while len(topo) < budget and (parent < 0 or level[parent] < depth) and kids[parent] < top_k:
                topo.append((parent, kids[parent]))
                kids[parent] += 1
                level.append(1 if parent < 0 else level[parent] + 1)
                kids.insert(len(topo) - 1, 0)
    return _breadth_first(topo)


def node_depths(parents: Sequence[int]) -> list[int]:
    """depth(i) ≥ 1 of every node, parents before children (-1: the root, at depth 0)."""
    out: list[int] = []
    for p in parents:
        out.append(1 if p < 0 else out[p] + 1)
    return out


def depth_of(topo: Topology) -> int:
    """The deepest node's depth (0 for an empty tree)."""
    return max(node_depths([p for p, _ in topo]), default=0)


def expected_accepted(topo: Topology, accept: Sequence[float]) -> float:
    """E[accepted tokens] of a topology (the module docstring's sum)."""
    reach: list[float] = []
    for parent, rank in topo:
        a = accept[rank] if rank < len(accept) else 0.0
        reach.append(a * (1.0 if parent < 0 else reach[parent]))
    return sum(reach)


def best_tree(n: int, accept: Sequence[float], max_depth: int = 8) -> tuple[float, Topology]:
    """The topology of at most ``n`` nodes and depth ≤ ``max_depth`` that maximises E[accepted tokens]
    for the acceptance vector ``accept`` (rank k → a[k]). Returns (E, topology).

    The programme: F(m, k, d) = the best value of at most m nodes spent on the children of one node of
    ranks k, k + 1, … (in order: a sibling is tried only after the ones before it), each child's subtree
    at most d deep. A child of rank k whose subtree holds j nodes (itself included) is worth
    a[k] · (1 + F(j − 1, 0, d − 1)), so F(m, k, d) = max(0, max_j a[k]·(1 + F(j − 1, 0, d − 1)) + F(m − j, k + 1, d))."""
    accept = tuple(float(a) for a in accept)
    ranks = len(accept)

    @functools.cache
    def f(m: int, k: int, d: int) -> tuple[float, tuple]:
        if m == 0 or k >= ranks or d == 0:
            return 0.0, ()
        best: tuple[float, tuple] = (0.0, ())
        for j in range(1, m + 1):
            sub_v, sub = f(j - 1, 0, d - 1)
            rest_v, rest = f(m - j, k + 1, d)
            value = accept[k] * (1.0 + sub_v) + rest_v
            if value > best[0] + 1e-12:
                best = (value, ((k, sub),) + rest)
        return best

    value, children = f(n, 0, max_depth)
    topo: Topology = []

    def emit(parent: int, kids: tuple) -> None:
        for rank, sub in kids:
            topo.append((parent, rank))
            emit(len(topo) - 1, sub)

    emit(-1, children)
    return value, _breadth_first(topo)


def _breadth_first(topo: Topology) -> Topology:
    """The same tree renumbered depth by depth (a drafter expands one depth per forward)."""
    depth = node_depths([p for p, _ in topo])
    order = sorted(range(len(topo)), key=lambda i: (depth[i], i))
    new = {old: i for i, old in enumerate(order)}
    return [(new[topo[i][0]] if topo[i][0] >= 0 else -1, topo[i][1]) for i in order]


def tree_speedup(topo: Topology, accept: Sequence[float], c: float, v, overhead: float = 0.0) -> float:
    """S of a topology (:func:`theory.predicted_speedup`): τ = 1 + E[accepted], drafting depth · c, the
    tree-mask ``v`` at the forward's padded width (:func:`forward_width`: n + 1 tokens up to the menu) and
    the loop's overhead o, all in target steps."""
    tau = 1.0 + expected_accepted(topo, accept) if topo else 1.0
    return theory.predicted_speedup(tau, depth_of(topo) * c, v(forward_width(topo)), overhead)


def forward_width(topo: Topology) -> int:
    """Tokens in the verify of a chosen topology: the root and its n nodes, padded to the next menu width
    (n = 5 → 8). What an auto step runs, and what :func:`tree_speedup` prices."""
    return menu_width(len(topo) + 1)


def best_shape(accept: Sequence[float], c: float, v, overhead: float = 0.0, budgets: Sequence[int] = BUDGETS,
               max_depth: int = 8) -> tuple[float, Topology]:
    """The (predicted S, topology) over node budgets: for each budget the programme's best tree, priced by
    the machine. A steep v (each row dear) collapses it to a chain or to a single guess."""
    best = (0.0, [])
    for n in budgets:
        try:
            _, topo = best_tree(n, accept, max_depth)
            s = tree_speedup(topo, accept, c, v, overhead)
        except ValueError:  # a width the cost model never measured
            continue
        if s > best[0]:
            best = (s, topo)
    return best


class ShapeChooser:
    """The tree of each step (a :class:`theory.Chooser`): a fixed topology, or (``"auto"``) :func:`best_shape`
    for the acceptance vector and the drafter's c measured so far in the run, started from a prior worth
    ``prior`` trials per rank (a[k] = 0.6 · 0.5^k, c = 0.1) and re-solved every ``every`` steps.
    :meth:`width_of` gives each step's forward width: a fixed shape's n + 1 (one width for the run), an
    auto shape's :func:`forward_width` (the chosen tree padded to the menu, the width its price assumed)."""

    def __init__(self, topology: Topology | None, costs=None, max_ranks: int = 4, prior: int = 4, every: int = 8) -> None:
        self.fixed, self.costs, self.every = topology, costs, every
        self.tried = [float(prior)] * max_ranks
        self.hits = [prior * 0.6 * 0.5 ** k for k in range(max_ranks)]
        self.steps, self.draft_s, self.depths = 0, 0.0, 0
        self._topo = topology

    @classmethod
    def for_run(cls, shape, costs) -> ShapeChooser:
        if theory.asks_auto("shape", shape, costs, "branching factors per depth or a topology"):
            return cls(None, costs)
        shape = list(shape)
        return cls(shape if shape and isinstance(shape[0], tuple) else from_branching(shape))

    def width_of(self, topo: Topology) -> int:
        """The verify's width for ``topo`` (a drafter's tree of at most len(topo) nodes, the rest pads)."""
        return len(topo) + 1 if self.fixed is not None else forward_width(topo)

    def choose(self, left: int) -> Topology:
        """The topology of the next step (``left``: tokens the budget allows)."""
        if self.fixed is None and (self._topo is None or self.steps % self.every == 0):
            c = self.draft_s / self.depths / self.costs.step_s if self.depths else 0.1
            accept = [h / t for h, t in zip(self.hits, self.tried)]  # a[k], measured so far
            self._topo = best_shape(accept, c, lambda n: self.costs.v(n, tree=True), self.costs.overhead)[1]
        return self._topo

    def update(self, step) -> None:
        """After a step (a ``records.TreeStep``): ranks 0..r were tried at each depth reached (r accepted),
        or all of them; its drafting seconds and depths count towards c."""
        self.steps += 1
        record_trials(self.tried, self.hits, step.trials)
        self.draft_s += step.draft_s
        self.depths += max(node_depths(step.parents), default=0)


def record_trials(tried: list[float], hits: list[float], trials: list[tuple[int, int]]) -> None:
    """Add :func:`tree.sibling_trials` to per-rank counts of tries and acceptances (in place)."""
    for children, accepted in trials:
        last = accepted if accepted >= 0 else children - 1
        for r in range(min(last + 1, len(tried))):
            tried[r] += 1
            hits[r] += r == accepted


def sibling_trials(tree, path: list[int]) -> list[tuple[int, int]]:
    """For each depth the verify reached: (children there, rank of the accepted one — 0 = the first tried —
    or -1 where every child was rejected). Sibling ranks 0..r were tried where rank r was accepted, all of
    them where none was: the data of Sequoia's acceptance vector."""
    out, node = [], -1
    for nxt in path + [None]:
        kids = tree.children(node)
        if not kids:
            break
        out.append((len(kids), kids.index(nxt) if nxt is not None else -1))
        node = nxt  # None closes the loop: it is the last
    return out
