"""What a reader of a stored notebook sees: no warnings on stderr, no machine paths, no runs of blank
lines, and no progress bar frozen below 100 %. Scans every lesson and solution as stored (no kernel);
each kind of problem is planted in a toy notebook to show the scan finds it."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted([*ROOT.glob("lessons/*.ipynb"), *ROOT.glob("solutions/*.ipynb")])

MACHINE_PATH = re.compile(r"(/work/|/root/|/home/\w+/|/tmp/|site-packages|\.venv/)")
BLANK_RUN = re.compile(r"\n[ \t]*\n[ \t]*\n[ \t]*\n")  # three blank lines in a row
BAR = re.compile(r"(\d+)%\|.*?\|\s*(\d+)/(\d+)")  # tqdm's meter: "37%|███▋      | 3/8"


def _texts(output) -> list[str]:
    if output.output_type == "stream":  # as stored: a static renderer (GitHub) shows every "\r" frame
        return [output.text]
    data = output.get("data", {})
    return [data[k] for k in ("text/plain", "text/markdown", "text/html") if k in data] + (
        ["\n".join(output.get("traceback", []))] if output.output_type == "error" else [])


def problems(nb: nbformat.NotebookNode) -> list[str]:
    """Every problem a reader would see in ``nb``'s stored outputs, as 'cell N: what'."""
    found = []
    for n, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []) if cell.cell_type == "code" else []:
            if out.output_type == "stream" and out.name == "stderr" and out.text.strip():
                found.append(f"cell {n}: stderr: {out.text.strip().splitlines()[0][:100]}")
            for text in _texts(out):
                if (m := MACHINE_PATH.search(text)) is not None:
                    found.append(f"cell {n}: a machine path ({m.group(0)}…)")
                if BLANK_RUN.search(text):
                    found.append(f"cell {n}: a run of blank lines")
                for pct, done, total in BAR.findall(text):
                    if int(done) < int(total) or int(pct) < 100:
                        found.append(f"cell {n}: a progress bar stored at {done}/{total}")
    return found


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_a_stored_notebook_shows_a_reader_no_warnings_paths_blank_runs_or_unfinished_bars(path):
    found = problems(nbformat.read(path, as_version=4))
    assert not found, f"{path.name}: " + "; ".join(found) + " — fix the source, then `make notebooks NB=...`"


def test_the_scan_finds_each_kind_it_looks_for():
    v4 = nbformat.v4
    clean = v4.new_code_cell("print(1)", outputs=[v4.new_output("stream", name="stdout", text="1\n")])
    planted = {
        "stderr": v4.new_output("stream", name="stderr", text="FutureWarning: x is deprecated\n"),
        "machine path": v4.new_output("stream", name="stdout", text="defined in /work/main/.venv/lib/x.py\n"),
        "blank lines": v4.new_output("stream", name="stdout", text="answer\n" + "\n" * 200 + "end\n"),
        "unfinished bar": v4.new_output("display_data", data={
            "text/plain": "tree budgets:   0%|          | 0/4 [00:00<?, ?it/s]"}),
    }
    assert problems(v4.new_notebook(cells=[clean])) == []
    for kind, out in planted.items():
        nb = v4.new_notebook(cells=[clean, v4.new_code_cell("x", outputs=[out])])
        assert len(problems(nb)) == 1, kind
    overwritten = [v4.new_output("stream", name="stdout", text="\rshapes:  50%|#####     | 1/2"),
                   v4.new_output("stream", name="stdout", text="\rshapes: 100%|##########| 2/2\n")]
    # tqdm's frames stored one output each: JupyterLab overwrites them, a static renderer shows every one
    assert len(problems(v4.new_notebook(cells=[v4.new_code_cell("x", outputs=overwritten)]))) == 1
    coalesced = v4.new_output("stream", name="stdout", text="shapes: 100%|##########| 2/2\n")  # `make notebooks`' NBTIDY
    assert problems(v4.new_notebook(cells=[v4.new_code_cell("x", outputs=[coalesced])])) == []
    finished = v4.new_output("display_data", data={"text/plain": "tree budgets: 100%|██████████| 4/4 [00:03<00:00]"})
    assert problems(v4.new_notebook(cells=[v4.new_code_cell("x", outputs=[finished])])) == []


def test_a_printed_answer_loses_its_blank_runs_but_says_its_length():
    from specdec_core.bench.quality import shown
    answer = "def f():\n    return 1" + "\n" * 200 + "tail"
    out = shown(answer, limit=1000)
    assert problems(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x", outputs=[
        nbformat.v4.new_output("stream", name="stdout", text=out)])])) == []
    assert "def f():\n    return 1\n\ntail" in out and f"({len(answer)} characters, 202 lines" in out
    assert shown("x" * 50, limit=10).startswith("x" * 10 + " …")
