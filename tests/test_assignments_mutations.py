"""The mutation table of capstone 1, measured: wrong answers lose points on the test that names their
mistake, right answers written differently get full marks on those tests. Graded in-process
(:mod:`specdec_core.course.mutants`: the master's own test cells against an edited answer), so the
table is cheap; ``tests/test_assignments.py`` grades with the real ``otter run``. The χ² tests
(≈ 85 s each here) are left out of this table: the slow otter tests cover them on the solution."""

from __future__ import annotations

from pathlib import Path

import pytest

from specdec_core.course.mutants import Master

ROOT = Path(__file__).resolve().parents[1]
CAPSTONE1 = Master(ROOT / "assignments" / "01_build_speculative_decoding.ipynb")
ANSWER = "def speculative_generate_mine"
SLOW_PRINTS = ("grading.sampled_pvalue(",)  # a notebook cell that only prints a χ² p-value
CHEAP = ["q1 public 1", "q1 hidden 2", "q1 hidden 3", "q2 hidden 3", "q3 public 1", "q3 hidden 1", "q3 hidden 2",
         "q3 hidden 3", "q4 public 1", "q4 hidden 1"]

# wrong answer → (edits to the answer cell, the test that must fail, the points it carries)
WRONG = {
    "AR loop ignoring the drafter": (
        [("drafted, q = drafter.propose(context, min(gamma, max_new_tokens - len(new)))",
          "drafted, q = torch.empty(0, dtype=torch.long), None"),
         ("drafter.accepted(n, k)", "pass")], "q3 hidden 1", 1.0),
    "per-guess verification (a target forward per guess)": (
        [("        calls += 1\n", "        calls += 1\n        for j in range(k):\n            target(context[:, -1:])\n")],
        "q3 hidden 1", 1.0),
    "alpha as accepted ÷ proposed": ([("examined + min(n + 1, k)", "examined + k")], "q3 hidden 3", 1.0),
    "top-k ignored": ([("warp = Warp(temperature, top_k, top_p)", "warp = Warp(temperature, None, top_p)")],
                      "q2 hidden 3", 1.0),
}

# right answers written differently: every cheap test passes
RIGHT = {
    "another loop structure (accept count by a for/else)": [(
        "            while n < k and drafted[n] == best[n]:\n                n += 1\n",
        "            for n in range(k + 1):\n                if n == k or drafted[n] != best[n]:\n                    break\n")],
}


@pytest.mark.parametrize("name", list(WRONG))
def test_a_wrong_answer_loses_the_points_of_the_test_that_names_its_mistake(name):
    edits, test, points = WRONG[name]
    result = CAPSTONE1.grade({ANSWER: edits}, only=[test], skip=SLOW_PRINTS)
    print(f"{name}: fails {test} (−{points:g}): {result[test].message}")
    assert not result[test].passed and result[test].possible == points


@pytest.mark.parametrize("name", list(RIGHT))
def test_a_right_answer_written_differently_gets_full_marks(name):
    result = CAPSTONE1.grade({ANSWER: RIGHT[name]}, only=CHEAP, skip=SLOW_PRINTS)
    print(f"{name}: {result.total:g}/{result.possible:g}")
    assert result.failed() == {}


def test_the_solution_passes_every_cheap_test_and_the_points_add_up():
    result = CAPSTONE1.grade(only=CHEAP, skip=SLOW_PRINTS)
    assert result.failed() == {} and sum(t.points for t in CAPSTONE1.tests) == 14
