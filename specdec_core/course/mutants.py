"""Grade a capstone's answer in-process, test by test, the way otter does but without a subprocess:
the cheap way to grade many variants of an answer (a mutation table) against a master's own tests.

    master = Master.read("assignments/01_build_speculative_decoding.ipynb")
    result = master.grade({"def speculative_generate_mine": [("alpha = accepted / examined", "...")]})
    result["q3 hidden 1"].passed, result.total

A master's code cells run in order in one namespace (the first, the setup cell, once per master and
reused: it loads the models); then, as otter does, every test cell runs after the whole notebook, in
a copy of the final namespace. A test's points are those of its ``TEST CONFIG``; tests without any
share what is left of their question's points. ``otter run`` stays the reference: the slow tests in
``tests/test_assignments.py`` grade the solution, an unsolved notebook and a few mutants for real.
"""

from __future__ import annotations

import json
import re
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import yaml

_QUESTION = re.compile(r"^# BEGIN QUESTION\s*\nname:\s*(\S+)(?:[\s\S]*?points:\s*([\d.]+))?")
_CONFIG = re.compile(r'^""" # BEGIN TEST CONFIG\n([\s\S]*?)""" # END TEST CONFIG')


@dataclass
class Test:
    name: str  # e.g. "q1 public 1", "q1 hidden 2"
    question: str
    points: float
    source: str


@dataclass
class Outcome:
    passed: bool
    points: float  # scored
    possible: float
    message: str = ""  # the start of the error, when it failed
    seconds: float = 0.0


@dataclass
class Result:
    outcomes: dict[str, Outcome] = field(default_factory=dict)

    def __getitem__(self, name: str) -> Outcome:
        return self.outcomes[name]

    @property
    def total(self) -> float:
        return sum(o.points for o in self.outcomes.values())

    @property
    def possible(self) -> float:
        return sum(o.possible for o in self.outcomes.values())

    def failed(self) -> dict[str, float]:
        """The tests that failed, with the points each lost."""
        return {n: o.possible for n, o in self.outcomes.items() if not o.passed}


def _tests_of(cells: list[dict]) -> tuple[list[str], list[Test]]:
    """(the notebook's code cells in order, its tests), from a master's cells."""
    code, tests, question, points, in_tests, batch = [], [], "", 0.0, False, []

    def close_question() -> None:
        fixed = sum(t.points for t in batch if t.points >= 0)
        shared = [t for t in batch if t.points < 0]
        for t in shared:
            t.points = (points - fixed) / len(shared)
        tests.extend(batch)
        batch.clear()

    for cell in cells:
        text = "".join(cell["source"])
        if cell["cell_type"] == "raw":
            found = _QUESTION.match(text)
            if found:
                question, points = found.group(1), float(found.group(2) or 0)
            elif text.startswith("# BEGIN TESTS"):
                in_tests = True
            elif text.startswith("# END TESTS"):
                in_tests = False
            elif text.startswith("# END QUESTION"):
                close_question()
        elif cell["cell_type"] == "code":
            if not in_tests:
                code.append(text)
                continue
            config = _CONFIG.match(text)
            hidden = bool(config and "hidden: true" in config.group(1))
            given = re.search(r"points:\s*([\d.]+)", config.group(1)) if config else None
            kind = "hidden" if hidden else "public"
            number = 1 + sum(t.name.startswith(f"{question} {kind}") for t in batch)
            batch.append(Test(f"{question} {kind} {number}", question, float(given.group(1)) if given else -1.0, text))
    return code, tests


class Master:
    """One otter master notebook, run in-process: its code cells and its tests."""

    _setup_cache: dict[str, dict] = {}

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        cells = json.loads(self.path.read_text())["cells"]
        self.code, self.tests = _tests_of(cells)
        config = yaml.safe_load("".join(cells[0]["source"]).removeprefix("# ASSIGNMENT CONFIG")) or {}
        self.seed_variable: str | None = (config.get("seed") or {}).get("variable")  # otter's seed_variable

    def setup(self) -> dict:
        """The namespace after the first code cell (imports, models), computed once per master."""
        key = str(self.path.resolve())
        if key not in self._setup_cache:
            scope: dict = {"__name__": "__main__"}
            exec(compile(self.code[0], f"{self.path.name}[setup]", "exec"), scope)  # noqa: S102 (the course's own master)
            self._setup_cache[key] = scope
        return dict(self._setup_cache[key])

    def grade(self, edits: dict[str, list[tuple[str, str]]] | None = None, only: list[str] | None = None,
              extra: str = "", skip: tuple[str, ...] = (), seed: int | None = None) -> Result:
        """Run the notebook with ``edits`` (cell marker → [(old, new)] replacements, each of which must
        apply) and ``extra`` code appended after the answer cells, leaving out the code cells that contain
        a string of ``skip`` (a slow printout); then the tests (all, or ``only`` these). ``seed``: as otter
        does with an autograder's seed, ``<seed_variable> = seed`` at the top of every code cell."""
        from . import grading

        if seed is not None and not self.seed_variable:
            raise ValueError(f"{self.path.name} has no seed variable in its ASSIGNMENT CONFIG")
        try:
            return self._grade(edits, only, extra, skip, "" if seed is None else f"{self.seed_variable} = {seed}\n")
        finally:
            grading.__dict__.pop("OTTER_SEED", None)  # the seed line sets it in this process: unset it

    def _grade(self, edits, only, extra, skip, seed_line: str) -> Result:
        scope = self.setup()
        for i, source in enumerate(self.code[1:], 1):
            if any(s in source for s in skip):
                continue
            for marker, changes in (edits or {}).items():
                if marker in source:
                    for old, new in changes:
                        if old not in source:
                            raise ValueError(f"{old!r} is not in the cell marked {marker!r}")
                        source = source.replace(old, new)
            exec(compile(seed_line + source, f"{self.path.name}[cell {i}]", "exec"), scope)  # noqa: S102
        if extra:
            exec(compile(seed_line + extra, f"{self.path.name}[extra]", "exec"), scope)  # noqa: S102
        result = Result()
        for test in self.tests:
            if only is not None and test.name not in only:
                continue
            start = time.perf_counter()
            try:
                exec(compile(test.source, test.name, "exec"), dict(scope))  # noqa: S102
                result.outcomes[test.name] = Outcome(True, test.points, test.points)
            except Exception as err:  # noqa: BLE001 (a failing test is any exception, as in otter)
                message = "".join(traceback.format_exception_only(type(err), err)).strip()[:400]  # its start: what failed first
                result.outcomes[test.name] = Outcome(False, 0.0, test.points, message)
            result.outcomes[test.name].seconds = time.perf_counter() - start
        return result
