"""Capstone 1's tests of the output law have stated power (issue 57): on each law test's toy, at the default
grading seed and two others, every classic error of the sampled accept/reject step
(:data:`specdec_core.course.sampled_mutants.WRONG`) fails with probability ≥ 0.99 — computed from its exact
law (:mod:`specdec_core.course.step_laws`), noncentral χ² — while a sampler of the target's law passes at
≥ 0.999; the tests of the law carry at least half the points. Cheap: laws are enumerated, nothing of the
student's loop runs (``test_assignments_sampled.py`` grades the mutants themselves)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch

os.environ.setdefault("SPECDEC_QUICK", "1")

from specdec_core.course import grading  # noqa: E402
from specdec_core.course import grading_laws as gl
from specdec_core.course.mutants import Master  # noqa: E402
from specdec_core.course.sampled_mutants import RIGHT, WRONG  # noqa: E402
from specdec_core.course.step_laws import Rule, as_array, output_law  # noqa: E402
from specdec_core.exactness import exact_law  # noqa: E402
from specdec_core.exactness import total_variation as tv  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CAPSTONE1 = Master(ROOT / "assignments" / "01_build_speculative_decoding.ipynb")
SEEDS = (None, 101, 202)
LAW_TESTS = {"q2 public 1": "c1-q2-law-public", "q2 hidden 1": "c1-q2-law-1", "q2 hidden 2": "c1-q2-law-2"}


def _toys() -> dict[tuple[int | None, str], gl.Toy]:
    toys = {}
    for seed in SEEDS:
        grading.__dict__.pop("OTTER_SEED", None)
        if seed is not None:
            grading.OTTER_SEED = seed
        try:
            for name in LAW_TESTS.values():
                toys[seed, name] = gl.toy_for(gl.LAW, name, grading.grading_seed())
        finally:
            grading.__dict__.pop("OTTER_SEED", None)
    return toys


TOYS = _toys()


def test_the_law_tests_are_the_masters_and_carry_at_least_half_the_points():
    tests = {t.name: t for t in CAPSTONE1.tests}
    for test, name in LAW_TESTS.items():
        assert f"law_pvalue(speculative_generate_mine, grading_laws.LAW, {name!r})" in tests[test].source.replace('"', "'"), test
    assert sum(tests[t].points for t in LAW_TESTS) >= sum(t.points for t in CAPSTONE1.tests) / 2


def test_the_enumerated_law_of_the_right_rule_is_the_targets():
    toy = TOYS[None, "c1-q2-law-1"]
    target_law = exact_law(toy.target, torch.tensor([toy.prompt]), gl.LAW.tokens, gl.LAW.temperature, gl.LAW.top_k)
    assert tv(toy.law, target_law) < 1e-6
    for name, mutant in RIGHT.items():
        assert mutant.rule == Rule(), name  # a right answer samples the target's law
    # and a wrong rule's law is not: the enumeration can tell them apart
    wrong = as_array(output_law(toy.tables, WRONG["residual: p again (max(0, p − q) forgotten)"].rule, 3, 2), 5, 3)
    assert tv(wrong, target_law) > 0.05


@pytest.mark.parametrize("seed", SEEDS)
def test_every_error_of_the_catalogue_fails_every_law_test_with_probability_099(seed):
    assert len(WRONG) >= 10
    for name in LAW_TESTS.values():
        toy = TOYS[seed, name]
        for mutant, chance in toy.powers.items():
            print(f"seed {seed} · {name} · {mutant}: TV {toy.tvs[mutant]:.3f}, P(fails) {chance:.5f}")
            assert toy.tvs[mutant] > 0 and chance >= 0.99, (seed, name, mutant)


def test_a_sampler_of_the_targets_law_passes_at_0999():
    """Counts drawn from the target's own law (its multinomial): the χ² test with pooling rejects them at
    about P_MIN (10⁻⁵); 3,000 simulated tests per toy see no failure."""
    for seed in SEEDS:
        toy = TOYS[seed, "c1-q2-law-1"]
        assert gl.simulated_pass_rate(toy.law, gl.LAW.draws, 3000, seed=1) >= 0.999
        assert gl.power(toy.law, toy.law, gl.LAW.draws) <= 1e-3  # the computed false-failure rate


def test_the_power_and_the_p_value_fail_on_a_broken_sampler():
    """Deliberately broken: counts from a wrong law fail the same p-value function the tests use, and a draw
    where the target puts no mass fails it however few."""
    toy = TOYS[None, "c1-q2-law-1"]
    wrong = as_array(output_law(toy.tables, WRONG["accept with probability p(x) (q ignored)"].rule, 3, 2), 5, 3)
    rng = np.random.default_rng(0)
    counts = rng.multinomial(gl.LAW.draws, wrong.ravel() / wrong.sum()).reshape(wrong.shape)
    assert gl.law_pvalue_of(counts, toy.law) < grading.P_MIN
    impossible = np.argwhere(toy.law <= 1e-12)
    right = rng.multinomial(gl.LAW.draws, toy.law.ravel() / toy.law.sum()).reshape(toy.law.shape)
    if len(impossible):
        right[tuple(impossible[0])] += 1
        assert gl.law_pvalue_of(right, toy.law) == 0.0
