"""The graded capstones' commands (``python -m specdec_core.course …``; README, "For instructors").

    assign [--no-run-tests] [--seed N] [--lean] [NB ...]    build dist/assignments/<name>/: the student notebook
                                                            and the Gradescope autograder zip (:mod:`.gradescope`)
    grade ZIP NOTEBOOK [--seed N]                           grade one submission, print its points and messages
    grade-all ZIP FOLDER [--out grades.csv] [--written SHEET] [--seed-per-student]
              [--format tests|canvas] [--roster EXPORT.csv] [--assignment NAME] [--points-possible P]
    gradescope-check ZIP NOTEBOOK [--workdir DIR]           prove the zip in a fresh environment (minutes)
"""

from __future__ import annotations

import argparse
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the course's checkout: requirements.txt, pyproject.toml


def cmd_assign(args: argparse.Namespace) -> int:
    from .assign import ASSIGNMENTS, DIST, AssignError, build, masters
    from .gradescope import GradescopeError, complete, course_wheel, model_wheel

    chosen = [Path(n) for n in args.notebooks] or masters(ASSIGNMENTS)
    missing = [str(p) for p in chosen if not p.is_file()]
    if missing or not chosen:
        print(f"error: no assignment master {', '.join(missing) or f'in {ASSIGNMENTS}/'} (run this from the course's root folder)")
        return 2
    try:
        wheel = None if args.lean else course_wheel(ROOT, DIST / ".wheels")
        model = None if args.lean else model_wheel()
    except GradescopeError as err:
        print(f"error: {err}")
        return 1
    for master in chosen:
        print(f"building {master.name} (runs its tests on the solution; a few minutes)…", flush=True)
        try:
            student, autograder = build(master, DIST / master.stem, run_tests=not args.no_run_tests, seed=args.seed)
        except AssignError as err:
            print(f"error: {err}")
            return 1
        print(f"  hand out  {student}\n  grade with {autograder}")
        if not args.lean:
            sizes = complete(autograder, ROOT, wheel, model)
            inside = ", ".join(f"{Path(n).name} {b / 1e6:.1f} MB" for n, b in sizes.items() if n.endswith(".whl"))
            print(f"  for Gradescope: {sizes['zip'] / 1e6:.1f} MB (Python 3.11, the course's pins; {inside})")
    return 0


def cmd_grade(args: argparse.Namespace) -> int:
    from .assign import AssignError, grade

    for path, what in ((args.autograder, "autograder zip"), (args.submission, "submission notebook")):
        if not Path(path).is_file():
            print(f"error: no {what} at {path} (make assignments builds the autograder zips)")
            return 2
    try:
        score = grade(Path(args.autograder), Path(args.submission), args.seed)
    except AssignError as err:
        print(f"error: {err}")
        return 1
    print(f"{Path(args.submission).name}: {score}")
    for question, message in score.messages.items():
        if message:
            print(f"  {question}: {message}")
    return 0


def cmd_grade_all(args: argparse.Namespace) -> int:
    from .gradebook import (
        assignment_name,
        grade_all,
        read_roster,
        read_written,
        write_canvas,
        write_csv,
        write_written_sheet,
    )

    if not Path(args.autograder).is_file() or not Path(args.folder).is_dir():
        print(f"error: need an autograder zip ({args.autograder}) and a folder of notebooks ({args.folder})")
        return 2
    if not any(Path(args.folder).glob("*.ipynb")):
        print(f"error: no notebooks (*.ipynb) in {args.folder}")
        return 2
    try:
        roster = read_roster(Path(args.roster)) if args.roster else None
    except (OSError, ValueError) as err:
        print(f"error: {err}")
        return 2
    written = read_written(Path(args.written)) if args.written else None
    rows = grade_all(Path(args.autograder), Path(args.folder), seed_per_student=args.seed_per_student)
    out = Path(args.out)
    if args.format == "canvas":
        unmatched = write_canvas(rows, out, args.assignment or assignment_name(Path(args.autograder)), roster,
                                 written, args.points_possible)
        for name in unmatched:
            print(f"warning: no student of {args.roster} matches {name} (its row names the file)")
    else:
        write_csv(rows, out, written)
    sheet = out.with_name(out.stem + "-written")
    if not args.written:
        write_written_sheet(rows, sheet.with_suffix(".csv"), sheet.with_suffix(".md"))
    print(f"wrote {out}" + ("" if args.written else f", {sheet}.csv and {sheet}.md (the written answers to grade)"))
    return 1 if any(r.score is None for r in rows) else 0


def cmd_gradescope_check(args: argparse.Namespace) -> int:
    from .gradescope import GradescopeError
    from .gradescope_check import check

    for path in (args.autograder, args.submission):
        if not Path(path).is_file():
            print(f"error: no {path} (make assignments builds the zips; the solution is beside each zip)")
            return 2
    try:
        score = check(Path(args.autograder), Path(args.submission), Path(args.workdir))
    except GradescopeError as err:
        print(f"error: {err}")
        return 1
    return 0 if score.total == score.possible else 1


def add_parsers(sub) -> None:
    assign = sub.add_parser("assign", help="build the graded assignments (otter assign) into dist/assignments/")
    assign.add_argument("notebooks", nargs="*", help="only these masters (default: assignments/*.ipynb)")
    assign.add_argument("--no-run-tests", action="store_true", help="skip running the tests on the solution")
    assign.add_argument("--seed", type=int, help="otter's seed for every grading with the zip (Gradescope)")
    assign.add_argument("--lean", action="store_true", help="no Gradescope payload (course wheel, model): grade here only")
    assign.set_defaults(func=cmd_assign)
    grade = sub.add_parser("grade", help="grade one submission with otter run and print its points")
    grade.add_argument("autograder", help="the assignment's autograder zip (dist/assignments/<name>/autograder/)")
    grade.add_argument("submission", help="the student's notebook")
    grade.add_argument("--seed", type=int, help="otter's seed: the hidden inputs of this grading")
    grade.set_defaults(func=cmd_grade)
    every = sub.add_parser("grade-all", help="grade every notebook in a folder: a CSV and a sheet of written answers")
    every.add_argument("autograder", help="the assignment's autograder zip")
    every.add_argument("folder", help="a folder of the students' notebooks (*.ipynb)")
    every.add_argument("--out", default="grades.csv", help="the CSV to write (default: grades.csv)")
    every.add_argument("--written", help="a filled-in written-answers sheet to merge into the CSV")
    every.add_argument("--seed-per-student", action="store_true", help="each notebook graded with its own seed")
    every.add_argument("--format", choices=["tests", "canvas"], default="tests",
                       help="tests: a row per submission, per-question points and messages (default); canvas: "
                            "Canvas's gradebook import")
    every.add_argument("--roster", help="canvas: the course's Canvas gradebook export, to fill in the student columns")
    every.add_argument("--assignment", help="canvas: the assignment column (default: the zip's assignment name)")
    every.add_argument("--points-possible", type=float, help="canvas: the Points Possible row (default: autograded)")
    every.set_defaults(func=cmd_grade_all)
    checking = sub.add_parser("gradescope-check", help="prove an autograder zip: a fresh environment from its own "
                              "requirements grades a submission with otter run (minutes)")
    checking.add_argument("autograder", help="a zip built by make assignments")
    checking.add_argument("submission", help="a notebook to grade, e.g. the solution beside the zip")
    checking.add_argument("--workdir", default="dist/gradescope-check", help="the scratch folder (replaced)")
    checking.set_defaults(func=cmd_gradescope_check)
