"""Prove an autograder zip in a fresh environment made from the zip's own requirements.

    python -m specdec_core.course gradescope-check ZIP SUBMISSION.ipynb [--workdir DIR]
    make gradescope-check                  # builds capstone 2's zip, then checks it on its solution

What Gradescope does with the zip, as far as this machine can: a new virtual environment with the zip's
Python (environment.yml's ``python=``) and nothing else, ``pip install`` of environment.yml's pip list
(otter and the course's pins), the zip's ``specdec/install.sh`` (the course's wheel and the offline model,
with a model cache of its own: nothing of this machine's ``~/.cache/specdec_core`` is used), then
``otter run`` of the submission with that environment's otter. It checks on the way that the package
and the kernel the notebook runs in are the fresh environment's, not the course's ``.venv``. Not
covered: Gradescope's image itself (conda-forge's Python from mamba, apt packages), which this machine
cannot reach; the pip part, install.sh and the grading are the same.

Minutes, not seconds: installing torch and friends, converting the model, grading. Not part of the test
suite's default run (``tests/test_assignments_gradescope.py`` runs it when SPECDEC_GRADESCOPE_CHECK=1).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

from .assign import Score, score_of
from .gradescope import PAYLOAD, GradescopeError, environment


def _python(version: str) -> str:
    """An interpreter of the zip's Python version (this one if it is that version)."""
    if f"{sys.version_info.major}.{sys.version_info.minor}" == version:
        return sys.executable
    found = shutil.which(f"python{version}")
    if found is None:
        raise GradescopeError(f"the zip wants Python {version}: no python{version} on this machine")
    return found


def _env(workdir: Path, venv: Path) -> dict[str, str]:
    """The check's environment: the fresh venv first on the PATH, a model cache and a Jupyter data folder of
    its own, no network for models, the notebooks' short loops (as run_autograder sets on Gradescope)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "JUPYTER_PATH", "SPECDEC_GRADING_SEED", "SPECDEC_LOCAL_MODELS")}
    env.update(PATH=f"{venv / 'bin'}:/usr/local/bin:/usr/bin:/bin", VIRTUAL_ENV=str(venv),
               SPECDEC_CACHE=str(workdir / "cache"), JUPYTER_DATA_DIR=str(workdir / "jupyter"),
               HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", SPECDEC_QUICK="1",
               OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    return env


def check(zip_path: Path, submission: Path, workdir: Path, log: Callable[[str], None] = print) -> Score:
    """Make a fresh environment from the zip in ``workdir`` (replaced), install the course from the zip,
    grade ``submission`` there with ``otter run``; returns its score. Raises GradescopeError on the first
    step that fails, with the end of its output."""
    zip_path, submission, workdir = Path(zip_path).resolve(), Path(submission).resolve(), Path(workdir).resolve()
    if workdir.exists():
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)
    venv = workdir / "venv"
    env = _env(workdir, venv)
    version, requirements = environment(zip_path)
    (workdir / "requirements.txt").write_text("\n".join(requirements) + "\n")
    with zipfile.ZipFile(zip_path) as zf:
        zf.extractall(workdir / "source")
    start = time.monotonic()

    def step(what: str, *command: str) -> str:
        began = time.monotonic()
        log(f"[{time.monotonic() - start:6.0f} s] {what}: {' '.join(command)}")
        done = subprocess.run(command, cwd=workdir, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise GradescopeError(f"{what} failed (exit {done.returncode}):\n{(done.stdout + done.stderr)[-4000:]}")
        log(f"         done in {time.monotonic() - began:.0f} s")
        return done.stdout

    step(f"a fresh virtual environment (Python {version})", _python(version), "-m", "venv", str(venv))
    python = str(venv / "bin" / "python")
    step(f"the zip's requirements ({len(requirements)} lines of environment.yml's pip list)",
         python, "-m", "pip", "install", "-q", "-r", "requirements.txt")
    log(step("the zip's install.sh (the course's wheel, the offline model)", "bash", str(workdir / "source" / PAYLOAD / "install.sh")).strip())
    where = step("where the package and the kernel come from", python, "-c",
                 "import specdec_core, sys; from jupyter_client.kernelspec import KernelSpecManager as K; "
                 "print(specdec_core.__file__); print(K().get_kernel_spec('python3').argv[0]); print(sys.prefix)")
    package, kernel, prefix = where.split()
    if not package.startswith(str(venv)) or not (kernel == "python" or kernel.startswith(str(venv))) or prefix != str(venv):
        raise GradescopeError(f"not the fresh environment: package {package}, kernel {kernel}, prefix {prefix}")
    log(f"         specdec_core from {package}; the kernel runs {kernel!r} (this environment's Python)")
    shutil.copyfile(submission, workdir / submission.name)
    step(f"otter run of {submission.name}", str(venv / "bin" / "otter"), "run", "-a", str(zip_path), "-o", str(workdir),
         "--no-logo", str(workdir / submission.name))
    score = score_of(workdir / "results.json")
    log(f"[{time.monotonic() - start:6.0f} s] {submission.name}: {score}")
    return score
