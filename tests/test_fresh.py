"""Each method's memory alone in a fresh process (specdec_core.bench.fresh), on toy pairs.

A few child processes (a method that holds one model, one that holds two, an NF4 copy with and without
the peak reset); the rest runs in this process. Memory figures only: never a wall-clock assertion.
"""

from __future__ import annotations

import json
import sys

import pytest
import torch

from specdec_core import costmodel
from specdec_core.bench import fresh, runner
from specdec_core.bench import quantized as Q
from specdec_core.bench import report as report_module
from specdec_core.memory import MB, weight_bytes

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the peak reset needs Linux /proc")

# big enough that a model's weights stand out of the allocator's noise: target 113 MB, draft 38 MB (fp32)
TOY = {"toy": {"hidden": 512, "target_layers": 12, "draft_layers": 4}}
FLAGS = ["--methods", "ar,spec", "--n-prompts", "1", "--max-new-tokens", "8", "--repeats", "1", "--gamma", "2",
         "--engine", "plain"]


def shows_the_extra_model(one_mb: float, two_mb: float, extra_mb: float) -> bool:
    """The check a per-method memory figure must pass: holding an extra model of ``extra_mb`` shows."""
    return two_mb - one_mb > 0.6 * extra_mb


def run_wasted_no_time(added_mb: float, fp32_mb: float) -> bool:
    """The check an NF4 run's figure must pass: the run adds far less than the fp32 weights freed before it."""
    return added_mb < 0.5 * fp32_mb


@pytest.fixture(scope="module")
def toy_pair():
    return fresh.build_pair(TOY)


@pytest.fixture(scope="module")
def bench(toy_pair, tmp_path_factory):
    """The benchmark on the toy pair with the fresh column (a child per method): (report, read back, out folder)."""
    out = tmp_path_factory.mktemp("results")
    costs = costmodel.CostModel({}, 0.01, {n: 1.0 for n in costmodel.NS}, (0.01, 0.01), 1e10, 1, {"model": 0.3})
    with pytest.MonkeyPatch.context() as mp:  # the calibration's timings are not what this file tests
        mp.setattr(runner.costmodel, "load_or_measure", lambda *a, **k: costs)
        report = runner.run(runner.parse_args(FLAGS), pair=toy_pair, prompt_texts=["w3 w4 w5 w6 w3 w4"],
                            progress=False, log=lambda _: None, fresh_pair=TOY)
    paths = report_module.write_report(report, out, "toy")
    return report, report_module.load_report(paths["json"]), out


def test_one_model_and_two_models_differ_by_the_draft(bench, toy_pair):
    report, _, _ = bench
    assert report["fresh_memory"]["failed"] == {} and report["fresh_memory"]["skipped"] is None
    one, two = (fresh.FreshPeak.from_json(report["fresh_memory"]["methods"][m]) for m in ("ar", "spec"))
    draft_mb = weight_bytes(toy_pair.draft) / MB
    assert one.held_bytes == weight_bytes(toy_pair.target) and two.held_bytes == weight_bytes(toy_pair.target, toy_pair.draft)
    assert shows_the_extra_model(one.loaded_bytes / MB, two.loaded_bytes / MB, draft_mb)
    assert shows_the_extra_model(one.peak_mb, two.peak_mb, draft_mb)
    for f in (one, two):  # libraries < loaded ≤ peak, and the loaded state holds the kept weights
        assert f.kind == "CPU peak RSS" and f.baseline_bytes < f.loaded_bytes <= f.peak_bytes
        assert f.loaded_bytes - f.baseline_bytes > 0.8 * f.held_bytes and f.new_tokens == 8
    assert "38 MB of the pair's other weights freed" in one.about


def test_measuring_in_the_parent_process_is_caught(bench, toy_pair):
    """The old figure (the probe around the timed calls, in the process that holds both models) fails the check."""
    rows = {r["name"]: r for r in bench[0]["methods"]}
    draft_mb = weight_bytes(toy_pair.draft) / MB
    assert not shows_the_extra_model(rows["ar"]["process_peak_mb"], rows["spec"]["process_peak_mb"], draft_mb)
    assert shows_the_extra_model(rows["ar"]["fresh_peak_mb"], rows["spec"]["fresh_peak_mb"], draft_mb)


def test_the_report_column_round_trips(bench):
    report, back, out = bench
    assert back["fresh_memory"] == json.loads(json.dumps(report["fresh_memory"]))
    md = (out / "toy.md").read_text()
    assert md == report_module.markdown(back)
    for row in back["methods"]:
        assert row["fresh_peak_mb"] == pytest.approx(back["fresh_memory"]["methods"][row["name"]]["peak_bytes"] / MB)
        assert f"| {row['fresh_peak_mb']:,.0f} (+{row['fresh_added_mb']:,.0f}) |" in md
    assert "peak memory alone (MB)" in md and "fresh Python process that held only that method's models" in md
    assert f"longest prompt ({back['fresh_memory']['prompt_tokens']} tokens)" in md
    old = back | {"methods": [{k: v for k, v in r.items() if not k.startswith("fresh_")} for r in back["methods"]]}
    del old["fresh_memory"]
    assert "| – |" in report_module.markdown(old) and "run `make bench` again" in report_module.markdown(old)
    skipped = back | {"fresh_memory": back["fresh_memory"] | {"skipped": "--no-fresh-memory", "methods": {}}}
    assert "not measured (--no-fresh-memory)" in report_module.markdown(skipped)


def test_an_nf4_copy_frees_the_fp32_weights_and_a_missing_reset_is_caught(toy_pair):
    job = runner.method_job("nf4_ar", pair=TOY, prompt_ids=[2, 3, 4, 5], max_new_tokens=8, engine="plain")
    nf4, unreset = fresh.measure(job), fresh.measure(job, reset_peak=False)
    fp32_mb = weight_bytes(toy_pair.target) / MB
    assert nf4.held_bytes < 0.2 * weight_bytes(toy_pair.target)
    assert nf4.loaded_bytes - nf4.baseline_bytes < 0.5 * weight_bytes(toy_pair.target)  # the fp32 copy is gone
    assert nf4.load_peak_bytes - nf4.loaded_bytes > 0.8 * weight_bytes(toy_pair.target)  # it was there while loading
    assert run_wasted_no_time(nf4.added_mb, fp32_mb)
    assert not run_wasted_no_time(unreset.added_mb, fp32_mb)  # without the reset: the loading peak


def test_the_fast_engine_keeps_its_prepacked_copies_and_frees_the_rest():
    pair = fresh.build_pair({"toy": {"hidden": 64, "target_layers": 2, "draft_layers": 1}}).fast()
    target_b, draft_b = weight_bytes(pair.target), weight_bytes(pair.draft)
    assert fresh.held_bytes([pair.target]) > 1.5 * target_b  # the weights and their oneDNN copies
    freed = fresh.keep_only([pair.target], [pair.target, pair.draft, pair.plain().target, pair.plain().draft])
    assert freed >= draft_b and weight_bytes(pair.draft) == 0 and weight_bytes(pair.target) == target_b
    out = pair.target(input_ids=torch.tensor([[2, 3]])).logits  # the kept model still runs
    assert out.shape == (1, 2, 32)
    with pytest.raises((RuntimeError, AssertionError)):  # a shape error of the emptied embedding
        pair.draft(input_ids=torch.tensor([[2, 3]]))  # a freed one fails loudly


def test_a_peak_that_cannot_be_reset_is_an_error_that_says_what_the_number_would_mean(monkeypatch):
    job = runner.method_job("ar", pair={"toy": {}}, prompt_ids=[2, 3], max_new_tokens=2, engine="plain")
    monkeypatch.setattr(fresh, "reset_peak_rss", lambda: False)
    with pytest.raises(fresh.FreshProbeError, match="cannot reset the peak RSS.*loading .*included.*not the peak of the run"):
        fresh.run_job(job)
    block = torch.ones(50 * MB)  # 200 MB touched, then freed: the high-water mark stays above the RSS
    del block
    monkeypatch.setattr(fresh, "reset_peak_rss", lambda: True)  # claims to reset, does nothing
    with pytest.raises(fresh.FreshProbeError, match="had no effect"):
        fresh.run_job(job)


def test_a_failing_child_reports_its_error():
    with pytest.raises(fresh.FreshProbeError, match="no_such_recipe"):
        fresh.measure(fresh.Job("specdec_core.bench.fresh:no_such_recipe", {}))


def test_lesson_06s_variant_recipe_loads_one_variant(tmp_path, monkeypatch):
    """The NF4 variant's fresh process holds the NF4 pair only (run here, in-process, on Hub-like toys)."""
    from specdec_core.toy import tiny_llama

    spec, fp32 = Q.PRESETS["smollm2"], []
    for model_id, seed in ((spec.target, 0), (spec.draft, 1)):  # hidden 64: what bitsandbytes' CPU repacking needs
        fp32.append(tiny_llama(32, 64, 2, seed=seed, logit_scale=4.0))
        fp32[-1].save_pretrained(tmp_path / model_id.replace("/", "--"))
    monkeypatch.setenv("SPECDEC_LOCAL_MODELS", str(tmp_path))
    kw = {"preset": "smollm2", "prompt_ids": [0, 5, 9], "max_new_tokens": 4, "gamma": 2, "eos_token_id": None,
          "warmup_tokens": 2, "device": "cpu", "variant": "ours", "label": Q.OURS}
    ours = fresh.run_job(fresh.Job("specdec_core.bench.quantized:variant_recipe", kw))
    assert ours["held_bytes"] < 0.6 * weight_bytes(*fp32) and ours["new_tokens"] == 4 and ours["label"] == Q.OURS
    assert Q.variant_kind("plain (bf16)") == "plain" and Q.variant_kind(Q.BNB) == "bnb"
    with pytest.raises(KeyError, match="no loader"):
        Q.variant_kind("int8")


def test_format_rows_shows_each_variants_own_peak_or_no_memory_column():
    variants = {"plain (fp32)": Q.Variant("plain (fp32)", (m := fresh.build_pair({"toy": {}}).target), m)}
    rows = Q.compare(variants, torch.tensor([[2, 3, 4]]), 4, gamma=2, repeats=1, warmup_tokens=1)
    peak = fresh.FreshPeak("plain (fp32)", "CPU peak RSS", 400 * MB, 900 * MB, 987 * MB, 1500 * MB, 0, 4, 3)
    with_fresh, without = Q.format_rows(rows, {"plain (fp32)": peak}), Q.format_rows(rows)
    assert "    987     87 " in with_fresh and "peak" in with_fresh.splitlines()[0]
    assert "peak" not in without and "+run" not in without


def test_own_copies_borrowed_weights_once_and_keeps_them_tied():
    """Weights that borrow memory (here a bytearray, in a lesson the model file's memory map) get memory of
    their own, one copy per storage: two views of one buffer stay views of one copy."""
    import numpy as np

    raw = torch.frombuffer(bytearray(np.arange(12, dtype=np.float32).tobytes()), dtype=torch.float32)
    module = torch.nn.Linear(3, 2, bias=False)
    module.weight.data = raw[:6].view(2, 3)
    module.register_buffer("rest", raw[6:])
    assert not module.weight.untyped_storage().resizable()
    copied = fresh.own([module])
    assert copied == raw.untyped_storage().nbytes()  # one storage, copied once
    assert module.weight.untyped_storage().resizable() and module.rest.untyped_storage().resizable()
    assert module.weight.untyped_storage().data_ptr() == module.rest.untyped_storage().data_ptr()  # still shared
    assert module.weight.flatten().tolist() == [0, 1, 2, 3, 4, 5] and module.rest.tolist() == [6, 7, 8, 9, 10, 11]
    assert fresh.own([module]) == 0  # nothing borrowed any more
