"""Grades that reach a gradebook: every submission in a folder graded with the real grader, one CSV row
each, and the written answers on a sheet the graders fill in.

    python -m specdec_core.course grade-all AUTOGRADER.zip SUBMISSIONS/ --out grades.csv

writes ``grades.csv`` (``file, total, possible``, then per question its points and, where it lost
some, the grader's message), ``grades-written.csv`` (one row per submission and written question:
``file, question, points, answer`` with ``points`` left blank for the grader) and
``grades-written.md`` (the same answers to read). After grading by hand,

    python -m specdec_core.course grade-all … --written grades-written.csv

merges the filled-in points back: a column per written question and ``total with written``. A
submission the grader cannot run gets a row with its error and no points.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .assign import AssignError, Score, grade


@dataclass
class Row:
    file: str
    score: Score | None
    error: str = ""
    written: dict[str, str] = field(default_factory=dict)  # written question → the student's answer


def written_answers(notebook: Path) -> dict[str, str]:
    """The answers to a handed-out notebook's written (manual) questions: the text of the cells otter tags
    ``otter_answer_cell`` between ``<!-- BEGIN QUESTION -->`` and ``<!-- END QUESTION -->``, by question
    (the first ``qN`` in the question's text, else ``written N``)."""
    cells = json.loads(Path(notebook).read_text())["cells"]
    answers: dict[str, str] = {}
    current, parts, context = None, [], ""
    for cell in cells:
        text = "".join(cell["source"])
        if "<!-- BEGIN QUESTION -->" in text:
            found = re.search(r"\b(q\d+)\b", text) or re.search(r"\b(q\d+)\b", context)
            current, parts = (found.group(1) if found else f"written {len(answers) + 1}"), []
        elif current is not None and "otter_answer_cell" in cell.get("metadata", {}).get("tags", []):
            parts.append(text.strip())
        if current is not None and "<!-- END QUESTION -->" in text:
            answers[current] = "\n\n".join(parts)
            current = None
        if cell["cell_type"] == "markdown":
            context = text
    return answers


def grade_all(autograder: Path, folder: Path, grader: Callable[[Path, Path], Score] = grade,
              progress: Callable[[str], None] = print) -> list[Row]:
    """Grade every ``*.ipynb`` in ``folder`` (sorted by name) with ``grader`` (otter run)."""
    rows = []
    for notebook in sorted(Path(folder).glob("*.ipynb")):
        try:
            row = Row(notebook.name, grader(Path(autograder), notebook))
        except (AssignError, ValueError, KeyError) as err:
            row = Row(notebook.name, None, str(err).strip().splitlines()[0][:300])
        try:
            row.written = written_answers(notebook)
        except (ValueError, KeyError):
            pass
        progress(f"{notebook.name}: {row.score if row.score else 'not graded: ' + row.error}")
        rows.append(row)
    return rows


def _questions(rows: list[Row]) -> list[str]:
    seen: dict[str, None] = {}
    for row in rows:
        for q in row.score.points if row.score else ():
            seen[q] = None
    return list(seen)


def read_written(path: Path) -> dict[tuple[str, str], float]:
    """(file, question) → points from a written-answers sheet the graders filled in (blank: not graded)."""
    with open(path, newline="") as f:
        return {(r["file"], r["question"]): float(r["points"]) for r in csv.DictReader(f) if r["points"].strip()}


def write_csv(rows: list[Row], out: Path, written: dict[tuple[str, str], float] | None = None) -> list[str]:
    """One row per submission: file, total, possible, each question's points and message (+ the written
    questions' points and the total with them, when a filled-in sheet was merged). Returns the header."""
    questions = _questions(rows)
    manual = sorted({q for (_, q) in written or {}})
    header = ["file", "total", "possible", *[c for q in questions for c in (q, f"{q} message")], "error"]
    header += [f"{q} (written)" for q in manual] + (["total with written"] if manual else [])
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        for row in rows:
            s = row.score
            line = [row.file, f"{s.total:g}" if s else "", f"{s.possible:g}" if s else ""]
            for q in questions:
                got = s.points.get(q) if s else None
                line += [f"{got[0]:g}" if got else "", s.messages.get(q, "") if s else ""]
            line.append(row.error)
            marks = [(written or {}).get((row.file, q)) for q in manual]
            line += ["" if m is None else f"{m:g}" for m in marks]
            if manual:
                line.append(f"{(s.total if s else 0) + sum(m or 0 for m in marks):g}")
            writer.writerow(line)
    return header


def write_written_sheet(rows: list[Row], csv_path: Path, md_path: Path) -> None:
    """The written answers, for the graders: a CSV to fill in (``points`` blank) and a Markdown to read."""
    with open(csv_path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["file", "question", "points", "answer"])
        for row in rows:
            for q, answer in row.written.items():
                writer.writerow([row.file, q, "", answer])
    lines = ["# Written answers", "", "Grade each from the rubric in the master; put the points in the CSV's "
             "`points` column, then run `grade-all … --written` on it.", ""]
    for row in rows:
        for q, answer in row.written.items():
            lines += [f"## {row.file} · {q}", "", answer or "_(no answer)_", "", "points: ____", ""]
    Path(md_path).write_text("\n".join(lines))
