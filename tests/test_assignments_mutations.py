"""The mutation table of capstone 1, measured: wrong answers lose points on the test that names their
mistake, right answers written differently get full marks. Graded in-process
(:mod:`specdec_core.course.mutants`: the master's own test cells against an edited answer), so the
table is cheap; ``tests/test_assignments.py`` grades with the real ``otter run``. The χ² tests take
≈ 4 s each here (with the gate's check), so the rows that need them are marked slow. Capstones 2 and 3:
``test_assignments_mutations_c2.py`` and ``…_c3.py``; the catalogue of sampled-step errors, every test at
three seeds: ``test_assignments_sampled.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

from specdec_core.course.mutants import Master

ROOT = Path(__file__).resolve().parents[1]
CAPSTONE1 = Master(ROOT / "assignments" / "01_build_speculative_decoding.ipynb")
ANSWER = "def speculative_generate_mine"
SLOW_PRINTS = ("grading_laws.toy_for(",)  # a notebook cell that only prints the law test's power
CHI2 = ["q2 public 1", "q2 hidden 1", "q2 hidden 2"]
CHEAP = [t.name for t in CAPSTONE1.tests if t.name not in CHI2]

# wrong answer → (edits to the answer cell, the test that must fail, the points it carries)
WRONG = {
    "AR loop ignoring the drafter": (
        [("drafted, q = drafter.propose(context, min(gamma, max_new_tokens - len(new)))",
          "drafted, q = torch.empty(0, dtype=torch.long), None"),
         ("drafter.accepted(n, k)", "pass")], "q3 hidden 1", 1.0),
    "per-guess verification (a target forward per guess)": (
        [("        calls += 1\n", "        calls += 1\n        for j in range(k):\n            target(context[:, -1:])\n")],
        "q3 hidden 1", 1.0),
    "alpha as accepted ÷ proposed": ([("examined + min(n + 1, k)", "examined + k")], "q3 hidden 3", 0.5),
    "target_calls counting the prefill": ([("target_calls=calls,", "target_calls=calls + 1,")], "q3 hidden 2", 0.5),
    "top-k ignored": ([("warp = Warp(temperature, top_k, top_p)", "warp = Warp(temperature, None, top_p)")],
                      "q2 hidden 3", 0.5),
    "the whole context re-read at every verify (no KV reuse)": (
        [("logits = decoder.step(torch.cat([context[:, -1:], drafted.view(1, -1)], dim=1))[0]",
          "decoder.rollback(0)\n        logits = decoder.step(torch.cat([context, drafted.view(1, -1)], dim=1))[0, -(k + 1):]")],
        "q4 hidden 1", 1.0),
}
WRONG_SAMPLED = {  # caught by a χ² test only
    "bonus token drawn from the last guess's row": (
        [("nxt = int(sample(p[k], generator))", "nxt = int(sample(p[k - 1], generator))")], "q2 hidden 1", 3.0),
    "residual that zeroes the rejected guess instead of subtracting q": (
        [("residual = (p[n] - q[n].to(p.device)).clamp(min=0)",
          "residual = p[n].clone()\n                residual[drafted[n]] = 0")], "q2 public 1", 1.0),
}

PREFILL_FIRST = [  # the first token from the prefill's logits, as ar.generate does
    ("    if context.shape[1] > 1:\n        decoder.prefill(context[:, :-1])  # the cache holds everything but the last token\n"
     "    new, calls, examined, accepted = [], 0, 0, 0\n    while len(new) < max_new_tokens:\n",
     "    last = decoder.prefill(context)[0, -1]  # the prompt's next-token logits\n"
     "    first = int(last.argmax()) if warp.greedy else int(sample(warp(last), generator))\n"
     "    new, calls, examined, accepted = [first], 0, 0, 0\n"
     "    context = torch.cat([context, torch.tensor([[first]], device=context.device)], dim=1)\n"
     "    while len(new) < max_new_tokens and new[-1] not in stops:\n"),
]  # (no target call when the first token ends the answer: the record's tokens_per_call is then NaN, not a division by 0)
# right answers written differently → edits; each gets full marks on every test it is graded on
RIGHT = {
    "another loop structure (accept count by a for/else)": [(
        "            while n < k and drafted[n] == best[n]:\n                n += 1\n",
        "            for n in range(k + 1):\n                if n == k or drafted[n] != best[n]:\n                    break\n")],
    "first token from the prefill": PREFILL_FIRST,
}
RIGHT_SAMPLED = {
    "random draws in another order (every uniform up front)": [(
        "            while n < k and torch.rand((), generator=generator) < p[n, drafted[n]] / q[n, drafted[n]]:\n",
        "            u = torch.rand(k, generator=generator)\n"
        "            while n < k and u[n] < p[n, drafted[n]] / q[n, drafted[n]]:\n")],
    "first token from the prefill": PREFILL_FIRST,
}


def _lose(table: dict, name: str) -> None:
    edits, test, points = table[name]
    result = CAPSTONE1.grade({ANSWER: edits}, only=[test], skip=SLOW_PRINTS)
    print(f"{name}: fails {test} (−{points:g}): {result[test].message}")
    assert not result[test].passed and result[test].possible == pytest.approx(points)


@pytest.mark.parametrize("name", list(WRONG))
def test_a_wrong_answer_loses_the_points_of_the_test_that_names_its_mistake(name):
    _lose(WRONG, name)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(WRONG_SAMPLED))
def test_a_wrong_sampler_fails_the_chi_square_test_that_names_it(name):
    _lose(WRONG_SAMPLED, name)


@pytest.mark.parametrize("name", list(RIGHT))
def test_a_right_answer_written_differently_gets_full_marks(name):
    result = CAPSTONE1.grade({ANSWER: RIGHT[name]}, only=CHEAP, skip=SLOW_PRINTS)
    print(f"{name}: {result.total:g}/{result.possible:g}")
    assert result.failed() == {}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(RIGHT_SAMPLED))
def test_a_right_sampler_written_differently_passes_every_chi_square_test(name):
    result = CAPSTONE1.grade({ANSWER: RIGHT_SAMPLED[name]}, only=CHI2, skip=SLOW_PRINTS)
    print(f"{name}: {result.total:g}/{result.possible:g}", {n: o.message for n, o in result.outcomes.items()})
    assert result.failed() == {}


def test_the_solution_passes_every_cheap_test_and_the_points_add_up():
    result = CAPSTONE1.grade(only=CHEAP, skip=SLOW_PRINTS)
    assert result.failed() == {} and sum(t.points for t in CAPSTONE1.tests) == 14


def test_the_grading_seed_changes_every_hidden_input(monkeypatch):
    from specdec_core.course import grading

    hidden = [t.source for t in CAPSTONE1.tests if "hidden" in t.name]
    assert all("grading_rng(" in s for s in hidden if "HELDOUT" in s or "tiny_llama(" in s or "sampled_pvalue(" in s)
    assert not any(f"HELDOUT[{i}]" in s for s in hidden for i in range(10)), "a fixed prompt in a hidden test"
    monkeypatch.setenv(grading.SEED_VARIABLE, "instructor-A")
    a = grading.grading_rng("c1-q1-greedy").random()
    monkeypatch.setenv(grading.SEED_VARIABLE, "instructor-B")
    assert grading.grading_rng("c1-q1-greedy").random() != a
