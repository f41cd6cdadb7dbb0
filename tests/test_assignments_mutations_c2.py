"""The mutation table of capstone 2 (measure and explain), measured in-process like capstone 1's
(``test_assignments_mutations.py``): each wrong answer loses the points of the test that names its
mistake, each right answer written differently gets full marks. The scripted clocks charge every call
its own cost, so a mean where a median belongs gives another number; the step, c and v are checked
against the AR and speculative runs that really happened (``grading.recording``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("SPECDEC_QUICK", "1")  # the notebook's short loops (the tests do not depend on them)

from specdec_core.course.mutants import Master  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CAPSTONE2 = Master(ROOT / "assignments" / "02_measure_and_explain.ipynb")
SKIP = ("rows = sweep(",)  # the notebook's own sweep: slow, and no test reads it (each computes its own)
SKIP_MORE = SKIP + ("point = measure_point(",)  # and its printed point
TESTS = [t.name for t in CAPSTONE2.tests]
TIMING, FORMULA, POINT, SWEEP = "def interleaved_times", "def predicted_speedup", "def measure_point", "def sweep"

# wrong answer → (cell marker, edits, the test that must fail, the points it carries)
WRONG = {
    "no warm-up": (TIMING, [("    for fn in calls.values():\n        fn()\n", "")], "q1 hidden 1", 2.0),
    "not interleaved (every repeat of one, then the next)": (TIMING, [(
        "    for _ in range(repeats):\n        for name, fn in calls.items():\n",
        "    for name, fn in calls.items():\n        for _ in range(repeats):\n")], "q1 hidden 1", 2.0),
    "E(α, γ) with γ terms instead of γ + 1": (FORMULA, [("alpha ** (gamma + 1)", "alpha ** gamma")], "q2 hidden 1", 2.0),
    "a mean for a median (speed-up)": (POINT, [('"speedup": statistics.median(times["ar"]) / statistics.median(times["spec"])',
                                              '"speedup": statistics.mean(times["ar"]) / statistics.mean(times["spec"])')],
                                       "q3 hidden 1", 3.0),
    "a mean for a median (step)": (POINT, [("step = statistics.median(token_times[1:] or token_times)",
                                          "step = statistics.mean(token_times[1:] or token_times)")], "q3 hidden 1", 3.0),
    "step with the prefill's token time": (POINT, [("step = statistics.median(token_times[1:] or token_times)",
                                                  "step = statistics.median(token_times)")], "q3 hidden 1", 3.0),
    "c per verify step instead of per drafted token": (POINT, [(
        "c = stats.draft_time / drafted / step if drafted else 0.0",
        "c = stats.draft_time / stats.target_calls / step")], "q3 hidden 1", 3.0),
    "a made-up step (one AR call's time ÷ n)": (POINT, [(
        "step = statistics.median(token_times[1:] or token_times)", "step = statistics.median(times['ar']) / n")],
        "q3 hidden 1", 3.0),
    "best γ by the smallest key": (SWEEP, [("return max(mine, key=lambda r: r[key])", "return min(mine, key=lambda r: r[key])")],
                                   "q4 hidden 1", 2.0),
}

# right answers written differently → (cell marker, edits)
RIGHT = {
    "E(α, γ) as the sum Σ α^i": (FORMULA, [(
        "expected = gamma + 1 if alpha == 1 else (1 - alpha ** (gamma + 1)) / (1 - alpha)",
        "expected = sum(alpha ** i for i in range(gamma + 1))")]),
    "statistics of the first run (the warm-up) instead of the last": (POINT, [("runs[name] = fn()", "runs.setdefault(name, fn())")]),
    "timing loop over the dict's items, durations collected per round": (TIMING, [(
        "    times = {name: [] for name in calls}\n    for _ in range(repeats):\n        for name, fn in calls.items():\n"
        "            start = clock()\n            fn()\n            times[name].append(clock() - start)\n    return times\n",
        "    rounds = []\n    for _ in range(repeats):\n        took = {}\n        for name, fn in calls.items():\n"
        "            t0 = clock()\n            fn()\n            took[name] = clock() - t0\n        rounds.append(took)\n"
        "    return {name: [r[name] for r in rounds] for name in calls}\n")]),
}


@pytest.mark.parametrize("name", list(WRONG))
def test_a_wrong_answer_loses_the_points_of_the_test_that_names_its_mistake(name):
    marker, edits, test, points = WRONG[name]
    result = CAPSTONE2.grade({marker: edits}, only=[test], skip=SKIP_MORE)
    print(f"{name}: fails {test} (−{points:g}): {result[test].message}")
    assert not result[test].passed and result[test].possible == points


@pytest.mark.parametrize("name", list(RIGHT))
def test_a_right_answer_written_differently_gets_full_marks(name):
    marker, edits = RIGHT[name]
    result = CAPSTONE2.grade({marker: edits}, only=TESTS, skip=SKIP)
    print(f"{name}: {result.total:g}/{result.possible:g}")
    assert result.failed() == {}, result.failed()


def test_the_solution_gets_full_marks_and_the_points_add_up():
    result = CAPSTONE2.grade(only=TESTS, skip=SKIP)
    assert result.failed() == {}, {n: o.message for n, o in result.outcomes.items() if not o.passed}
    assert sum(t.points for t in CAPSTONE2.tests) == 12


def test_every_hidden_input_is_drawn_from_the_grading_seed():
    hidden = [t.source for t in CAPSTONE2.tests if "hidden" in t.name]
    assert all("grading_rng(" in s for s in hidden) and not any("random.Random(" in s for s in hidden)
    assert all("grading.MEASURING_LIBRARY" in s for s in hidden)  # bench.drafters blocked everywhere
