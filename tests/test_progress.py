"""specdec_core.progress: a notebook executed headless (as `make notebooks` does) stores the finished
bar, where tqdm.auto stores the bar at 0 %. Runs a real kernel."""

from __future__ import annotations

import nbformat
from nbclient import NotebookClient
from test_stored_outputs import problems


def _executed(source: str) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source)])
    NotebookClient(nb, timeout=120, kernel_name="python3").execute()
    return nb


def _plain(nb) -> str:
    return "\n".join(o.get("data", {}).get("text/plain", "") for o in nb.cells[0].outputs)


def test_the_course_bar_is_stored_finished_and_tqdm_autos_is_not():
    loop = "for _ in tqdm(range(3), desc='steps'):\n    pass"
    ours = _executed("from specdec_core.progress import tqdm\n" + loop)
    assert "3/3" in _plain(ours) and problems(ours) == []
    theirs = _executed("from tqdm.auto import tqdm\n" + loop)
    assert "0/3" in _plain(theirs) and problems(theirs) != []  # the scan sees what a reader would
