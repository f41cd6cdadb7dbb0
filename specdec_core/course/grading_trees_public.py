"""Capstone 4's public tests (verify a token tree): hand-made cases a student can run, each reported as a
✓ or ✗ line with a hint; and the notebook's feedback on what each way of drawing siblings buys. A test cell asserts that no line is a ✗ (otter shows the lines on failure;
a test cell prints nothing, so the report travels in the assertion's message).

    report = check_try_children(try_children)
    assert "✗" not in report, report

Every case is decided by support — what must always, or never, happen — never by chance; the χ² tests
are hidden (:mod:`.grading_trees`). The library's tree and accept functions are blocked while the
student's code runs.
"""

from __future__ import annotations

import random
import traceback
from collections.abc import Callable

import torch

from .grading import blocked
from .grading_trees import TREE_LIBRARY, V, draw_tree, node_probs, run_verify, toy_pair


class Report:
    """✓ / ✗ lines, one per expectation; a crash of the student's code ends the report."""

    def __init__(self, name: str) -> None:
        self.name, self.lines = name, []

    def expect(self, ok: bool, what: str, hint: str) -> bool:
        self.lines.append(f"✓ {what}" if ok else f"✗ {what} — hint: {hint}")
        return ok

    def run(self, fn: Callable, *args) -> object:
        with blocked(*TREE_LIBRARY):
            try:
                return fn(*args)
            except NotImplementedError:
                self.lines.append(f"✗ {self.name} runs — hint: replace `raise NotImplementedError` with your code")
            except Exception as err:  # the student's bug, reported briefly
                if isinstance(err, AssertionError) and str(err).startswith("✗"):
                    self.lines.append(str(err))
                else:
                    line = traceback.extract_tb(err.__traceback__)[-1].lineno
                    self.lines.append(f"✗ {self.name} runs — hint: it raised {type(err).__name__}: {err} (line {line})")
        raise _Stop

    def __str__(self) -> str:
        return "\n".join(self.lines)


class _Stop(Exception):
    pass


def _node(out: object) -> tuple[int | None, torch.Tensor | None]:
    """(accepted index or None, residual as a normalised float64 tensor, or None) from try_children's answer."""
    index, residual = out
    index = None if index is None else int(index)
    if residual is None:
        return index, None
    residual = torch.as_tensor(residual).double().flatten()
    return index, residual / residual.sum() if float(residual.sum()) > 0 else residual


def check_try_children(try_children: Callable) -> str:
    """The sibling rule at one node, ``try_children(p [V], candidates, q [V] or None, generator)``."""
    r, gen = Report("try_children"), torch.Generator().manual_seed(0)
    t = lambda *xs: torch.tensor(xs)  # noqa: E731
    try:
        q = t(0.1, 0.4, 0.3, 0.2)
        got = [_node(r.run(try_children, q.clone(), [2, 0, 1], q.clone(), gen))[0] for _ in range(20)]
        r.expect(set(got) == {0}, "p = q: the first candidate is accepted every time (min(1, p/q) = 1)",
                 f"accept x with probability min(1, p(x)/q(x)); got {got}")
        p, q = t(0.1, 0.6, 0.3, 0.0), t(0.1, 0.2, 0.3, 0.4)
        got = [_node(r.run(try_children, p.clone(), [1], q.clone(), gen))[0] for _ in range(20)]
        r.expect(set(got) == {0}, "p(x) > q(x): accepted for sure", "accept with min(1, p(x)/q(x)), not with p(x) "
                 "(that is the rule for one-hot candidates)")
        p, q = t(0.0, 0.0, 1.0, 0.0), t(0.5, 0.1, 0.4, 0.0)
        got = [_node(r.run(try_children, p.clone(), [0, 2], q.clone(), gen))[0] for _ in range(20)]
        r.expect(set(got) == {1}, "the first candidate rejected (p = 0 there), the second accepted",
                 f"after a rejection, try the next candidate with the residual; got {got}")
        p, q = t(0.0, 0.0, 0.8, 0.2), t(0.3, 0.3, 0.3, 0.1)
        index, residual = _node(r.run(try_children, p.clone(), [0, 1], q.clone(), gen))
        want = t(0.0, 0.0, 8 / 9, 1 / 9).double()
        r.expect(index is None and residual is not None and residual.shape == want.shape
                 and torch.allclose(residual, want, atol=1e-5),
                 "both rejected: residual [0, 0, 0.8889, 0.1111] (subtract q, renormalise, again)",
                 "p ← max(p − q, 0) / its sum after EACH rejection: " + (
                     "yours zeroes p(x), the one-hot rule" if residual is not None and torch.allclose(residual, p.double(), atol=1e-5)
                     else f"got {index, None if residual is None else [round(v, 4) for v in residual.tolist()]}"))
        p = t(0.5, 0.0, 0.5, 0.0)
        got = [_node(r.run(try_children, p.clone(), [2, 2], None, gen)) for _ in range(40)]
        r.expect(all(i != 1 for i, _ in got) and any(i == 0 for i, _ in got),
                 "one-hot candidates [2, 2]: the first accepted with p(2) = 0.5, the repeat never",
                 "q None: accept x with the current p(x); on rejection set p(x) = 0 and renormalise, so a repeat has p = 0")
        left = [res for i, res in got if i is None]
        r.expect(bool(left) and all(res is not None and torch.allclose(res, t(1.0, 0, 0, 0).double(), atol=1e-5) for res in left),
                 "both rejected: the residual is p without token 2, renormalised ([1, 0, 0, 0])",
                 "one-hot candidates: on rejection zero p(x) and renormalise")
    except _Stop:
        pass
    except (TypeError, ValueError) as err:
        r.lines.append(f"✗ try_children returns (index or None, residual [V]) — hint: {err}")
    return str(r)


TOKENS, PARENTS = [1, 2, 3, 0, 2], [-1, -1, 0, 1, 1]  # node 0: 1 under the root, node 1: 2, node 2: 3 under 0, …


def check_verify_tree(verify: Callable) -> str:
    """``verify(tokens, parents, p [N + 1, V], q [N, V] or None, generator) -> (path, next token)`` on a
    hand-made tree of five nodes."""
    r, gen = Report("verify_tree_sampled"), torch.Generator().manual_seed(0)
    q_root, q_0, q_1 = torch.tensor([0.1, 0.4, 0.3, 0.2]), torch.tensor([0.25] * 4), torch.tensor([0.3, 0.3, 0.2, 0.2])
    q = torch.stack([q_root, q_root, q_0, q_1, q_1])
    one_hot = lambda *xs: torch.nn.functional.one_hot(torch.tensor(xs), 4).float()  # noqa: E731
    run = lambda p, q_: r.run(run_verify, verify, TOKENS, PARENTS, p, q_, gen)  # noqa: E731
    try:
        greedy = one_hot(2, 0, 2, 0, 0, 3)  # the target's choice at [root, node 0, …, node 4]
        for q_, how in ((q, "i.i.d. siblings"), (None, "one-hot candidates (q None)")):
            got = [run(greedy, q_) for _ in range(5)]
            r.expect(all(g == ([1, 4], 3) for g in got), f"{how}, a greedy target: path [1, 4] (the second child "
                     "twice) and next token 3", f"try every child in order, follow the accepted one; got {got[0]}")
        p = torch.stack([q_root, q_0, q_1, one_hot(0)[0], q_1, q_1])  # p = q along nodes 0 then 2 (a leaf)
        got = [run(p, q) for _ in range(10)]
        r.expect(all(g[0] == [0, 2] for g in got), "p = q along [0, 2]: accepted to the leaf",
                 f"min(1, p/q) = 1 there; got {[g[0] for g in got]}")
        r.expect(all(g[1] == 0 for g in got), "after the leaf, the next token comes from p at the leaf (one-hot on 0)",
                 "the bonus token is drawn from p AT THE ACCEPTED LEAF (p[1 + leaf]), not from a residual left at its parent")
        p = torch.stack([torch.tensor([0.5, 0.0, 0.0, 0.5])] + [q_1] * 5)
        got = [run(p, q) for _ in range(20)]
        r.expect(all(g[0] == [] and g[1] in (0, 3) for g in got),
                 "the target gives the root's children p = 0: nothing accepted, next token from the residual (0 or 3)",
                 f"all children rejected: sample the residual; got {got[0]}")
    except _Stop:
        pass
    return str(r)


def acceptance(verify: Callable, seed: int = 0, verifies: int = 300) -> dict[float, dict[str, float]]:
    """Feedback: {T: mean accepted tokens per verify of one shape (three candidates, two under each) drawn
    i.i.d. and as the draft's top choices, and the share of verifies whose i.i.d. root siblings repeat},
    the target and its draft both warped by T."""
    rng, gen = random.Random(seed), torch.Generator().manual_seed(seed)
    shape = [(-1, 0), (-1, 1), (-1, 2)] + [(i, r) for i in range(3) for r in range(2)]
    out: dict = {}
    with blocked(*TREE_LIBRARY):
        for temperature in (0.5, 1.0, 2.0):
            target, draft = toy_pair(random.Random(seed), temperature)
            draft.temperature, row = temperature, {"repeats": 0.0}
            for iid in (True, False):
                total = 0
                for _ in range(verifies):
                    prefix = tuple(rng.randrange(V) for _ in range(rng.randint(0, 3)))
                    tokens, parents, q = draw_tree(draft, prefix, shape, iid, rng)
                    row["repeats"] += iid and len(set(tokens[:3])) < 3
                    total += len(run_verify(verify, tokens, parents, node_probs(target, prefix, tokens, parents), q, gen)[0])
                row["i.i.d." if iid else "top-k"] = total / verifies
            out[temperature] = {**row, "repeats": row["repeats"] / verifies}
    return out
