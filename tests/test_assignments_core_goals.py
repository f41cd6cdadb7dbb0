"""Points follow the learning goal (issue 48): on each capstone, answers that miss a core goal
(:data:`specdec_core.course.core_goals.CORE_GOALS`) in different ways score at most half, and right
answers written differently score full marks — with the default grading seed and two others.

Graded like the other mutation tables (:mod:`specdec_core.course.mutants`: the master's own test cells,
in-process, with otter's seed line); the public tests draw nothing from the grading seed, so they are
graded once and the hidden ones once per seed. A wrong answer's gated tests stop at the gate (a
fraction of a second); a right answer's χ² tests make its full grading slow (1–20 min on two cores), so
the suite checks the gate at every seed and :func:`scores` measured the tables once, every test at every
seed. The tables below (:data:`TABLE`, :data:`RIGHT_TABLE`) are the README's, row by row
(``test_the_readme_tables_are_these``); ``tests/test_assignments.py`` grades two of the wrong rows with the
real ``otter run``.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

os.environ.setdefault("SPECDEC_QUICK", "1")  # the notebooks' short loops (no test depends on them)

import test_assignments_mutations as m1  # noqa: E402
import test_assignments_mutations_c2 as m2  # noqa: E402
import test_assignments_mutations_c3 as m3  # noqa: E402
import test_assignments_mutations_c4 as m4  # noqa: E402

from specdec_core.course.core_goals import CORE_GOALS  # noqa: E402
from specdec_core.course.mutants import Master  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SEEDS = (None, 101, 202)
# capstone 3's gate runs the offline pair on two prompts (≈ 10–35 s per grading here): its rows are slow
PARAMS = [pytest.param(c, marks=pytest.mark.slow) if c == "c3" else c for c in ("c1", "c2", "c3", "c4")]  # the default grading seed, and two students' own (otter's seed)
GATE = "waits for core goal"

# --- capstone 1: the speculative loop -------------------------------------------------------------------
PLAIN_AR = '''
    warp = Warp(temperature, top_k, top_p)
    stops = set() if eos_token_id is None else {eos_token_id} if isinstance(eos_token_id, int) else set(eos_token_id)
    decoder, new = Decoder(target), []
    logits = decoder.prefill(input_ids.to(target.device))[0, -1]
    while len(new) < max_new_tokens:
        nxt = int(logits.argmax()) if warp.greedy else int(sample(warp(logits), generator))
        new.append(nxt)
        if nxt in stops or len(new) == max_new_tokens:
            break
        logits = decoder.step(torch.tensor([[nxt]], device=target.device))[0, -1]
    calls = max(len(new) - 1, 1)
    return new, LoopStats(target_calls=calls, alpha=0.0, new_tokens=len(new))
'''
VERIFY = "logits = decoder.step(torch.cat([context[:, -1:], drafted.view(1, -1)], dim=1))[0]  # [k + 1, V]"
ACCEPT = "while n < k and torch.rand((), generator=generator) < p[n, drafted[n]] / q[n, drafted[n]]:"
PROPOSE = "drafted, q = drafter.propose(context, min(gamma, max_new_tokens - len(new)))"


def c1_body(body: str) -> dict:
    """Edits that replace the whole solution body of capstone 1's answer with ``body``."""
    cell = next("".join(c["source"]) for c in json.loads(m1.CAPSTONE1.path.read_text())["cells"]
                if c["cell_type"] == "code" and m1.ANSWER in "".join(c["source"]))
    solution = re.search(r"# BEGIN SOLUTION\n([\s\S]*?)    # END SOLUTION", cell).group(1)
    return {m1.ANSWER: [(solution, body.strip("\n") + "\n")]}


C1_WRONG = {
    "a plain AR loop that never calls the drafter": c1_body(PLAIN_AR),
    "the drafter asked, its guesses dropped (one token per target call)": {m1.ANSWER: [
        ("k = drafted.numel()", "drafted, k = drafted[:0], 0  # guesses dropped")]},
    "one target forward per guess (verified one by one)": {m1.ANSWER: [(VERIFY, (
        "fed = torch.cat([context[:, -1:], drafted.view(1, -1)], dim=1)\n"
        "        logits = torch.cat([decoder.step(fed[:, i:i + 1])[0] for i in range(k + 1)])  # one forward per token"))]},
    "speculation only when greedy (plain sampling at T > 0)": {m1.ANSWER: [(PROPOSE, (
        "drafted, q = drafter.propose(context, min(gamma, max_new_tokens - len(new))) if warp.greedy else "
        "(torch.empty(0, dtype=torch.long), None)"))]},
    "every sampled guess kept (no accept test)": {m1.ANSWER: [(ACCEPT, "while n < k:")]},
    "the accept ratio upside down, min(1, q/p)": {m1.ANSWER: [(ACCEPT, ACCEPT.replace(
        "p[n, drafted[n]] / q[n, drafted[n]]", "q[n, drafted[n]] / p[n, drafted[n]]"))]},
}
C1_RIGHT = {
    "the solution": {},
    "accept count by a for/else": {m1.ANSWER: m1.RIGHT["another loop structure (accept count by a for/else)"]},
    "first token from the prefill": {m1.ANSWER: m1.PREFILL_FIRST},
    "every uniform drawn up front": {m1.ANSWER: m1.RIGHT_SAMPLED["random draws in another order (every uniform up front)"]},
}

# --- capstone 2: measure and explain --------------------------------------------------------------------
C2_WRONG = {
    "not interleaved (every repeat of one, then the next)": {m2.TIMING: m2.WRONG["not interleaved (every repeat of one, then the next)"][1]},
    "each function's repeats timed as one block, split evenly": {m2.TIMING: [(
        "    times = {name: [] for name in calls}\n    for _ in range(repeats):\n        for name, fn in calls.items():\n"
        "            start = clock()\n            fn()\n            times[name].append(clock() - start)\n",
        "    times = {}\n    for name, fn in calls.items():\n        start = clock()\n        for _ in range(repeats):\n"
        "            fn()\n        times[name] = [(clock() - start) / repeats] * repeats\n")]},
    "c and v assumed (0.1 and 1), not measured": {m2.POINT: [
        ("c = stats.draft_time / drafted / step if drafted else 0.0", "c = 0.1"),
        ("v = stats.verify_time / stats.target_calls / step", "v = 1.0")]},
    "α assumed (0.7), not the run's": {m2.POINT: [(
        "alpha = stats.alpha if not math.isnan(stats.alpha) else 0.0", "alpha = 0.7")]},
    "a made-up step (one AR call's time ÷ n)": {m2.POINT: m2.WRONG["a made-up step (one AR call's time ÷ n)"][1]},
}
C2_RIGHT = {"the solution": {}, **{name: {marker: edits} for name, (marker, edits) in m2.RIGHT.items()}}

# --- capstone 3: a drafter of your own design -----------------------------------------------------------
SAME_TOKEN = '''class SameToken(Drafter):
    def __init__(self, vocab_size):
        self.vocab_size = vocab_size

    def propose(self, context, k):
        tokens = torch.zeros(k, dtype=torch.long)  # always token 0, for sure
        return tokens, None if self.greedy else torch.nn.functional.one_hot(tokens, self.vocab_size).float()'''
LAST_REPEATED = '''class LastRepeated(Drafter):
    def __init__(self, vocab_size):
        self.vocab_size = vocab_size

    def propose(self, context, k):
        tokens = context[0, -1:].repeat(k).cpu()  # the last token, k times
        return tokens, None if self.greedy else torch.nn.functional.one_hot(tokens, self.vocab_size).float()'''
FROM_THE_START = '''class FromTheStart(Drafter):
    def __init__(self, vocab_size):
        self.vocab_size = vocab_size

    def propose(self, context, k):
        tokens = context[0, :k].cpu()  # the context's first k tokens
        return tokens, None if self.greedy else torch.nn.functional.one_hot(tokens, self.vocab_size).float()'''
SPAN_COPY = '''class SpanCopy(Drafter):
    """Copies, in one go, the k tokens that followed the latest earlier occurrence of the last two tokens
    (else of the last one); q one-hot."""

    def __init__(self, vocab_size):
        self.vocab_size = vocab_size

    def propose(self, context, k):
        ids = context[0].tolist()
        for n in (2, 1):
            tail = ids[-n:]
            starts = [i for i in range(len(ids) - n - 1, -1, -1) if ids[i:i + n] == tail]
            if len(ids) > n and starts:
                span = ids[starts[0] + n:starts[0] + n + k]
                tokens = torch.tensor(span, dtype=torch.long)
                return tokens, None if self.greedy else torch.nn.functional.one_hot(tokens, self.vocab_size).float()
        return torch.empty(0, dtype=torch.long), None if self.greedy else torch.empty(0, self.vocab_size)'''
C3_WRONG = {
    "a uniform-random drafter": {m3.ANSWER: m3.drafter(m3.UNIFORM, "Uniform")},
    "a silent drafter (never proposes)": {m3.ANSWER: m3.drafter(m3.SILENT, "Silent")},
    "always the same token": {m3.ANSWER: m3.drafter(SAME_TOKEN, "SameToken")},
    "the last token repeated": {m3.ANSWER: m3.drafter(LAST_REPEATED, "LastRepeated")},
    "the context's first k tokens": {m3.ANSWER: m3.drafter(FROM_THE_START, "FromTheStart")},
}
C3_RIGHT = {
    "the solution (sampled successor shares)": {},
    "my own prompt lookup (one-hot q)": {m3.ANSWER: m3.drafter(m3.MY_LOOKUP, "MyLookup")},
    "a span copier (k tokens at once)": {m3.ANSWER: m3.drafter(SPAN_COPY, "SpanCopy")},
}

# --- capstone 4: verify a token tree --------------------------------------------------------------------
C4_WRONG = {
    "the target's own sample, ignoring the tree": m4.WRONG["the target's own sample, ignoring the tree (exact, accepts nothing)"][0],
    "a hard-coded answer (passes the public test)": m4.WRONG["a hard-coded answer (passes the public test)"][0],
    "a chain: only each node's first child tried": {m4.TREE: [(
        "kids = [i for i, parent in enumerate(parents) if parent == node]",
        "kids = [i for i, parent in enumerate(parents) if parent == node][:1]")]},
    "depth one: an accepted child's children never tried": {m4.TREE: [(
        "        node = kids[k]\n        path.append(node)\n",
        "        node = kids[k]\n        path.append(node)\n        return path, int(sample(p[node + 1], generator))\n")]},
}
C4_RIGHT = {name: edits for name, edits in m4.RIGHT.items()}

CAPSTONES = {  # capstone → (master, cells skipped, wrong answers, right answers, χ² tests a right answer skips here)
    "c1": (m1.CAPSTONE1, m1.SLOW_PRINTS + ("mine, stats = speculative_generate_mine(pair.target", "_, same = speculative_generate_mine("),
           C1_WRONG, C1_RIGHT, m1.CHI2),
    "c2": (m2.CAPSTONE2, m2.SKIP_MORE, C2_WRONG, C2_RIGHT, []),
    "c3": (m3.CAPSTONE3, m3.SKIP + ("useful = grading.acceptance_against_lookup(",), C3_WRONG, C3_RIGHT, m3.LOOP_CHI2),
    "c4": (m4.CAPSTONE4, m4.SKIP, C4_WRONG, C4_RIGHT, []),
}


GATED_TEST = {"c1": "q1 hidden 3", "c2": "q3 public 1", "c3": "q1 hidden 1", "c4": "q2 hidden 2"}  # waits for every core goal


def scores(master: Master, edits: dict, skip: tuple, leave_out: list[str] = ()) -> tuple[list[float], float, list[str]]:
    """(points at each of :data:`SEEDS`, points possible, the failed tests' messages) of one answer, every
    test graded (the public ones once: they draw nothing from the seed). How :data:`TABLE` was measured."""
    public = [t.name for t in master.tests if "public" in t.name and t.name not in leave_out]
    hidden = [t.name for t in master.tests if "hidden" in t.name and t.name not in leave_out]
    once = master.grade(edits or None, only=public, skip=skip)
    totals, messages, possible = [], [o.message for o in once.outcomes.values() if not o.passed], 0.0
    for seed in SEEDS:
        result = master.grade(edits or None, only=hidden, skip=skip, seed=seed)
        totals.append(once.total + result.total)
        possible = once.possible + result.possible
        messages += [o.message for o in result.outcomes.values() if not o.passed]
    return totals, possible, messages


@pytest.mark.parametrize("capstone", list(CAPSTONES))
def test_without_its_core_goals_a_capstone_gives_at_most_half_its_points(capstone):
    """The gate's bound: the tests that do not wait for the core goals (those that check a core goal, and
    most public tests) carry at most half the points; every other test runs inside ``waiting_for``."""
    master = CAPSTONES[capstone][0]
    gated = [t for t in master.tests if f"goals.waiting_for({capstone!r}" in t.source]
    possible = sum(t.points for t in master.tests)
    assert sum(t.points for t in master.tests if t not in gated) <= possible / 2
    for t in gated:  # the body is the with-block's: nothing of the test runs before the gate
        before, _, body = t.source.partition(f"with goals.waiting_for({capstone!r}")
        assert all(line.startswith(("import ", "from ", "grading", "goals", '"""', "hidden", "points")) or not line.strip()
                   for line in before.splitlines()), t.name
        assert all(line.startswith("    ") for line in body.splitlines()[1:] if line.strip()), t.name


@pytest.mark.parametrize("capstone", PARAMS)
def test_every_answer_that_misses_a_core_goal_waits_at_every_seed(capstone):
    """Each wrong answer of the table fails the gate at the default seed and two others: its gated tests
    score 0 and say which core goal they wait for (so, by the bound above, it scores at most half)."""
    master, skip, wrong, _, _ = CAPSTONES[capstone]
    assert len(wrong) >= 4
    for name, edits in wrong.items():
        for seed in SEEDS:
            result = master.grade(edits, only=[GATED_TEST[capstone]], skip=skip, seed=seed)
            outcome = result[GATED_TEST[capstone]]
            assert not outcome.passed and outcome.message.startswith(f"AssertionError: ✗ {GATE}"), (name, seed, outcome.message)
        print(f"{capstone} · {name}: {outcome.message[:160]}")
        assert max(TABLE.get(capstone, {}).get(name, (0,))) <= sum(t.points for t in master.tests) / 2  # the README's row


@pytest.mark.parametrize("capstone", PARAMS)
def test_every_right_answer_meets_the_core_goals_at_every_seed(capstone):
    """Each right answer written differently passes the gate at every seed (its full marks at the default
    seed: the slow tests of test_assignments_mutations*.py and ``scores``)."""
    master, skip, _, right, _ = CAPSTONES[capstone]
    assert len(right) >= 3
    for name, edits in right.items():
        for seed in SEEDS:
            result = master.grade(edits or None, only=[GATED_TEST[capstone]], skip=skip, seed=seed)
            assert result.failed() == {}, (name, seed, result[GATED_TEST[capstone]].message)


def test_every_capstone_writes_down_its_core_goals_in_its_master():
    for capstone, (master, *_) in CAPSTONES.items():
        assert "Core goal" in master.path.read_text() and len(CORE_GOALS[capstone]) in (1, 2)


@pytest.mark.slow
def test_capstone_4s_table_graded_in_full():
    """The cheapest capstone (toy tables, no model): every wrong answer's every test at three seeds is its row."""
    master, skip, wrong, right, _ = CAPSTONES["c4"]
    for name, edits in wrong.items():
        totals, possible, messages = scores(master, edits, skip)
        assert tuple(totals) == TABLE["c4"][name] and any(GATE in m for m in messages), (name, totals)
    for name, edits in right.items():
        totals, possible, _ = scores(master, edits, skip)
        assert tuple(totals) == RIGHT_TABLE["c4"][name], (name, totals)


# capstone → wrong answer → its points at the default seed, seed 101, seed 202 (the README's table)
# measured with ``scores`` (every test, the master's own cells, otter's seed line); rows not yet measured are absent
TABLE: dict[str, dict[str, tuple[float, ...]]] = {
    "c1": {"a plain AR loop that never calls the drafter": (3, 3, 3),
           "the drafter asked, its guesses dropped (one token per target call)": (3, 3, 3),
           "one target forward per guess (verified one by one)": (3, 3, 3),
           "speculation only when greedy (plain sampling at T > 0)": (4, 4, 4),  # exact: passes the public law test
           "every sampled guess kept (no accept test)": (3, 3, 3),
           "the accept ratio upside down, min(1, q/p)": (3, 3, 3)},
    "c2": {"not interleaved (every repeat of one, then the next)": (0, 0, 0),
           "each function's repeats timed as one block, split evenly": (3, 3, 3),
           "c and v assumed (0.1 and 1), not measured": (5, 5, 5), "α assumed (0.7), not the run's": (5, 5, 5),
           "a made-up step (one AR call's time ÷ n)": (5, 5, 5)},
    "c3": {"a uniform-random drafter": (1, 1, 1), "a silent drafter (never proposes)": (0, 0, 0),
           "always the same token": (1, 1, 1), "the last token repeated": (1, 1, 1),
           "the context's first k tokens": (1, 1, 1)},
    "c4": {"the target's own sample, ignoring the tree": (2, 2, 2), "a hard-coded answer (passes the public test)": (3, 3, 3),
           "a chain: only each node's first child tried": (2, 2, 2), "depth one: an accepted child's children never tried": (2, 2, 2)},
}


# capstone → right answer → its points at the three seeds, measured the same way (every one: full marks)
RIGHT_TABLE: dict[str, dict[str, tuple[float, ...]]] = {
    "c1": {"the solution": (14, 14, 14), "accept count by a for/else": (14, 14, 14),
           "first token from the prefill": (14, 14, 14), "every uniform drawn up front": (14, 14, 14)},
    "c2": {"the solution": (12, 12, 12), "E(α, γ) as the sum Σ α^i": (12, 12, 12),
           "statistics of the first run (the warm-up) instead of the last": (12, 12, 12),
           "timing loop over the dict's items, durations collected per round": (12, 12, 12)},
    "c3": {"the solution (sampled successor shares)": (10, 10, 10), "my own prompt lookup (one-hot q)": (10, 10, 10),
           "a span copier (k tokens at once)": (10, 10, 10)},
    "c4": {name: (10, 10, 10) for name in C4_RIGHT},
}


def readme_rows(table: dict[str, dict[str, tuple[float, ...]]] = TABLE) -> list[str]:
    rows = []
    for capstone, (master, *_rest) in CAPSTONES.items():
        possible = sum(t.points for t in master.tests)
        for name, totals in table.get(capstone, {}).items():
            rows.append(f"| {capstone[1]} | {name} | {' / '.join(f'{t:g}' for t in totals)} of {possible:g} |")
    return rows


def test_the_readme_tables_are_these():
    readme = (ROOT / "README.md").read_text()
    for row in readme_rows(TABLE) + readme_rows(RIGHT_TABLE):
        assert row in readme, row


def test_every_answer_has_its_measured_row():
    """The tables cover every answer of :data:`CAPSTONES`: each wrong one at most half the points at each
    seed, each right one full marks at each seed."""
    for capstone, (master, _, wrong, right, _) in CAPSTONES.items():
        possible = sum(t.points for t in master.tests)
        assert set(TABLE[capstone]) == set(wrong) and set(RIGHT_TABLE[capstone]) == set(right), capstone
        assert all(max(row) <= possible / 2 for row in TABLE[capstone].values()), capstone
        assert all(row == (possible,) * len(SEEDS) for row in RIGHT_TABLE[capstone].values()), capstone


def late_gates(cells: list[dict]) -> list[str]:
    """Gates that name a function the notebook has not defined yet where the test stands. otter runs each
    question's tests (hidden ones too) at that question's check, in the namespace of that moment, so such a
    gate fails every submission, right answers included (capstone 2's q2 waited for q3's measure_point)."""
    defined, late = set(), []
    for i, cell in enumerate(cells):
        source = "".join(cell["source"])
        for names in re.findall(r"waiting_for\('c\d',\s*([^)]*)\)", source):
            late += [f"cell {i}: {n.strip()}" for n in names.split(",") if n.strip() and n.strip() not in defined]
        if cell["cell_type"] == "code":
            defined.update(re.findall(r"^(?:def|class) (\w+)", source, re.M))
    return late


@pytest.mark.parametrize("capstone", list(CAPSTONES))
def test_a_gate_waits_only_for_functions_written_before_its_test(capstone):
    master = CAPSTONES[capstone][0]
    assert late_gates(json.loads(master.path.read_text())["cells"]) == []


def test_the_gate_order_check_fails_on_a_gate_that_looks_ahead():
    code = lambda s: {"cell_type": "code", "source": [s]}  # noqa: E731
    cells = [code("def a():\n    pass"), code("with goals.waiting_for('c2', a, b):\n    pass"), code("def b():\n    pass")]
    assert late_gates(cells) == ["cell 1: b"]
