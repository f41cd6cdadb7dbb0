"""The student bundle: the course as committed, without what would give graded work away.

    make student-release        # → dist/student-release/

A public clone of the course repository holds everything an instructor needs, which is also everything
a student should not see: the capstones' masters (``assignments/``: solutions, hidden tests, rubrics),
the tests that grade them and the table of what each wrong answer scores (``tests/test_assignments*.py``)
and the answer keys of the lessons' questions (``solutions/answer-keys.md``). :func:`student_release`
writes the committed tree (``git archive HEAD``: nothing uncommitted, nothing ignored) without them.
What the bundle still holds, by design: the lessons, the exercises *and* their solution notebooks
(``solutions/NN_*.ipynb``: self-check practice, never graded) and the grading helpers the handed-out
notebooks' public tests call (``specdec_core/course/grading.py``: tripwires, counters, χ² helpers — no
hidden input; those are drawn from ``SPECDEC_GRADING_SEED`` at grading time).
"""

from __future__ import annotations

import fnmatch
import io
import shutil
import subprocess
import tarfile
from pathlib import Path

LEFT_OUT = ("assignments/*", "tests/test_assignments*.py", "solutions/answer-keys.md", "dist/*")


class ReleaseError(RuntimeError):
    """Not a git checkout, or git failed."""


def left_out(path: str) -> bool:
    """Whether a repository path stays out of the student bundle (:data:`LEFT_OUT`)."""
    return any(fnmatch.fnmatch(path, pattern) for pattern in LEFT_OUT)


def student_release(root: Path, out: Path) -> list[str]:
    """Write the committed tree of the git checkout ``root`` into ``out`` (replaced), leaving out
    :data:`LEFT_OUT`; returns the paths written."""
    done = subprocess.run(["git", "-C", str(root), "archive", "--format=tar", "HEAD"], capture_output=True)
    if done.returncode != 0:
        raise ReleaseError(f"git archive failed in {root}: {done.stderr.decode(errors='replace').strip()}")
    out = Path(out)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    written = []
    with tarfile.open(fileobj=io.BytesIO(done.stdout)) as tar:
        members = [m for m in tar.getmembers() if m.isfile() and not left_out(m.name)]  # folders come with their files
        tar.extractall(out, members=members, filter="data")
        written = sorted(m.name for m in members if m.isfile())
    return written
