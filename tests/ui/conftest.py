"""Fixtures for the browser test: JupyterLab on a free loopback port, driven by headless Chromium.

The browser is Debian's Chromium at ``/usr/bin/chromium`` (``apt-get install chromium``), driven
by Playwright for Python; Playwright's own browser download (``playwright install``) cannot work
on the course machines. Without that Chromium the UI tests skip with a reason, except under CI
(``CI=true``), where they fail: CI must run them, and ``.ci/run`` installs Chromium first.

The server is started the way ``make lab`` starts it: the test reads the command from ``make -n lab``
(the course's ``.jupyter/jupyter_lab_config.py``: the repository's root, lesson 00 first, no news, no
network), adding only a port, a token and a settings folder of its own. The lessons it runs are copies
(outputs cleared) in ``test-artifacts/ui-work/``, so running cells never touches ``lessons/``; autosave
is off, so a notebook opened from the course's folders is never written. Screenshots and the server's
log go to ``test-artifacts/ui/``. Kernels run with ``SPECDEC_QUICK=1``.
"""

from __future__ import annotations

import json
import os
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = REPO / "test-artifacts" / "ui"  # screenshots, server log
# the notebook copies the browser runs; one folder per pytest-xdist worker
WORK = REPO / "test-artifacts" / "ui-work" / os.environ.get("PYTEST_XDIST_WORKER", "main")
# As root on a closed network Chromium needs these: no sandbox (root), no GPU, and no background
# connections (they are refused here, many at a time). Playwright adds --headless and a fresh,
# empty user-data-dir of its own.
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync",
]
# The test's own JupyterLab settings, over the course's: every cell in the DOM (no virtual scrolling,
# so the test sees all prompts and the screenshot all outputs), and no autosave (a notebook the test
# opens from exercises/ is run, never written). The news and update settings are the course's own.
LAB_SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/docmanager-extension/plugin.jupyterlab-settings": {"autosave": False},
}


def make_lab_args() -> list[str]:
    """The arguments ``make lab`` gives ``jupyter lab``, read from ``make -n lab`` (printed, not run)."""
    out = subprocess.run(["make", "-n", "-s", "lab", "ROOT_FLAG=", "LAB_ARGS="], cwd=REPO, capture_output=True,
                         text=True, check=True).stdout
    lines = [line for line in out.splitlines() if "jupyter lab" in line]
    assert len(lines) == 1, f"make -n lab should print one `jupyter lab` command, printed:\n{out}"
    argv = shlex.split(lines[0])
    return argv[argv.index("lab") + 1:]


def browser_missing() -> str | None:
    """Why the browser test cannot run here, or None when it can."""
    if not os.access(CHROMIUM, os.X_OK):
        return f"no Chromium at {CHROMIUM}: install Debian's chromium: apt-get install chromium"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright package is missing: run `make setup` (it is in requirements.txt)"
    return None


@pytest.fixture(scope="session")
def chromium() -> Path:
    """The Chromium executable; skips without one, but fails under CI=true (CI must run the UI tests)."""
    reason = browser_missing()
    if reason:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true but the browser test cannot run: {reason}", pytrace=False)
        pytest.skip(reason)
    return CHROMIUM


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Lab:
    """A running JupyterLab: ``url("lab/tree/x.ipynb")`` is a page with the token in it."""

    base: str
    token: str
    root: Path
    work: Path
    process: subprocess.Popen
    log: Path
    artifacts: Path  # where the tests put screenshots
    state: Path  # the server's own settings, workspaces and runtime files (removed at the end)

    def url(self, path: str) -> str:
        return f"{self.base}/{path.lstrip('/')}?token={self.token}"

    def api(self, path: str, method: str = "GET") -> dict | list:
        req = urllib.request.Request(f"{self.base}/api/{path}", method=method,
                                     headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(req, timeout=5) as r:
            body = r.read()
        return json.loads(body) if body else {}

    def kernel_ids(self) -> set[str]:
        return {kernel["id"] for kernel in self.api("kernels")}

    def shutdown_kernels(self, keep: set[str] = frozenset()) -> None:
        """Stop the kernels not in ``keep`` (a test that failed mid-run must not leave one computing)."""
        for kernel_id in self.kernel_ids() - keep:
            self.api(f"kernels/{kernel_id}", method="DELETE")

    def relative(self, path: Path) -> str:
        """``path`` as JupyterLab names it (relative to the served root, with slashes)."""
        return path.resolve().relative_to(self.root).as_posix()


def start_lab(root: Path, work: Path, log: Path, timeout: float = 120.0) -> Lab:
    """Start ``jupyter lab`` from this Python's environment with ``make lab``'s arguments, from ``root``
    (the repository), on 127.0.0.1, and wait until ``/api/status`` answers with the token."""
    token, port = secrets.token_hex(16), free_port()
    state = Path(tempfile.mkdtemp(prefix="specdec-lab-"))  # settings, workspaces, runtime: nothing of the user's
    for name, values in LAB_SETTINGS.items():
        path = state / "settings" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))
    cmd = [sys.executable, "-m", "jupyter", "lab", *make_lab_args(), "--no-browser", "--ServerApp.ip=127.0.0.1",
           f"--ServerApp.port={port}", "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
           f"--LabApp.user_settings_dir={state / 'settings'}",
           f"--LabApp.workspaces_dir={state / 'workspaces'}",
           # window.jupyterapp: the notebook model (output types), as JupyterLab's own Galata tests use it
           "--LabApp.expose_app_in_browser=True"]
    if os.geteuid() == 0:
        cmd.append("--allow-root")
    env = {**os.environ, "SPECDEC_QUICK": "1", "JUPYTER_RUNTIME_DIR": str(state / "runtime"),
           "JUPYTER_CONFIG_DIR": str(state / "config"), "PYTHONUNBUFFERED": "1"}
    # The kernel shares the cores with the browser and the server: there torch's default OpenMP
    # pool (one thread per core) spins against them, and a lesson runs many times slower.
    env.setdefault("OMP_NUM_THREADS", "1")
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "wb") as out:  # the child keeps its own handle
        proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    lab = Lab(f"http://127.0.0.1:{port}", token, root.resolve(), work, proc, log, log.parent, state)
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"jupyter lab exited with {proc.returncode}; its log:\n{log.read_text()[-3000:]}")
        try:
            lab.api("status")
            return lab
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            if time.monotonic() > deadline:
                stop_lab(lab)
                raise RuntimeError(f"jupyter lab did not answer within {timeout:.0f} s; its log:\n"
                                   f"{log.read_text()[-3000:]}") from None
            time.sleep(0.5)


def stop_lab(lab: Lab, timeout: float = 20.0) -> None:
    """Ask the server to shut down (it stops its kernels), then make sure its process group is gone."""
    try:
        lab.api("shutdown", method="POST")
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        pass
    try:
        lab.process.wait(timeout)
    except subprocess.TimeoutExpired:
        lab.process.terminate()
        try:
            lab.process.wait(10)
        except subprocess.TimeoutExpired:
            lab.process.kill()
            lab.process.wait(10)
    try:  # a kernel that outlived its server: the group is the one started for the server alone
        os.killpg(lab.process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    shutil.rmtree(lab.state, ignore_errors=True)


@pytest.fixture(scope="session")
def lab(chromium: Path) -> Iterator[Lab]:
    """JupyterLab serving the repository, with an empty ``test-artifacts/ui-work/`` for notebook copies."""
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    server = start_lab(REPO, WORK, ARTIFACTS / f"jupyter-server-{WORK.name}.log")
    yield server
    stop_lab(server)


@pytest.fixture(scope="session")
def browser(chromium: Path):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(chromium), headless=True, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """Keep each phase's report on the test item, so that ``page`` can tell whether its test failed."""
    report = yield
    setattr(item, f"report_{report.when}", report)
    return report


@pytest.fixture
def page(browser, lab: Lab, request: pytest.FixtureRequest):
    """A fresh browser tab (own cookies and storage) of a fixed size. Afterwards the kernels it
    started stop, and when the test failed, the page is saved as ``FAILED-<test>.png``."""
    kernels = lab.kernel_ids()
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    tab = context.new_page()
    tab.set_default_timeout(30_000)
    yield tab
    report = getattr(request.node, "report_call", None)
    if report is not None and report.failed:
        tab.screenshot(path=str(lab.artifacts / f"FAILED-{request.node.name}.png"))
    context.close()
    lab.shutdown_kernels(keep=kernels)
