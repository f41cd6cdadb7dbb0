"""Lesson 10: its reading of the serving report (bench/serving_view.py: the report read back, each verdict from
the numbers and the noise band, the load table, the live batched comparison on toys) and its exercise's checkers
(right answers pass, each common wrong one fails with its hint, calling the library or typing in the example's
answers fails). Each check is shown to catch a deliberately broken variant; nothing here asserts a time."""

from __future__ import annotations

import json
import math

import pytest
import torch

from specdec_core.bench import serving_view
from specdec_core.course import CheckFailed, check_batch_gain, check_choose_gamma, check_crossover
from specdec_core.course.lesson10 import EXAMPLE, costs_of, random_table, table_from_report
from specdec_core.lm import on_static_engine
from specdec_core.load_costs import LoadCosts
from specdec_core.toy import tiny_llama

# ---- the exercise's answers: right, and the common mistakes ------------------------------------------


def batch_gain(table, B, gamma, alpha):
    if gamma == 0:
        return 1.0
    t, d, step = table["t"][B], table["d"][B], table["step"][B]
    tau = gamma + 1.0 if alpha == 1 else (1 - alpha ** (gamma + 1)) / (1 - alpha)
    return tau * step / (gamma * d + t[gamma + 1] + step - t[1])


def gain_at_batch_one(table, B, gamma, alpha):
    """Broken: the verify priced at batch 1 (the mistake that makes speculation look free on a busy server)."""
    if gamma == 0:
        return 1.0
    tau = gamma + 1.0 if alpha == 1 else (1 - alpha ** (gamma + 1)) / (1 - alpha)
    return tau * table["step"][B] / (gamma * table["d"][B] + table["t"][1][gamma + 1] + table["step"][B] - table["t"][B][1])


def gain_without_loop(table, B, gamma, alpha):
    """Broken: speculation's loop pays no bookkeeping o(B)."""
    if gamma == 0:
        return 1.0
    tau = gamma + 1.0 if alpha == 1 else (1 - alpha ** (gamma + 1)) / (1 - alpha)
    return tau * table["step"][B] / (gamma * table["d"][B] + table["t"][B][gamma + 1])


def gain_by_library(table, B, gamma, alpha):
    return costs_of(table).gain(B, gamma, alpha)


TYPED_IN = {(B, g, a): costs_of(EXAMPLE).gain(B, g, a) for B in (1, 4, 16) for g in (0, 1, 2, 4) for a in (0.7, 1.0)}


def gain_typed_in(table, B, gamma, alpha):
    """Broken: the example's answers typed in (right on the hand-made table only)."""
    return TYPED_IN.get((B, gamma, alpha), 1.0)


def choose_gamma(table, B, alpha):
    gains = {n - 1: batch_gain(table, B, n - 1, alpha) for n in table["t"][B] if n > 1}
    best = max(gains, key=gains.get, default=0)
    return best if gains.get(best, 0.0) > 1 else 0


def choose_never_off(table, B, alpha):
    """Broken: the best γ even when it loses to batched AR."""
    gains = {n - 1: batch_gain(table, B, n - 1, alpha) for n in table["t"][B] if n > 1}
    return max(gains, key=gains.get)


def choose_blind_to_batch(table, B, alpha):
    """Broken: γ chosen at B = 1 whatever the load (speculation always on at the batch-1 choice)."""
    return choose_gamma(table, min(table["t"]), alpha)


def crossover(table, alpha):
    return next((B for B in sorted(table["t"]) if choose_gamma(table, B, alpha) == 0), None)


def crossover_last(table, alpha):
    """Broken: the last B where speculation is off, not the first."""
    off = [B for B in sorted(table["t"]) if choose_gamma(table, B, alpha) == 0]
    return off[-1] if off else None


@pytest.mark.parametrize("checker, answer", [(check_batch_gain, batch_gain), (check_choose_gamma, choose_gamma),
                                             (check_crossover, crossover)])
def test_the_right_answers_pass(checker, answer, capsys):
    checker(answer)
    assert "✗" not in capsys.readouterr().out


@pytest.mark.parametrize("checker, answer, hint", [
    (check_batch_gain, gain_at_batch_one, "prices the verify at batch 1"),
    (check_batch_gain, gain_without_loop, "loop's own cost"),
    (check_batch_gain, gain_by_library, "blocked"),
    (check_batch_gain, gain_typed_in, "random tables"),
    (check_choose_gamma, choose_never_off, "return 0 (off)"),
    (check_choose_gamma, choose_blind_to_batch, "✗"),
    (check_crossover, crossover_last, "FIRST B"),
])
def test_each_mistake_fails_with_its_hint(checker, answer, hint, capsys):
    with pytest.raises(CheckFailed):
        checker(answer)
    assert hint in capsys.readouterr().out


def test_the_library_is_restored_after_a_check():
    check_batch_gain(batch_gain)
    assert costs_of(EXAMPLE).gain(1, 2, 0.7) == pytest.approx(batch_gain(EXAMPLE, 1, 2, 0.7))


def test_the_random_tables_need_every_choice():
    """A constant answer cannot pass: the seeded tables' best γ and crossover take several values."""
    gen = torch.Generator().manual_seed(1011)
    tables = [(random_table(gen), float(torch.rand(1, generator=gen))) for _ in range(25)]
    assert len({costs_of(t).best(b, a)[0] for t, a in tables for b in t["t"]}) >= 3
    assert len({costs_of(t).crossover(a) for t, a in tables}) >= 3


def test_the_report_table_reads_back_as_the_exercise_takes_it():
    costs = costs_of(EXAMPLE)
    table = table_from_report({"costs": json.loads(json.dumps(costs.as_json()))})  # string keys in the file
    assert table == {"t": EXAMPLE["t"], "d": EXAMPLE["d"], "step": EXAMPLE["step"]}
    bare = costs.as_json() | {"step_s": {}}
    with pytest.raises(ValueError, match="make serving"):
        table_from_report({"costs": bare})


# ---- the report read back: verdicts from the numbers and the band -----------------------------------


def fake_report(band: float | None, gains: dict[int, float], adaptive: list[float], load=None) -> dict:
    batches = sorted(gains)
    spread = lambda x: {"median": x, "lo": x, "hi": x, "n": 3}  # noqa: E731
    return {
        "schema": serving_view.SCHEMA, "machine": {"cpu": "A Test CPU"}, "date": "2026-12-06T10:00:00+00:00",
        "engine": {"name": "static f32", "why": "a test"}, "threads": 2, "noise_band": band,
        "settings": {"batches": batches, "gammas": [2], "new_tokens": 8, "repeats": 3},
        "ar": [{"batch": b, "tokens_per_s": spread(10.0 * b), "tokens_per_s_per_seq": spread(10.0), "step_s": spread(0.1)}
               for b in batches],
        "spec": [{"batch": b, "gamma": 2, "gain": spread(g)} for b, g in gains.items()],
        "crossover": {"measured": next((b for b in batches if gains[b] < 1), None), "predicted": 8, "alpha": 0.6},
        "prediction_error": {"median": 0.123, "median_tau": 0.045}, "roofline_turn": 6.5,
        "adaptive_check": [{"batch": b, "ratio_to_best": r} for b, r in zip(batches, adaptive)], "load": load,
    }


def test_verdict_words_come_from_the_band():
    assert serving_view.verdict(1.3, 0.1) == "pays" and serving_view.verdict(0.8, 0.1) == "loses"
    assert "tie" in serving_view.verdict(1.05, 0.1) and "no verdict" in serving_view.verdict(1.3, math.nan)
    assert "tie" in serving_view.verdict(1.3, 0.5)  # a wide band: the same ratio is noise


def test_the_gain_line_renders_the_reports_numbers():
    text = serving_view.gain_markdown(fake_report(0.05, {1: 1.8, 4: 1.02, 16: 0.7}, [1.0, 1.0, 1.0]))
    assert "B = 1: γ = 2 at 1.80× pays" in text and "B = 16: γ = 2 at 0.70× loses" in text and "1.02× ties" in text
    assert "measured **B = 16**" in text and "**B = 8**" in text and "12%" in text
    single = serving_view.gain_markdown(fake_report(None, {1: 1.8}, [1.0]))
    assert "pays" not in single and "no verdict" in single  # one repeat: no band, no verdict


def test_adaptive_below_the_band_is_named():
    ok = serving_view.adaptive_markdown(fake_report(0.05, {1: 1.5, 4: 0.9}, [0.97, 1.01]))
    assert "within the noise band" in ok
    bad = serving_view.adaptive_markdown(fake_report(0.05, {1: 1.5, 4: 0.9}, [0.97, 0.90]))
    assert "below the better choice beyond the noise band at B = 4" in bad


def test_where_and_throughput_render_machine_date_and_growth():
    report = fake_report(0.05, {1: 1.5, 4: 0.9}, [1.0, 1.0])
    assert "A Test CPU" in serving_view.where(report) and "2026-12-06 10:00" in serving_view.where(report)
    assert "**4.0×**" in serving_view.throughput_markdown(report) and "B* ≈ 6.5" in serving_view.throughput_markdown(report)
    report["costs"] = {"bandwidth": 2.0e10, "flops_per_s": 3.1e11}
    assert "20.0 GB/s read and 310.0 GFLOP/s" in serving_view.throughput_markdown(report)


def test_the_load_table_or_a_line_saying_it_is_absent():
    assert "no load sweep" in serving_view.load_markdown(fake_report(0.05, {1: 1.5}, [1.0]))
    rows = [{"rate": 2.0, "mode": m, "gamma": g, "median_ttft": 0.25, "median_tpot": 0.05, "throughput": t}
            for m, g, t in (("on", 2, 41.5), ("off", 0, 30.0), ("adaptive", "AdaptiveGamma", 31.0))]
    table = serving_view.load_markdown(fake_report(0.05, {1: 1.5}, [1.0], load={"rows": rows}))
    lines = table.splitlines()
    assert lines[2].startswith("| 2.00 | off |") and len(lines) == 5  # off first: the baseline of its rate
    assert "| 2.00 | on, γ = 2 | 250 ms | 50 ms | 41.5 | 1.38×, pays |" in table and "1.03×, ties" in table


def test_read_absent_none_and_a_wrong_schema_says_what_to_do(tmp_path):
    assert serving_view.read(tmp_path / "none.json") is None
    assert "make serving" in serving_view.missing_markdown(tmp_path / "none.json")
    path = tmp_path / "serving-cpu.json"
    path.write_text(json.dumps(fake_report(0.05, {1: 1.5}, [1.0])))
    assert serving_view.read(path)["engine"]["name"] == "static f32"
    path.write_text(json.dumps({"schema": 99, "ar": [1]}))
    with pytest.raises(ValueError, match="make serving"):
        serving_view.read(path)
    path.write_text("{not json")
    with pytest.raises(ValueError, match="make serving"):
        serving_view.read(path)


# ---- the live comparison on toys ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def toys():
    return (on_static_engine(tiny_llama(vocab_size=32, seed=0)),
            on_static_engine(tiny_llama(vocab_size=32, hidden_size=16, seed=1)))


PROMPTS = [torch.tensor([[2, 5, 3, 7, 2, 5]]), torch.tensor([[4, 9]]), torch.tensor([[6, 6, 8]])]


def test_the_live_rows_equal_their_batch1_runs(toys):
    live = serving_view.live_comparison(*toys, PROMPTS, batch=4, new_tokens=5, gamma=2, repeats=2, progress=False)
    assert live["equal_ar"] == 4 and live["equal_spec"] == 4
    assert live["ratio"] == pytest.approx(live["speed"]["batched speculation"].median / live["speed"]["batched AR"].median)
    assert "4 of 4" in serving_view.live_markdown(live) and "breaks exactness" not in serving_view.live_markdown(live)


def test_a_batch_that_mixes_up_its_rows_is_caught(toys, monkeypatch):
    from specdec_core.bench import serving

    def swapped(fn):
        out = serving.batched(fn)
        out.rows = out.rows[1:] + out.rows[:1]  # row b answered with row b + 1's tokens
        return out

    monkeypatch.setattr(serving_view, "batched", swapped)
    live = serving_view.live_comparison(*toys, PROMPTS, batch=3, new_tokens=5, gamma=2, repeats=1, progress=False)
    assert live["equal_ar"] < 3 and live["equal_spec"] < 3
    assert "breaks exactness" in serving_view.live_markdown(live)


def test_bad_live_input_says_what_to_do(toys):
    with pytest.raises(ValueError, match=">= 1"):
        serving_view.live_comparison(*toys, PROMPTS, batch=0)


def test_costs_of_is_the_librarys_table():
    assert isinstance(costs_of(EXAMPLE), LoadCosts) and costs_of(EXAMPLE).batches == [1, 4, 16]


def test_the_panels_rate_slider_prints_that_rates_stored_rows():
    from specdec_core.viz import serving as figures

    rows = [{"rate": rate, "mode": m, "gamma": 2, "median_ttft": ttft, "median_tpot": 0.05, "throughput": 10.0 * rate}
            for rate, ttft in ((1.0, 0.2), (4.0, 0.9)) for m in ("off", "on")]
    report = fake_report(0.05, {1: 1.5, 4: 0.9}, [1.0, 1.0], load={"rows": rows}) | {"costs": costs_of(
        {"t": {1: EXAMPLE["t"][1], 4: EXAMPLE["t"][4]}, "d": {1: 0.01, 4: 0.011}, "step": {1: 0.102, 4: 0.107}}).as_json()}
    report["spec"] = [{"batch": b, "gamma": g, "gain": {"median": 1.0}} for b in (1, 4) for g in (1, 2, 4)]
    panel = figures.prediction_widget(report)
    assert len(panel.children[0].children) == 3  # B, γ, α as before
    rate = panel.children[1].children[0]
    assert list(rate.options) == [("1.00", 1.0), ("4.00", 4.0)]
    line = figures.load_line(rows, 4.0)
    assert "900 ms" in line and "40.0 tokens/s" in line and "200 ms" not in line
    rate.value = 4.0  # redraws without an error
    figures.plt.close("all")
    broken = lambda rows_, r: "; ".join(f"{1e3 * x['median_ttft']:.0f} ms" for x in rows_)  # noqa: E731 every rate's rows
    assert "200 ms" in broken(rows, 4.0)  # the check above catches a line that mixes the rates
