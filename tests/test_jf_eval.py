"""The side-by-side evaluation of fine-tuned parallel decoders (bench/jf_eval.py)."""

from __future__ import annotations

import pytest

from specdec_core.bench import jf_eval


def _row(ar_s: float, j_s: float, tokens: int = 8, iterations: int = 4) -> dict:
    return {"ar_tokens": tokens, "methods": {
        "ar": {"tokens": tokens, "iterations": tokens, "width": None, "seconds": [ar_s, ar_s * 1.1], "drift": tokens},
        "jf ×2": {"tokens": tokens, "iterations": iterations, "width": 3 * (iterations - 1), "seconds": [j_s, j_s],
                  "drift": 5},
    }}


def test_summary_rates_widths_and_noise_band():
    s = jf_eval.speed_summary([_row(1.0, 0.5), _row(2.0, 2.0, iterations=8)])
    jf = s["methods"]["jf ×2"]
    assert jf["tokens_per_iteration"] == pytest.approx(16 / 12, abs=1e-3)
    assert jf["mean_width"] == 3.0 and jf["median_drift"] == 5
    assert jf["vs_ar"] == pytest.approx(3.15 / 2.5, abs=1e-3)  # rates from the medians of the rounds (1.05 + 2.1)
    assert s["methods"]["ar"]["vs_ar"] == 1.0 and s["noise_band"] == pytest.approx(0.1 / 1.05 / 2, abs=1e-3)  # median of 0.095, 0.095, 0, 0


@pytest.mark.offline
def test_speed_and_quality_on_the_offline_target():
    from transformers import AutoTokenizer

    from specdec_core.assets import ensure_target_dir
    from specdec_core.models import PRESETS, load_model

    target = load_model(PRESETS["offline"].target, "cpu")
    tokenizer = AutoTokenizer.from_pretrained(ensure_target_dir())
    rows = jf_eval.speed(target, {"base": target}, tokenizer, ["Write a Python function that adds two numbers."],
                         max_new_tokens=12, repeats=1)
    methods = rows[0]["methods"]
    assert set(methods) == {"ar", "base", "base ×2"}
    assert all(m["drift"] == m["tokens"] == 12 for m in methods.values())  # Jacobi = the base model's greedy AR
    assert methods["base ×2"]["width"] > 0 and methods["base"]["width"] > 0 and methods["ar"]["width"] is None
    from specdec_core.train.corpus import heldout_prose

    q = jf_eval.quality(target, {"base": target}, tokenizer, heldout_prose(tokenizer, 600), n_humaneval=1, answer_tokens=8)
    base = q["base"]
    assert q["counts"] == {"heldout": 19, "humaneval": 1, "answers": 20}
    assert 0 <= base["heldout_tests_passed"] <= 19 and base["collapsed"] == 0
    assert 1 < base["ppl_domain"] < 3 < base["ppl_prose"]  # its own greedy answers are the most likely text


def test_tables_and_figures_of_a_report():
    from specdec_core import jacobi_forcing
    from specdec_core.viz import jacobi_forcing as viz_jf

    report = {"speed": jf_eval.speed_summary([_row(1.0, 0.5), _row(2.0, 2.0, iterations=8)])}
    one = {"heldout_tests_passed": 3, "heldout_parses": 17, "humaneval_parses": 18, "collapsed": 0,
           "ppl_domain": 1.5, "ppl_prose": 9.87}
    report["quality"] = {"base": one, "jf": {**one, "collapsed": 2}, "counts": {"heldout": 19, "humaneval": 20, "answers": 39}}
    speed = viz_jf.speed_table(report)
    assert "| jf ×2 | 1.33 | 3.0 | 1.26× | 5 |" in speed and "| ar | 1 | – | 1.00× |" in speed
    quality = viz_jf.quality_table(report)
    assert "| jf | 3 | 17 | 18 | 2 | 1.500 | 9.87 |" in quality and "(of 39)" in quality
    viz_jf.speed_bars(report)
    log = {"step": [0, 1, 2], "after_error_acc": [0.1, 0.2, 0.3], "ar_acc": [0.9, 0.95, 1.0]}
    viz_jf.ablation_curves({"cllm": log, "jf": log})
    viz_jf.mask_picture(jacobi_forcing.noise_aware_mask(3, [2, 2]), 3, [2, 2])
    viz_jf.packed_sequence([[1, 9], [3, 4]], [[1, 2], [3, 4]], [0.5, 1.0])
    viz_jf.plt.close("all")


def test_shares_of_the_trajectories_are_fixed_nested_and_checked():
    import torch

    from specdec_core.cllm import Trajectory
    from specdec_core.train.trajectories import answer_tokens, share

    trajs = [Trajectory(torch.tensor([1]), torch.arange(i + 1), []) for i in range(20)]
    quarter, half = share(trajs, 0.25), share(trajs, 0.5)
    assert len(quarter) == 5 and len(half) == 10 and share(trajs, 1.0) == trajs
    assert all(any(t is u for u in half) for t in quarter)  # nested: the data curve adds data, never swaps it
    assert [len(t.answer) for t in share(trajs, 0.25)] == [len(t.answer) for t in quarter]  # fixed seed
    assert [id(t) for t in quarter] != [id(t) for t in trajs[:5]]  # a random share, not the first prompts
    assert answer_tokens(trajs) == sum(range(1, 21))
    for bad in (0.0, 1.5):
        with pytest.raises(ValueError, match=r"in \(0, 1\]"):
            share(trajs, bad)


@pytest.mark.offline
def test_tokens_per_iteration_is_the_ratio_of_sums_of_the_side_by_side_rows():
    from transformers import AutoTokenizer

    from specdec_core.assets import ensure_target_dir
    from specdec_core.models import PRESETS, load_model

    target = load_model(PRESETS["offline"].target, "cpu")
    tokenizer = AutoTokenizer.from_pretrained(ensure_target_dir())
    prompts = ["Write a Python function that adds two numbers.", "Write a Python function that reverses a string."]
    rows = jf_eval.speed(target, {"base": target}, tokenizer, prompts, max_new_tokens=20, repeats=1)
    want = sum(r["methods"]["base"]["tokens"] for r in rows) / sum(r["methods"]["base"]["iterations"] for r in rows)
    assert jf_eval.tokens_per_iteration(target, tokenizer, prompts, max_new_tokens=20) == pytest.approx(want)


def test_the_data_curve_figure():
    from specdec_core.viz import jacobi_forcing as viz_jf

    curve = {"base": 1.07, "prompts": 19, "points": [
        {"adapter": "a", "trajectory_tokens": 5000, "fraction": 0.25, "steps": 100, "objective": "jf", "tokens_per_iteration": 1.1},
        {"adapter": "b", "trajectory_tokens": 19000, "fraction": 1.0, "steps": 100, "objective": "jf", "tokens_per_iteration": 1.2}]}
    fig = viz_jf.data_curve(curve, title="t")
    line = fig.axes[0].get_lines()[0]
    assert list(line.get_xdata()) == [5000, 19000] and list(line.get_ydata()) == [1.1, 1.2]
    viz_jf.plt.close("all")


def test_the_quality_bar_at_its_edges_and_on_the_stored_reports():
    import json

    from specdec_core.assets import JF_ADAPTER

    base = {"ppl_prose": 10.0, "collapsed": 3, "humaneval_parses": 18}
    assert jf_eval.keeps_the_model(base, base)
    assert jf_eval.keeps_the_model({**base, "ppl_prose": 11.0, "humaneval_parses": 17}, base)  # the edges pass
    assert not jf_eval.keeps_the_model({**base, "ppl_prose": 11.01}, base)
    assert not jf_eval.keeps_the_model({**base, "collapsed": 4}, base)
    assert not jf_eval.keeps_the_model({**base, "humaneval_parses": 16}, base)
    q = json.loads((JF_ADAPTER.parent / "compare-kl.json").read_text())["quality"]  # lesson 08b's verdicts
    assert jf_eval.keeps_the_model(q["jf-kl"], q["base"]) and not jf_eval.keeps_the_model(q["jf"], q["base"])
