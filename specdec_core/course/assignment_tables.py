"""The README's three-seed tables of the capstones' catalogues (issue 57), rendered from the files that
``make assignments`` writes (``results/assignments/*.json``: every answer graded with every test at the
default grading seed and two others, written row by row as they are measured).

    python -m specdec_core.course.assignment_tables --write-readme     # the rows between the README's markers
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from ..files import atomic_write

ROOT = Path(__file__).resolve().parents[2]
TABLES = {  # README marker → (the file, the capstone's number)
    "c1-table": (ROOT / "results" / "assignments" / "capstone1-sampled-table.json", 1),
    "c3-table": (ROOT / "results" / "assignments" / "capstone3-contract-table.json", 3),
}  # and "c3-power": capstone 3's computed power


def rows(table: dict, capstone: int) -> list[str]:
    """``| capstone | kind | answer | points at the three seeds of N |``, one per measured answer (a ``|`` in a
    name escaped, so the table keeps its columns)."""
    return [f"| {capstone} | {row['kind']} | {name.replace('|', chr(92) + '|')} | {' / '.join(f'{t:g}' for t in row['totals'])} of {row['possible']:g} |"
            for name, row in table["answers"].items()]


def contract_power() -> list[str]:
    """Each drafter of capstone 3's catalogue: P(a law test fails it) at 400 and 600 calls, from its exact law."""
    from .drafter_mutants import WRONG, proposal_law
    from .grading import TOY_PROMPT
    from .grading_guesses import power

    laws = {name: proposal_law(drafted, TOY_PROMPT, 3, 8) for name, drafted in WRONG.items()}
    return [f"- {name}: {power(law, 400):.6f} (400 calls, the public test) / {power(law, 600):.6f} (600, the hidden ones)"
            for name, law in laws.items()]


def render(readme: str, marker: str, lines: list[str]) -> str:
    """``readme`` with ``lines`` between ``<!-- marker -->`` and ``<!-- /marker -->`` (the end marker added)."""
    block = "\n".join([f"<!-- {marker} -->", *lines, f"<!-- /{marker} -->"])
    pattern = re.compile(rf"<!-- {marker} -->(?:[\s\S]*?<!-- /{marker} -->)?")
    if not pattern.search(readme):
        raise ValueError(f"the README has no <!-- {marker} --> marker")
    return pattern.sub(lambda _: block, readme, count=1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write-readme", action="store_true", help="write the tables into README.md")
    args = parser.parse_args(argv)
    readme_path = ROOT / "README.md"
    readme = readme_path.read_text()
    for marker, (path, capstone) in TABLES.items():
        if path.exists():
            table = json.loads(path.read_text())
            lines = ["| capstone | kind | answer | points (default seed / 101 / 202) |", "|---|---|---|---|", *rows(table, capstone)]
            readme = render(readme, marker, lines)
            print("\n".join(lines))
    readme = render(readme, "c3-power", contract_power())
    print("\n".join(contract_power()))
    if args.write_readme:
        atomic_write(readme_path, readme)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
