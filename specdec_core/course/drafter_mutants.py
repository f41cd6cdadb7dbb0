"""Capstone 3's catalogue: drafters that break the contract (issue 57), written outside the solution as
subclasses of its ``ContextNGramDrafter`` (greedy untouched: each defers to it when ``self.greedy``, so
every greedy and usefulness test sees the solution), each with its exact proposal law after
``grading.TOY_PROMPT`` (:func:`proposal_law`: every tuple of guesses, its probability, the rows it reports),
from which :func:`.grading_guesses.power` computes the chance that the contract test fails it. Right
answers written differently sit beside them (:data:`RIGHT`).

    edits = drafter_edits(WRONG["q rows one guess late (row i is guess i + 1's q)"].source)
    Master(CAPSTONE_3).grade({ANSWER: edits})     # how the capstone's tests grade it

The contract's three ways to break (the issue's list): q that does not match the draws, q rows misaligned
with the guesses, a drafter that reads the future (a row that sees its own guess or later ones).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from .grading_guesses import ProposalLaw

ANSWER = "class ContextNGramDrafter"  # the answer cell of assignments/03_design_a_drafter.ipynb
MAKE = "def make_drafter(vocab_size: int) -> Drafter:\n    # BEGIN SOLUTION\n    return ContextNGramDrafter(vocab_size)\n"
LOOP = '''
    def propose(self, context, k):
        if self.greedy:
            return super().propose(context, k)
        ids, tokens, qs = context[0].tolist(), [], []
        for _ in range(k):
            q = self.shares(ids)
            if q is None:
                break
{body}
        out = torch.tensor(tokens, dtype=torch.long)
        return out, {rows}
'''
SHARES = '''
    def shares(self, ids):
        found = self.successors(ids)
        if not found:
            return None
        q = torch.zeros(self.vocab_size)
        q[list(found)] = torch.tensor(list(found.values()), dtype=torch.float)
        return q / q.sum()
'''
DRAW = "            token = int(sample(q, self.generator))\n            tokens.append(token)\n            ids.append(token)\n"
STACK = "(torch.stack(qs) if qs else torch.empty(0, self.vocab_size))"


def _class(name: str, body: str, rows: str = STACK, more: str = "") -> str:
    return f"class {name}(ContextNGramDrafter):{SHARES}{more}{LOOP.format(body=body, rows=rows)}"


def drafter_edits(source: str) -> list[tuple[str, str]]:
    """Edits of the answer cell that add the class ``source`` and make ``make_drafter`` return it."""
    name = source.split("(", 1)[0].removeprefix("class ")
    return [(MAKE, f"{source}\n\n{MAKE.replace('ContextNGramDrafter(vocab_size)', f'{name}(vocab_size)')}")]


# --- the exact law: what the drafter draws after ids, what it reports for guess i ----------------------------

def shares(ids: list[int], vocab: int, max_n: int = 2) -> np.ndarray | None:
    """The solution's q after ``ids``: the shares of what followed its last n tokens earlier (n = 2, else 1)."""
    for n in range(max_n, 0, -1):
        if len(ids) > n:
            found = Counter(ids[i + n] for i in range(len(ids) - n) if ids[i : i + n] == ids[-n:])
            if found:
                q = np.zeros(vocab)
                q[list(found)] = list(found.values())
                return q / q.sum()
    return None


def counted_over(ids: list[int], end: int, vocab: int) -> np.ndarray:
    """Shares of what followed ids[end − n : end] anywhere in ``ids`` (its guesses included): the future read."""
    for n in (2, 1):
        if end > n:
            found = Counter(ids[i + n] for i in range(len(ids) - n) if ids[i : i + n] == ids[end - n : end])
            if found:
                q = np.zeros(vocab)
                q[list(found)] = list(found.values())
                return q / q.sum()
    raise ValueError("no successor")


Draw = Callable[[list[int], int], "np.ndarray | None"]  # (ids so far, vocab) → the next guess's law, None: stop
Report = Callable[[list[int], tuple[int, ...], int, int], np.ndarray]  # (context, guesses, i, vocab) → row i


@dataclass(frozen=True)
class Drafted:
    source: str  # the class, appended to the answer cell ("" : the solution itself)
    draw: Draw = shares
    report: Report = lambda ctx, g, i, v: shares(ctx + list(g[:i]), v)  # noqa: E731
    fresh: bool = False  # every call draws from a generator seeded 0 (the law: one tuple)


def _smoothed(q: np.ndarray | None) -> np.ndarray | None:
    return None if q is None else 0.9 * q + 0.1 / len(q)


def _argmax(q: np.ndarray | None) -> np.ndarray | None:
    return None if q is None else np.eye(len(q))[int(np.argmax(q))]


def _late(ctx: list[int], g: tuple[int, ...], i: int, v: int) -> np.ndarray:
    after = shares(ctx + list(g[: i + 1]), v)
    return after if after is not None else shares(ctx + list(g[:i]), v)


WRONG: dict[str, Drafted] = {
    "q reported, guesses always its likeliest (argmax)": Drafted(_class(
        "Likeliest", DRAW.replace("int(sample(q, self.generator))", "int(q.argmax())") + "            qs.append(q)\n"),
        draw=lambda ids, v: _argmax(shares(ids, v))),
    "q reported smoothed (0.9 q + 0.1 uniform), guesses drawn from the raw q": Drafted(_class(
        "SmoothedReport", DRAW + "            qs.append(0.9 * q + 0.1 / self.vocab_size)\n"),
        report=lambda ctx, g, i, v: _smoothed(shares(ctx + list(g[:i]), v))),
    "guesses drawn from a smoothed q (0.9 q + 0.1 uniform), the raw q reported": Drafted(_class(
        "SmoothedDraws", DRAW.replace("sample(q,", "sample(0.9 * q + 0.1 / self.vocab_size,") + "            qs.append(q)\n"),
        draw=lambda ids, v: _smoothed(shares(ids, v))),
    "a generator of its own, seeded 0 at every call (not self.generator)": Drafted(_class(
        "OwnGenerator", DRAW.replace("self.generator", "gen") + "            qs.append(q)\n",
        more="", rows=STACK).replace("        ids, tokens, qs = ", "        gen = torch.Generator().manual_seed(0)\n        ids, tokens, qs = "),
        fresh=True),
    "q rows one guess late (row i is guess i + 1's q)": Drafted(_class(
        "RowsLate", DRAW + "            nxt = self.shares(ids)\n            qs.append(q if nxt is None else nxt)\n"),
        report=_late),
    "q rows one guess early (the first row repeated, row i is guess i − 1's)": Drafted(_class(
        "RowsEarly", DRAW + "            qs.append(q)\n", rows="torch.stack([qs[max(i - 1, 0)] for i in range(len(qs))]) if qs else torch.empty(0, self.vocab_size)"),
        report=lambda ctx, g, i, v: shares(ctx + list(g[: max(i - 1, 0)]), v)),
    "reads the future: each row counted over the context with every guess in it": Drafted(_class(
        "ReadsAhead", DRAW,
        rows="torch.stack([self.counted(ids, len(ids) - len(tokens) + i) for i in range(len(tokens))]) if tokens "
             "else torch.empty(0, self.vocab_size)",
        more='''
    def counted(self, ids, end):
        for n in (2, 1):
            found = Counter(ids[i + n] for i in range(len(ids) - n) if end > n and ids[i:i + n] == ids[end - n:end])
            if found:
                q = torch.zeros(self.vocab_size)
                q[list(found)] = torch.tensor(list(found.values()), dtype=torch.float)
                return q / q.sum()
'''), report=lambda ctx, g, i, v: counted_over(ctx + list(g), len(ctx) + i, v)),
}

RIGHT: dict[str, Drafted] = {  # other code, the contract kept: full marks
    "the solution (sampled successor shares)": Drafted(""),
    "smoothed shares (0.9 q + 0.1 uniform), drawn from and reported": Drafted(_class(
        "Smoothed", "            q = 0.9 * q + 0.1 / self.vocab_size\n" + DRAW + "            qs.append(q)\n"),
        draw=lambda ids, v: _smoothed(shares(ids, v)),
        report=lambda ctx, g, i, v: _smoothed(shares(ctx + list(g[:i]), v))),
    "an inverse-CDF draw from self.generator": Drafted(_class(
        "InverseCdf", DRAW.replace("int(sample(q, self.generator))",
                                   "int(torch.searchsorted(q.cumsum(0), torch.rand((), generator=self.generator)).clamp(max=len(q) - 1))")
        + "            qs.append(q)\n")),
}


def proposal_law(drafted: Drafted, context: list[int], k: int, vocab: int) -> ProposalLaw:
    """Every tuple of guesses ``drafted`` proposes after ``context`` (asked for ``k``), its probability and the
    rows it reports, enumerated."""
    from ..sampling import sample

    if drafted.fresh:  # one tuple: the draws of a generator seeded 0
        gen, ids, g = torch.Generator().manual_seed(0), list(context), ()
        while len(g) < k and (q := drafted.draw(ids, vocab)) is not None:
            g += (int(sample(torch.tensor(q, dtype=torch.float32), gen)),)
            ids.append(g[-1])
        paths = [(g, 1.0)]
    else:
        paths, frontier = [], [((), 1.0)]
        while frontier:
            g, chance = frontier.pop()
            q = drafted.draw(list(context) + list(g), vocab) if len(g) < k else None
            if q is None:
                paths.append((g, chance))
                continue
            frontier += [(g + (int(x),), chance * float(q[x])) for x in np.flatnonzero(q)]
    return [(g, chance, np.stack([drafted.report(list(context), g, i, vocab) for i in range(len(g))]))
            for g, chance in paths if g]


def tuples(law: ProposalLaw) -> dict[tuple[int, ...], float]:
    """{guesses: probability} of a law (for comparing with sampled proposals)."""
    out: dict[tuple[int, ...], float] = {}
    for g, chance, _ in law:
        out[g] = out.get(g, 0.0) + chance
    return out

