"""The course's exercise commands (``make exercises`` and ``make check-exercise`` call them).

    python -m specdec_core.course generate [--force] [--solutions solutions] [--exercises exercises] [NB ...]
    python -m specdec_core.course tag [--solutions solutions] [NB ...]
    python -m specdec_core.course check exercises/03_speculative_sampling.ipynb [--full] [-v]

    python -m specdec_core.course assign [--no-run-tests] [--seed N] [--lean] [NB ...]
    python -m specdec_core.course grade AUTOGRADER.zip SUBMISSION.ipynb [--seed N]
    python -m specdec_core.course grade-all AUTOGRADER.zip SUBMISSIONS/ --out grades.csv [--written SHEET.csv]
                                  [--seed-per-student] [--format canvas --roster EXPORT.csv]
    python -m specdec_core.course gradescope-check AUTOGRADER.zip SUBMISSION.ipynb
    python -m specdec_core.course student-release [--out dist/student-release]

``generate`` writes ``exercises/NN_*.ipynb`` from ``solutions/NN_*.ipynb`` (never over a notebook a
student changed, unless ``--force``, which keeps a backup); ``tag`` writes nbgrader metadata into
the solutions; ``check`` runs one notebook under nbval and prints which checks pass.
``assign`` builds the graded assignments (``assignments/*.ipynb``, otter-grader masters) into
``dist/assignments/``; ``grade`` grades one submission with the real grader and prints its points;
``grade-all`` grades a folder into a CSV and a sheet of written answers (:mod:`.gradebook`);
``gradescope-check`` proves a zip in a fresh environment (:mod:`.gradescope_check`; all four: :mod:`.grading_cli`);
``student-release`` writes the course without what students must not see (:mod:`.release`).
Exit status: 0 all good, 1 a check failed or a notebook was not overwritten, 2 bad input.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import nbformat

from .exercises import ExerciseError, notebooks_in, tag_file, tag_notebook, write_exercise
from .grading_cli import add_parsers
from .nbval_run import RunReport, run_notebook


def _folder(path: str, what: str) -> Path | None:
    folder = Path(path)
    if folder.is_dir():
        return folder
    print(
        f"error: no {what} folder at {folder.resolve()}.\n"
        f"Run this from the course's root folder (where the Makefile is), or pass --{what} DIR."
    )
    return None


def _chosen(folder: Path, names: list[str]) -> list[Path] | None:
    """The solution notebooks to work on: the ones named, or all of ``folder``."""
    if not names:
        return notebooks_in(folder)
    paths = [Path(n) if Path(n).exists() else folder / Path(n).name for n in names]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        print(f"error: no such solution notebook: {', '.join(missing)}")
        return None
    return paths


def _untagged(path: Path) -> bool:
    return tag_notebook(nbformat.read(path, as_version=4), path.name)


def cmd_generate(args: argparse.Namespace) -> int:
    solutions = _folder(args.solutions, "solutions")
    if solutions is None:
        return 2
    chosen = _chosen(solutions, args.notebooks)
    if chosen is None:
        return 2
    if not chosen:
        print(f"No solution notebooks in {solutions}/ — nothing to generate.")
        return 0
    exercises = Path(args.exercises)
    try:
        outcomes = [write_exercise(p, exercises / p.name, args.force) for p in chosen]
    except ExerciseError as err:
        print(f"error: {err}")
        return 2
    untagged = [p for p in chosen if _untagged(p)]
    if untagged:
        print(
            "note: without nbgrader metadata (needed only for nbgrader): "
            + ", ".join(p.name for p in untagged)
            + " — run `python -m specdec_core.course tag`"
        )
    refused = []
    for outcome in outcomes:
        if outcome.action == "refused":
            refused.append(outcome.exercise)
            print(f"kept      {outcome.exercise}  (it has your changes: not overwritten)")
        elif outcome.action == "unchanged":
            print(f"unchanged {outcome.exercise}")
        else:
            saved = f"  (your version saved as {outcome.backup.name})" if outcome.backup else ""
            print(f"wrote     {outcome.exercise}{saved}")
    if refused:
        print(
            f"\n{len(refused)} exercise notebook(s) differ from what the generator last wrote, so they were left alone:\n"
            + "".join(f"  {path}\n" for path in refused)
            + "To regenerate them anyway (your version is kept as NAME.ipynb.bak-<date>-<time>), run\n"
            "  make exercises FORCE=1      or      python -m specdec_core.course generate --force"
        )
        return 1
    return 0


def cmd_tag(args: argparse.Namespace) -> int:
    solutions = _folder(args.solutions, "solutions")
    if solutions is None:
        return 2
    chosen = _chosen(solutions, args.notebooks)
    if chosen is None:
        return 2
    for path in chosen:
        print(f"{'tagged   ' if tag_file(path) else 'unchanged'} {path}")
    return 0


def print_report(path: Path, report: RunReport) -> None:
    """The student's table: one row per check cell, then any other cell that failed."""
    checks, others = report.checks, [c for c in report.failed if c.role != "check"]
    for cell in checks + others:  # keep the table narrow: a long first line is cut
        cell.label = cell.label if len(cell.label) <= 48 else cell.label[:47] + "…"
    width = max([len(c.label) for c in checks + others] + [5])
    if checks:
        print(f"\nChecks in {path}:\n")
        print(f"  {'cell':>4}  {'check':<{width}}  result")
        for cell in checks:
            mark = {"passed": "✓ passed", "failed": "✗ failed"}.get(cell.outcome, f"· {cell.outcome}")
            print(f"  {cell.number:>4}  {cell.label:<{width}}  {mark}")
            for line in cell.crosses or ([cell.reason] if cell.reason else []):
                print(f"  {'':>4}    {line}")
    else:
        print(f"\n{path} has no check cells (`# NBVAL_CHECK_OUTPUT` cells calling a check_… function).")
    if others:
        print("\nOther cells that failed:")
        for cell in others:
            print(f"  {cell.number:>4}  {cell.label:<{width}}  ✗ {cell.reason}")
    passed = sum(c.outcome == "passed" for c in checks)
    print(f"\n{passed} of {len(checks)} checks passed.")


def cmd_check(args: argparse.Namespace) -> int:
    path = Path(args.notebook)
    if not path.is_file():
        print(f"error: there is no notebook {path}" + (" (that is a folder)." if path.is_dir() else "."))
        folder = path.parent if path.parent.is_dir() else Path("exercises")
        found = notebooks_in(folder) if folder.is_dir() else []
        if found:
            print(f"Notebooks in {folder}/:\n" + "".join(f"  {p}\n" for p in found), end="")
        print("usage: make check-exercise NB=exercises/NN_name.ipynb")
        return 2
    quick = not args.full
    mode = "SPECDEC_QUICK=1, heavy cells shrunk; --full runs them in full" if quick else "full run"
    print(f"Running every cell of {path} under nbval ({mode}). This can take a minute…", flush=True)
    try:
        report = run_notebook(path, quick=quick)
    except ValueError as err:
        print(f"error: {err}")
        return 2
    if args.verbose or not any(c.outcome != "not run" for c in report.cells):
        print(report.log[-6000:])
    if report.cells and all(c.outcome == "not run" for c in report.cells):
        print("error: nbval did not run any cell (see its output above).")
        return 2
    print_report(path, report)
    if report.failed:
        print("Fix what failed (the hints above; run the notebook in Jupyter to see more), then run this again.")
        return 1
    if report.returncode not in (0, 5):  # 5: no code cells at all
        print(report.log[-3000:])
        return 1
    print("All good.")
    return 0


def cmd_student_release(args: argparse.Namespace) -> int:
    from .release import ReleaseError, student_release

    try:
        files = student_release(Path(args.root), Path(args.out))
    except ReleaseError as err:
        print(f"error: {err}")
        return 2
    print(f"wrote {len(files)} files to {args.out} (no assignments/, assignment tests or answer keys)")
    return 0


def cmd_runtimes(args: argparse.Namespace) -> int:
    from .runtimes import lesson_minutes, write_all

    root = Path(args.root)
    minutes = write_all(root) if args.write else lesson_minutes(root)
    for name, m in minutes.items():
        print(f"{name:45s} {m:5.1f} min")
    print("written into the README and the lessons' Run time lines" if args.write else "(--write renders them)")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m specdec_core.course", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    gen = sub.add_parser("generate", help="write exercises/ from solutions/")
    gen.add_argument("notebooks", nargs="*", help="only these solution notebooks (default: all)")
    gen.add_argument("--force", action="store_true", help="overwrite exercises you changed (a backup is kept)")
    gen.add_argument("--solutions", default="solutions", help="folder of solution notebooks (default: solutions)")
    gen.add_argument("--exercises", default="exercises", help="folder to write exercises to (default: exercises)")
    gen.set_defaults(func=cmd_generate)
    tag = sub.add_parser("tag", help="add nbgrader cell metadata to the solution notebooks (idempotent)")
    tag.add_argument("notebooks", nargs="*", help="only these solution notebooks (default: all)")
    tag.add_argument("--solutions", default="solutions", help="folder of solution notebooks (default: solutions)")
    tag.set_defaults(func=cmd_tag)
    check = sub.add_parser("check", help="run one notebook's checks and print which pass")
    check.add_argument("notebook", help="e.g. exercises/03_speculative_sampling.ipynb")
    check.add_argument("--full", action="store_true", help="do not set SPECDEC_QUICK=1 (slower, same checks)")
    check.add_argument("-v", "--verbose", action="store_true", help="also print nbval's own output")
    check.set_defaults(func=cmd_check)
    add_parsers(sub)  # assign, grade, grade-all, gradescope-check (.grading_cli)
    release = sub.add_parser("student-release", help="write the course without assignments, their tests and answer keys")
    release.add_argument("--out", default="dist/student-release", help="where (replaced; default: dist/student-release)")
    release.add_argument("--root", default=".", help="the course's git checkout (default: here)")
    release.set_defaults(func=cmd_student_release)
    runtimes = sub.add_parser("runtimes", help="each lesson's run time in its stored run (--write: into the README "
                              "and the lessons' Run time lines)")
    runtimes.add_argument("--write", action="store_true", help="render them where people read them")
    runtimes.add_argument("--root", default=".", help="the course's folder (default: here)")
    runtimes.set_defaults(func=cmd_runtimes)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
