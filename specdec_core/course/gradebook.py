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

``--seed-per-student`` grades each notebook with otter's seed set to :func:`student_seed` of its file
name (a ``seed`` column records it): every student gets hidden inputs of their own, drawn together with
``$SPECDEC_GRADING_SEED``. ``--format canvas`` writes the CSV Canvas's gradebook imports instead
(:func:`write_canvas`).
"""

from __future__ import annotations

import csv
import hashlib
import json
import re
import zipfile
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
    seed: int | None = None  # otter's seed it was graded with (--seed-per-student)


def student_seed(file_name: str) -> int:
    """A submission's own grading seed, from its file name (stable: a regrade draws the same inputs)."""
    return int.from_bytes(hashlib.sha256(Path(file_name).stem.encode()).digest()[:4], "big") % 2**31


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


def grade_all(autograder: Path, folder: Path, grader: Callable[..., Score] | None = None,
              progress: Callable[[str], None] = print, seed_per_student: bool = False) -> list[Row]:
    """Grade every ``*.ipynb`` in ``folder`` (sorted by name) with ``grader`` (default :func:`.assign.grade`:
    otter run), each with its :func:`student_seed` when ``seed_per_student``."""
    grader = grader or grade
    rows = []
    for notebook in sorted(Path(folder).glob("*.ipynb")):
        seed = student_seed(notebook.name) if seed_per_student else None
        try:
            score = grader(Path(autograder), notebook, seed) if seed is not None else grader(Path(autograder), notebook)
            row = Row(notebook.name, score, seed=seed)
        except (AssignError, ValueError, KeyError) as err:
            row = Row(notebook.name, None, str(err).strip().splitlines()[0][:300], seed=seed)
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
    seeded = any(row.seed is not None for row in rows)
    header = ["file", "total", "possible", *(["seed"] if seeded else []),
              *[c for q in questions for c in (q, f"{q} message")], "error"]
    header += [f"{q} (written)" for q in manual] + (["total with written"] if manual else [])
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        for row in rows:
            s = row.score
            line = [row.file, f"{s.total:g}" if s else "", f"{s.possible:g}" if s else ""]
            line += [str(row.seed if row.seed is not None else "")] if seeded else []
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


# Canvas's gradebook import (Grades → Import): a CSV whose first columns name the student — Student (the
# sortable name), ID (Canvas's user id), SIS User ID, SIS Login ID, Section; one of Student, ID or SIS User ID
# is enough to match a student — then one column per assignment (its name; "Name (id)" as Canvas exports it
# matches an existing one, a new name creates an assignment) holding points. Canvas's own export has a
# "Points Possible" row under the header; a blank cell changes nothing. Source: Ohio State's CarmenCanvas
# guide "Import CSV File for Carmen Grades" (teaching.resources.osu.edu) and Canvas gradebook exports.
CANVAS_COLUMNS = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
POINTS_POSSIBLE = "    Points Possible"  # as Canvas writes it: indented, in the Student column


def assignment_name(autograder: Path) -> str:
    """The assignment's name in an autograder zip (otter's ``assignment_name``), else the zip's stem."""
    try:
        with zipfile.ZipFile(autograder) as zf:
            return json.loads(zf.read("otter_config.json")).get("assignment_name") or Path(autograder).stem
    except (OSError, KeyError, ValueError, zipfile.BadZipFile):
        return Path(autograder).stem


def read_roster(path: Path) -> list[dict[str, str]]:
    """The students of a Canvas gradebook export (Grades → Export): its first five columns, without the
    "Points Possible" row."""
    with open(path, newline="", encoding="utf-8-sig") as f:
        reader = csv.DictReader(f)
        missing = [c for c in CANVAS_COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{path} is not a Canvas gradebook export: no column {', '.join(missing)}")
        rows = [{c: (r[c] or "").strip() for c in CANVAS_COLUMNS} for r in reader]
    return [r for r in rows if r["Student"] and r["Student"] != POINTS_POSSIBLE.strip()]


def match(file_name: str, roster: list[dict[str, str]]) -> dict[str, str] | None:
    """The roster row a submission's file name belongs to: Canvas's "Download Submissions" names a file
    ``name_[late_]<ID>_<submission id>_<file>``; a file may also be named after an ID, SIS User ID or SIS
    Login ID."""
    stem = Path(file_name).stem.lower()
    canvas = re.search(r"_(?:late_)?(\d+)_\d+(?:_|$)", stem)
    for row in roster:
        if (canvas and row["ID"] == canvas.group(1)) or stem in {row[c].lower() for c in CANVAS_COLUMNS[1:4]} - {""}:
            return row
    return None


def write_canvas(rows: list[Row], out: Path, assignment: str, roster: list[dict[str, str]] | None = None,
                 written: dict[tuple[str, str], float] | None = None, points_possible: float | None = None) -> list[str]:
    """The grades as Canvas imports them: the five student columns, then ``assignment`` with each
    submission's autograded total (plus the written points of a merged sheet); the "Points Possible" row
    says ``points_possible`` (default: the autograded points). A submission that could not be graded has a
    blank cell. Students come from ``roster`` (:func:`read_roster`) by :func:`match`; without a roster, or
    unmatched, the Student column holds the file's name. Returns the files no roster row matched."""
    possible = points_possible if points_possible is not None else max(
        (r.score.possible for r in rows if r.score), default=0.0)
    unmatched = []
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow([*CANVAS_COLUMNS, assignment])
        writer.writerow([POINTS_POSSIBLE, "", "", "", "", f"{possible:g}"])
        for row in rows:
            student = match(row.file, roster) if roster else None
            if roster and student is None:
                unmatched.append(row.file)
            student = student or {"Student": Path(row.file).stem, "ID": "", "SIS User ID": "", "SIS Login ID": "", "Section": ""}
            marks = sum(m for (file, _), m in (written or {}).items() if file == row.file)
            writer.writerow([student[c] for c in CANVAS_COLUMNS] + [f"{row.score.total + marks:g}" if row.score else ""])
    return unmatched
