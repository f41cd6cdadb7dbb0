"""bench.trees.tau_by_budget: τ pooled over the prompts (all tokens ÷ all target calls), not the median of
the prompts' τ, which a short answer pins. Bookkeeping on a toy pair, untimed."""

from __future__ import annotations

import pytest
from test_benchmark import PROMPTS, toy_pair

from specdec_core.bench import trees
from specdec_core.generation import Generation


def test_tau_is_pooled_over_the_prompts(monkeypatch):
    # prompt 0: 8 tokens in 5 calls (τ 1.6); prompt 1: 40 tokens in 20 calls (2.0); prompt 2: 30 in 20 (1.5)
    runs = iter([(8, 5), (40, 20), (30, 20)])

    def fake(target, drafter, ids, n, **kwargs):
        tokens, calls = next(runs)
        return Generation(list(range(tokens)), "", {"target_calls": calls, "tokens_per_call": tokens / calls})

    monkeypatch.setattr(trees, "tree_generate", fake)
    (row,) = trees.tau_by_budget(toy_pair(), PROMPTS[:3], [4], [0.5, 0.2, 0.1, 0.05], max_new_tokens=8)
    assert row["tau"] == pytest.approx(78 / 45)  # the median of the three τ would be 1.6
    assert row["taus"] == pytest.approx([1.6, 2.0, 1.5]) and row["nodes"] == 4
