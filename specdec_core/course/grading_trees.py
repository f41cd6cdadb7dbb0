"""What capstone 4's autograder tests use (verify a token tree): toy models as tables, trees drawn from
them, the exact law of one verify by enumeration, χ² tests of the student's verifier — at one node, on
one tree, inside a decoding loop — and the ✓/✗ checks of the public tests (:mod:`.grading_trees_public`).

    rng = grading.grading_rng("c4-q2-loop")                   # every hidden input comes from the seed
    p_value, detail = loop_pvalue(verify_tree_sampled, rng, iid=True)

A toy model (:class:`ToyLM`) is a table over a 4-token vocabulary: the distribution of the next token
after any prefix, drawn from (seed, prefix) on first use, so the target's p at every node of a tree
costs no forward pass and thousands of verifies take seconds. A draft is the target's logits plus its
own noise (it agrees with the target often, so paths are accepted down to their leaves).

**χ² tests and false failures.** A χ² test here pools, within each group of draws (one case), the
outcomes whose expected count is below 5, sums Pearson's statistic and degrees of freedom over the
groups (:func:`chi2_pvalue`) and fails below :data:`grading.P_MIN` = 10⁻⁵. For a correct answer the
p-value is uniform (its draws are its own), so each χ² test fails it once in 100,000 gradings; the
capstone has :data:`CHI2_TESTS` = 4 of them, so a correct answer loses points less than 4 × 10⁻⁵ < 1 in
10,000 of the time (union bound). An outcome the rule makes impossible (a repeated top-k candidate
accepted, a token outside p's support) gives p = 0 at once. The other tests check by support: greedy
(one-hot) targets and paths the target must accept leave nothing to chance.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from ..sampling import logits_to_probs
from .grading import blocked

TREE_LIBRARY = ("specdec_core.tree.verify_tree", "specdec_core.tree.verify_tree_greedy", "specdec_core.tree.tree_generate",
                "specdec_core.tree.accept", "specdec_core.tree.greedy_path",
                "specdec_core.tree.tree_step", "specdec_core.accept.verify", "specdec_core.accept.verify_greedy",
                "specdec_core.speculative.speculative_generate", "specdec_core.speculative.speculative_step")
CHI2_TESTS = 4  # χ² tests in the capstone (q1 hidden 2, q2 hidden 2, 3, 4): the union bound above
V = 4  # the toys' vocabulary
# topologies as (parent, rank among the draft's choices) per node: depth 3, a childless node at depth 1
SHAPES = ([(-1, 0), (-1, 1), (-1, 2), (0, 0), (0, 1), (1, 0), (3, 0)],
          [(-1, 0), (-1, 1), (0, 0), (0, 1), (2, 0), (2, 1)],
          [(-1, 0), (-1, 1), (-1, 2), (0, 0), (2, 0), (3, 0), (3, 1)])


@dataclass
class ToyLM:
    """A toy language model as a table: p(next | prefix) from random logits drawn from (seed, prefix),
    warped (temperature, top-k). ``near``: a draft — that model's logits plus this one's."""

    seed: int
    scale: float = 1.5
    temperature: float = 1.0
    top_k: int | None = None
    near: ToyLM | None = None
    _cache: dict = field(default_factory=dict, repr=False)

    def logits(self, prefix: tuple[int, ...]) -> torch.Tensor:
        r = random.Random(f"{self.seed}/{prefix}")
        own = torch.tensor([r.gauss(0.0, self.scale) for _ in range(V)], dtype=torch.float64)
        return own if self.near is None else own + self.near.logits(prefix)

    def probs(self, prefix: tuple[int, ...]) -> torch.Tensor:
        """[V] float32, as the course's samplers warp logits."""
        if prefix not in self._cache:
            self._cache[prefix] = logits_to_probs(self.logits(prefix).float(), self.temperature, self.top_k, None)
        return self._cache[prefix]


def toy_pair(rng: random.Random, temperature: float = 1.0, top_k: int | None = None, noise: float = 1.0
             ) -> tuple[ToyLM, ToyLM]:
    """(target, draft) from ``rng``: the target warped, the draft at T = 1 its logits plus noise."""
    target = ToyLM(rng.randrange(10**9), temperature=temperature, top_k=top_k)
    return target, ToyLM(rng.randrange(10**9), scale=noise, near=target)


def children(parents: list[int], node: int) -> list[int]:
    return [i for i, p in enumerate(parents) if p == node]


def path_to(parents: list[int], node: int) -> list[int]:
    out = []
    while node >= 0:
        out.append(node)
        node = parents[node]
    return out[::-1]


def with_repeat(shape: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """``shape`` with its first node that has an elder sibling given that sibling's rank (at the root in
    :data:`SHAPES`): one-hot candidates with a repeated token, which the rule must skip."""
    i = min(i for i, (p, _) in enumerate(shape) if any(q == p for q, _ in shape[:i]))
    j = max(j for j in range(i) if shape[j][0] == shape[i][0])
    return shape[:i] + [(shape[i][0], shape[j][1])] + shape[i + 1:]


def draw_tree(draft: ToyLM, prefix: tuple[int, ...], shape: list[tuple[int, int]], iid: bool,
              rng: random.Random) -> tuple[list[int], list[int], torch.Tensor | None]:
    """A tree as a drafter draws it after ``prefix``: (tokens, parents, q [N, V] or None). i.i.d.: each
    node drawn from the draft at its parent (q's row i); otherwise the draft's ranked choice there."""
    tokens: list[int] = []
    parents = [p for p, _ in shape]
    rows = []
    for parent, rank in shape:
        q = draft.probs(prefix + tuple(tokens[j] for j in path_to(parents, parent)))
        if iid:
            tokens.append(rng.choices(range(V), weights=q.tolist())[0])
        else:
            tokens.append(int(q.argsort(descending=True, stable=True)[rank]))
        rows.append(q)
    return tokens, parents, torch.stack(rows) if iid else None


def node_probs(target: ToyLM, prefix: tuple[int, ...], tokens: list[int], parents: list[int]) -> torch.Tensor:
    """The target's p at [root, node 0, …]: [N + 1, V] (what one forward over the tree gives)."""
    rows = [target.probs(prefix)] + [target.probs(prefix + tuple(tokens[j] for j in path_to(parents, i)))
                                     for i in range(len(tokens))]
    return torch.stack(rows)


def run_verify(verify: Callable, tokens: list[int], parents: list[int], p: torch.Tensor, q: torch.Tensor | None,
               gen: torch.Generator) -> tuple[list[int], int]:
    """The student's ``verify(tokens, parents, p, q, generator)`` on copies of the inputs, its answer
    checked for shape: a path down from the root (each node a child of the one before) and a token."""
    out = verify(list(tokens), list(parents), p.clone(), None if q is None else q.clone(), gen)
    try:
        path, nxt = out
        path, nxt = [int(i) for i in path], int(nxt)
    except (TypeError, ValueError) as err:
        raise AssertionError(f"✗ return (path: a list of node indices, next token: an int), got {out!r}") from err
    for above, node in zip([-1] + path, path):
        if not 0 <= node < len(parents) or parents[node] != above:
            raise AssertionError(f"✗ the path {path} must go down from the root, each node a child of the one before "
                                 f"(parents {parents})")
    if not 0 <= nxt < p.shape[-1]:
        raise AssertionError(f"✗ the next token {nxt} is outside the vocabulary")
    return path, nxt


def _next_residual(p_here: torch.Tensor, x: int, q_row: torch.Tensor | None) -> tuple[float, torch.Tensor]:
    """(probability that candidate x is accepted, p after it is rejected) under the capstone's rule."""
    if q_row is None:  # one-hot candidate: accept with p(x); else zero it, renormalise
        a, left = float(p_here[x]), p_here.clone()
        left[x] = 0.0
    else:
        a, left = min(1.0, float(p_here[x] / q_row[x])), (p_here - q_row).clamp(min=0)
    total = float(left.sum())
    return a, (left / total if total > 0 else left)


def outcome_law(tokens: list[int], parents: list[int], p: torch.Tensor, q: torch.Tensor | None) -> dict:
    """The exact law of one verify: {(path as a tuple, next token): probability}, by enumeration."""
    law: dict = {}

    def walk(node: int, prob: float, path: tuple[int, ...]) -> None:
        p_here = p[node + 1].double()
        for c in children(parents, node):
            a, left = _next_residual(p_here, tokens[c], None if q is None else q[c].double())
            if a > 0:
                walk(c, prob * a, path + (c,))
            prob *= 1 - a
            if prob <= 0:
                return
            p_here = left
        for t in range(p.shape[-1]):
            if p_here[t] > 0:
                law[(path, t)] = law.get((path, t), 0.0) + prob * float(p_here[t])

    walk(-1, 1.0, ())
    return law


def chi2_pvalue(groups: list[tuple[np.ndarray, np.ndarray]]) -> float:
    """Pearson's χ² over independent groups of draws, each (counts, exact law) over the same cells:
    cells expected below 5 pooled per group, statistics and degrees of freedom summed. 0 when a draw
    fell where the law is 0 (impossible under the rule)."""
    stat, df = 0.0, 0
    for counts, law in groups:
        counts, law = np.asarray(counts, float).ravel(), np.asarray(law, float).ravel()
        if counts[law <= 0].sum() > 0:
            return 0.0
        expected = law / law.sum() * counts.sum()
        small = expected < 5
        exp = np.append(expected[~small], expected[small].sum())
        obs = np.append(counts[~small], counts[small].sum())
        keep = exp > 0
        stat += float(((obs[keep] - exp[keep]) ** 2 / exp[keep]).sum())
        df += int(keep.sum()) - 1
    if df < 1:
        return 1.0
    return float(torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64), torch.tensor(stat / 2, dtype=torch.float64)))


def _tally(outcomes: list, law: dict) -> tuple[np.ndarray, np.ndarray]:
    """(counts, law) arrays over the law's outcomes plus one cell for anything else (law 0)."""
    cells = {o: i for i, o in enumerate(law)}
    counts = np.zeros(len(cells) + 1)
    for o in outcomes:
        counts[cells.get(o, len(cells))] += 1
    return counts, np.append(np.array(list(law.values())), 0.0)


# --- the hidden tests -------------------------------------------------------------------------------

def residual_problem(try_children: Callable, rng: random.Random, cases: int = 12) -> str:
    """q1: '' when, every candidate rejected for sure (p(x) = 0 on each), the residual ``try_children``
    returns (normalised here) is the rule's: i.i.d. candidates subtract q and renormalise after each."""
    for case in range(cases):
        vocab, n = rng.choice([4, 6, 8]), rng.randint(2, 3)
        q = torch.softmax(torch.tensor([rng.gauss(0, 1.5) for _ in range(vocab)]), -1)
        candidates = [rng.choices(range(vocab), weights=q.tolist())[0] for _ in range(n)]
        if len(set(candidates)) == vocab:
            continue
        p = torch.softmax(torch.tensor([rng.gauss(0, 1.5) for _ in range(vocab)]), -1)
        p[candidates] = 0.0
        p /= p.sum()
        want = p.double()
        for x in candidates:
            want = _next_residual(want, x, q.double())[1]
        gen = torch.Generator().manual_seed(rng.randrange(10**6))
        with blocked(*TREE_LIBRARY):
            out = try_children(p.clone(), list(candidates), q.clone(), gen)
        index, got = out
        if index is not None:
            return f"✗ candidate {index} was accepted although p = 0 there (p = {p.tolist()}, candidates {candidates})"
        got = torch.as_tensor(got).double().flatten()
        if got.shape != want.shape or float(got.sum()) <= 0 or bool((got < 0).any()):
            return f"✗ the residual must be a distribution over the {vocab} tokens, got {got.tolist()}"
        got = got / got.sum()
        if torch.allclose(got, want, atol=1e-5):
            continue
        zeroed, unnorm = p.double().clone(), p.double()
        zeroed[candidates] = 0.0
        for _ in candidates:
            unnorm = (unnorm - q.double()).clamp(min=0)
        hint = ("yours zeroes p(x), the one-hot rule: i.i.d. candidates subtract q, p ← norm(max(p − q, 0))"
                if torch.allclose(got, zeroed / zeroed.sum(), atol=1e-5) else
                "yours subtracts q from an unnormalised p: renormalise after each rejection, before the next candidate"
                if float(unnorm.sum()) > 0 and torch.allclose(got, unnorm / unnorm.sum(), atol=1e-5) else
                "after each rejected candidate, p ← max(p − q, 0) / its sum")
        return (f"✗ case {case}: every candidate rejected, the residual should be {[round(v, 4) for v in want.tolist()]}, "
                f"got {[round(v, 4) for v in got.tolist()]}: {hint}")
    return ""


def accept_pvalue(try_children: Callable, rng: random.Random, draws: int = 600) -> tuple[float, str]:
    """q1: χ² p-value of which candidate ``try_children`` accepts (or none), against the rule's law, over
    four seeded cases on toys: three i.i.d. candidates at T = 1 (twice) and against a sharpened target
    (T = 0.6, top-k 3), and one-hot candidates with a repeat (the draft's choices of rank 0, 1, 0). Each
    case is redrawn until at least three outcomes have probability ≥ 5 %. Returns (p, per case)."""
    groups, detail = [], []
    for iid, temperature, top_k in ((True, 1.0, None), (True, 1.0, None), (True, 0.6, 3), (False, 1.0, None)):
        for _ in range(100):
            target, draft = toy_pair(rng, temperature, top_k, noise=2.0)
            tokens, parents, q = draw_tree(draft, (), [(-1, 0), (-1, 1), (-1, 0)], iid, rng)
            p, q = target.probs(()), None if q is None else q[0]
            law = outcome_law(tokens, parents, torch.stack([p] * 4), None if q is None else torch.stack([q] * 3))
            by_index: dict = {}
            for (path, _), prob in law.items():
                by_index[path[0] if path else None] = by_index.get(path[0] if path else None, 0.0) + prob
            if sum(v >= 0.05 for v in by_index.values()) >= 3:
                break
        gen = torch.Generator().manual_seed(rng.randrange(10**6))
        seen = []
        with blocked(*TREE_LIBRARY):
            for _ in range(draws):
                index, _ = try_children(p.clone(), list(tokens), None if q is None else q.clone(), gen)
                seen.append(None if index is None else int(index))
        groups.append(_tally(seen, by_index))
        counts = {k: seen.count(k) for k in sorted(set(seen) | set(by_index), key=str)}
        detail.append(f"{'i.i.d.' if iid else 'one-hot'} {tokens}: accepted {counts}, expected "
                      f"{ {k: round(by_index.get(k, 0.0) * draws) for k in counts} }")
    return chi2_pvalue(groups), "; ".join(detail)


def _random_tree(rng: random.Random, iid: bool) -> tuple[list[int], list[int], torch.Tensor | None]:
    n = rng.randint(5, 9)
    parents = [-1, -1, 0] + [rng.randrange(-1, i) for i in range(3, n)]
    tokens = [rng.randrange(V) for _ in range(n)]
    rows = {p: torch.softmax(torch.tensor([rng.gauss(0, 1.0) for _ in range(V)]), -1) for p in range(-1, n)}
    return tokens, parents, torch.stack([rows[p] for p in parents]) if iid else None


def sure_paths_problem(verify: Callable, rng: random.Random, trees: int = 12) -> str:
    """q2, by support: '' when (a) against greedy targets (p one-hot at every node) the answer is the
    greedy one — at each node the first child whose token is the target's choice, the next token the
    choice where the walk stops — and (b) where the target equals q along the first children (i.i.d.:
    min(1, p/q) = 1) the whole first-child path is accepted and the next token comes from p AT THE LEAF
    (a one-token support there)."""
    for t in range(trees):
        iid = t % 2 == 0
        tokens, parents, q = _random_tree(rng, iid)
        choice = []
        for node in range(-1, len(tokens)):
            kids = children(parents, node)
            choice.append(tokens[rng.choice(kids)] if kids and rng.random() < 0.75 else rng.randrange(V))
        p = torch.nn.functional.one_hot(torch.tensor(choice), V).float()
        node, want = -1, []
        while (nxt := next((c for c in children(parents, node) if tokens[c] == choice[node + 1]), None)) is not None:
            want.append(nxt)
            node = nxt
        gen = torch.Generator().manual_seed(rng.randrange(10**6))
        with blocked(*TREE_LIBRARY):
            got = [run_verify(verify, tokens, parents, p, q, gen) for _ in range(3)]
        if any(g != (want, choice[node + 1]) for g in got):
            return (f"✗ a greedy target (p one-hot: choice {choice} at [root, nodes…]) on tokens {tokens}, parents "
                    f"{parents}{'' if iid else ' (one-hot candidates)'}: expected {(want, choice[node + 1])}, got "
                    f"{got[0] if got[0] != (want, choice[node + 1]) else got[1]} — at each node try every child in order")
        if not iid:
            continue
        p = torch.softmax(torch.tensor([[rng.gauss(0, 1.0) for _ in range(V)] for _ in range(len(tokens) + 1)]), -1)
        node, sure = -1, []
        while kids := children(parents, node):
            p[node + 1] = q[kids[0]]  # the target agrees with the draft: the first child is accepted
            sure.append(kids[0])
            node = kids[0]
        leaf_token = rng.randrange(V)
        p[node + 1] = torch.nn.functional.one_hot(torch.tensor(leaf_token), V).float()
        with blocked(*TREE_LIBRARY):
            got = [run_verify(verify, tokens, parents, p, q, gen) for _ in range(5)]
        if any(g[0] != sure for g in got):
            return (f"✗ where p = q at every node of the path {sure} (min(1, p/q) = 1), it must be accepted whole, "
                    f"got {[g[0] for g in got]}")
        if any(g[1] != leaf_token for g in got):
            return (f"✗ after the accepted leaf {node}, the next token must come from p AT THAT LEAF (one-hot on "
                    f"{leaf_token}), got {[g[1] for g in got]}: not from a residual left over at its parent")
    return ""


def outcome_pvalue(verify: Callable, rng: random.Random, draws: int = 1500) -> tuple[float, str]:
    """q2: χ² p-value of one verify's outcome (path, next token) against its exact law (enumeration), on
    three seeded trees of depth 3 with a childless node: i.i.d. siblings at T = 1 with a repeated
    sibling, i.i.d. against a sharpened target (T = 0.6, top-k 3), one-hot candidates with a repeat."""
    groups, detail = [], []
    for iid, temperature, top_k in ((True, 1.0, None), (True, 0.6, 3), (False, 1.0, None)):
        target, draft = toy_pair(rng, temperature, top_k)
        shape = list(rng.choice(SHAPES))
        if iid:
            tokens, parents, q = draw_tree(draft, (), shape, True, rng)
            first, later = children(parents, -1)[0], children(parents, -1)[-1]
            tokens[later] = tokens[first]  # a repeated sibling (drawn i.i.d., it happens; here for sure)
        else:
            shape = with_repeat(shape)
            tokens, parents, q = draw_tree(draft, (), shape, False, rng)
        p = node_probs(target, (), tokens, parents)
        law = outcome_law(tokens, parents, p, q)
        gen = torch.Generator().manual_seed(rng.randrange(10**6))
        with blocked(*TREE_LIBRARY):
            seen = [(tuple(path), nxt) for path, nxt in (run_verify(verify, tokens, parents, p, q, gen) for _ in range(draws))]
        groups.append(_tally(seen, law))
        full = sum(1 for path, _ in seen if path and not children(parents, path[-1]))
        detail.append(f"{'i.i.d.' if iid else 'one-hot'} T = {temperature}: a leaf accepted in {full}/{draws} "
                      f"(expected {sum(v for (path, _), v in law.items() if path and not children(parents, path[-1])) * draws:.0f})")
    return chi2_pvalue(groups), "; ".join(detail)


def generate_with(verify: Callable, target: ToyLM, draft: ToyLM, shape: list[tuple[int, int]], iid: bool,
                  rng: random.Random, gen: torch.Generator, n_tokens: int = 3) -> list[int]:
    """Speculative decoding with trees on toys, the student's ``verify`` at every step: the first
    ``n_tokens`` tokens (a step emits the accepted path's tokens, then the next token)."""
    new: list[int] = []
    while len(new) < n_tokens:
        tokens, parents, q = draw_tree(draft, tuple(new), shape, iid, rng)
        path, nxt = run_verify(verify, tokens, parents, node_probs(target, tuple(new), tokens, parents), q, gen)
        new += [tokens[i] for i in path] + [nxt]
    return new[:n_tokens]


def loop_pvalue(verify: Callable, rng: random.Random, iid: bool, temperature: float = 1.0, top_k: int | None = None,
                draws: int = 3000) -> tuple[float, str]:
    """q2: χ² p-value of the joint law of the first three tokens of :func:`generate_with` (seeded toys,
    shape and draws) against the target's exact law. One-hot candidates get a repeated sibling."""
    target, draft = toy_pair(rng, temperature, top_k)
    shape = list(rng.choice(SHAPES))
    if not iid:
        shape = with_repeat(shape)
    gen = torch.Generator().manual_seed(rng.randrange(10**6))
    draw_rng = random.Random(rng.randrange(10**9))
    counts = np.zeros((V, V, V))
    with blocked(*TREE_LIBRARY):
        for _ in range(draws):
            counts[tuple(generate_with(verify, target, draft, shape, iid, draw_rng, gen))] += 1
    law = np.einsum("a,ab,abc->abc", target.probs(()).double().numpy(),
                    torch.stack([target.probs((a,)) for a in range(V)]).double().numpy(),
                    torch.stack([torch.stack([target.probs((a, b)) for b in range(V)]) for a in range(V)]).double().numpy())
    return chi2_pvalue([(counts, law)]), f"shape {[p for p, _ in shape]}, {draws} draws"
