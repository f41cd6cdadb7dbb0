"""The serving sweep (bench/serving.py, make serving) on toy models: the report's schema, the arithmetic of its rows
(decode tokens/s, the same-round gain), the engine it names, and the figures drawn from it. Each check also runs
on a broken variant it must catch. Nothing here asserts a time: the toys' numbers are noise."""

from __future__ import annotations

import json
import math

import pytest
import torch

from specdec_core.bench import serving
from specdec_core.bench.harness import Run
from specdec_core.generation import Generation
from specdec_core.lm import on_static_engine
from specdec_core.load_costs import LoadCosts
from specdec_core.records import ARStats, SpecStats, SpecStep
from specdec_core.toy import tiny_llama

PROMPTS = [torch.tensor([[2, 5, 3, 7, 2, 5]]), torch.tensor([[4, 9]]), torch.tensor([[6, 6, 8]])]
BATCHES, GAMMAS = (1, 2, 3), (1, 2)


@pytest.fixture(scope="module")
def report():
    target = on_static_engine(tiny_llama(vocab_size=32, seed=0))
    draft = on_static_engine(tiny_llama(vocab_size=32, hidden_size=16, seed=1))
    results = serving.sweep(target, draft, PROMPTS, batches=BATCHES, gammas=GAMMAS, new_tokens=5, repeats=2, rounds=1,
                            matmul_rows=32, overhead_steps=2, bandwidth=2e10, engine="static f32", progress=False)
    return serving.report(results, "static f32", "a toy on the pinned engine", ["p0", "p1", "p2"])


def check_schema(doc: dict) -> None:
    """What lesson 10 and the viz read: every B and every (B, γ), medians with min–max, the costs, the hook."""
    for key in ("schema", "machine", "date", "engine", "threads", "prompts", "ar", "spec", "adaptive", "crossover",
                "roofline_turn", "prediction_error", "noise_band", "costs", "settings", "load"):
        assert key in doc, f"the report has no {key!r}"
    batches = doc["settings"]["batches"]
    assert [r["batch"] for r in doc["ar"]] == batches
    assert {(r["batch"], r["gamma"]) for r in doc["spec"]} == {(b, g) for b in batches for g in doc["settings"]["gammas"]}
    for row in doc["ar"] + doc["spec"] + (doc["adaptive"] or []):
        for key in ("tokens_per_s", "tokens_per_s_per_seq"):
            assert {"median", "lo", "hi", "n"} <= set(row[key]) and row[key]["lo"] <= row[key]["median"] <= row[key]["hi"]
        assert row["tokens_per_s_per_seq"]["median"] == pytest.approx(row["tokens_per_s"]["median"] / row["batch"])
    for row in doc["spec"]:
        assert math.isfinite(row["predicted"]) and math.isfinite(row["error"]) and 0 <= row["alpha"] <= 1
    assert set(doc["crossover"]) >= {"measured", "predicted", "alpha"}
    assert doc["load"] is None or isinstance(doc["load"], dict)
    LoadCosts.from_json(doc["costs"])


def test_the_report_has_every_number_lesson_10_reads(report, tmp_path):
    check_schema(report)
    assert report["engine"]["name"] == "static f32" and report["prompts"] == ["p0", "p1", "p2"]
    path = serving.write(report, tmp_path)
    assert path.name == "serving-cpu.json" and json.loads(path.read_text())["settings"]["batches"] == list(BATCHES)
    check_schema(json.loads(path.read_text()))  # strict JSON (NaN as null) reads back


def test_adaptive_runs_or_says_why_not(report):
    if report["adaptive"] is None:
        assert "policy" in report["adaptive_note"]
    else:
        assert [r["batch"] for r in report["adaptive"]] == list(BATCHES)
        assert all(set(r["gammas_chosen"]) <= {0, 1, 2, 3, 4} for r in report["adaptive"])
        assert [c["batch"] for c in report["adaptive_check"]] == list(BATCHES)


@pytest.mark.parametrize("broken", ["a batch missing", "a γ missing", "no load hook", "lo above the median"])
def test_the_schema_check_catches_a_broken_report(report, broken):
    doc = json.loads(json.dumps(report))
    if broken == "a batch missing":
        doc["ar"] = doc["ar"][:-1]
    elif broken == "a γ missing":
        doc["spec"] = [r for r in doc["spec"] if r["gamma"] != GAMMAS[-1]]
    elif broken == "no load hook":
        del doc["load"]
    else:
        doc["ar"][0]["tokens_per_s"]["lo"] = doc["ar"][0]["tokens_per_s"]["median"] * 2
    with pytest.raises(AssertionError):
        check_schema(doc)


def fake_runs() -> tuple[list[Run], list[Run]]:
    """Two rounds at B = 2: AR makes 5 tokens a row (the prefill the first, 0.1 s; then 4 steps), speculation 5 a row
    in 2 batch steps. Round 2 is twice as slow for both (a busy phase): the same-round gain does not move."""
    ar, spec = [], []
    for slow in (1, 2):
        rows = [Generation([7] * 5, stats=ARStats(wall_time=slow * 0.5, ttft=slow * 0.1)) for _ in range(2)]
        ar.append(Run(slow * 0.5, serving.Batched([7] * 10, rows=rows)))
        steps = [SpecStep([1, 2], 2, 3, "bonus", 2), SpecStep([1, 2], 1, 3, "resampled", 2)]
        srows = [Generation([7] * 5, stats=SpecStats(wall_time=slow * 0.3, target_calls=2, steps=steps)) for _ in range(2)]
        spec.append(Run(slow * 0.3, serving.Batched([7] * 10, rows=srows)))
    return ar, spec


def assert_rows(ar_row: dict, spec_row: dict) -> None:
    # AR decode: 2 rows × 4 tokens in 0.4 s = 20 tokens/s; speculation: 10 tokens in 0.3 − 0.1 = 0.2 s = 50 tokens/s
    assert ar_row["tokens_per_s"]["median"] == pytest.approx(20 * 0.75)  # rounds: 20 and 10 → median 15
    assert ar_row["step_s"]["median"] == pytest.approx(0.15)
    assert spec_row["gain"]["median"] == pytest.approx(2.5) and spec_row["gain"]["lo"] == pytest.approx(2.5)
    assert spec_row["alpha"] == pytest.approx(3 / 4) and spec_row["tau"] == pytest.approx(2.5)


def test_the_rows_arithmetic_by_hand():
    costs = LoadCosts(t={2: {1: 0.08, 3: 0.1}}, d={2: 0.01}, bandwidth=1e10, weight_bytes=10**8, params=25 * 10**6,
                      flops_per_s=1e11)
    ar, spec = fake_runs()
    ar_row = serving.ar_row(2, ar, costs)
    costs.step_s = {2: ar_row["step_s"]["median"]}
    row = serving.spec_row(2, 2, spec, ar, costs)
    assert_rows(ar_row, row)
    assert row["predicted_tau"] == pytest.approx(costs.gain(2, 2, 0.75, tau=2.5))
    assert row["error"] == pytest.approx(2.5 / costs.gain(2, 2, 0.75) - 1)


def test_the_rows_check_catches_the_prefill_counted_as_decode(monkeypatch):
    """The broken variant times speculation's whole call (its prefill included) against AR's decode."""
    costs = LoadCosts(t={2: {1: 0.08, 3: 0.1}}, d={2: 0.01}, bandwidth=1e10, weight_bytes=10**8, params=25 * 10**6,
                      flops_per_s=1e11)
    ar, spec = fake_runs()
    no_prefill = [Run(r.seconds, serving.Batched(r.result.new_tokens, rows=[
        Generation(g.new_tokens, stats=ARStats(wall_time=g.stats.wall_time, ttft=0.0)) for g in r.result.rows]))
        for r in ar]
    with pytest.raises(AssertionError):
        assert_rows(serving.ar_row(2, ar, costs), serving.spec_row(2, 2, spec, no_prefill, costs))


@pytest.mark.parametrize("ours, runs_on", [("static int8-bf16", "static int8-bf16"), ("prepacked f32", "static f32"),
                                           ("eager f32", "static f32"), ("compiled bf16", "static bf16")])
def test_the_batches_run_on_our_engine_or_its_static_twin(ours, runs_on):
    name, why = serving.serving_engine(ours)
    assert name == runs_on and ours in why


def test_bad_input_says_what_to_do():
    with pytest.raises(ValueError, match="at least one prompt"):
        serving.cycled([], 2)
    with pytest.raises(ValueError, match="new_tokens >= 2"):
        serving.sweep(None, None, PROMPTS, new_tokens=1)
    assert [p.shape[-1] for p in serving.cycled(PROMPTS, 4)] == [6, 2, 3, 6]


# ---- lesson 10's figures and panel, drawn from the toy report ------------------------------------------------------

def check_throughput(fig, doc: dict) -> None:
    """Both panels mark the roofline's turn; the left panel's first line is the summed tokens/s of the report."""
    left, right = fig.axes[:2]
    for ax in (left, right):
        assert any(list(line.get_xdata()) == [doc["roofline_turn"]] * 2 for line in ax.get_lines()), "no B* line"
    summed = left.get_lines()[0]
    assert list(summed.get_ydata()) == pytest.approx([r["tokens_per_s"]["median"] for r in doc["ar"]])


def test_the_figures_draw_the_report(report):
    from specdec_core.viz import serving as figures

    fig = figures.throughput(report)
    check_throughput(fig, report)
    swapped = json.loads(json.dumps(report))  # the broken variant: per-sequence drawn as the sum
    for row in swapped["ar"]:
        row["tokens_per_s"] = row["tokens_per_s_per_seq"]
    if len(BATCHES) > 1:
        with pytest.raises(AssertionError):
            check_throughput(figures.throughput(swapped), report)
    fig = figures.gain(report)
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert all(f"γ = {g} predicted" in labels for g in GAMMAS) and "break-even (batched AR)" in labels
    figures.plt.close("all")
    with pytest.raises(ValueError, match="bench.serving"):
        figures.throughput({**report, "ar": []})


def check_prediction(doc: dict) -> None:
    from specdec_core.viz.serving import predicted_gains

    costs = LoadCosts.from_json(doc["costs"])
    line = predicted_gains(doc, 2, 0.7)
    by_hand = {b: (1 + 0.7 + 0.49) * costs.step(b) / (2 * costs.d[b] + costs.t[b][3] + costs.step(b) - costs.t[b][1]
                                                     + costs.verify_overhead_s) for b in costs.batches}
    assert line == pytest.approx(by_hand)


def test_the_panel_moves_the_cost_models_prediction(report, monkeypatch):
    from specdec_core.viz.serving import prediction_widget

    check_prediction(report)
    panel = prediction_widget(report)
    batch, gamma, alpha = panel.children[0].children
    assert list(batch.options) == list(BATCHES) and list(gamma.options) == list(range(1, max(GAMMAS) + 1))
    batch.value, gamma.value, alpha.value = BATCHES[-1], 2, 0.3  # each redraws without an error
    right = LoadCosts.forward  # the broken variant: every B priced as batch 1
    monkeypatch.setattr(LoadCosts, "forward", lambda self, b, n: right(self, 1, n))
    with pytest.raises(AssertionError):
        check_prediction(report)
