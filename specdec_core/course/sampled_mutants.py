"""Capstone 1's catalogue: the classic errors of the *sampled* accept/reject step, each written as an edit
of the master's answer (greedy untouched: every one of them gives the target's greedy tokens) and as the
:class:`.step_laws.Rule` whose exact law it samples. Right answers written differently sit beside them:
other code, the target's law (:data:`RIGHT`).

    edits = {ANSWER: WRONG["residual: p again (max(0, p − q) forgotten)"].edits}
    Master(CAPSTONE_1).grade(edits)        # how the capstone's tests grade it (tests/test_assignments_sampled.py)

The sources: lesson 03's bug zoo (:mod:`specdec_core.bug_zoo`, the bugs real libraries shipped), the
rejection rule's three parts (accept ratio, residual, bonus) each got wrong once, and the indexing a
loop over guesses invites (which row of p and q, one uniform or several, a prefix or a count).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .step_laws import Rule

ANSWER = "def speculative_generate_mine"  # the answer cell of assignments/01_build_speculative_decoding.ipynb
P = "            p = warp(logits)  # [k + 1, V]\n"
TEST = "while n < k and torch.rand((), generator=generator) < p[n, drafted[n]] / q[n, drafted[n]]:"
RESIDUAL = "residual = (p[n] - q[n].to(p.device)).clamp(min=0)"
DRAW = "nxt = int(sample(residual / residual.sum(), generator))"
BONUS = "nxt = int(sample(p[k], generator))"


@dataclass(frozen=True)
class Mutant:
    edits: list[tuple[str, str]]  # (old, new) in the answer cell
    rule: Rule = field(default_factory=Rule)  # the law it samples (Rule(): the target's)


def _test(new: str) -> list[tuple[str, str]]:
    return [(TEST, new)]


WRONG: dict[str, Mutant] = {
    "residual: p again (max(0, p − q) forgotten)": Mutant([(RESIDUAL, "residual = p[n]")], Rule(residual="p")),
    "residual: p with the rejected guess zeroed": Mutant(
        [(RESIDUAL, "residual = p[n].clone()\n                residual[drafted[n]] = 0")], Rule(residual="p, the guess zeroed")),
    "residual: |p − q| instead of max(0, p − q)": Mutant(
        [(RESIDUAL, "residual = (p[n] - q[n].to(p.device)).abs()")], Rule(residual="|p - q|")),
    "residual normalised by a softmax (probabilities taken for logits)": Mutant(
        [(DRAW, "nxt = int(sample(torch.softmax(residual, -1), generator))")], Rule(residual="softmax")),
    "residual: max(0, q − p) (sides swapped)": Mutant(
        [(RESIDUAL, "residual = (q[n].to(p.device) - p[n]).clamp(min=0)")], Rule(residual="max(0, q - p)")),
    "accept with probability p(x) (q ignored)": Mutant(
        _test("while n < k and torch.rand((), generator=generator) < p[n, drafted[n]]:"), Rule(accept="p")),
    "accept ratio upside down, min(1, q/p)": Mutant(
        _test("while n < k and torch.rand((), generator=generator) < q[n, drafted[n]] / p[n, drafted[n]]:"), Rule(accept="q/p")),
    "comparison flipped: keep when u > p/q": Mutant(
        _test("while n < k and torch.rand((), generator=generator) > p[n, drafted[n]] / q[n, drafted[n]]:"),
        Rule(accept="u > p/q")),
    "no uniform: keep when p(x) ≥ q(x)": Mutant(
        _test("while n < k and p[n, drafted[n]] >= q[n, drafted[n]]:"), Rule(accept="p >= q")),
    "one uniform per step, reused for every guess": Mutant(
        [(P, P + "            u = torch.rand((), generator=generator)\n")]
        + _test("while n < k and u < p[n, drafted[n]] / q[n, drafted[n]]:"), Rule(uniforms="one per step")),
    "guesses counted, not the prefix before the first rejection": Mutant(
        [(f"            {TEST}\n                n += 1\n",
          "            n = sum(int(torch.rand((), generator=generator) < p[i, drafted[i]] / q[i, drafted[i]]) for i in range(k))\n")],
        Rule(prefix=False)),
    "bonus token from the last guess's row, p[k − 1]": Mutant(
        [(BONUS, "nxt = int(sample(p[k - 1], generator))")], Rule(bonus_row=-1)),
    "bonus token from the unwarped logits (warp on one side)": Mutant(
        [(BONUS, "nxt = int(sample(torch.softmax(logits[k], -1), generator))")], Rule(bonus_warp=False)),
    "target unwarped: p = softmax(logits) (warp on the draft's side only)": Mutant(
        [(P, "            p = torch.softmax(logits, -1)  # [k + 1, V]\n")], Rule(target="softmax")),
    "target at the temperature only (top-k/top-p on the draft's side only)": Mutant(
        [(P, "            p = torch.softmax(logits / temperature, -1)  # [k + 1, V]\n")], Rule(target="temperature")),
    "every guess divided by the first guess's q, q[0]": Mutant(
        _test("while n < k and torch.rand((), generator=generator) < p[n, drafted[n]] / q[0, drafted[n]]:"), Rule(q_row="0")),
    "each guess judged by the target's next row, p[n + 1] (off by one)": Mutant(
        _test("while n < k and torch.rand((), generator=generator) < p[n + 1, drafted[n]] / q[n, drafted[n]]:"), Rule(p_row=1)),
}

RIGHT: dict[str, Mutant] = {  # other code, the target's law: full marks
    "the solution": Mutant([]),
    "residual left unnormalised (sample normalises it)": Mutant([(DRAW, "nxt = int(sample(residual, generator))")]),
    "accept test without a division, u · q(x) < p(x)": Mutant(
        _test("while n < k and torch.rand((), generator=generator) * q[n, drafted[n]] < p[n, drafted[n]]:")),
    "every uniform drawn up front": Mutant(
        [(P, P + "            u = torch.rand(k, generator=generator)\n")]
        + _test("while n < k and u[n] < p[n, drafted[n]] / q[n, drafted[n]]:")),
}
