"""Device hygiene of the GPU-path modules, read from the source (``ast``): no tensor lands on the host
by accident.

With one device, a tensor made without ``device=``, a ``torch.Generator()`` or a ``.cpu()`` does
nothing wrong, so the CPU tests cannot see it; on a GPU each is a crash ("Expected all tensors to be
on the same device") or a silent host copy. The scan flags, in every module on a GPU path:

- a tensor factory without ``device=`` (``torch.tensor``, ``zeros``, ``arange``, ``randint``, …;
  ``*_like`` and ``x.new_*`` inherit their device and pass), or with a literal CPU device;
- ``torch.Generator()`` without a device;
- ``.cpu()``, ``.numpy()`` and ``.to("cpu")``.

Each finding is fixed, or marked as host by design in ONE way: a trailing comment ``# host: <why>``
on the line that names the call (the line of ``torch.zeros`` / of ``.cpu``). A mark needs a reason,
and a mark on a line with nothing to mark is stale and fails too. ``SPECDEC_HYGIENE_ROOT`` points the
scan at another copy of the package (e.g. an old commit's worktree).
"""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

import pytest

ROOT = Path(os.environ.get("SPECDEC_HYGIENE_ROOT") or Path(__file__).resolve().parents[1] / "specdec_core")

# Not on a GPU path (every other module is scanned):
NOT_GPU_PATH = {
    "course/": "graders of the learner's functions: they build their own toy models and data on the CPU",
    "viz/": "plots: matplotlib reads host arrays",
}
# Scanned once their owners' changes land (issue 44, item 3: host syncs; item 4: gpu-check at real
# shapes). Their findings at the time of writing, for the record:
#   tree.py:97,102 (tree_mask: eye, tensor); lookahead.py:64,72,73,92,96 (tensor, zeros);
#   bench/gpucheck.py:75,163,164,190,206 (arange, tensor, full, randn), 211,214,216 (.cpu());
#   bench/gpuscale.py:142,143 (Generator, randint).
PENDING: set[str] = set()

FACTORIES = {"tensor", "as_tensor", "zeros", "ones", "empty", "full", "arange", "range", "randn", "rand",
             "randint", "randperm", "eye", "linspace", "logspace", "tril_indices", "triu_indices", "empty_strided",
             "normal", "scalar_tensor", "Tensor", "LongTensor", "FloatTensor", "BoolTensor", "IntTensor"}
MARK = re.compile(r"#\s*host:(.*)$")


def _is_cpu(node: ast.expr | None) -> bool:
    """A literal CPU device: "cpu", "cpu:0" or torch.device("cpu")."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value.split(":")[0] == "cpu"
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "device"
            and bool(node.args) and _is_cpu(node.args[0]))


def _device_kw(call: ast.Call) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == "device"), None)


def findings(source: str) -> list[tuple[int, str]]:
    """(line, what) of every device finding in ``source``; the line is the one naming the call."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        f, line, what = node.func, node.func.end_lineno, None
        on_torch = isinstance(f.value, ast.Name) and f.value.id == "torch"
        device = _device_kw(node)
        if on_torch and f.attr in FACTORIES and (device is None or _is_cpu(device)):
            what = f"torch.{f.attr} without a device" if device is None else f"torch.{f.attr} on the CPU"
        elif on_torch and f.attr == "Generator" and not node.args and (device is None or _is_cpu(device)):
            what = "torch.Generator on the host"
        elif f.attr in ("cpu", "numpy") and not node.args:
            what = f".{f.attr}()"
        elif f.attr == "to" and (any(_is_cpu(a) for a in node.args) or _is_cpu(device)):
            what = '.to("cpu")'
        if what:
            out.append((line, what))
    return sorted(set(out))


def problems(source: str, name: str) -> list[str]:
    """Unmarked findings, marks without a reason and stale marks of one module."""
    lines = source.splitlines()
    found = findings(source)
    flagged = {line for line, _ in found}
    out = []
    for line, what in found:
        mark = MARK.search(lines[line - 1])
        if mark is None:
            out.append(f"{name}:{line}: {what}: fix it (pass device=) or mark the line `# host: <why>`")
        elif len(re.findall(r"[A-Za-z]+", mark.group(1))) < 2:
            out.append(f"{name}:{line}: `# host:` needs a reason (a few words: why this lives on the host)")
    for i, text in enumerate(lines, 1):
        if MARK.search(text) and i not in flagged:
            out.append(f"{name}:{i}: a `# host:` mark with nothing to mark on its line: remove it")
    return out


def gpu_path_modules(root: Path = ROOT) -> list[Path]:
    def name(p: Path) -> str:
        return p.relative_to(root).as_posix()

    return [p for p in sorted(root.rglob("*.py"))
            if not any(name(p).startswith(d) for d in NOT_GPU_PATH) and name(p) not in PENDING]


def marks_per_module(root: Path = ROOT) -> dict[str, int]:
    """How many `# host:` marks each scanned module holds (for the issue's note)."""
    counts = {p.relative_to(root).as_posix(): sum(bool(MARK.search(t)) for t in p.read_text().splitlines())
              for p in gpu_path_modules(root)}
    return {k: v for k, v in counts.items() if v}


def test_gpu_path_modules_put_every_tensor_on_a_device_or_say_why_not():
    modules = gpu_path_modules()
    assert len(modules) > 40, f"the scan found only {len(modules)} modules under {ROOT}"
    bad = [msg for p in modules for msg in problems(p.read_text(), p.relative_to(ROOT).as_posix())]
    assert not bad, f"{len(bad)} device finding(s):\n" + "\n".join(bad)


def test_the_exclusions_name_folders_that_exist():
    for entry in NOT_GPU_PATH:
        assert (ROOT / entry).is_dir(), f"{entry} is excluded in tests/test_device_hygiene.py but not on disk"


PLANTED = {
    "x = torch.zeros(3)": ["torch.zeros without a device"],
    "x = torch.arange(n, dtype=torch.long)": ["torch.arange without a device"],
    "x = torch.tensor([1, 2], device='cpu')": ["torch.tensor on the CPU"],
    "x = torch.randint(0, 9, (2,), generator=g, device=torch.device('cpu'))": ["torch.randint on the CPU"],
    "g = torch.Generator().manual_seed(0)": ["torch.Generator on the host"],
    "y = x.detach().cpu()": [".cpu()"],
    "y = model(x).logits\\\n    .float().numpy()": [".numpy()"],
    "y = x.to('cpu')": ['.to("cpu")'],
    "y = x.to(device='cpu:0')": ['.to("cpu")'],
    "x = torch.zeros(3, device=d)": [],
    "x = torch.zeros_like(y); z = y.new_zeros(3); w = torch.empty_like(y)": [],
    "g = torch.Generator(device=d)": [],
    "g = torch.Generator('cuda')": [],
    "y = x.to(d)": [],
}


@pytest.mark.parametrize("source", PLANTED)
def test_the_scan_flags_what_it_should_and_nothing_else(source):
    assert [what for _, what in findings(source)] == PLANTED[source]


def test_a_mark_needs_a_reason_and_something_to_mark():
    assert problems("x = torch.zeros(3)  # host: a constant table\n", "m") == []
    assert "needs a reason" in problems("x = torch.zeros(3)  # host:\n", "m")[0]
    assert "needs a reason" in problems("x = torch.zeros(3)  # host: ok\n", "m")[0]
    assert "with nothing to mark" in problems("x = torch.zeros(3, device=d)  # host: a constant table\n", "m")[0]
    assert "fix it" in problems("x = torch.zeros(3)  # a constant table\n", "m")[0]
    # a call over several lines is marked on the line that names it
    assert problems("ids = torch.randint(0, 9,  # host: drawn from a seeded generator\n    (3,))\n", "m") == []
    assert "fix it" in problems("ids = torch.randint(0, 9,\n    (3,))  # host: drawn from a seeded generator\n", "m")[0]
