"""The mutation table of capstone 4 (verify a token tree), measured in-process like capstone 1's
(``test_assignments_mutations.py``): wrong answers lose points on the test that names the mistake, right
answers written differently get full marks. No model is loaded (the tests run on toy tables), so every
row grades the whole master: ≈ 10 s each. The real grader (``otter run``) gives the solution full marks,
the unsolved notebook zero and a partly right one partial marks (slow)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from specdec_core.course.mutants import Master

ROOT = Path(__file__).resolve().parents[1]
MASTER = ROOT / "assignments" / "04_verify_a_token_tree.ipynb"
CAPSTONE4 = Master(MASTER)
NODE, TREE = "def try_children", "def verify_tree_sampled"
SKIP = ("tried = [try_children(", "path, nxt = verify_tree_sampled(tokens", "acceptance(verify_tree_sampled)")  # printouts


def _body(marker: str) -> str:
    """The solution's body of the answer cell marked ``marker`` (between its BEGIN and END SOLUTION lines)."""
    cell = next("".join(c["source"]) for c in json.loads(MASTER.read_text())["cells"]
                if c["cell_type"] == "code" and marker in "".join(c["source"]))
    return re.search(r"# BEGIN SOLUTION\n([\s\S]*?)    # END SOLUTION", cell).group(1)


def replaced(marker: str, body: str) -> dict[str, list[tuple[str, str]]]:
    return {marker: [(_body(marker), body.strip("\n") + "\n")]}


HARD_CODED = '''
    if p[0, 2] == 1:  # the public test's greedy tree
        return [1, 4], 3
    if p[3, 0] == 1:  # its accepted leaf
        return [0, 2], 0
    return [], int(sample(p[0], generator))
'''
# wrong answer → (edits, the test that must fail, the points it carries)
WRONG = {
    "bonus from a stale residual (the parent's, after an accepted leaf)": (
        {TREE: [("return path, int(sample(p[node + 1], generator))",
                 "return path, int(sample(p[0] if node < 0 else residual, generator))")]}, "q2 hidden 1", 1.5),
    "a residual that zeroes p(x) instead of subtracting q": (
        {NODE: [("p = (p - q).clamp(min=0)", "p[x] = 0.0")]}, "q1 hidden 1", 0.5),
    "siblings not renormalised after a rejection": ({NODE: [("        p = p / p.sum()\n", "")]}, "q1 hidden 1", 0.5),
    "accepting an i.i.d. candidate with p(x), without min(1, p/q)": (
        {NODE: [("if u * q[x] < p[x]:", "if u < p[x]:")]}, "q1 hidden 2", 0.5),
    "ignoring the children after the first": (
        {NODE: [("for k, x in enumerate(candidates):", "for k, x in enumerate(candidates[:1]):")]}, "q1 hidden 2", 0.5),
    "a hard-coded answer (passes the public test)": (replaced(TREE, HARD_CODED), "q2 hidden 1", 1.5),
    "the target's own sample, ignoring the tree (exact, accepts nothing)": (
        replaced(TREE, "    return [], int(sample(p[0], generator))"), "q2 hidden 2", 3.5),
    "the next token after a rejection from p, not the residual": (
        {TREE: [("return path, int(sample(residual, generator))", "return path, int(sample(p[node + 1], generator))")]},
        "q2 hidden 3", 1.0),
}

RECURSION = '''
    def walk(node: int, path: list[int]) -> tuple[list[int], int]:
        kids = [i for i, parent in enumerate(parents) if parent == node]
        here = p[node + 1].clone()
        u = torch.rand(len(kids), generator=generator)  # every uniform of this node up front
        for c, u_c in zip(kids, u):
            x = tokens[c]
            q_c = torch.nn.functional.one_hot(torch.tensor(x), here.numel()).to(here) if q is None else q[c]
            if u_c * q_c[x] < here[x]:  # one-hot q: min(1, p/1) = p(x), and max(p - q, 0) zeroes x
                return walk(c, path + [c])
            here = (here - q_c).clamp(min=0)
            here = here / here.sum()
        cdf = here.cumsum(0)  # the next token by inverse CDF
        r = torch.rand((), generator=generator) * cdf[-1]
        return path, min(int(torch.searchsorted(cdf, r, right=True)), here.numel() - 1)

    return walk(-1, [])
'''
MASS_NODE = '''
    left, mass = p.clone(), float(p.sum())  # p after the rejections, unnormalised, and its mass
    k = 0
    while k < len(candidates):
        x = candidates[k]
        u = float(torch.rand((), generator=generator))
        if q is None:
            if u * mass < float(left[x]):  # the current p(x) is left[x] / mass
                return k, left
            mass -= float(left[x])
            left[x] = 0.0
        else:
            if float(left[x]) / mass / float(q[x]) > u:
                return k, left
            left = (left / mass - q).clamp(min=0)
            mass = float(left.sum())
        k += 1
    return None, left  # unnormalised: the grader and multinomial normalise it
'''
FOR_ELSE_TREE = '''
    kids: dict[int, list[int]] = {}
    for i, parent in enumerate(parents):
        kids.setdefault(parent, []).append(i)
    path, node = [], -1
    for _ in range(len(tokens) + 1):
        mine = kids.get(node, [])
        if not mine:
            residual = p[node + 1]
            break
        k, residual = try_children(p[node + 1], [tokens[c] for c in mine], None if q is None else q[mine[0]], generator)
        if k is None:
            break
        node = mine[k]
        path.append(node)
    return path, int(torch.multinomial(residual / residual.sum(), 1, generator=generator))
'''
UPFRONT = '''
    u = torch.rand(len(tokens) + 1, generator=generator)  # one uniform per node, one for the next token: all first
    path, node, here = [], -1, p[0].clone()
    while True:
        for c in [i for i, parent in enumerate(parents) if parent == node]:
            x = tokens[c]
            if q is None:
                if u[c] < here[x]:
                    break
                here[x] = 0.0
            else:
                if u[c] < min(1.0, float(here[x] / q[c][x])):
                    break
                here = (here - q[c]).clamp(min=0)
            here = here / here.sum()
        else:  # every child rejected, or none: the next token from here
            cdf = here.cumsum(0)
            return path, min(int((cdf <= u[-1] * cdf[-1]).sum()), len(cdf) - 1)
        path.append(c)
        node, here = c, p[c + 1].clone()
'''
# right answers written differently → edits; each gets full marks on every test
RIGHT = {
    "the solution (iteration, try_children at each node)": {},
    "recursion in one function, one-hot q built for top-k, uniforms per node up front, inverse-CDF draw": replaced(TREE, RECURSION),
    "another loop structure (children dict, for loop with breaks) and try_children tracking p's mass": {
        **replaced(NODE, MASS_NODE), **replaced(TREE, FOR_ELSE_TREE)},
    "random draws in another order (every uniform of the tree first), for/else": replaced(TREE, UPFRONT),
}


@pytest.mark.parametrize("name", list(WRONG))
def test_a_wrong_answer_loses_the_points_of_the_test_that_names_its_mistake(name):
    edits, test, points = WRONG[name]
    result = CAPSTONE4.grade(edits, skip=SKIP)
    lost = result.failed()
    print(f"{name}: {result.total:g}/{result.possible:g}, fails {test} (−{points:g}): {result[test].message}; "
          f"all failed: {lost}")
    assert not result[test].passed and result[test].possible == pytest.approx(points)
    if "hard-coded" in name:
        assert result["q2 public 1"].passed  # the public test alone cannot tell


@pytest.mark.parametrize("name", list(RIGHT))
def test_a_right_answer_written_differently_gets_full_marks(name):
    result = CAPSTONE4.grade(RIGHT[name], skip=SKIP)
    print(f"{name}: {result.total:g}/{result.possible:g}")
    assert result.failed() == {}, {n: o.message for n, o in result.outcomes.items() if not o.passed}


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_table_holds_under_other_students_seeds(seed):
    """One seed per student (otter's seed): other toys, trees and draws; every wrong answer still fails the
    test that names it and every right one still gets full marks."""
    for name, (edits, test, _) in WRONG.items():
        result = CAPSTONE4.grade(edits, only=[test], skip=SKIP, seed=seed)
        assert not result[test].passed, f"seed {seed}: {name} passes {test}"
    for name, edits in RIGHT.items():
        result = CAPSTONE4.grade(edits, skip=SKIP, seed=seed)
        assert result.failed() == {}, (seed, name, {n: o.message for n, o in result.outcomes.items() if not o.passed})


def test_the_points_add_up_and_hidden_inputs_come_from_the_grading_seed(monkeypatch):
    from specdec_core.course import grading, grading_trees

    assert sum(t.points for t in CAPSTONE4.tests) == 10
    hidden = [t.source for t in CAPSTONE4.tests if "hidden" in t.name]
    assert all("grading.grading_rng(" in s for s in hidden) and not any("random.Random(" in s for s in hidden)
    assert sum("grading.P_MIN" in s for s in hidden) == grading_trees.CHI2_TESTS  # the union bound's count
    assert not any("P_MIN" in t.source for t in CAPSTONE4.tests if "public" in t.name)  # public: by support
    monkeypatch.setenv(grading.SEED_VARIABLE, "instructor-A")
    a = grading_trees.toy_pair(grading.grading_rng("c4-q2-loop-iid"))[0].probs(())
    monkeypatch.setenv(grading.SEED_VARIABLE, "instructor-B")
    assert not bool((grading_trees.toy_pair(grading.grading_rng("c4-q2-loop-iid"))[0].probs(()) == a).all())


def test_the_library_verifier_passes_and_is_blocked_while_grading():
    """The library's own tree verification, through the hidden tests' helpers, passes them (the helpers
    agree with specdec_core.tree); and an answer that calls it is stopped by the tripwire."""
    import random

    import torch

    from specdec_core import tree as T
    from specdec_core.course import grading_trees

    def calling(verify):
        def answer(tokens, parents, p, q, generator):
            return verify(T.Tree(torch.tensor(tokens), parents, q, "iid" if q is not None else "topk"), p, generator)
        return answer

    library = calling(T.verify_tree)
    fn = T.verify_tree
    unblocked = calling(type(fn)(fn.__code__, fn.__globals__, None, fn.__defaults__))  # out of the tripwire's reach
    assert grading_trees.sure_paths_problem(unblocked, random.Random(0)) == ""
    assert grading_trees.outcome_pvalue(unblocked, random.Random(0), draws=800)[0] > 1e-3
    with pytest.raises(RuntimeError, match="blocked while grading"):
        grading_trees.sure_paths_problem(library, random.Random(0))


@pytest.mark.slow
def test_the_real_grader_gives_capstone_4_full_zero_and_partial_marks(tmp_path):
    from test_assignments import edited, graded, handed_out_and_solution

    student, autograder, solution = handed_out_and_solution(MASTER, tmp_path, "p = (p - q).clamp(min=0)")
    partial = edited(solution, TREE, "return path, int(sample(p[node + 1], generator))",
                     "return path, int(sample(p[0] if node < 0 else residual, generator))", tmp_path / "stale.ipynb")
    from_p = edited(solution, TREE, "return path, int(sample(residual, generator))",
                    "return path, int(sample(p[node + 1], generator))", tmp_path / "from_p.ipynb")
    scores = graded(autograder, {"solution": solution, "unsolved": student, "stale residual": partial,
                                 "next token from p after a rejection": from_p})
    assert scores["solution"].total == scores["solution"].possible == 10
    assert scores["unsolved"].total == 0 and scores["unsolved"].possible == 10
    stale = scores["stale residual"]
    # q1 (one node) is right; every test of q2 sees the stale residual: 2 of 10, as in the mutation table
    assert stale.points == {"q1": (2, 2), "q2": (0, 8)} and "AT THAT LEAF" in stale.messages["q2"]
    from_p = scores["next token from p after a rejection"]  # fails q2's three χ² tests, passes its support tests
    assert from_p.points == {"q1": (2, 2), "q2": (2.5, 8)} and "not distributed" in from_p.messages["q2"]
