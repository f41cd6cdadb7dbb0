"""Running a notebook under nbval and reading back, cell by cell, which checks passed.

Two things live here:

- a small pytest plugin. It makes nbval never compare **stderr** (warnings, progress bars and
  library messages go there and differ between machines); ``tests/conftest.py`` applies that to
  ``make test``. When ``$SPECDEC_NBVAL_RESULTS`` names a file, it also appends one JSON line per
  notebook cell there: outcome, the cell's stdout (a checker's ``✓`` / ``✗ … — hint`` lines) and
  the exception, if any.
- :func:`run_notebook`: ``pytest --nbval-lax --nbval-current-env --nbval-sanitize-with
  tests/nbval_sanitize.cfg NB -p specdec_core.course.nbval_run`` in a subprocess, read back into
  one :class:`CellResult` per code cell. It runs a scratch copy of the notebook (next to it, so the
  kernel's working directory is the same) in which every compared cell's output is reset to the
  expected one the generator stored (``metadata.specdec.expected_outputs``): a failing run that the
  student saved earlier must not count against an answer that is now right.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
import pytest

from .exercises import cell_role, checker_call, dumps

REPO_ROOT = Path(__file__).resolve().parents[2]
SANITIZE_FILE = REPO_ROOT / "tests" / "nbval_sanitize.cfg"
RESULTS_ENV = "SPECDEC_NBVAL_RESULTS"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_EXCEPTION_LINE = re.compile(r"^\s*([A-Za-z_][\w.]*(?:Error|Exception|Failed|Interrupt))\s*:?(.*)$")


# ----------------------------------------------------------------------------- the pytest plugin


def _is_notebook_cell(item) -> bool:
    return type(item).__name__ == "IPyNbCell"  # nbval's item class (not imported: nbval may be absent)


def skip_stderr_comparison(items: list) -> None:
    """Make nbval ignore stderr streams when it compares a cell's outputs (idempotent)."""
    for item in items:
        collector = getattr(item, "parent", None)
        skip = getattr(collector, "skip_compare", None)
        # nbval turns a stream output into {"stderr": text} before comparing: skipping the key skips it
        if _is_notebook_cell(item) and isinstance(skip, tuple) and "stderr" not in skip:
            collector.skip_compare = skip + ("stderr",)


def pytest_collection_modifyitems(items: list) -> None:
    skip_stderr_comparison(items)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """Append this cell's result to ``$SPECDEC_NBVAL_RESULTS`` (one JSON object per line)."""
    report = yield
    target = os.environ.get(RESULTS_ENV)
    if target and _is_notebook_cell(item) and (report.when == "call" or not report.passed):
        outputs = item.test_outputs or []
        record = {
            "cell": item.cell_num,  # nbval counts code cells only, from 0
            "outcome": report.outcome,
            "stdout": "".join(o.get("text", "") for o in outputs if o.get("name") == "stdout"),
            "error": next((f"{o.ename}: {o.evalue}" for o in outputs if o.output_type == "error"), ""),
            "report": _ANSI.sub("", str(report.longrepr or "")),
        }
        with open(target, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
    return report


# ----------------------------------------------------------------------------- running a notebook


@dataclass
class CellResult:
    """One code cell after the run. ``number`` counts all cells from 1, as a reader of the notebook would."""

    number: int
    label: str  # the checker call, or the cell's first line of code
    role: str  # "answer", "check", "compared" or "plain" (see exercises.cell_role)
    outcome: str  # "passed", "failed", "not run"
    reason: str = ""  # one line: the exception, or why the outputs differ
    crosses: list[str] = field(default_factory=list)  # the checker's "✗ … — hint: …" lines


@dataclass
class RunReport:
    cells: list[CellResult]
    returncode: int
    log: str  # pytest's own output, for when something went wrong before any cell ran

    @property
    def checks(self) -> list[CellResult]:
        return [cell for cell in self.cells if cell.role == "check"]

    @property
    def failed(self) -> list[CellResult]:
        return [cell for cell in self.cells if cell.outcome == "failed"]


def _first_code_line(source: str) -> str:
    for line in source.splitlines():
        if line.strip() and not line.strip().startswith("#"):
            return line.strip()
    return source.strip().splitlines()[0] if source.strip() else "(empty cell)"


def failure_reason(error: str, report: str) -> str:
    """One short line saying why a cell failed, from its exception or else nbval's report."""
    if error.startswith("NotImplementedError"):
        return "NotImplementedError: not filled in yet"
    if error.startswith("CheckFailed: "):
        return error.removeprefix("CheckFailed: ")
    if error:
        return error[:160]
    if "Cell outputs differ" in report:
        return "its output differs from the expected one"
    if "Timeout" in report:
        return "timed out"
    for line in reversed(report.splitlines()):  # e.g. the kernel did not start
        if _EXCEPTION_LINE.match(line):
            return line.strip()[:160]
    return "failed (run it in Jupyter to see why)"


def _scratch_copy(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The notebook with each compared cell's outputs reset to the expected ones, if stored."""
    nb = nbformat.from_dict(nb)
    for cell in nb.cells:
        expected = cell.get("metadata", {}).get("specdec", {}).get("expected_outputs")
        if cell.cell_type == "code" and expected is not None:
            cell.outputs = nbformat.from_dict(expected)
            cell.execution_count = cell.execution_count or 1  # nbval compares only cells that ran
    return nb


def _read_results(path: Path) -> dict[int, dict]:
    """``{code cell index: record}`` from the plugin's JSON lines (a later record of a cell wins)."""
    if not path.is_file():
        return {}
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return {record["cell"]: record for record in records}


def nbval_command(notebook: Path) -> list[str]:
    """The pytest command line that runs one notebook under nbval, as ``make test`` does."""
    command = [sys.executable, "-m", "pytest", str(notebook), "--nbval-lax", "--nbval-current-env"]
    if SANITIZE_FILE.is_file():
        command += ["--nbval-sanitize-with", str(SANITIZE_FILE)]
    return command + ["-p", "specdec_core.course.nbval_run", "-p", "no:cacheprovider", "--color=no", "-q"]


def run_notebook(path: Path, quick: bool = True, timeout: float | None = None) -> RunReport:
    """Run ``path`` under nbval (``SPECDEC_QUICK=1`` when ``quick``) and report every code cell.

    Raises FileNotFoundError for a missing file and ValueError for one that is not a notebook.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(path)
    try:
        nb = nbformat.read(path, as_version=4)
    except Exception as err:
        raise ValueError(f"{path} is not a readable Jupyter notebook ({err})") from None
    env = dict(os.environ)
    if quick:
        env["SPECDEC_QUICK"] = "1"
    else:
        env.pop("SPECDEC_QUICK", None)
    fd, scratch = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=".check.ipynb", dir=path.parent)
    os.close(fd)
    try:
        Path(scratch).write_text(dumps(_scratch_copy(nb)), encoding="utf-8")
        with tempfile.TemporaryDirectory() as tmp:
            env[RESULTS_ENV] = str(Path(tmp) / "cells.jsonl")
            cwd = REPO_ROOT if (REPO_ROOT / "pyproject.toml").is_file() else path.parent
            proc = subprocess.run(
                nbval_command(Path(scratch)), cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
            )
            results = _read_results(Path(env[RESULTS_ENV]))
    finally:
        Path(scratch).unlink(missing_ok=True)
    cells, code_index = [], 0
    for number, cell in enumerate(nb.cells, start=1):
        if cell.cell_type != "code":
            continue
        record = results.get(code_index)
        label = checker_call(cell) or _first_code_line(cell.source)
        result = CellResult(number, label, cell_role(cell), "not run")
        if record is not None:
            result.outcome = {"passed": "passed", "failed": "failed"}.get(record["outcome"], "not run")
            if result.outcome == "failed":
                result.reason = failure_reason(record["error"], record["report"])
                result.crosses = [line for line in record["stdout"].splitlines() if line.startswith("✗")]
        cells.append(result)
        code_index += 1
    return RunReport(cells, proc.returncode, proc.stdout + proc.stderr)
