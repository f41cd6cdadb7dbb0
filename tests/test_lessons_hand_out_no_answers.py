"""No exercise can be solved by copying a cell of its lesson (#20): a lesson never prints the source of a
function its exercise asks for (it prints the contract: specdec_core.course.contract), and no lesson code
cell holds most of an answer's lines. Both checks are shown to fire on planted copies."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from specdec_core import jacobi
from specdec_core.course.contract import contract

ROOT = Path(__file__).resolve().parents[1]
SOURCE = re.compile(r"getsource\(\s*[\w.]*?(\w+)\s*\)")


def code_cells(nb: dict) -> list[str]:
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]


def answers(solution: dict) -> dict[str, list[str]]:
    """Each answer of a solution notebook: the function it defines → the lines between the markers."""
    out = {}
    for cell in code_cells(solution):
        if "### BEGIN SOLUTION" in cell:
            name = re.search(r"def (\w+)", cell)
            body = cell.split("### BEGIN SOLUTION")[1].split("### END SOLUTION")[0]
            out[name.group(1) if name else cell[:30]] = normalised(body)
    return out


def normalised(code: str) -> list[str]:
    lines = (line.split("#")[0].strip() for line in code.splitlines())
    return [line for line in lines if line]


def problems(lesson: dict, solution: dict) -> list[str]:
    found = []
    asked = answers(solution)
    for cell in code_cells(lesson):
        for name in SOURCE.findall(cell):
            for answer in asked:
                if answer == name or answer.startswith(name + "_") or answer.endswith("_" + name):
                    found.append(f"prints the source of {name}, which the exercise asks for ({answer})")
        lines = set(normalised(cell))
        for name, body in asked.items():
            if len(body) >= 3 and sum(line in lines for line in body) / len(body) >= 0.5:
                found.append(f"a code cell holds most of the answer to {name}")
    return found


def pairs() -> list[tuple[Path, Path]]:
    return [(ROOT / "lessons" / s.name, s) for s in sorted((ROOT / "solutions").glob("*.ipynb"))]  # same names


@pytest.mark.parametrize("lesson, solution", pairs(), ids=lambda p: p.stem)
def test_no_lesson_hands_out_its_exercise(lesson, solution):
    assert problems(json.loads(lesson.read_text()), json.loads(solution.read_text())) == []


def test_the_check_fires_on_a_printed_source_and_on_a_copied_answer():
    solution = json.loads((ROOT / "solutions" / "07_jacobi_decoding.ipynb").read_text())
    printed = {"cells": [{"cell_type": "code", "source": ["import inspect\n", "print(inspect.getsource(jacobi.converged_count))"]}]}
    assert problems(printed, solution) == ["prints the source of converged_count, which the exercise asks for (converged_count)"]
    body = "\n".join(answers(solution)["jacobi_block"])
    copied = {"cells": [{"cell_type": "code", "source": [body]}]}
    assert problems(copied, solution) == ["a code cell holds most of the answer to jacobi_block"]


def test_a_contract_shows_signature_and_docstring_but_no_body():
    shown = contract(jacobi.converged_count, "exercise 07 asks you to write it")
    assert shown.startswith("def converged_count(old: State, new: State) -> int:")
    assert "certainly right" in shown and "exercise 07 asks you to write it" in shown
    assert "while m < len(new)" not in shown and "specdec_core/jacobi.py" in shown
