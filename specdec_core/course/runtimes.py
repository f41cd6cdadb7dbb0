"""Each lesson's run time, measured: the stored run's own cell timings, written where people read them.

A notebook executed by nbclient (``make notebooks``) keeps, in every code cell's metadata, when the cell
started and when it replied. The run time of the stored run is the span from the first cell's start to the
last cell's reply. ``python -m specdec_core.course runtimes --write`` renders it into the README's lesson
table and into each lesson's **Run time:** line, so neither is a typed figure that goes stale; the tests check
that both agree with the stored notebooks.
"""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path

import nbformat

from ..files import atomic_write

RUN_TIME = re.compile(r"(\*\*Run time:\*\* )([^`\n]*?)( on a 2-core CPU)")  # the figure, never across a line


def stored_minutes(path: Path, nb: nbformat.NotebookNode | None = None) -> float | None:
    """Minutes from the first code cell's start to the last one's reply in the stored run of ``path`` (or of
    ``nb``, already read from it), or None when its cells carry no timings (never executed by nbclient)."""
    nb = nb if nb is not None else nbformat.read(path, as_version=4)
    stamps = [c.metadata.get("execution", {}) for c in nb.cells if c.cell_type == "code"]
    stamps = [s for s in stamps if "iopub.execute_input" in s and "shell.execute_reply" in s]
    if not stamps:
        return None
    start = datetime.fromisoformat(stamps[0]["iopub.execute_input"].replace("Z", "+00:00"))
    end = datetime.fromisoformat(stamps[-1]["shell.execute_reply"].replace("Z", "+00:00"))
    return (end - start).total_seconds() / 60


def lesson_minutes(root: Path) -> dict[str, float]:
    """{lesson file name: its stored run time in minutes} for every timed lesson under ``root/lessons``."""
    return {p.name: m for p in sorted((root / "lessons").glob("*.ipynb")) if (m := stored_minutes(p)) is not None}


def phrase(minutes: float) -> str:
    """How the course writes a measured run time."""
    return "under a minute" if minutes < 1 else f"{minutes:.1f} min"


def with_run_time(markdown: str, minutes: float) -> str:
    """``markdown`` with the measured time in its **Run time:** line (unchanged if it has none)."""
    return RUN_TIME.sub(lambda m: f"{m[1]}{phrase(minutes)} (the stored run){m[3]}", markdown, count=1)


def readme_with_run_times(readme: str, minutes: dict[str, float]) -> str:
    """The README with the last column of each lesson row (``| NN | [name](lessons/NN_….ipynb) | … | time |``)
    set to the stored run's time of that notebook (keyed by its file name)."""
    def row(m: re.Match) -> str:
        name = m[2]
        if name not in minutes:
            return m[0]
        return f"{m[1]} {phrase(minutes[name])} |"

    return re.sub(r"^(\|[^|\n]*\|\s*\[[^\]]*\]\(lessons/([^)]+\.ipynb)\)[^\n]*\|)[^|\n]*\|[ \t]*$", row, readme,
                  flags=re.M)


def write_all(root: Path) -> dict[str, float]:
    """Render every lesson's stored run time into its **Run time:** line and the README; return them."""
    minutes = {}
    for path in sorted((root / "lessons").glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        if (m := stored_minutes(path, nb)) is None:
            continue
        minutes[path.name] = m
        cell = next((c for c in nb.cells if c.cell_type == "markdown" and RUN_TIME.search(c.source)), None)
        if cell is not None and (new := with_run_time(cell.source, m)) != cell.source:
            cell.source = new
            atomic_write(path, nbformat.writes(nb) + "\n")
    readme = root / "README.md"
    text = readme.read_text()
    if (new := readme_with_run_times(text, minutes)) != text:
        atomic_write(readme, new)
    return minutes
