"""The graded capstones, through the real grader: otter assign builds the student notebook and the
autograder from each master; otter run grades the solution (full marks), the unsolved student notebook
(zero) and a partly right one (partial marks). Also the grading tripwires and counters themselves."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import torch

from specdec_core import ar, drafters, speculative
from specdec_core.course import grading
from specdec_core.course.assign import build, grade, masters
from specdec_core.course.given import LoopStats
from specdec_core.sampling import Warp
from specdec_core.toy import tiny_llama

ROOT = Path(__file__).resolve().parents[1]
CAPSTONE1 = ROOT / "assignments" / "01_build_speculative_decoding.ipynb"


def test_blocked_functions_raise_however_they_were_imported_and_come_back():
    from specdec_core.speculative import speculative_generate as imported_early

    model = tiny_llama(16, seed=0)
    ids = torch.tensor([[1, 2, 3]])
    with grading.blocked(*grading.SPECULATIVE_LIBRARY):
        for call in (lambda: imported_early(model, drafters.ModelDrafter(model), ids, 3),
                     lambda: speculative.verify_greedy(torch.tensor([1]), torch.zeros(2, 16)),
                     lambda: ar.generate(model, ids, 3)):
            with pytest.raises(RuntimeError, match=grading.BLOCKED):
                call()
    assert len(imported_early(model, drafters.ModelDrafter(model), ids, 3).new_tokens) == 3  # restored


def test_counting_sees_every_forward_and_the_positions_it_reads():
    model = tiny_llama(16, seed=0)
    with grading.counting(model) as calls:
        ar.generate(model, torch.tensor([[1, 2, 3, 4]]), 5)
    assert calls.forwards == 5 and calls.tokens == 4 + 4  # the prompt once, then one position per step


def test_a_loop_that_is_not_exact_gets_a_small_p_value():
    def always_accept(target, drafter, ids, n, gamma=2, temperature=0.0, top_p=None, generator=None, **_):
        drafter.begin(Warp(temperature, None, top_p), generator)
        tokens, _ = drafter.propose(ids, n)  # the draft's own sample, never corrected
        return tokens.tolist(), LoopStats()

    assert grading.sampled_pvalue(always_accept, 1, 1.0) < 1e-4


def test_every_master_is_a_valid_otter_notebook():
    assert CAPSTONE1 in masters(ROOT / "assignments")
    for master in masters(ROOT / "assignments"):
        nb = json.loads(master.read_text())
        assert "".join(nb["cells"][0]["source"]).startswith("# ASSIGNMENT CONFIG")
        assert any("hidden: true" in "".join(c["source"]) for c in nb["cells"]), f"{master.name} has no hidden test"


def handed_out_and_solution(master: Path, tmp_path: Path, answer: str) -> tuple[Path, Path, Path]:
    """otter assign one master: (student notebook, autograder zip, solution notebook), checking that the
    handed-out notebook holds neither the ``answer`` (a line of the solution) nor a hidden test or rubric."""
    student, autograder = build(master, tmp_path / "dist", run_tests=False)
    solution = autograder.parent / master.name  # otter keeps the solution notebook beside the zip
    handed_out = student.read_text()
    assert answer in solution.read_text() and answer not in handed_out
    assert "hidden: true" not in handed_out and "Rubric" not in handed_out  # no hidden test, no answer key
    return student, autograder, solution


def edited(solution: Path, cell_marker: str, old: str, new: str, out: Path) -> Path:
    """A copy of ``solution`` with ``old`` replaced by ``new`` in the cell that contains ``cell_marker``."""
    nb = json.loads(solution.read_text())
    cell = next(c for c in nb["cells"] if cell_marker in "".join(c["source"]))
    text = "".join(cell["source"])
    assert old in text
    cell["source"] = text.replace(old, new)
    out.write_text(json.dumps(nb))
    return out


def graded(autograder: Path, notebooks: dict[str, Path]) -> dict:
    """Grade each notebook with the real grader, printing its points and how long grading took."""
    scores = {}
    for name, notebook in notebooks.items():
        start = time.perf_counter()
        scores[name] = grade(autograder, notebook)
        print(f"{name}: {scores[name]}  (graded in {time.perf_counter() - start:.0f} s)")
    return scores


@pytest.mark.slow
def test_the_real_grader_gives_full_zero_and_partial_marks(tmp_path):
    """The solution 14/14, the unsolved notebook 0 (its messages: the first real failure, no NameError
    echoes), and a plain AR loop that never calls the drafter — exact, so it passed most tests before
    issue 48 (12/14) — at most half: its gated tests wait for core goal 1."""
    from test_assignments_core_goals import C1_WRONG

    student, autograder, solution = handed_out_and_solution(CAPSTONE1, tmp_path, "decoder.rollback(context.shape[1] + n)")
    (marker, [(old, new)]), = C1_WRONG["a plain AR loop that never calls the drafter"].items()
    plain_ar = edited(solution, marker, old, new, tmp_path / "plain_ar.ipynb")
    scores = graded(autograder, {"solution": solution, "unsolved": student, "plain AR loop": plain_ar})
    assert scores["solution"].total == scores["solution"].possible == 14
    assert scores["unsolved"].total == 0 and scores["unsolved"].possible == 14
    assert not any("NameError" in m for m in scores["unsolved"].messages.values()), scores["unsolved"].messages
    ar_loop = scores["plain AR loop"]
    assert 0 < ar_loop.total <= 7 and ar_loop.points["q1"][0] < 4, ar_loop  # q1's greedy tests wait for the core goal
    assert "waits for core goal 1" in ar_loop.messages["q1"] and "drafter.propose" in ar_loop.messages["q1"]


@pytest.mark.slow
def test_capstone_2_grades_its_solution_in_full_and_an_unsolved_notebook_zero(tmp_path):
    master = ROOT / "assignments" / "02_measure_and_explain.ipynb"
    student, autograder, solution = handed_out_and_solution(master, tmp_path, "times[name].append(clock() - start)")
    scores = graded(autograder, {"solution": solution, "unsolved": student})
    assert scores["solution"].total == 12 and scores["unsolved"].total == 0
    assert scores["solution"].possible == scores["unsolved"].possible == 12


def test_a_drafter_whose_guesses_are_not_drawn_from_its_q_is_caught():
    from specdec_core.drafters import Drafter, NGramDrafter

    class AlwaysThreeSaysUniform(Drafter):  # guesses token 3, but reports a uniform q
        def propose(self, context, k):
            tokens = torch.full((k,), 3, dtype=torch.long)
            return tokens, None if self.greedy else torch.full((k, 8), 1 / 8)

    lookup = NGramDrafter(8)
    lookup.begin(Warp(0.0, None, None), None)
    assert grading.proposal_problem(*lookup.propose(torch.tensor([grading.TOY_PROMPT]), 2), 2, 8, True) == ""
    assert grading.first_guess_pvalue(AlwaysThreeSaysUniform(), 8, draws=300) < 1e-4
    assert grading.drafter_sampled_pvalue(lambda v: AlwaysThreeSaysUniform(), 1, 1.0, draws=400) < 1e-4
    assert "probability distribution" in grading.proposal_problem(torch.tensor([3]), torch.full((1, 8), 0.1), 2, 8, False)
    assert "probability 0" in grading.proposal_problem(torch.tensor([3]), torch.eye(8)[[0]], 2, 8, False)


@pytest.mark.slow
def test_grade_all_grades_a_folder_of_capstone_3_submissions_into_a_csv_and_a_written_sheet(tmp_path):
    """`grade-all` with the real grader on a folder of three submissions: the solution (full marks), the
    unsolved notebook (zero) and a drafter whose guesses are not drawn from its q (partial marks)."""
    import csv

    from specdec_core.course.gradebook import grade_all, read_written, write_csv, write_written_sheet

    master = ROOT / "assignments" / "03_design_a_drafter.ipynb"
    student, autograder, solution = handed_out_and_solution(master, tmp_path, "class ContextNGramDrafter")
    folder = tmp_path / "submissions"
    folder.mkdir()
    (folder / "alice.ipynb").write_text(solution.read_text())
    (folder / "bob.ipynb").write_text(student.read_text())
    edited(solution, "class ContextNGramDrafter", "token = int(q.argmax()) if self.greedy else int(sample(q, self.generator))",
           "token = int(q.argmax())  # always the likeliest: not drawn from q", folder / "carol.ipynb")
    from test_assignments_core_goals import C3_WRONG

    (marker, [(old, new)]), = C3_WRONG["a uniform-random drafter"].items()
    edited(solution, marker, old, new, folder / "dave.ipynb")  # valid, exact and useless: 8/10 before issue 48
    answer = json.loads((folder / "bob.ipynb").read_text())
    cell = next(c for c in answer["cells"]  # the written answer (code answers are tagged so too)
                if c["cell_type"] == "markdown" and "otter_answer_cell" in c["metadata"].get("tags", []))
    cell["source"] = "My drafter copies what followed the last two tokens."
    (folder / "bob.ipynb").write_text(json.dumps(answer))
    graded_rows = grade_all(autograder, folder)
    write_csv(graded_rows, tmp_path / "grades.csv")
    write_written_sheet(graded_rows, tmp_path / "grades-written.csv", tmp_path / "grades-written.md")
    with open(tmp_path / "grades.csv", newline="") as f:
        rows = {r["file"]: r for r in csv.DictReader(f)}
    # carol loses the three tests of q2 that check every guess against its q row first (public 1, hidden 2 + 2
    # points: issue 57); her greedy output, her contract and her usefulness are the solution's (5 points)
    totals = {name: float(r["total"]) for name, r in rows.items()}
    assert {n: t for n, t in totals.items() if n != "dave.ipynb"} == {"alice.ipynb": 10, "bob.ipynb": 0, "carol.ipynb": 5}
    assert totals["dave.ipynb"] <= 5 and "waits for core goal 1" in rows["dave.ipynb"]["q2 message"]
    assert not any("NameError" in v for k, v in rows["bob.ipynb"].items() if k.endswith("message"))  # first failures only
    assert all(float(r["possible"]) == 10 for r in rows.values())
    carol = rows["carol.ipynb"]
    assert float(carol["q1"]) == 2 and float(carol["q3"]) == 2 and float(carol["q2"]) == 1
    assert "not drawn from the q you report" in carol["q2 message"] and rows["alice.ipynb"]["q2 message"] == ""
    with open(tmp_path / "grades-written.csv", newline="") as f:
        written = list(csv.DictReader(f))
    assert {(r["file"], r["question"]) for r in written} == {(n, "q4") for n in rows}
    assert next(r for r in written if r["file"] == "bob.ipynb")["answer"] == "My drafter copies what followed the last two tokens."
    for r in written:
        r["points"] = "3" if r["file"] == "alice.ipynb" else ""
    with open(tmp_path / "filled.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["file", "question", "points", "answer"])
        writer.writeheader()
        writer.writerows(written)
    write_csv(graded_rows, tmp_path / "merged.csv", read_written(tmp_path / "filled.csv"))
    with open(tmp_path / "merged.csv", newline="") as f:
        merged = {r["file"]: r for r in csv.DictReader(f)}
    assert merged["alice.ipynb"]["q4 (written)"] == "3" and float(merged["alice.ipynb"]["total with written"]) == 13
    assert merged["bob.ipynb"]["q4 (written)"] == "" and float(merged["bob.ipynb"]["total with written"]) == 0


@pytest.mark.slow
def test_the_readme_commands_build_and_grade(tmp_path, monkeypatch, capsys):
    """README, 'For instructors': `python -m specdec_core.course assign` from the course folder, then
    `… grade <zip> <notebook>` on a handed-out notebook (here unsolved: zero), and clear errors."""
    from specdec_core.course.__main__ import main

    (tmp_path / "assignments").mkdir()
    master = ROOT / "assignments" / "03_design_a_drafter.ipynb"
    (tmp_path / "assignments" / master.name).write_text(master.read_text())
    monkeypatch.chdir(tmp_path)
    assert main(["assign", "--no-run-tests"]) == 0
    built = tmp_path / "dist" / "assignments" / master.stem
    student = built / "student" / master.name
    autograder = next((built / "autograder").glob("*.zip"))
    assert "hand out" in capsys.readouterr().out and student.is_file()
    assert main(["grade", str(autograder), str(student)]) == 0
    assert capsys.readouterr().out.startswith(f"{master.name}: 0 of 10 autograded points")
    (tmp_path / "submissions").mkdir()
    (tmp_path / "submissions" / "unsolved.ipynb").write_text(student.read_text())
    assert main(["grade-all", str(autograder), "submissions", "--out", "grades.csv"]) == 0
    lines = (tmp_path / "grades.csv").read_text().splitlines()
    assert lines[0].startswith("file,total,possible,q1,q1 message,q2,q2 message,q3,q3 message") and lines[1].startswith("unsolved.ipynb,0,10,0,")
    assert (tmp_path / "grades-written.csv").read_text().splitlines()[1].startswith("unsolved.ipynb,q4,,")
    assert main(["grade", str(tmp_path / "missing.zip"), str(student)]) == 2
    assert "make assignments builds the autograder zips" in capsys.readouterr().out
    assert main(["assign", "no-such.ipynb"]) == 2


def test_the_gradebook_writes_one_row_per_submission_and_the_written_answers(tmp_path):
    """The CSV and the written sheet, from scores made by hand (the slow test above uses the real grader)."""
    import csv

    from specdec_core.course.assign import Score, failure_message
    from specdec_core.course.gradebook import Row, read_written, write_csv, write_written_sheet, written_answers

    nb = {"cells": [{"cell_type": "markdown", "metadata": {}, "source": "<!-- BEGIN QUESTION -->\n\n**q5 (written).** Why?"},
                    {"cell_type": "markdown", "metadata": {"tags": ["otter_answer_cell"]}, "source": "Because min(p, q) + max(0, p − q) = p."},
                    {"cell_type": "markdown", "metadata": {}, "source": "<!-- END QUESTION -->"}], "metadata": {}}
    (tmp_path / "a.ipynb").write_text(json.dumps(nb))
    assert written_answers(tmp_path / "a.ipynb") == {"q5": "Because min(p, q) + max(0, p − q) = p."}
    otter_output = "q2 results:\n    q2 - 1 result:\n        ❌ Test case failed\n    Trying:\n        assert p > x\n    AssertionError: ✗ χ² p = 1e-9"
    assert failure_message(otter_output) == "AssertionError: ✗ χ² p = 1e-9"
    rows = [Row("a.ipynb", Score({"q1": (4, 4), "q2": (1.5, 4)}, {"q1": "", "q2": "AssertionError: ✗ χ²"}),
                written={"q5": "Because."}),
            Row("b.ipynb", None, "otter run failed")]
    header = write_csv(rows, tmp_path / "grades.csv")
    assert header == ["file", "total", "possible", "q1", "q1 message", "q2", "q2 message", "error"]
    with open(tmp_path / "grades.csv", newline="") as f:
        got = list(csv.DictReader(f))
    assert [(r["file"], r["total"], r["q2"], r["q2 message"], r["error"]) for r in got] == [
        ("a.ipynb", "5.5", "1.5", "AssertionError: ✗ χ²", ""), ("b.ipynb", "", "", "", "otter run failed")]
    write_written_sheet(rows, tmp_path / "w.csv", tmp_path / "w.md")
    assert "## a.ipynb · q5" in (tmp_path / "w.md").read_text()
    (tmp_path / "w.csv").write_text((tmp_path / "w.csv").read_text().replace("a.ipynb,q5,,", "a.ipynb,q5,3.5,"))
    write_csv(rows, tmp_path / "merged.csv", read_written(tmp_path / "w.csv"))
    with open(tmp_path / "merged.csv", newline="") as f:
        merged = list(csv.DictReader(f))
    assert [(r["q5 (written)"], r["total with written"]) for r in merged] == [("3.5", "9"), ("", "0")]


def test_the_student_release_leaves_out_assignments_their_tests_and_the_answer_keys(tmp_path):
    from specdec_core.course.release import left_out, student_release

    files = student_release(ROOT, tmp_path / "release")
    assert files and all(not left_out(f) for f in files)
    assert not (tmp_path / "release" / "assignments").exists()
    assert not (tmp_path / "release" / "solutions" / "answer-keys.md").exists()
    assert not list((tmp_path / "release" / "tests").glob("test_assignments*.py"))
    assert (tmp_path / "release" / "specdec_core" / "course" / "grading.py").is_file()  # the public tests call it
    assert (tmp_path / "release" / "lessons").is_dir() and (tmp_path / "release" / "Makefile").is_file()
    assert left_out("assignments/01_build_speculative_decoding.ipynb") and not left_out("solutions/03_speculative_sampling.ipynb")


def test_recording_keeps_what_the_library_returned_however_it_was_imported():
    from specdec_core.ar import generate as imported_early

    model = tiny_llama(16, seed=0)
    ids = torch.tensor([[1, 2, 3]])
    with grading.recording("specdec_core.ar.generate") as seen:
        first = imported_early(model, ids, 3)
        second = ar.generate(model, ids, 2)
    assert seen["specdec_core.ar.generate"] == [first, second] and len(second.new_tokens) == 2
    assert len(imported_early(model, ids, 3).new_tokens) == 3 and len(seen["specdec_core.ar.generate"]) == 2  # restored


def test_capstone_1_blocks_the_transformers_paths_and_ar_next_token():
    model = tiny_llama(16, seed=0)
    with grading.blocked(*grading.SPECULATIVE_LIBRARY):
        for call in (lambda: model.generate(torch.tensor([[1, 2]]), max_new_tokens=2),
                     lambda: ar.next_token(torch.zeros(16), 0.0, None, None, None)):
            with pytest.raises(RuntimeError, match=grading.BLOCKED):
                call()
    assert ar.next_token(torch.arange(16.0), 0.0, None, None, None) == 15


def test_greedy_alpha_is_counted_from_the_proposals_and_the_output():
    # prompt of 2 tokens, output [5, 6, 7, 8]: step 1 proposed [5, 9] at length 2 (1 kept of 2 examined),
    # step 2 proposed [7, 8, 1] at length 4 and the output ends after 8: 2 or 3 kept (cut by max_new_tokens)
    log = [(2, [5, 9]), (4, []), (4, [7, 8, 1])]
    assert grading.greedy_alphas(log, [0, 0, 5, 6, 7, 8]) == [3 / 5, 4 / 5]
    assert grading.greedy_alphas([(2, [])], [0, 0, 5]) == []


def test_a_deterministic_drafter_passes_the_first_guess_test_by_its_support():
    from specdec_core.drafters import Drafter

    class OneHot(Drafter):
        def __init__(self, token):
            self.token = token

        def propose(self, context, k):
            return torch.tensor([self.token]), torch.eye(8)[[self.token]]

    class Liar(OneHot):  # reports a one-hot q but guesses something else half the time
        def propose(self, context, k):
            tokens, q = super().propose(context, k)
            return (tokens + int(torch.rand((), generator=self.generator) < 0.5)) % 8, q

    assert grading.first_guess_pvalue(OneHot(3), 8, draws=50) == 1.0
    assert grading.first_guess_pvalue(Liar(3), 8, draws=50) == 0.0


def test_no_test_cell_prints_anything():
    """otter runs a test cell as a doctest: anything it prints is compared with nothing, so it fails."""
    from specdec_core.course.mutants import Master

    for master in masters(ROOT / "assignments"):
        for test in Master(master).tests:
            assert "print(" not in test.source, f"{master.name} {test.name} prints"
