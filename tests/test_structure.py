"""The package's shape: no import cycles, the tooling layered one way, no file over 400 lines, one helper
per idea, one import path per name.

These read the source (``ast``), so they fail the day someone adds a cycle, a second atomic writer or
a fourth copy of "common prefix" — whatever the module.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "specdec_core"
SOURCES = sorted(p for p in ROOT.rglob("*.py"))


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


KNOWN = {module_name(p) for p in SOURCES}


def imports_in(tree: ast.AST, name: str, package: str) -> set[str]:
    """Every specdec_core module the code ``tree`` (module ``name`` of ``package``) imports: ``import`` and
    ``from … import`` at module level or inside a function, and string imports
    (``importlib.import_module("specdec_core.x")``, ``__import__("specdec_core.x")``), which would hide an edge."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            # `from . import x` may name a submodule x, or a name defined in the package
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in KNOWN else base for a in node.names]
        elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)
              and (getattr(node.func, "attr", None) or getattr(node.func, "id", None)) in ("import_module", "__import__")):
            targets = [node.args[0].value.partition(":")[0]]
        else:
            continue
        found |= {t for t in targets if t.startswith("specdec_core") and t in KNOWN and t != name}
    return found


def imports_of(path: Path) -> set[str]:
    """Every specdec_core module that ``path`` imports (:func:`imports_in`)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    return imports_in(ast.parse(path.read_text()), name, package)


def import_graph() -> dict[str, set[str]]:
    return {module_name(p): imports_of(p) for p in SOURCES}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph as a list of modules, or None (depth-first search, three colours)."""
    state, stack = {}, []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_no_import_cycles():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " → ".join(cycle)


def test_the_cycle_finder_finds_a_planted_cycle():
    graph = import_graph()
    assert find_cycle({**graph, "specdec_core.lm": graph["specdec_core.lm"] | {"specdec_core.ar"}}) is not None
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    # the edges the graph is made of: relative, absolute, function-level
    assert "specdec_core.lm" in graph["specdec_core.ar"]
    assert "specdec_core.viz" in graph["specdec_core.bench.report"]  # imported inside a function
    planted = ast.parse("import importlib\ndef f():\n    importlib.import_module('specdec_core.ar')\n"
                        "    __import__('specdec_core.lm')\n    name = 'specdec_core.tree'\n")
    assert imports_in(planted, "specdec_core.x", "specdec_core") == {"specdec_core.ar", "specdec_core.lm"}


# The tooling's layers, one way (specdec_core/__init__'s docstring): course → train → bench → viz. A
# package may import the concepts, its own modules and the packages BELOW it, never one above: viz/ draws
# plain data, bench/ measures (and draws its report with viz/), train/ evaluates what it trains with bench/,
# course/ (exercises, checkers, grading) may use all three.
LAYERS = {"specdec_core.viz": 0, "specdec_core.bench": 1, "specdec_core.train": 2, "specdec_core.course": 3}


def against_the_layers(graph: dict[str, set[str]]) -> list[str]:
    def layer(module: str) -> tuple[str, int] | None:
        return next(((p, n) for p, n in LAYERS.items() if module == p or module.startswith(p + ".")), None)

    wrong = []
    for module, targets in graph.items():
        if (here := layer(module)) is None:
            continue
        wrong += [f"{module} → {t}" for t in sorted(targets)
                  if (there := layer(t)) is not None and there[0] != here[0] and there[1] >= here[1]]
    return wrong


def test_the_tooling_imports_run_one_way():
    wrong = against_the_layers(import_graph())
    assert not wrong, "imports against the tooling's layers (course → train → bench → viz): " + "; ".join(wrong)


def test_the_layer_check_catches_planted_imports():
    graph = {"specdec_core.bench.x": {"specdec_core.train.y", "specdec_core.viz", "specdec_core.ar"},
             "specdec_core.train.y": {"specdec_core.bench.x", "specdec_core.train"},
             "specdec_core.viz.z": {"specdec_core.bench.x"}, "specdec_core.course.c": {"specdec_core.train.y"}}
    assert against_the_layers(graph) == ["specdec_core.bench.x → specdec_core.train.y",
                                         "specdec_core.viz.z → specdec_core.bench.x"]


def test_concepts_never_import_the_tooling():
    tooling = ("specdec_core.train", "specdec_core.bench", "specdec_core.viz", "specdec_core.course")
    concepts = {module_name(p) for p in ROOT.glob("*.py") if p.name != "__init__.py"}
    for module, targets in import_graph().items():
        if module in concepts:  # a top-level concept module
            assert not [t for t in targets if t.startswith(tooling)], f"{module} imports {targets}"


def test_no_file_over_400_lines():
    long = {str(p.relative_to(ROOT)): n for p in SOURCES if (n := len(p.read_text().splitlines())) > 400}
    assert not long, long


def test_no_module_imports_another_modules_private_helper():
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(("specdec_core", "")) and node.level:
                private = [a.name for a in node.names if a.name.startswith("_") and not a.name.startswith("__")
                           and not (path.parent / f"{a.name}.py").exists()]  # a private module of its own package
                assert not private, f"{path.relative_to(ROOT)} imports {private} from {node.module}"


# --- one helper per idea --------------------------------------------------------------------------

HELPERS = {  # the idea → the one place that defines it
    "common prefix of two token sequences": "specdec_core.generation:common_prefix",
    "atomic file write": "specdec_core.files:atomic_write",
    "model weight bytes": "specdec_core.memory:weight_bytes",
    "total variation": "specdec_core.exactness:total_variation",
    "learning-rate schedule": "specdec_core.train.loop:lr_at",
    "resumable training loop": "specdec_core.train.loop:train_loop",
    "interleaved timing harness": "specdec_core.bench.harness:interleaved",
}
OLD_NAMES = {"_common_prefix", "common_prefix_length", "correct_prefix", "first_difference", "atomic_save",
             "atomic_write_json", "write_atomic", "model_bytes", "cosine_lr", "_loop", "_smooth"}


def definitions() -> list[tuple[str, ast.FunctionDef]]:
    return [(module_name(p), node) for p in SOURCES for node in ast.walk(ast.parse(p.read_text()))
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)]


def calls(node: ast.AST) -> set[str]:
    """Names of everything ``node`` calls (``os.replace`` → "replace", ``x.abs()`` → "abs")."""
    out = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Call):
            f = n.func
            out.add(f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", ""))
    return out


def suspects(module: str, fn: ast.FunctionDef) -> set[str]:
    """Which ideas of HELPERS ``fn`` looks like it computes itself."""
    called, text = calls(fn), ast.unparse(fn)
    found = set()
    if fn.name in OLD_NAMES:
        found.add(f"old name {fn.name}")
    if called & {"replace", "rename"} and called & {"mkstemp", "NamedTemporaryFile", "write", "write_bytes", "save"}:
        found.add("atomic file write")  # write to a temporary file, then rename it over the target
    if "abs" in called and ("0.5 *" in text or "/ 2" in text) and "sum" in called:
        found.add("total variation")
    if "cos" in called and "pi" in text and "warm" in text:
        found.add("learning-rate schedule")
    if "element_size" in called and "numel" in called and ("parameters" in called or "buffers" in called):
        found.add("model weight bytes")
    timed_loops = [loop for loop in ast.walk(fn) if isinstance(loop, ast.For)
                   and any(isinstance(inner, ast.For) and calls(inner) & {"perf_counter", "Timer"}
                           for inner in ast.walk(loop) if inner is not loop)]
    if timed_loops and "median" in called:
        found.add("interleaved timing harness")  # rounds of timed calls, summarised by a median
    if ("zip" in called and "!=" in text and "break" in text and "n += 1" in text) or "nonzero" in called and "!=" in text:
        found.add("common prefix of two token sequences")
    return found


def test_each_helper_exists_once_and_nobody_writes_their_own():
    defs = definitions()
    for idea, where in HELPERS.items():
        module, name = where.split(":")
        owners = [m for m, fn in defs if fn.name == name]
        assert owners == [module], f"{idea}: {name} defined in {owners}, expected once in {module}"
        assert callable(getattr(importlib.import_module(module), name))
    # step_latency times ONE forward at several context lengths (lesson 01's curve), no methods side by side
    allowed = {tuple(w.split(":")) for w in HELPERS.values()} | {("specdec_core.bench.probes", "step_latency")}
    offenders = {f"{m}:{fn.name}": s for m, fn in defs if (m, fn.name) not in allowed and (s := suspects(m, fn))}
    assert not offenders, offenders


def test_the_scan_catches_planted_copies():
    planted = ast.parse('''
def my_prefix(a, b):
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n

def save_it(path, data):
    fd, tmp = tempfile.mkstemp(dir=path.parent)
    os.write(fd, data)
    os.replace(tmp, path)

def tv(p, q):
    return 0.5 * (p - q).abs().sum()

def lr(step, steps, warm):
    return 0.5 * (1 + math.cos(math.pi * (step - warm) / steps))

def cosine_lr(step):
    return 1.0

def bench(fns, repeats):
    times = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(t) for name, t in times.items()}
''')
    found = {fn.name: suspects("x", fn) for fn in planted.body}
    assert found["my_prefix"] == {"common prefix of two token sequences"}
    assert found["save_it"] == {"atomic file write"}
    assert found["tv"] == {"total variation"}
    assert found["lr"] == {"learning-rate schedule"}
    assert found["cosine_lr"] == {"old name cosine_lr"}
    assert found["bench"] == {"interleaved timing harness"}


# --- one import path per name ------------------------------------------------------------------

@pytest.mark.parametrize("old", ["distill", "benchmark", "methods", "drafter_eval", "quantized", "cllm_eval",
                                 "cllm_train", "distill_data", "viz_drafts", "viz_cllm", "widgets"])
def test_the_old_module_paths_are_gone(old):
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(f"specdec_core.{old}")


FACADES = {"specdec_core.viz", "specdec_core.course"}  # documented: every figure / every exercise's checks by name


def reexports(module: str) -> set[str]:
    """Names ``module`` imports from another specdec_core module (not a facade's): importing them from it
    would be a second path."""
    path = ROOT.parent / (module.replace(".", "/") + ".py")
    if module in FACADES or not path.exists():
        return set()
    package = module.rpartition(".")[0]
    return {a.asname or a.name for node in ast.parse(path.read_text()).body if isinstance(node, ast.ImportFrom)
            and (node.level or (node.module or "").startswith("specdec_core")) for a in node.names
            if imports_in(ast.Module([node], []), module, package)}


def test_each_name_is_imported_from_the_module_that_defines_it():
    """The drafters from drafters.py (not speculative.py), harness names from bench.harness (not bench), …:
    in the package, the tests and every notebook."""
    import json

    texts = [(module_name(p), p.name == "__init__.py", p.read_text()) for p in SOURCES]
    texts += [("tests", False, p.read_text()) for p in sorted(ROOT.parent.joinpath("tests").rglob("*.py"))]
    for folder in ("lessons", "solutions", "exercises", "assignments"):
        for nb in sorted(ROOT.parent.joinpath(folder).glob("*.ipynb")):
            cells = json.loads(nb.read_text())["cells"]
            texts += [(nb.name, False, "\n".join(line for line in "".join(c["source"]).splitlines()
                                                  if not line.lstrip().startswith(("%", "!"))))
                      for c in cells if c["cell_type"] == "code"]
    wrong = set()
    for name, init, text in texts:
        package = name if init else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ImportFrom) and (found := imports_in(ast.Module([node], []), name, package)):
                base = found.pop() if len(found) == 1 else None
                wrong |= {f"{name}: {a.name} from {base}" for a in node.names if base and a.name in reexports(base)}
    assert not wrong, sorted(wrong)
    assert not hasattr(__import__("specdec_core.nf4").nf4, "model_bytes")
    assert "Drafter" in reexports("specdec_core.speculative") and reexports("specdec_core.bench.harness")


def test_the_package_map_lists_exactly_the_modules_on_disk():
    """specdec_core/__init__'s docstring names every top-level module once (a new module must join it)."""
    import re

    import specdec_core
    package = Path(specdec_core.__file__).parent
    on_disk = {p.name for p in package.glob("*.py") if p.name != "__init__.py"}
    listed = set(re.findall(r"^    (\w+\.py)\s", specdec_core.__doc__, flags=re.M))
    assert listed == on_disk, f"missing from the map: {sorted(on_disk - listed)}; not on disk: {sorted(listed - on_disk)}"


def test_the_bench_map_lists_exactly_its_files():
    import re

    from specdec_core import bench
    on_disk = {p.name for p in (ROOT / "bench").iterdir() if p.suffix in (".py", ".sh") and p.name != "__init__.py"}
    listed = set(re.findall(r"^    (\w+\.(?:py|sh))\s", bench.__doc__, flags=re.M))
    assert listed == on_disk, f"missing from the map: {sorted(on_disk - listed)}; not on disk: {sorted(listed - on_disk)}"


def test_the_speculative_step_reads_in_one_screen():
    """Issue #31.5: the algorithm (draft → one verify → keep) is a short step, as gpt-fast's
    speculative_decode; buffers, γ, EOS, timing and statistics live in the loop around it."""
    import inspect

    from specdec_core import speculative

    for fn, limit in ((speculative.speculative_step, 40), (speculative.draft, 12)):
        assert len(inspect.getsource(fn).splitlines()) <= limit, fn.__name__
    loop = inspect.getsource(speculative.speculative_generate)
    assert "verify(" not in loop and "rollback" not in loop, "the loop must call the step, not do its work"
