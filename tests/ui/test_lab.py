"""The lessons in a real browser: JupyterLab in headless Chromium, as a student uses them.

``make lab``'s own page: lesson 00 first, no pop-up, the file browser at the repository's root lists
lessons/, exercises/ and assignments/, and exercise 01 opened from there runs to its first check.

For lesson 00 and lesson 03 (copies with cleared outputs, ``SPECDEC_QUICK=1``): open the notebook,
Run → Run All Cells, wait until every code cell shows ``[n]:`` and the kernel is idle, assert
that no cell shows an error, and screenshot the page. In lesson 03, press → on the γ slider and
assert that the widget's "γ = …" line changes to the new γ. Both checks are shown to fail on a
notebook built to break them (an error cell, a slider whose output ignores it).

What the page shows is read from the DOM (prompts, rendered outputs, widgets); whether an output
is an error is read from JupyterLab's own notebook model (``window.jupyterapp``, exposed as for
JupyterLab's Galata tests): in the DOM an error and a warning are both rendered as
``application/vnd.jupyter.stderr``. Screenshots: ``test-artifacts/ui/``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import nbformat
import pytest

if TYPE_CHECKING:  # the fixtures come from conftest.py; playwright is imported only when the test runs
    from conftest import Lab
    from playwright.sync_api import Locator, Page

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.ui

LESSON_00 = REPO / "lessons" / "00_welcome.ipynb"
LESSON_03 = REPO / "lessons" / "03_speculative_sampling.ipynb"
RUN_TIMEOUT_S = 420  # lesson 03 under QUICK takes about a minute on 2 cores; a busy machine, more
GAMMA = "γ"


# ---------------------------------------------------------------- notebooks
def clean_copy(src: Path, dest_dir: Path) -> Path:
    """Copy ``src`` into ``dest_dir`` with outputs, execution counts and saved widget state removed,
    so that everything the page shows afterwards comes from this run."""
    nb = nbformat.read(src, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    nb.metadata.pop("widgets", None)
    dest = dest_dir / src.name
    nbformat.write(nb, dest)
    return dest


# ---------------------------------------------------------------- the page
_STATE_JS = """(path) => {
    const panel = window.jupyterapp.shell.currentWidget;
    if (!panel || !panel.context || panel.context.path !== path) return null;
    const kernel = panel.sessionContext.session && panel.sessionContext.session.kernel;
    const cells = panel.content.widgets.map((cell, index) => {
        if (cell.model.type !== 'code') return null;
        const outputs = [];
        for (let i = 0; i < cell.model.outputs.length; i++) outputs.push(cell.model.outputs.get(i).toJSON());
        const prompt = cell.node.querySelector('.jp-InputArea-prompt');
        const shown = [...cell.node.querySelectorAll(
            '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]')].map(n => n.innerText);
        return {
            index: index,
            prompt: prompt ? prompt.innerText.trim() : '',
            errors: outputs.filter(o => o.output_type === 'error').map(o => o.ename + ': ' + o.evalue),
            stderr_shown: shown,
        };
    }).filter(c => c !== null);
    return {kernel: kernel ? kernel.status : 'none', cells: cells};
}"""

_FINISHED_JS = """(path) => {
    const state = (STATE)(path);
    if (!state || state.kernel !== 'idle' || state.cells.length === 0) return false;
    // queued or running cells show [*]; the first cell has a count once the run has started
    return state.cells.every(c => !c.prompt.includes('*')) && /^\\[\\d+\\]:$/.test(state.cells[0].prompt);
}""".replace("STATE", _STATE_JS)


@dataclass
class CellState:
    index: int  # position in the notebook (markdown cells count)
    prompt: str  # as shown: "[3]:", "[*]:", "[ ]:"
    errors: list[str] = field(default_factory=list)  # "ValueError: boom" for each error output
    stderr_shown: list[str] = field(default_factory=list)  # text of the red blocks the page shows


def open_notebook(page: Page, lab: Lab, path: Path) -> str:
    """Open ``path`` in JupyterLab and wait until its kernel is idle. Returns its Jupyter path."""
    rel = lab.relative(path)
    # a workspace of its own: the default one would reopen (and rerun kernels for) earlier tests' notebooks
    page.goto(lab.url(f"lab/workspaces/{path.stem}/tree/{rel}"))
    page.wait_for_selector(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-Cell", timeout=90_000)
    page.wait_for_function(f"(path) => {{ const s = ({_STATE_JS})(path); return s && s.kernel === 'idle'; }}",
                           arg=rel, timeout=90_000, polling=500)
    return rel


def run_all_cells(page: Page, rel: str, timeout_s: float = RUN_TIMEOUT_S) -> list[CellState]:
    """Run → Run All Cells from the menu bar; wait until no cell is queued or running and the
    kernel is idle. Returns what each code cell shows."""
    page.click(".lm-MenuBar-itemLabel:text-is('Run')")
    page.click(".lm-Menu-itemLabel:text-is('Run All Cells')")
    try:
        page.wait_for_function(_FINISHED_JS, arg=rel, timeout=timeout_s * 1000, polling=500)
    except Exception as err:  # playwright's TimeoutError: say which cells were still pending
        pending = [c.prompt for c in cell_states(page, rel)]
        raise AssertionError(f"{rel}: the run did not finish within {timeout_s:.0f} s; prompts: {pending}") from err
    return cell_states(page, rel)


def cell_states(page: Page, rel: str) -> list[CellState]:
    state = page.evaluate(_STATE_JS, rel)
    assert state is not None, f"{rel} is not the notebook shown in JupyterLab"
    return [CellState(**c) for c in state["cells"]]


def problems(cells: list[CellState]) -> list[str]:
    """What is wrong after Run All: a cell with an error output, or one that never ran."""
    found = []
    for c in cells:
        for e in c.errors:
            found.append(f"cell {c.index} {c.prompt} shows an error: {e}")
        if not (c.prompt.startswith("[") and c.prompt[1:-2].isdigit()):
            found.append(f"cell {c.index} did not run (prompt {c.prompt!r})")
    return found


_SCROLLER = ".jp-NotebookPanel:not(.lm-mod-hidden) .jp-WindowedPanel-outer"  # JupyterLab scrolls this, not the page


def screenshot_notebook(page: Page, path: Path, max_height: int = 16_000) -> Path:
    """A screenshot of the whole notebook: the window is made as tall as the notebook's content
    (JupyterLab scrolls inside its own panel, so a page screenshot alone shows one screen)."""
    page.mouse.click(5, page.viewport_size["height"] - 5)  # park the mouse on the status bar: no hover tool-tips
    size = page.viewport_size
    # how much taller the window must be: from the top of the notebook to the end of its last cell
    extra = page.evaluate(f"() => {{ const s = document.querySelector('{_SCROLLER}'); if (!s) return 0;"
                          "const cells = s.querySelectorAll('.jp-Cell'); if (!cells.length) return 0;"
                          "const end = cells[cells.length - 1].getBoundingClientRect().bottom"
                          " - s.getBoundingClientRect().top + s.scrollTop;"
                          "return Math.max(0, Math.ceil(end + 24 - s.clientHeight)); }")
    page.set_viewport_size({"width": size["width"], "height": min(size["height"] + extra, max_height)})
    page.wait_for_timeout(500)  # layout and images
    page.evaluate(f"() => {{ const s = document.querySelector('{_SCROLLER}'); if (s) s.scrollTop = 0; }}")
    page.wait_for_timeout(300)
    path.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(path))
    page.set_viewport_size(size)
    return path


# ---------------------------------------------------------------- the γ slider
_GAMMA_LINE_JS = """(cell) => [...cell.querySelectorAll('.jupyter-widgets .jp-RenderedText')]
    .flatMap(n => n.innerText.split('\\n')).filter(l => l.startsWith('γ = ')).join('\\n')"""


def gamma_cells(page: Page) -> Locator:
    """The code cells whose widgets include a slider labelled γ."""
    slider = page.locator(".widget-slider", has=page.locator(f".widget-label:text-is('{GAMMA}')"))
    return page.locator(".jp-CodeCell", has=slider)


def move_gamma_slider(cell: Locator, timeout_s: float = 60.0) -> tuple[str, str]:
    """Focus the γ slider's handle in ``cell`` and press → (γ: n → n + 1); wait until the widget's
    "γ = …" line is one for γ = n + 1. Returns (line before, line after). AssertionError when it is
    not within ``timeout_s``: a widget whose output ignores the slider (a mere change is not enough:
    measured timings change on every run)."""
    slider = cell.locator(".widget-slider", has=cell.page.locator(f".widget-label:text-is('{GAMMA}')"))
    handle = slider.locator(".noUi-handle")
    handle.wait_for(timeout=60_000)
    cell.page.wait_for_function(f"(cell) => ({_GAMMA_LINE_JS})(cell) !== ''", arg=cell.element_handle(),
                                timeout=60_000, polling=250)
    before = cell.evaluate(_GAMMA_LINE_JS)
    value = float(handle.get_attribute("aria-valuenow"))
    handle.scroll_into_view_if_needed()
    handle.focus()
    handle.press("ArrowRight")
    moved = float(handle.get_attribute("aria-valuenow"))
    assert moved == value + 1, f"the γ slider did not move: {value:g} → {moved:g}"
    expected = f"{GAMMA} = {moved:g}"
    try:
        cell.page.wait_for_function(
            f"([cell, before, expected]) => {{ const now = ({_GAMMA_LINE_JS})(cell);"
            " return now !== before && new RegExp('^' + expected + '(?![0-9])').test(now); }",
            arg=[cell.element_handle(), before, expected], timeout=timeout_s * 1000, polling=250)
    except Exception as err:  # playwright's TimeoutError
        now = cell.evaluate(_GAMMA_LINE_JS)
        raise AssertionError(f"the γ slider moved {value:g} → {moved:g}, but after {timeout_s:.0f} s the widget "
                             f"says {now!r} (before: {before!r}), no line starting {expected!r}") from err
    return before, cell.evaluate(_GAMMA_LINE_JS)


# ---------------------------------------------------------------- the lessons
@pytest.mark.offline
def test_lesson_00_runs_clean_in_jupyterlab(page: Page, lab: Lab) -> None:
    rel = open_notebook(page, lab, clean_copy(LESSON_00, lab.work))
    try:
        cells = run_all_cells(page, rel)
    finally:  # also when the run did not finish: the picture shows where it stopped
        screenshot_notebook(page, lab.artifacts / "00_welcome.png")
    assert problems(cells) == [], "\n".join(problems(cells))


@pytest.mark.offline
def test_lesson_03_runs_clean_and_gamma_slider_updates(page: Page, lab: Lab) -> None:
    if not LESSON_03.exists():
        pytest.fail(f"{LESSON_03.relative_to(REPO)} is missing", pytrace=False)
    rel = open_notebook(page, lab, clean_copy(LESSON_03, lab.work))
    try:
        cells = run_all_cells(page, rel)
    finally:
        screenshot_notebook(page, lab.artifacts / "03_speculative_sampling.png")
    assert problems(cells) == [], "\n".join(problems(cells))

    panels = gamma_cells(page)
    assert panels.count() == 1, f"expected one γ slider in lesson 03, found {panels.count()}"
    before, after = move_gamma_slider(panels.first)  # asserts that the line now names the new γ
    panels.first.screenshot(path=str(lab.artifacts / "03_speculative_sampling-gamma-moved.png"))
    assert before != after


# ---------------------------------------------------------------- make lab: the whole course
FOLDERS = ("lessons", "exercises", "assignments")  # the folders the README sends a student to
EXERCISE_01 = REPO / "exercises" / "01_autoregressive_baseline.ipynb"
_LISTING = ".jp-FileBrowser .jp-DirListing-content .jp-DirListing-item"


def first_check_cell(path: Path) -> int:
    """Index of the first code cell that calls one of the course's checkers (``check_…(``)."""
    nb = nbformat.read(path, as_version=4)
    return next(i for i, c in enumerate(nb.cells) if c.cell_type == "code" and "check_" in c.source
                and not c.source.lstrip().startswith(("import", "from")))


def listed(page: Page, wanted: tuple[str, ...], timeout_s: float = 20.0) -> list[str]:
    """The names the file browser shows, once they include ``wanted`` or after ``timeout_s`` (the
    listing refreshes a moment after the browser changes folder)."""
    js = f"(wanted) => {{ const names = [...document.querySelectorAll('{_LISTING} .jp-DirListing-itemText')]" \
         ".map(n => n.innerText.trim()); return wanted.every(w => names.includes(w)); }"
    try:
        page.wait_for_function(js, arg=list(wanted), timeout=timeout_s * 1000, polling=250)
    except Exception:  # playwright's TimeoutError: the caller's assertion says what is listed instead
        pass
    return page.locator(f"{_LISTING} .jp-DirListing-itemText").all_inner_texts()


def open_from_file_browser(page: Page, *names: str) -> None:
    """Double-click each name in turn in the file browser (folders, then the file)."""
    for name in names:
        # the item's tool-tip starts "Name: <name>" and a line break (CSS writes it \\A)
        item = page.locator(f"{_LISTING}[title^='Name: {name}\\A ']")
        item.wait_for(timeout=30_000)
        item.dblclick()


@pytest.mark.offline
def test_make_lab_serves_the_whole_course_and_an_exercise_runs(page: Page, lab: Lab) -> None:
    """As a student after ``make lab``: the start page is lesson 00, no pop-up, the file browser at the
    root lists the README's folders, and exercise 01 opened from there runs up to its first check."""
    before = EXERCISE_01.read_bytes()
    page.goto(f"{lab.base}/?token={lab.token}")  # the address `make lab` opens
    page.wait_for_selector(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-Cell", timeout=90_000)
    shown = page.evaluate("() => window.jupyterapp.shell.currentWidget.context.path")
    assert shown == "lessons/00_welcome.ipynb", f"make lab opened {shown!r}, not lesson 00"
    page.wait_for_timeout(3_000)  # the news question, when asked, comes as a toast within a second or two
    toasts = page.locator(".Toastify__toast").all_inner_texts()
    assert toasts == [], f"JupyterLab greets with a pop-up: {toasts}"

    page.locator(".jp-FileBrowser .jp-BreadCrumbs-home").click()  # the served root
    names = listed(page, FOLDERS)
    missing = [f for f in FOLDERS if f not in names]
    assert not missing, f"the file browser at the root lists {names}, not {missing}"

    open_from_file_browser(page, "exercises", EXERCISE_01.name)
    rel = lab.relative(EXERCISE_01)
    page.wait_for_function(f"(path) => {{ const s = ({_STATE_JS})(path); return s && s.kernel === 'idle'; }}",
                           arg=rel, timeout=90_000, polling=500)
    check = first_check_cell(EXERCISE_01)
    page.evaluate("""async (index) => {
        const panel = window.jupyterapp.shell.currentWidget;
        panel.content.activeCellIndex = index;
        await window.jupyterapp.commands.execute('notebook:run-all-above');
        await window.jupyterapp.commands.execute('notebook:run-cell');
    }""", check)
    page.wait_for_function(rf"""([path, index]) => {{ const s = ({_STATE_JS})(path);
        if (!s || s.kernel !== 'idle') return false;
        const c = s.cells.find(c => c.index === index); return c && /^\[\d+\]:$/.test(c.prompt); }}""",
                           arg=[rel, check], timeout=RUN_TIMEOUT_S * 1000, polling=500)
    screenshot_notebook(page, lab.artifacts / "exercise-01-first-check.png")
    cells = {c.index: c for c in cell_states(page, rel)}
    ran_before = [c for i, c in cells.items() if i < check and c.errors]
    assert not ran_before, f"cells above the check failed: {ran_before}"
    text = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell").nth(check).inner_text()
    # the exercise is unsolved: its checker ran and says what is missing, with a hint
    assert "✗" in text and "hint" in text, f"the first check cell shows no checker output:\n{text[:800]}"
    assert cells[check].errors and cells[check].errors[0].startswith("CheckFailed"), cells[check].errors
    assert EXERCISE_01.read_bytes() == before, "the test wrote the exercise notebook"


# ---------------------------------------------------------------- the checks can fail
BROKEN_CELLS = [
    # 0: a warning is red too, but it is no error
    "import warnings\nwarnings.warn('a warning is not an error')\nprint('ok')",
    # 1: a γ slider whose output follows it
    "import ipywidgets as w\n"
    "g = w.IntSlider(value=4, min=1, max=8, description='γ', continuous_update=False)\n"
    "w.VBox([g, w.interactive_output(lambda gamma: print(f'γ = {gamma}'), {'gamma': g})])",
    # 2: a γ slider whose output ignores it (the bug the lesson test must catch)
    "f = w.IntSlider(value=4, min=1, max=8, description='γ', continuous_update=False)\n"
    "w.VBox([f, w.interactive_output(lambda gamma: print('γ = 4'), {'gamma': f})])",
    # 3: an error; 4: never runs, as Run All stops at an error
    "raise ValueError('a lesson cell that breaks')",
    "print('not reached')",
]


@pytest.fixture(scope="module")
def broken(browser, lab: Lab):
    """A notebook built to fail both checks, opened and run once: (page, cell states)."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in BROKEN_CELLS])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    path = lab.work / "broken.ipynb"
    nbformat.write(nb, path)
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    kernels = lab.kernel_ids()
    rel = open_notebook(page, lab, path)
    cells = run_all_cells(page, rel, timeout_s=120)
    screenshot_notebook(page, lab.artifacts / "broken.png")
    yield page, cells
    context.close()
    lab.shutdown_kernels(keep=kernels)


def test_a_cell_error_is_caught(broken) -> None:
    _, cells = broken
    found = problems(cells)
    assert len(found) == 2, found
    assert found[0].startswith("cell 3 [4]: shows an error: ValueError: a lesson cell that breaks"), found
    assert found[1] == "cell 4 did not run (prompt '[ ]:')", found
    assert cells[0].stderr_shown and not cells[0].errors  # the warning is shown, and not taken for an error
    assert any("ValueError" in text for text in cells[3].stderr_shown)  # the error is on the page


def test_a_frozen_gamma_output_is_caught(broken) -> None:
    page, _ = broken
    live, frozen = gamma_cells(page).nth(0), gamma_cells(page).nth(1)
    assert move_gamma_slider(live, timeout_s=30) == ("γ = 4", "γ = 5")
    with pytest.raises(AssertionError, match="says 'γ = 4' \\(before: 'γ = 4'\\)"):
        move_gamma_slider(frozen, timeout_s=5)
