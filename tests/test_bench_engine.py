"""The engine ladder (bench/engine.py) on a toy pair: every rung runs, the f32 rungs give the eager tokens, and
the table's arithmetic holds (no wall-clock value is asserted)."""

from __future__ import annotations

import math

import torch

from specdec_core.bench.engine import measure, rungs
from specdec_core.memory import step_bytes, weight_bytes
from specdec_core.models import Pair
from specdec_core.toy import tiny_llama


def _pair() -> Pair:
    return Pair(tiny_llama(64, hidden_size=64, seed=11, logit_scale=3.0), tiny_llama(64, seed=1), None, "toy",
                torch.device("cpu"))


def test_the_ladder_runs_every_rung_and_f32_keeps_the_tokens() -> None:
    pair = _pair()
    ladder = rungs(pair)
    assert [r.name for r in ladder] == ["eager f32", "prepacked f32", "static f32", "static bf16", "static f16",
                                        "static int8"]
    prompts = [torch.tensor([[2, 5, 9, 4]]), torch.tensor([[7, 3]])]
    rows = measure(ladder, prompts, max_new_tokens=12, bandwidth=1e10, repeats=2)
    by = {r["rung"]: r for r in rows}
    assert by["eager f32"]["speedup"].median == 1.0  # the base against itself, round by round
    for name in ("prepacked f32", "static f32"):
        assert by[name]["same_tokens"] == by[name]["tokens"] == 24
    for r in rows:
        assert r["tokens_per_s"].n == 4 and r["mbu"] > 0 and math.isfinite(r["ms_per_token"])
    assert by["static int8"]["step_mb"] < by["static bf16"]["step_mb"] < by["static f32"]["step_mb"]


def test_step_bytes_counts_a_tied_table_once_and_an_untied_one_not_at_all() -> None:
    model = tiny_llama(64, hidden_size=64)
    table = model.get_input_embeddings().weight
    assert step_bytes(model) == weight_bytes(model) - table.numel() * 4  # untied: one row a step
    model.lm_head.weight = table  # tie them
    assert step_bytes(model) == weight_bytes(model)
