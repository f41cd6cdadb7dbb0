"""Exercise notebooks generated from solution notebooks: one source, stubs instead of answers.

A solution notebook (``solutions/NN_topic.ipynb``) marks each answer inside a code cell::

    def sample_step(logits, temperature):
        ### BEGIN SOLUTION
        ...the answer...
        ### END SOLUTION

and follows it with a *check cell* (``# NBVAL_CHECK_OUTPUT`` and one call such as
``check_sample_step(sample_step)``). :func:`make_exercise` turns it into the student's notebook:

- every region from ``### BEGIN SOLUTION`` to ``### END SOLUTION`` (markers included) becomes
  ``raise NotImplementedError`` at the marker's indentation (``YOUR ANSWER HERE`` in markdown);
- cells compared by nbval (``NBVAL_CHECK_OUTPUT``) keep their stored, expected ``✓`` output, and a
  copy of it in ``metadata.specdec.expected_outputs`` (so ``check`` can compare against it even
  after the student has saved a failing run); all other outputs are cleared;
- every cell gets nbgrader (schema 3) metadata: answer cells ``solution``, check cells ``grade``
  (1 point, locked), the rest locked read-only — :func:`tag_notebook` writes the same metadata into
  the solution, so ``nbgrader generate_assignment`` works on ``solutions/`` too;
- the notebook stores a hash of its cells' sources (``metadata.specdec.generated_hash``). When a
  later run finds an exercise whose sources no longer match that hash, the student changed it:
  :func:`write_exercise` refuses to overwrite it unless forced, and then keeps a backup.

Output is deterministic (same solution → byte-identical exercise) and written atomically.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import nbformat
from nbformat import NotebookNode

from ..files import atomic_write

BEGIN = "### BEGIN SOLUTION"
END = "### END SOLUTION"
CODE_STUB = "raise NotImplementedError"
TEXT_STUB = "YOUR ANSWER HERE"
CHECK_MARKER = "NBVAL_CHECK_OUTPUT"
NBGRADER_SCHEMA = 3
_CHECKER_CALL = re.compile(r"^\s*(check_\w+)\s*\(")
_DEFINITION = re.compile(r"^\s*(?:async\s+)?(?:def|class)\s+(\w+)", re.MULTILINE)
_CELL_ID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


class ExerciseError(ValueError):
    """A solution notebook cannot be turned into an exercise (the message says where and why)."""


# ----------------------------------------------------------------------------- reading a cell


def strip_solutions(source: str, cell_type: str = "code") -> tuple[str, int]:
    """Replace each ``### BEGIN SOLUTION`` … ``### END SOLUTION`` region by the stub.

    Returns ``(new_source, number_of_regions)``. Raises :class:`ExerciseError` for unbalanced or
    nested markers, and for a line that mentions a marker without being exactly one (it would leak).
    """
    stub = CODE_STUB if cell_type == "code" else TEXT_STUB
    out: list[str] = []
    inside, regions = False, 0
    for number, line in enumerate(source.split("\n"), start=1):
        marker = line.strip()
        if marker == BEGIN:
            if inside:
                raise ExerciseError(f"line {number}: a second `{BEGIN}` before the `{END}` of the first")
            inside, regions = True, regions + 1
            out.append(line[: len(line) - len(line.lstrip())] + stub)  # the stub takes the marker's indentation
        elif marker == END:
            if not inside:
                raise ExerciseError(f"line {number}: `{END}` without a `{BEGIN}` before it")
            inside = False
        elif "BEGIN SOLUTION" in line or "END SOLUTION" in line:
            raise ExerciseError(
                f"line {number}: {marker!r} mentions a solution marker but is not exactly `{BEGIN}` or `{END}` "
                "on a line of its own; fix the marker (or reword the text)"
            )
        elif not inside:
            out.append(line)
    if inside:
        raise ExerciseError(f"`{BEGIN}` without a matching `{END}`")
    return "\n".join(out), regions


def is_compared(cell: NotebookNode) -> bool:
    """True for a code cell nbval compares with its stored output (``# NBVAL_CHECK_OUTPUT``)."""
    if cell.cell_type != "code":
        return False
    if "nbval-check-output" in cell.get("metadata", {}).get("tags", []):
        return True
    # the same rule as nbval: a comment line whose text is exactly the marker
    return any(
        line.strip().startswith("#") and line.strip().lstrip("#").strip() == CHECK_MARKER
        for line in cell.source.splitlines()
    )


def checker_call(cell: NotebookNode) -> str | None:
    """The line calling a checker (``check_sample_step(sample_step)``) of a check cell, else None."""
    if not is_compared(cell):
        return None
    for line in cell.source.splitlines():
        if _CHECKER_CALL.match(line):
            return line.strip()
    return None


def cell_role(cell: NotebookNode) -> str:
    """``answer`` (has solution markers), ``check`` (compared and calls a checker), ``compared``, or ``plain``."""
    if cell.cell_type in ("code", "markdown") and BEGIN in cell.source:
        return "answer"
    if checker_call(cell) is not None:
        return "check"
    return "compared" if is_compared(cell) else "plain"


# ----------------------------------------------------------------------------- metadata


def ensure_cell_ids(nb: NotebookNode, name: str) -> None:
    """Give every cell a valid id, derived from the file name and position (never random)."""
    for index, cell in enumerate(nb.cells):
        if not _CELL_ID.match(str(cell.get("id", ""))):
            cell["id"] = hashlib.sha1(f"{name}:{index}".encode()).hexdigest()[:8]
    nb.nbformat, nb.nbformat_minor = 4, max(nb.get("nbformat_minor", 5), 5)  # ids need nbformat 4.5


def _grade_id_base(cell: NotebookNode, role: str) -> str:
    if role == "check":
        return _CHECKER_CALL.match(checker_call(cell)).group(1)
    if role == "answer" and (found := _DEFINITION.search(cell.source)):
        return found.group(1)
    return f"{'answer' if role == 'answer' else 'cell'}-{cell.id}"


def nbgrader_metadata(nb: NotebookNode) -> list[dict]:
    """nbgrader (schema 3) cell metadata for each cell of a solution notebook, in order.

    Answer cells are solution cells (markdown answers are also manually graded, as nbgrader
    requires), check cells are 1-point autograded test cells, everything else is read-only.
    ``grade_id`` is unique: the answer's function name, the checker's name, or ``cell-<id>``.
    """
    metadata, seen = [], set()
    for cell in nb.cells:
        role = cell_role(cell)
        base = re.sub(r"[^A-Za-z0-9_-]", "-", _grade_id_base(cell, role))
        grade_id, n = base, 1
        while grade_id in seen:
            n += 1
            grade_id = f"{base}-{n}"
        seen.add(grade_id)
        meta = {"grade_id": grade_id, "schema_version": NBGRADER_SCHEMA, "task": False}
        if role == "answer":
            graded = cell.cell_type == "markdown"
            meta.update(solution=True, grade=graded, locked=False, **({"points": 1} if graded else {}))
        elif role == "check":
            meta.update(solution=False, grade=True, locked=True, points=1)
        else:
            meta.update(solution=False, grade=False, locked=True)
        metadata.append(meta)
    return metadata


def tag_notebook(nb: NotebookNode, name: str) -> bool:
    """Write nbgrader metadata (and missing cell ids) into a solution notebook; True if it changed."""
    before = copy.deepcopy(nb)
    ensure_cell_ids(nb, name)
    for cell, meta in zip(nb.cells, nbgrader_metadata(nb)):
        cell.metadata["nbgrader"] = meta
    return nb != before


# ----------------------------------------------------------------------------- the exercise


def content_hash(nb: NotebookNode) -> str:
    """SHA-256 over the cells' types and sources: what a student's edit changes (outputs don't count)."""
    cells = [[cell.cell_type, cell.source] for cell in nb.cells]
    return "sha256:" + hashlib.sha256(json.dumps(cells, ensure_ascii=False).encode()).hexdigest()


def _expected_outputs(cell: NotebookNode, where: str) -> list:
    """The outputs a compared cell must reproduce (stderr dropped: it is never compared)."""
    if cell.execution_count is None or (cell_role(cell) == "check" and not cell.outputs):
        raise ExerciseError(
            f"{where} is compared by nbval but has no stored output: execute the solution notebook first "
            "(make notebooks NB=<the solution>)"
        )
    outputs = [out for out in cell.outputs if not (out.output_type == "stream" and out.name == "stderr")]
    text = "".join(out.get("text", "") for out in outputs if out.output_type == "stream")
    crossed = any(line.startswith("✗") for line in text.splitlines())
    if any(out.output_type == "error" for out in outputs) or (cell_role(cell) == "check" and crossed):
        raise ExerciseError(f"{where} failed when the solution was last run: fix the solution and execute it again")
    return outputs


def make_exercise(solution: NotebookNode, name: str) -> NotebookNode:
    """The exercise notebook for a solution notebook (which is not modified). ``name`` is its file name."""
    nb = copy.deepcopy(solution)
    ensure_cell_ids(nb, name)
    grading = nbgrader_metadata(nb)
    for number, (cell, meta) in enumerate(zip(nb.cells, grading), start=1):
        where = f"{name}, cell {number}"
        role = cell_role(cell)
        cell.metadata.pop("execution", None)  # nbclient's timestamps
        cell.metadata.pop("specdec", None)
        cell.metadata["nbgrader"] = meta
        try:  # every cell, so that a malformed marker anywhere is an error, not a leak
            stripped, regions = strip_solutions(cell.source, cell.cell_type)
        except ExerciseError as err:
            raise ExerciseError(f"{where}: {err}") from None
        if regions and role != "answer":
            raise ExerciseError(f"{where}: solution markers in a {cell.cell_type} cell; use a code or markdown cell")
        if role == "answer":
            if is_compared(cell):
                raise ExerciseError(
                    f"{where}: an answer cell cannot carry `# {CHECK_MARKER}`; put the check in its own cell"
                )
            cell.source = stripped
        if cell.cell_type != "code":
            continue
        if role in ("check", "compared"):
            cell.outputs = _expected_outputs(cell, where)
            cell.metadata["specdec"] = {"expected_outputs": copy.deepcopy(cell.outputs)}
            if role == "check":  # JupyterLab keeps the student from editing or deleting a check
                cell.metadata.update(editable=False, deletable=False)
        else:
            cell.outputs, cell.execution_count = [], None
    nb.metadata.pop("widgets", None)  # saved widget state belongs to cleared outputs
    nb.metadata["specdec"] = {
        "generated_from": name,
        "generated_hash": content_hash(nb),
        "note": "Generated from solutions/ by `make exercises`. Fill in the `raise NotImplementedError` "
        "parts; `make check-exercise NB=<this file>` checks them.",
    }
    return nb


def dumps(nb: NotebookNode) -> str:
    """Stable JSON (sorted keys, one-space indent, trailing newline): equal notebooks, equal bytes."""
    text = nbformat.writes(nb, version=4)
    return text if text.endswith("\n") else text + "\n"


# ----------------------------------------------------------------------------- files


def backup_path(path: Path, now: datetime | None = None) -> Path:
    """``NN_name.ipynb.bak-YYYYmmdd-HHMMSS`` next to ``path`` (``.N`` appended if that exists)."""
    stamp = (now or datetime.now()).strftime("%Y%m%d-%H%M%S")
    candidate = path.with_name(f"{path.name}.bak-{stamp}")
    n = 1
    while candidate.exists():
        candidate = path.with_name(f"{path.name}.bak-{stamp}.{n}")
        n += 1
    return candidate


def student_changed(path: Path) -> bool:
    """True when the exercise at ``path`` is not what the generator last wrote (sources edited,
    cells added or removed, stored hash missing, or not readable as a notebook)."""
    try:
        nb = nbformat.read(path, as_version=4)
    except Exception:  # corrupt JSON, not a notebook: not ours to overwrite silently
        return True
    stored = nb.metadata.get("specdec", {}).get("generated_hash")
    return stored is None or stored != content_hash(nb)


@dataclass
class Outcome:
    """What :func:`write_exercise` did: ``written``, ``unchanged`` or ``refused`` (``backup`` when forced)."""

    exercise: Path
    action: str
    backup: Path | None = None


def write_exercise(solution_path: Path, exercise_path: Path, force: bool = False) -> Outcome:
    """Generate one exercise file from one solution file, respecting a student's changes."""
    solution_path, exercise_path = Path(solution_path), Path(exercise_path)
    try:
        solution = nbformat.read(solution_path, as_version=4)
    except Exception as err:
        raise ExerciseError(f"{solution_path}: not a readable notebook ({err})") from None
    text = dumps(make_exercise(solution, solution_path.name))
    backup = None
    if exercise_path.exists():
        if exercise_path.read_text(encoding="utf-8") == text:
            return Outcome(exercise_path, "unchanged")
        if student_changed(exercise_path):
            if not force:
                return Outcome(exercise_path, "refused")
            backup = backup_path(exercise_path)
            atomic_write(backup, exercise_path.read_text(encoding="utf-8", errors="surrogateescape"))
    exercise_path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(exercise_path, text)
    return Outcome(exercise_path, "written", backup)


def notebooks_in(folder: Path) -> list[Path]:
    """``NN_*.ipynb`` files of a folder, sorted (hidden and scratch files excluded)."""
    return sorted(p for p in Path(folder).glob("*.ipynb") if not p.name.startswith("."))


def tag_file(path: Path) -> bool:
    """Add nbgrader metadata to one solution file in place; True if the file changed."""
    path = Path(path)
    nb = nbformat.read(path, as_version=4)
    if not tag_notebook(nb, path.name):
        return False
    atomic_write(path, dumps(nb))
    return True
