"""CLLM evaluation: output drift, code extraction, HumanEval's unit tests run for real."""

from __future__ import annotations

import math

import pytest

from specdec_core import prompts
from specdec_core.bench.cllm_eval import noise_band_of, summary
from specdec_core.bench.quality import extract_code, parses, passes
from specdec_core.generation import common_prefix as first_difference


def test_first_difference():
    assert first_difference([1, 2, 3], [1, 2, 4]) == 2
    assert first_difference([1, 2], [1, 2, 3]) == 2
    assert first_difference([5], [6]) == 0


def test_extract_code_takes_the_first_fenced_block():
    answer = "Here you go:\n```python\ndef f(x):\n    return x\n```\nThis returns x.\n```python\nprint(1)\n```"
    assert extract_code(answer) == "def f(x):\n    return x\n"
    assert extract_code("```\nx = 1\n```") == "x = 1\n"
    assert extract_code("```python\ndef f():\n    return 1") == "def f():\n    return 1"  # cut off by max tokens
    assert extract_code("no code") == "no code"


def test_humaneval_canonical_solutions_pass_and_wrong_ones_fail():
    problems = prompts.humaneval()[:3]
    for p in problems:
        full = "```python\n" + p["prompt"] + p["canonical_solution"] + "```"
        assert passes(p, full), p["task_id"]
        body_only = "```python\n" + p["canonical_solution"] + "```"  # the answer gives only the body
        assert passes(p, body_only), p["task_id"]
        assert not passes(p, f"```python\ndef {p['entry_point']}(*args):\n    return None\n```")
    assert not passes(problems[0], f"```python\ndef {problems[0]['entry_point']}(*a):\n    while True: pass\n```",
                      timeout=2.0)


def test_summary_rates():
    rows = [{"tokens": 10, "ar_tokens": 10, "base_tpi": 1.0, "cllm_tpi": 2.0, "ar_s": 1.0, "base_jacobi_s": 2.0,
             "cllm_jacobi_s": 0.5, "cllm_fast_forward": 5, "cllm_stationary": 1, "drift": 10, "same_output": True}]
    s = summary(rows)
    assert s["cllm_tokens_per_iteration"] == 2.0 and s["base_tokens_per_iteration"] == 1.0
    assert s["base_jacobi_vs_ar"] == 0.5 and s["cllm_jacobi_vs_ar"] == 2.0 and s["same_output"] == 1


def test_parses():
    assert parses("```python\ndef f(x):\n    return x\n```") and not parses("```python\ndef f(x):\n    return (\n```")


def test_noise_band_of_rows_uses_every_round_and_needs_two():
    rows = [{"runs_s": {"ar": [1.0, 1.1, 0.9], "cllm": [2.0, 2.0, 2.0]}}]
    assert noise_band_of(rows) == pytest.approx(0.1)  # spreads 0.2 and 0.0: their median
    assert math.isnan(noise_band_of([{"runs_s": {"ar": [1.0]}}])) and math.isnan(noise_band_of([{}]))
