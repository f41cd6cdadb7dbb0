"""Graded assignments (the capstones): built and graded with otter-grader, the real thing.

    python -m specdec_core.course assign                      # assignments/*.ipynb → dist/assignments/
    python -m specdec_core.course grade dist/assignments/01_…/autograder/01_….zip submission.ipynb

Each master notebook in ``assignments/`` (otter-assign format: an ``ASSIGNMENT CONFIG`` cell, then
questions with ``BEGIN SOLUTION`` regions and ``BEGIN TESTS`` cells, hidden ones marked ``hidden:
true``) is the single source of one assignment. ``otter assign`` turns it into

    dist/assignments/<name>/student/<name>.ipynb      what you hand out: no solutions, public tests only
    dist/assignments/<name>/autograder/<name>-autograder_<date>.zip   every test, hidden ones included

and runs the tests on the solution first (a master that fails its own tests is an error).
:func:`grade` runs ``otter run`` — otter's grader without Docker, in this environment, which has torch
and ``specdec_core`` — on one submission and returns the points per question. Questions marked
``manual: true`` (written answers) are graded by hand from the rubric in the master.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import yaml

ASSIGNMENTS = Path("assignments")
DIST = Path("dist") / "assignments"


class AssignError(RuntimeError):
    """otter failed; the message carries the end of its output."""


def _otter(*args: str, cwd: Path | None = None, timeout: float = 1800) -> subprocess.CompletedProcess:
    """Run otter's command line (the one installed beside this Python, else the one on the PATH)."""
    beside = Path(sys.executable).parent / "otter"
    exe = str(beside) if beside.exists() else shutil.which("otter")
    if exe is None:
        raise AssignError("otter-grader is not installed here: run `make setup` (it installs requirements-grading.txt)")
    return subprocess.run([exe, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout)


def build(master: Path, out: Path, run_tests: bool = True, seed: int | None = None) -> tuple[Path, Path]:
    """``otter assign`` one master into ``out`` (replaced); returns (student notebook, autograder zip).
    ``seed``: the zip's otter seed (its ``autograder_value``: every submission graded with it draws its
    hidden inputs from it), the solution checked with it too."""
    master, out = Path(master).resolve(), Path(out).resolve()
    if out.exists():
        shutil.rmtree(out)
    with tempfile.TemporaryDirectory() as tmp:
        if seed is not None:  # a copy of the master whose ASSIGNMENT CONFIG says seed.autograder_value
            nb = json.loads(master.read_text())
            config = yaml.safe_load("".join(nb["cells"][0]["source"]).removeprefix("# ASSIGNMENT CONFIG"))
            if not (config.get("seed") or {}).get("variable"):
                raise AssignError(f"{master.name}: its ASSIGNMENT CONFIG has no seed: variable")
            config["seed"]["autograder_value"] = int(seed)
            nb["cells"][0]["source"] = "# ASSIGNMENT CONFIG\n" + yaml.safe_dump(config, sort_keys=False)
            master = Path(tmp) / master.name
            master.write_text(json.dumps(nb, indent=1, ensure_ascii=False))
        done = _otter("assign", *([] if run_tests else ["--no-run-tests"]), master.name, str(out), cwd=master.parent)
    zips = sorted((out / "autograder").glob("*.zip"))
    if done.returncode != 0 or not zips:
        raise AssignError(f"otter assign {master.name} failed:\n{(done.stdout + done.stderr)[-4000:]}")
    return out / "student" / master.name, zips[-1]


@dataclass
class Score:
    points: dict[str, tuple[float, float]]  # question → (score, out of)
    messages: dict[str, str] = field(default_factory=dict)  # question → why it lost points ('' when full)

    @property
    def total(self) -> float:
        return sum(s for s, _ in self.points.values())

    @property
    def possible(self) -> float:
        return sum(m for _, m in self.points.values())

    def __str__(self) -> str:
        parts = ", ".join(f"{q} {s:g}/{m:g}" for q, (s, m) in self.points.items())
        return f"{self.total:g} of {self.possible:g} autograded points ({parts})"


def grade(autograder: Path, submission: Path, seed: int | None = None) -> Score:
    """Grade one notebook with ``otter run`` (in a scratch folder: nothing is written next to it), with the
    zip's lean copy (:func:`.gradescope.lean_copy`: this environment has the course) and otter's ``seed``
    when one is given (the student's own hidden inputs)."""
    from .gradescope import GradescopeError, lean_copy

    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / Path(submission).name
        shutil.copyfile(submission, copy)
        try:
            lean = lean_copy(Path(autograder), Path(tmp) / "autograder.zip", seed)
        except (GradescopeError, KeyError) as err:
            raise AssignError(str(err)) from err
        done = _otter("run", "-a", str(lean), "--no-logo", "-o", tmp, str(copy), cwd=Path(tmp))
        results = Path(tmp) / "results.json"
        if done.returncode != 0 or not results.exists():
            raise AssignError(f"otter run failed on {submission}:\n{(done.stdout + done.stderr)[-4000:]}")
        return score_of(results)


def score_of(results: Path) -> Score:
    """Points and messages per question from otter's ``results.json``."""
    tests = json.loads(Path(results).read_text())["tests"]
    scored = [t for t in tests if "score" in t]
    return Score({t["name"]: (float(t["score"]), float(t["max_score"])) for t in scored},
                 {t["name"]: failure_message(t.get("output", "")) if t["score"] < t["max_score"] else "" for t in scored})


def failure_message(output: str, limit: int = 600) -> str:
    """Why a question lost points, from otter's summary of it: per failed test case the FIRST error it
    raised (``AssertionError: ✗ …``), joined, shortened. otter runs a test case as a doctest, which goes
    on after a failing line: the ``NameError``s of the lines after it (a name the failing line did not
    bind) are its echoes, not the student's mistake, and are left out."""
    cases = re.split(r"^\s*\S+ - \d+ result:\s*$", output, flags=re.MULTILINE)
    failed = [c for c in cases[1:] if "Test case failed" in c] if len(cases) > 1 else [output]
    found = []
    for case in failed:
        first = next((m.group(1).strip() for m in re.finditer(r"^\s*(\w*(?:Error|Exception)\b.*)$", case, re.MULTILINE)
                      if not m.group(1).startswith("Exception raised")), None)
        if first:
            found.append(first)
    text = " | ".join(dict.fromkeys(found)) or " ".join(output.split())[-limit:]
    return text if len(text) <= limit else text[: limit - 1] + "…"


def masters(folder: Path = ASSIGNMENTS) -> list[Path]:
    return sorted(p for p in Path(folder).glob("*.ipynb") if not p.name.startswith("."))
