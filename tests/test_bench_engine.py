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
                                        "static int8", "static int8-bf16"]
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


def test_engine_rows_run_our_ar_beside_the_speculation_engine_and_apply_the_exactness_rule(monkeypatch) -> None:
    from specdec_core.ar import generate as ar_generate
    from specdec_core.bench.engine import engine_rows
    from specdec_core.bench.methods import Method
    from specdec_core.drafters import ModelDrafter
    from specdec_core.speculative import speculative_generate
    from specdec_core.toy import toy_tokenizer

    pair = Pair(tiny_llama(64, hidden_size=256, seed=11, logit_scale=3.0), tiny_llama(64, seed=1, num_layers=1),
                toy_tokenizer(64), "toy", torch.device("cpu"))
    registry = {"ar": Method(lambda p, ids, n: ar_generate(p.target, ids, n), "ar"),
                "spec": Method(lambda p, ids, n: speculative_generate(p.target, ModelDrafter(p.draft), ids, n, gamma=3),
                               "spec"),
                "wrong": Method(lambda p, ids, n: ar_generate(p.target, (ids + 1) % 64, n), "a method that changes the output")}
    prompts = [torch.tensor([[2, 5, 9, 4]]), torch.tensor([[7, 3, 11]])]
    rows = [{"name": "spec", "ratio_to_ar": 1.2}]
    out = engine_rows(pair.engine("f32"), registry, rows, prompts, 10, 1, pair.engine("f16"), "static f16",
                      log=lambda _: None)
    assert out["engine"] == "static f16" and out["method"] == "spec" and out["prompts"] == 2
    assert out["same_as_engine_ar"] + out["explained_by_rounding"] == 2  # exact on the rounding engine, by the rule
    import specdec_core.bench.engine as engine_module

    monkeypatch.setattr(engine_module, "OURS_EXACT", (*engine_module.OURS_EXACT, "wrong"))  # as if it claimed exactness
    bad = engine_rows(pair.engine("f32"), registry, [{"name": "wrong", "ratio_to_ar": 2.0}], prompts, 10, 1,
                      pair.engine("f16"), "static f16", log=lambda _: None)
    assert bad["same_as_engine_ar"] == 0 and bad["explained_by_rounding"] < 2 and bad["width_drift"] is not None
