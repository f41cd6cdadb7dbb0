"""A capstone's tests read only what the grader gives them (issue 33, item 4).

otter runs every test in a copy of the submission's namespace. A test that read ``pair``, ``tok``,
``chat_ids``, ``V`` or ``grading`` from it would read whatever the student last bound to those names,
so ``V = 2`` or a toy pair of one's own could cost a correct answer its points, and a fake ``grading``
or a made-up ``useful`` could hand a wrong one the points of a public test. Every test now imports what
it uses and takes the models from :mod:`specdec_core.course.given`:

- statically, every test cell of every master reads from the namespace only the names of its answer
  cells (the functions and classes the student writes);
- measured in-process (:mod:`specdec_core.course.mutants`), a submission that rebinds the setup names
  after its answers keeps a correct answer's full marks and rescues no wrong answer.
"""

from __future__ import annotations

import ast
import builtins
import json
import os
from pathlib import Path

import pytest

os.environ.setdefault("SPECDEC_QUICK", "1")  # the notebooks' short loops (the tests do not depend on them)

from specdec_core.course.mutants import Master  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MASTERS = sorted((ROOT / "assignments").glob("*.ipynb"))


def _bound(node: ast.AST) -> set[str]:
    names = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
            names.add(n.id)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(n.name)
        elif isinstance(n, ast.alias):
            names.add((n.asname or n.name).split(".")[0])
        elif isinstance(n, ast.arg):
            names.add(n.arg)
        elif isinstance(n, ast.ExceptHandler) and n.name:
            names.add(n.name)
    return names


def read_from_namespace(source: str) -> set[str]:
    """The names a cell reads before binding them itself (statement by statement): what it takes from
    the namespace it runs in."""
    known, free = set(dir(builtins)), set()
    for statement in ast.parse(source).body:
        here = _bound(statement)
        loads = {n.id for n in ast.walk(statement) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        free |= loads - known - here
        known |= here
    return free


def answer_names(master: Path) -> set[str]:
    """The functions and classes the student writes: those defined in the master's answer cells."""
    names = set()
    for cell in json.loads(master.read_text())["cells"]:
        source = "".join(cell["source"])
        if cell["cell_type"] == "code" and "# BEGIN SOLUTION" in source:
            names |= {n.name for n in ast.parse(source).body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    return names


@pytest.mark.parametrize("master", MASTERS, ids=lambda p: p.stem)
def test_every_test_reads_from_the_notebook_only_the_names_the_student_writes(master):
    allowed = answer_names(master)
    assert allowed, f"{master.name}: no answer cell"
    leaks = {t.name: sorted(read_from_namespace(t.source) - allowed) for t in Master(master).tests}
    assert {name: names for name, names in leaks.items() if names} == {}, (
        "these tests read setup names from the student's namespace: import them, and take the pair from "
        "specdec_core.course.given.offline()")


def test_the_checker_sees_a_name_read_from_the_namespace():
    assert read_from_namespace("import math\nassert math.isclose(f(V), 1)\n") == {"f", "V"}
    assert read_from_namespace("pair = g()\nx = [t for t in pair]\ndef h(a):\n    return a + b\n") == {"g", "b"}


# The setup names, rebound after the answers: a toy "pair", a tokenizer with another EOS, chat ids of
# three tokens, empty prompt lists, V = 2 — and, for the public tests, a fake grading module and results.
SHADOW = '''
from types import SimpleNamespace as _NS
from specdec_core.toy import tiny_llama as _tiny
pair = _NS(target=_tiny(12, seed=3), draft=_tiny(12, seed=4), tokenizer=None, device="cpu")
tok = _NS(eos_token_id=-1)
HELDOUT = COPY_HEAVY = ["?"]
V = 2
class _Lenient:  # every helper says "fine"
    P_MIN, TOY_PROMPT = 0.0, [2, 5, 3, 2, 5, 1, 2, 5]
    def __getattr__(self, name):
        return lambda *a, **k: 1.0 if "pvalue" in name else True
grading = _Lenient()
'''
SHADOW_C1 = SHADOW + "chat_ids = lambda tokenizer, prompt, device='cpu': torch.tensor([[1, 2, 3]])\n" \
                     "ModelDrafter = NGramDrafter = None\nmine, stats = [], LoopStats(target_calls=1, alpha=1, new_tokens=0)\n"
SHADOW_C2 = SHADOW + "load_drafter = None\npoint = {k: 1.0 for k in ('speedup', 'alpha', 'stats', 'step', 'c', 'v', 'predicted')}\n" \
                     "rows, DRAFTERS, PROMPTS, GAMMAS = [], {}, {}, []\n"  # (its answer's sweep uses chat_ids: kept)
SHADOW_C3 = SHADOW + "chat_ids = lambda tokenizer, prompt, device='cpu': torch.tensor([[1, 2, 3]])\nWarp = None\n" \
                     "useful = {'yours': {'extra': 9.0, 'alpha': 1.0}, 'prompt lookup': {'extra': 1.0, 'alpha': 0.5}}\n"

C1 = Master(ROOT / "assignments" / "01_build_speculative_decoding.ipynb")
C2 = Master(ROOT / "assignments" / "02_measure_and_explain.ipynb")
C3 = Master(ROOT / "assignments" / "03_design_a_drafter.ipynb")
C1_CHEAP = [t.name for t in C1.tests if t.name not in ("q2 public 1", "q2 hidden 1", "q2 hidden 2")]  # no χ² (slow)
C3_CHEAP = [t.name for t in C3.tests if t.name not in ("q2 hidden 2", "q2 hidden 3")]
C1_SKIP = ("grading.sampled_pvalue(speculative_generate_mine, 0",)  # printouts only
C2_SKIP = ("rows = sweep(",)
C3_SKIP = ("compare_drafters(", "first guesses against their q")


def _failed(result) -> dict[str, str]:
    return {n: o.message for n, o in result.outcomes.items() if not o.passed}


@pytest.mark.parametrize("master, shadow, only, skip", [
    (C1, SHADOW_C1, C1_CHEAP, C1_SKIP),
    (C2, SHADOW_C2, None, C2_SKIP),
    (C3, SHADOW_C3, C3_CHEAP, C3_SKIP),
], ids=["capstone 1", "capstone 2", "capstone 3"])
def test_rebinding_the_setup_names_keeps_a_correct_answers_full_marks(master, shadow, only, skip):
    result = master.grade(extra=shadow, only=only, skip=skip)
    print(f"{master.path.stem}: {result.total:g}/{result.possible:g} with the setup names rebound")
    assert _failed(result) == {}


SILENT = '''class Silent(Drafter):
    def __init__(self, vocab_size):
        self.vocab_size = vocab_size

    def propose(self, context, k):
        return torch.empty(0, dtype=torch.long), None if self.greedy else torch.empty(0, self.vocab_size)'''
MAKE = "def make_drafter(vocab_size: int) -> Drafter:\n    # BEGIN SOLUTION\n    return ContextNGramDrafter(vocab_size)\n"

# wrong answer + rebound names → (master, marker, edits, extra, the tests it must still fail)
WRONG = {
    "capstone 1: the AR loop ignoring the drafter, with a toy pair": (
        C1, "def speculative_generate_mine",
        [("drafted, q = drafter.propose(context, min(gamma, max_new_tokens - len(new)))",
          "drafted, q = torch.empty(0, dtype=torch.long), None"), ("drafter.accepted(n, k)", "pass")],
        SHADOW_C1, ["q3 hidden 1"]),
    "capstone 2: measure_point without 'predicted', with a made-up point": (
        C2, "def measure_point", [(', "predicted": predicted_speedup(alpha, gamma, c, v)}', "}")],
        SHADOW_C2, ["q3 public 1"]),
    "capstone 3: a silent drafter, with a lenient grading and a made-up useful": (
        C3, "def make_drafter", [(MAKE, f"{SILENT}\n\n{MAKE.replace('ContextNGramDrafter', 'Silent')}")],
        SHADOW_C3, ["q2 public 1", "q3 public 1", "q3 hidden 1"]),
}


@pytest.mark.parametrize("name", list(WRONG))
def test_rebinding_the_setup_names_rescues_no_wrong_answer(name):
    master, marker, edits, extra, tests = WRONG[name]
    skip = {C1: C1_SKIP, C2: C2_SKIP, C3: C3_SKIP}[master]
    result = master.grade({marker: edits}, only=tests, extra=extra, skip=skip)
    print(f"{name}: {_failed(result)}")
    assert sorted(_failed(result)) == sorted(tests)
