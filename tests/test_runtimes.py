"""Run times are measured, never typed: the README's column and each lesson's **Run time** line equal
what the stored notebooks' own cell timings say (``python -m specdec_core.course runtimes --write``)."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from specdec_core.course.runtimes import RUN_TIME, lesson_minutes, readme_with_run_times, stored_minutes, with_run_time

ROOT = Path(__file__).resolve().parents[1]
LESSONS = sorted((ROOT / "lessons").glob("*.ipynb"))


def _timed(cell, start: str, end: str):
    cell.metadata["execution"] = {"iopub.execute_input": start, "shell.execute_reply": end}
    return cell


def test_stored_minutes_span_the_first_start_to_the_last_reply(tmp_path):
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("# t"),
        _timed(nbformat.v4.new_code_cell("1"), "2026-12-02T10:00:00.000Z", "2026-12-02T10:00:01.000Z"),
        nbformat.v4.new_code_cell("2"),  # no timing: skipped
        _timed(nbformat.v4.new_code_cell("3"), "2026-12-02T10:04:00.000Z", "2026-12-02T10:04:30.000Z"),
    ])
    nbformat.write(nb, tmp_path / "a.ipynb")
    assert stored_minutes(tmp_path / "a.ipynb") == pytest.approx(4.5)
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1")]), tmp_path / "b.ipynb")
    assert stored_minutes(tmp_path / "b.ipynb") is None


def test_the_renderers_replace_only_the_measured_part():
    line = "**Run time:** about 5 minutes on a 2-core CPU, under a minute on a GPU."
    assert with_run_time(line, 3.24) == "**Run time:** 3.2 min (the stored run) on a 2-core CPU, under a minute on a GPU."
    assert with_run_time("no such line", 3.0) == "no such line"
    rendered = "**Run time:** 5.4 min (the stored run) on a 2-core CPU (under 90 s with `SPECDEC_QUICK=1`)."
    assert with_run_time(rendered, 4.8) == rendered.replace("5.4", "4.8")  # its own output matches again: a stale one is caught
    assert with_run_time(rendered, 5.4) == rendered
    table = ("| # | lesson | you build | CPU run time |\n|---|---|---|---|\n"
             "| 01 | [ar](lessons/01_a.ipynb) | the loop | ≈ 5 min |\n| 02 | [b](lessons/02_b.ipynb) | x | 1 min |\n\nText.\n")
    out = readme_with_run_times(table, {"01_a.ipynb": 0.4})
    assert "| 01 | [ar](lessons/01_a.ipynb) | the loop | under a minute |\n" in out
    assert "| 02 | [b](lessons/02_b.ipynb) | x | 1 min |\n\nText.\n" in out  # no timing: left as it was


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_each_lesson_states_its_stored_run_time(path):
    minutes = stored_minutes(path)
    assert minutes is not None, f"{path.name} has no cell timings: execute it with `make notebooks NB={path}`"
    nb = nbformat.read(path, as_version=4)
    lines = [c.source for c in nb.cells if c.cell_type == "markdown" and RUN_TIME.search(c.source)]
    for source in lines[:1]:
        assert with_run_time(source, minutes) == source, "run `python -m specdec_core.course runtimes --write`"


def test_the_readme_states_the_stored_run_times_and_a_stale_one_is_caught():
    minutes = lesson_minutes(ROOT)
    readme = (ROOT / "README.md").read_text()
    assert readme_with_run_times(readme, minutes) == readme, "run `python -m specdec_core.course runtimes --write`"
    stale = {name: m + 1 for name, m in minutes.items()}
    assert readme_with_run_times(readme, stale) != readme
