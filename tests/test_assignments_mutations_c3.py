"""The mutation table of capstone 3 (a drafter of your own design), measured in-process like capstone
1's (``test_assignments_mutations.py``): a drafter that guesses at random, one that never proposes and
one that lies about q lose points on the test that names the mistake; a correct deterministic drafter
(one-hot q: the student's own prompt lookup) gets full marks — its q is checked by its support, not by
a χ² with zero degrees of freedom. The χ² tests of the loop's output take ≈ 1–2 min each: slow."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("SPECDEC_QUICK", "1")  # the notebook's short loops (the tests do not depend on them)

from specdec_core.course.mutants import Master  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CAPSTONE3 = Master(ROOT / "assignments" / "03_design_a_drafter.ipynb")
ANSWER = "class ContextNGramDrafter"
SKIP = ("compare_drafters(", "first guesses against their q")  # feedback printouts, never graded
LOOP_CHI2 = ["q2 hidden 2", "q2 hidden 3"]
CHEAP = [t.name for t in CAPSTONE3.tests if t.name not in LOOP_CHI2]
MAKE = "def make_drafter(vocab_size: int) -> Drafter:\n    # BEGIN SOLUTION\n    return ContextNGramDrafter(vocab_size)\n"


def drafter(source: str, name: str) -> list[tuple[str, str]]:
    """Edits that put the class ``source`` in the answer cell and make ``make_drafter`` return it."""
    return [(MAKE, f"{source}\n\n{MAKE.replace('ContextNGramDrafter(vocab_size)', f'{name}(vocab_size)')}")]


UNIFORM = '''class Uniform(Drafter):
    def __init__(self, vocab_size):
        self.vocab_size = vocab_size

    def propose(self, context, k):
        q = torch.full((k, self.vocab_size), 1 / self.vocab_size)
        tokens = torch.multinomial(q, 1, generator=self.generator).view(-1)
        return tokens, None if self.greedy else q'''
SILENT = '''class Silent(Drafter):
    def __init__(self, vocab_size):
        self.vocab_size = vocab_size

    def propose(self, context, k):
        return torch.empty(0, dtype=torch.long), None if self.greedy else torch.empty(0, self.vocab_size)'''
MY_LOOKUP = '''class MyLookup(Drafter):
    """My prompt lookup: the token after the latest earlier match of the last 3, 2 or 1 tokens; q one-hot."""

    def __init__(self, vocab_size):
        self.vocab_size = vocab_size

    def propose(self, context, k):
        ids, out = context[0].tolist(), []
        for _ in range(k):
            nxt = None
            for n in (3, 2, 1):
                if len(ids) > n:
                    tail = ids[-n:]
                    hits = [i + n for i in range(len(ids) - n) if ids[i:i + n] == tail]
                    if hits:
                        nxt = ids[hits[-1]]
                        break
            if nxt is None:
                break
            out.append(nxt)
            ids.append(nxt)
        tokens = torch.tensor(out, dtype=torch.long)
        return tokens, None if self.greedy else torch.eye(self.vocab_size)[tokens]'''

# wrong answer → (edits to the answer cell, the test that must fail, the points it carries)
WRONG = {
    "a uniform-random drafter": (drafter(UNIFORM, "Uniform"), "q3 hidden 1", 1.5),
    "a silent drafter (never proposes)": (drafter(SILENT, "Silent"), "q2 public 1", 1.0),
    "a silent drafter (never proposes), usefulness": (drafter(SILENT, "Silent"), "q3 hidden 1", 1.5),
    "a drafter that lies about q (always its likeliest guess)": (
        [("token = int(q.argmax()) if self.greedy else int(sample(q, self.generator))",
          "token = int(q.argmax())  # always the likeliest: not drawn from q")], "q2 public 1", 1.0),
}
RIGHT = {
    "the solution (sampled successor shares)": [],
    "a deterministic one-hot-q drafter (my own prompt lookup)": drafter(MY_LOOKUP, "MyLookup"),
}


@pytest.mark.parametrize("name", list(WRONG))
def test_a_wrong_drafter_loses_the_points_of_the_test_that_names_its_mistake(name):
    edits, test, points = WRONG[name]
    result = CAPSTONE3.grade({ANSWER: edits}, only=[test], skip=SKIP)
    print(f"{name}: fails {test} (−{points:g}): {result[test].message}")
    assert not result[test].passed and result[test].possible == points


@pytest.mark.parametrize("name", list(RIGHT))
def test_a_right_drafter_gets_full_marks_on_the_cheap_tests(name):
    result = CAPSTONE3.grade({ANSWER: RIGHT[name]} if RIGHT[name] else None, only=CHEAP, skip=SKIP)
    print(f"{name}: {result.total:g}/{result.possible:g}")
    assert result.failed() == {}, {n: o.message for n, o in result.outcomes.items() if not o.passed}


@pytest.mark.slow
def test_a_deterministic_drafter_passes_the_loop_chi_square_tests():
    result = CAPSTONE3.grade({ANSWER: RIGHT["a deterministic one-hot-q drafter (my own prompt lookup)"]},
                             only=LOOP_CHI2, skip=SKIP)
    assert result.failed() == {}, {n: o.message for n, o in result.outcomes.items() if not o.passed}


def test_the_points_add_up_and_hidden_inputs_come_from_the_grading_seed():
    assert sum(t.points for t in CAPSTONE3.tests) == 10
    hidden = [t.source for t in CAPSTONE3.tests if "hidden" in t.name]
    assert all("grading_rng(" in s for s in hidden) and not any("random.Random(" in s for s in hidden)
