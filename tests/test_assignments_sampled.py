"""Capstone 1's catalogue of sampled-step errors (:mod:`specdec_core.course.sampled_mutants`), graded by the
master's own tests (issue 57). Cheap here: every edit applies to the answer cell, and greedy stays untouched
(each error sits in the sampled branch). The full table — every answer, every test, the default grading seed
and two others (≈ 100 s per answer on two cores) — runs with ``SPECDEC_SAMPLED_TABLE=1`` (not in CI): each
error at most half the points, each right answer full marks."""

from __future__ import annotations

import json
import os
import time

import pytest

os.environ.setdefault("SPECDEC_QUICK", "1")

import test_assignments_core_goals as cg  # noqa: E402

from specdec_core.course.assignment_tables import TABLES, rows  # noqa: E402
from specdec_core.course.sampled_mutants import ANSWER, RIGHT, WRONG  # noqa: E402
from specdec_core.files import write_json  # noqa: E402

MASTER, SKIP = cg.CAPSTONES["c1"][0], cg.CAPSTONES["c1"][1]
CELL = next(c for c in MASTER.code if ANSWER in c)
GREEDY = CELL[CELL.index("if warp.greedy:"):CELL.index("else:  # T > 0") if "else:  # T > 0" in CELL else CELL.index("            p = warp(logits)")]


@pytest.mark.parametrize("name", list(WRONG) + list(RIGHT))
def test_every_edit_applies_and_leaves_greedy_alone(name):
    mutant = WRONG.get(name) or RIGHT[name]
    source = CELL
    for old, new in mutant.edits:
        assert old in source, (name, old)
        source = source.replace(old, new)
    assert GREEDY in source
    assert (source != CELL) == bool(mutant.edits)


TABLE_FILE = TABLES["c1-table"][0]  # written by `make assignments`


@pytest.mark.skipif(os.environ.get("SPECDEC_SAMPLED_TABLE") != "1", reason="the full table: SPECDEC_SAMPLED_TABLE=1")
@pytest.mark.parametrize("name", list(WRONG) + list(RIGHT))
def test_every_error_scores_at_most_half_and_every_right_answer_full_marks_at_three_seeds(name):
    mutant = WRONG.get(name) or RIGHT[name]
    start = time.perf_counter()
    totals, possible, messages = cg.scores(MASTER, {ANSWER: mutant.edits} if mutant.edits else {}, SKIP)
    print(name, totals, possible, messages[:3])
    table = json.loads(TABLE_FILE.read_text()) if TABLE_FILE.exists() else {}
    table = {"seeds": ["default" if s is None else s for s in cg.SEEDS], "answers": table.get("answers", {})}
    table["answers"][name] = {"kind": "wrong" if name in WRONG else "right", "totals": totals, "possible": possible,
                              "seconds": round(time.perf_counter() - start, 1), "failed": messages[:4]}
    write_json(table, TABLE_FILE, indent=1)  # atomically, row by row (the run may be cut short)
    if name in WRONG:
        assert max(totals) <= possible / 2, (name, totals)
    else:
        assert totals == [possible] * 3, (name, totals)


def test_the_readme_shows_the_table_file_as_measured():
    """The README's capstone 1 table is rendered from the file the last full run wrote (every answer of the
    catalogue in it, each wrong one at most half the points, each right one full marks)."""
    if not TABLE_FILE.exists():
        pytest.skip("no table yet: make assignments writes it")
    table = json.loads(TABLE_FILE.read_text())
    readme = (cg.ROOT / "README.md").read_text()
    assert set(table["answers"]) == set(WRONG) | set(RIGHT)
    for row in rows(table, 1):
        assert row in readme, row
    for name, row in table["answers"].items():
        assert max(row["totals"]) <= row["possible"] / 2 if name in WRONG else row["totals"] == [row["possible"]] * 3, name
