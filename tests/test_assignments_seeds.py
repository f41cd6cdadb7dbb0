"""One grading seed per student, through otter's own seed support (issue 33, item 2).

Every master's ASSIGNMENT CONFIG names a ``seed: variable`` (grading.OTTER_SEED_LINE). When an autograder's
otter_config.json has a ``seed`` (``assign --seed N`` bakes one in; ``grade --seed N`` and ``grade-all
--seed-per-student`` set one per grading), otter puts ``<variable> = N`` at the top of every code cell, which
sets ``grading.OTTER_SEED``; :func:`grading.grading_seed` mixes it with ``$SPECDEC_GRADING_SEED``, so every
hidden input changes. Measured here: two seeds draw other inputs for every hidden test of capstone 2, and
its solution gets full marks under both (in-process); the real ``otter run`` carries the seed to a hidden
test (a small master of its own, slow)."""

from __future__ import annotations

import importlib
import json
import os
import re
from pathlib import Path

import pytest

os.environ.setdefault("SPECDEC_QUICK", "1")

from specdec_core.course import grading  # noqa: E402
from specdec_core.course.mutants import Master  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MASTERS = sorted((ROOT / "assignments").glob("*.ipynb"))
C2 = Master(ROOT / "assignments" / "02_measure_and_explain.ipynb")
C2_HIDDEN = [t.name for t in C2.tests if "hidden" in t.name]


@pytest.mark.parametrize("master", MASTERS, ids=lambda p: p.stem)
def test_every_master_names_the_seed_variable_that_reaches_the_grading_seed(master):
    assert Master(master).seed_variable == grading.OTTER_SEED_LINE


def test_the_seed_line_sets_the_grading_seed_and_a_reload_keeps_it(monkeypatch):
    monkeypatch.delenv(grading.SEED_VARIABLE, raising=False)
    try:
        exec(f"{grading.OTTER_SEED_LINE} = 7", {})  # noqa: S102 (what otter puts at the top of every cell)
        assert grading.grading_seed() == "specdec-course/seed-7"
        assert importlib.reload(grading).grading_seed() == "specdec-course/seed-7"  # the hidden tests reload it
        monkeypatch.setenv(grading.SEED_VARIABLE, "secret")
        assert grading.grading_seed() == "secret/seed-7"
    finally:
        grading.__dict__.pop("OTTER_SEED", None)
    assert grading.grading_seed() == "secret"  # no otter seed: the instructor's seed alone, as before


def _draws(seed: int | None) -> list[float]:
    names = sorted({n for t in C2.tests if "hidden" in t.name for n in re.findall(r'grading_rng\("([^"]+)"\)', t.source)})
    assert len(names) == len(C2_HIDDEN)  # one random source per hidden test
    try:
        if seed is not None:
            grading.OTTER_SEED = seed
        return [grading.grading_rng(n).random() for n in names]
    finally:
        grading.__dict__.pop("OTTER_SEED", None)


def test_two_seeds_draw_other_hidden_inputs_and_the_solution_gets_full_marks_under_both():
    a, b, default = _draws(101), _draws(202), _draws(None)
    assert all(x != y != z for x, y, z in zip(a, b, default))  # every hidden test draws other inputs
    for seed in (101, 202):
        result = C2.grade(only=C2_HIDDEN, skip=("rows = sweep(",), seed=seed)
        print(f"seed {seed}: {result.total:g}/{result.possible:g}")
        assert result.failed() == {} and result.possible == 9, {n: o.message for n, o in result.outcomes.items()}
    assert "OTTER_SEED" not in vars(grading)  # unset after grading


def _tiny_master(folder: Path) -> Path:
    """A master of one question whose hidden test passes only when otter's seed 7 reached it."""
    config = "".join(json.loads(MASTERS[0].read_text())["cells"][0]["source"])
    seed_block = config[config.index("seed:"):]
    raw = lambda text: {"cell_type": "raw", "metadata": {}, "source": text}  # noqa: E731
    code = lambda text: {"cell_type": "code", "metadata": {}, "source": text, "outputs": [], "execution_count": None}  # noqa: E731
    test = ('""" # BEGIN TEST CONFIG\nhidden: true\n""" # END TEST CONFIG\n'
            "import importlib, specdec_core.course.grading as grading\ngrading = importlib.reload(grading)\n"
            'assert grading.grading_seed().endswith("/seed-7"), grading.grading_seed()\n')
    cells = [raw("# ASSIGNMENT CONFIG\nname: seeded\ninit_cell: true\ncheck_all_cell: false\nexport_cell: false\n"
                 "solutions_pdf: false\ngenerate:\n  pdf: false\n" + seed_block),
             raw("# BEGIN QUESTION\nname: q1\npoints: 1"), code("answer = 1"),
             raw("# BEGIN TESTS"), code(test), raw("# END TESTS"), raw("# END QUESTION")]
    nb = {"cells": cells, "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}},
          "nbformat": 4, "nbformat_minor": 5}
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "seeded.ipynb").write_text(json.dumps(nb))
    return folder / "seeded.ipynb"


@pytest.mark.slow
def test_otter_run_carries_the_seed_to_the_hidden_tests(tmp_path, monkeypatch):
    from specdec_core.course.assign import build, grade

    monkeypatch.delenv(grading.SEED_VARIABLE, raising=False)
    master = _tiny_master(tmp_path / "masters")
    student, autograder = build(master, tmp_path / "plain", run_tests=False)
    assert grade(autograder, student, seed=7).total == 1  # grade --seed 7 / grade-all --seed-per-student
    assert grade(autograder, student).total == 0  # no seed: the hidden test sees the default
    student, baked = build(master, tmp_path / "baked", run_tests=True, seed=7)  # assign --seed 7: checked with it
    assert json.loads(__import__("zipfile").ZipFile(baked).read("otter_config.json"))["seed"] == 7
    assert grade(baked, student).total == 1
