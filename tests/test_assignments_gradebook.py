"""Grades that reach Canvas, and one seed per student (issue 33, items 2 and 3), with scores made by hand
(``tests/test_assignments.py`` grades a folder with the real grader).

Canvas's gradebook import reads a CSV whose first columns name the student — Student, ID, SIS User ID,
SIS Login ID, Section — then one column per assignment with points; its own export puts a
"Points Possible" row under the header (``specdec_core/course/gradebook.py`` cites the guide)."""

from __future__ import annotations

import csv
import json
import zipfile
from pathlib import Path

from specdec_core.course.assign import Score
from specdec_core.course.gradebook import (
    CANVAS_COLUMNS,
    Row,
    assignment_name,
    grade_all,
    match,
    read_roster,
    student_seed,
    write_canvas,
    write_csv,
)

# a Canvas gradebook export, as Grades → Export writes it (columns after Section are other assignments)
EXPORT = '''Student,ID,SIS User ID,SIS Login ID,Section,Quiz 1 (101),Current Score
    Points Possible,,,,,10,
"Lopez, Ana",2041,S1001,alopez,DEC-01,9,90
"Smith, Jane",2042,S1002,jsmith,DEC-01,7,70
"Student, Test",2099,,test_student,DEC-01,,
'''


def _rows() -> list[Row]:
    return [Row("lopezana_2041_7765_capstone.ipynb", Score({"q1": (3, 3), "q2": (2, 2)})),
            Row("jsmith.ipynb", Score({"q1": (1.5, 3), "q2": (2, 2)})),
            Row("someone.ipynb", Score({"q1": (0, 3), "q2": (0, 2)})),
            Row("broken.ipynb", None, "otter run failed")]


def test_the_canvas_csv_has_canvass_columns_a_points_possible_row_and_the_points(tmp_path):
    (tmp_path / "export.csv").write_text(EXPORT)
    roster = read_roster(tmp_path / "export.csv")
    assert [r["Student"] for r in roster] == ["Lopez, Ana", "Smith, Jane", "Student, Test"]  # no Points Possible row
    assert match("lopezana_late_2041_7765_capstone.ipynb", roster)["SIS Login ID"] == "alopez"  # Canvas's download name
    assert match("JSmith.ipynb", roster)["ID"] == "2042" and match("S1001.ipynb", roster)["ID"] == "2041"
    assert match("someone.ipynb", roster) is None
    unmatched = write_canvas(_rows(), tmp_path / "canvas.csv", "Capstone 2 (5678)", roster)
    assert unmatched == ["someone.ipynb", "broken.ipynb"]
    with open(tmp_path / "canvas.csv", newline="") as f:
        lines = list(csv.reader(f))
    assert lines[0] == [*CANVAS_COLUMNS, "Capstone 2 (5678)"] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section",
                                                                   "Capstone 2 (5678)"]
    assert lines[1] == ["    Points Possible", "", "", "", "", "5"]
    assert lines[2:] == [["Lopez, Ana", "2041", "S1001", "alopez", "DEC-01", "5"],
                         ["Smith, Jane", "2042", "S1002", "jsmith", "DEC-01", "3.5"],
                         ["someone", "", "", "", "", "0"],
                         ["broken", "", "", "", "", ""]]  # a blank cell: Canvas changes nothing


def test_the_canvas_csv_adds_the_written_points_and_says_the_points_possible(tmp_path):
    written = {("jsmith.ipynb", "q5"): 3.5}
    write_canvas(_rows()[:2], tmp_path / "canvas.csv", "Capstone 1", written=written, points_possible=9)
    lines = (tmp_path / "canvas.csv").read_text().splitlines()
    assert lines[1] == "    Points Possible,,,,,9"
    assert lines[2:] == ["lopezana_2041_7765_capstone,,,,,5", "jsmith,,,,,7"]  # no roster: the file's name


def test_a_roster_that_is_not_a_canvas_export_is_refused(tmp_path):
    (tmp_path / "other.csv").write_text("name,email\nAna,a@x\n")
    try:
        read_roster(tmp_path / "other.csv")
    except ValueError as err:
        assert "not a Canvas gradebook export" in str(err)
    else:
        raise AssertionError("accepted a file without Canvas's columns")


def test_the_assignment_column_defaults_to_the_zips_assignment_name(tmp_path):
    with zipfile.ZipFile(tmp_path / "a.zip", "w") as zf:
        zf.writestr("otter_config.json", json.dumps({"assignment_name": "02_measure_and_explain"}))
    assert assignment_name(tmp_path / "a.zip") == "02_measure_and_explain"
    assert assignment_name(tmp_path / "missing.zip") == "missing"


def test_grade_all_gives_each_student_a_seed_of_their_own_and_records_it(tmp_path):
    for name in ("ana.ipynb", "ben.ipynb"):
        (tmp_path / name).write_text(json.dumps({"cells": [], "metadata": {}}))
    calls = []

    def grader(autograder, notebook, seed=None):
        calls.append((notebook.name, seed))
        return Score({"q1": (1, 1)})

    rows = grade_all(tmp_path / "a.zip", tmp_path, grader=grader, progress=lambda _: None, seed_per_student=True)
    assert calls == [("ana.ipynb", student_seed("ana.ipynb")), ("ben.ipynb", student_seed("ben.ipynb"))]
    assert student_seed("ana.ipynb") != student_seed("ben.ipynb") and student_seed("ana.ipynb") == student_seed("x/ana.ipynb")
    header = write_csv(rows, tmp_path / "grades.csv")
    assert header[:4] == ["file", "total", "possible", "seed"]
    assert (tmp_path / "grades.csv").read_text().splitlines()[1] == f"ana.ipynb,1,1,{student_seed('ana.ipynb')},1,,"
    calls.clear()
    grade_all(tmp_path / "a.zip", tmp_path, grader=lambda a, n: calls.append(n.name) or Score({}), progress=lambda _: None)
    assert calls == ["ana.ipynb", "ben.ipynb"]  # without seeds, the grader is called as before


def test_grade_all_from_the_command_line_writes_the_canvas_csv(tmp_path, monkeypatch, capsys):
    from specdec_core.course import gradebook
    from specdec_core.course.__main__ import main

    (tmp_path / "subs").mkdir()
    for name in ("jsmith.ipynb", "nobody.ipynb"):
        (tmp_path / "subs" / name).write_text(json.dumps({"cells": [], "metadata": {}}))
    (tmp_path / "export.csv").write_text(EXPORT)
    with zipfile.ZipFile(tmp_path / "ag.zip", "w") as zf:
        zf.writestr("otter_config.json", json.dumps({"assignment_name": "03_design_a_drafter"}))
    seen = []
    monkeypatch.setattr(gradebook, "grade", lambda a, n, seed=None: seen.append(seed) or Score({"q1": (2, 3)}))
    out = tmp_path / "canvas.csv"
    assert main(["grade-all", str(tmp_path / "ag.zip"), str(tmp_path / "subs"), "--out", str(out), "--format", "canvas",
                 "--roster", str(tmp_path / "export.csv"), "--seed-per-student"]) == 0
    assert seen == [student_seed("jsmith.ipynb"), student_seed("nobody.ipynb")]
    assert "no student of" in capsys.readouterr().out
    assert out.read_text().splitlines() == ["Student,ID,SIS User ID,SIS Login ID,Section,03_design_a_drafter",
                                            "    Points Possible,,,,,3", '"Smith, Jane",2042,S1002,jsmith,DEC-01,2',
                                            "nobody,,,,,2"]
    assert Path(tmp_path / "canvas-written.csv").is_file()
