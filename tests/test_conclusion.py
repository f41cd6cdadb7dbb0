"""Lesson 09's closing table (bench/conclusion.py) on small synthetic reports: which row is the fastest exact
method, which ratio goes in which column, the verdicts against the noise band, and the missing pieces."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specdec_core import theory
from specdec_core.bench import conclusion
from specdec_core.bench.report import SCHEMA_VERSION


def row(name: str, ratio: float, same: int | None = 4, alpha: float | None = None, prediction: dict | None = None) -> dict:
    return {"name": name, "label": name, "ratio_to_ar": ratio, "same_as_ar": same, "prompts": 4, "alpha": alpha,
            "tokens_per_call": 1.5, "prediction": prediction}


def report(methods: list[dict], band: float | None = 0.1, engine: dict | None = None) -> dict:
    return {"schema": SCHEMA_VERSION, "settings": {"engine": "fast"}, "noise_band": band,
            "methods": [row("ar", 1.0), *methods], "engine": engine}


def gain(x: float) -> dict:
    return {"median": x, "lo": x - 0.05, "hi": x + 0.05, "n": 4}


ENGINE = {"engine": "static bf16", "method": "spec", "band": 0.05, "engine_gain": gain(1.5), "method_gain": gain(1.2),
          "together": gain(1.8), "same_as_engine_ar": 3, "prompts": 4}
PRED = {"tokens_per_call": 2.0, "draft": 0.3, "v": 1.2, "overhead": 0.01, "speedup": 1.32}


def cells(markdown: str, category: str) -> list[str]:
    """The cells of the category's row, without the category."""
    line = next(ln for ln in markdown.splitlines() if ln.startswith(f"| {category} |"))
    return [c.strip() for c in line.strip("|").split("|")][1:]


def test_the_fastest_exact_method_skips_the_inexact_the_peers_and_the_wrong_outputs():
    rep = report([row("naive", 5.0, same=0), row("hf_lookup", 2.0), row("llamacpp_ar", 3.0), row("lookup", 1.9, same=3),
                  row("spec", 1.3, alpha=0.6), row("spec_feature", 1.1)])
    assert conclusion.fastest_exact(rep)["name"] == "spec"
    assert cells(conclusion.table({"chat": rep}, []), "chat")[0] == "`spec`: 1.30× (faster)"


def test_the_engine_columns_hold_each_ratio_in_its_place():
    rep = report([row("spec", 1.3)], engine=ENGINE)
    first, on_engine, engine_ar, together, *_ = cells(conclusion.table({"code": rep}, []), "code")
    assert on_engine == "`spec`: 1.20× (faster) ⚠ 3/4 (band ±5%)"  # ÷ engine AR, on how many prompts AR's tokens, the band
    assert engine_ar == "static bf16: 1.50× (faster)"  # engine AR ÷ our AR
    assert together == "1.80× (faster)"  # method on the engine ÷ our AR
    text = conclusion.sentence("code", rep)
    assert "AR on static bf16 ran 1.50× (faster)" in text and "`spec` on it 1.80× our AR (faster)" in text
    assert conclusion.NO_ENGINE not in text


def test_without_engine_rows_the_table_and_the_sentence_say_how_to_get_them():
    rep = report([row("spec", 1.3)])
    assert cells(conclusion.table({"chat": rep}, []), "chat")[1:4] == [conclusion.NO_ENGINE, "–", "–"]
    assert conclusion.sentence("chat", rep).endswith(conclusion.NO_ENGINE + ".")


def test_an_engine_whose_band_is_null_gives_no_verdict():
    rep = report([row("spec", 1.3)], engine=ENGINE | {"band": None})
    assert cells(conclusion.table({"chat": rep}, []), "chat")[2] == "static bf16: 1.50× (single run)"


def test_a_tie_and_a_win_are_told_apart_by_the_noise_band():
    tie, win = report([row("lookup", 1.08, alpha=0.3)], band=0.1), report([row("lookup", 1.19, alpha=0.4)], band=0.1)
    assert cells(conclusion.table({"heldout": tie}, []), "held-out")[0] == "`lookup`: 1.08× (a tie)"
    assert ("none of our exact methods was faster than our AR beyond the noise band (±10%); the fastest, `lookup`, was a tie "
            "(1.08×)") in conclusion.sentence("heldout", tie)
    assert "`lookup` decoded faster than our AR (1.19×, outside the noise band ±10%)" in conclusion.sentence("copy", win)
    slower = report([row("jacobi", 0.7)], band=0.1)
    assert "the fastest, `jacobi`, was slower (0.70×)" in conclusion.sentence("chat", slower)
    single = report([row("lookup", 1.5)], band=None)
    assert "no verdict" in conclusion.sentence("chat", single) and "faster" not in conclusion.sentence("chat", single)


def test_the_sentence_prices_the_row_with_its_own_prediction():
    rep = report([row("spec", 1.3, alpha=0.6, prediction=PRED)])
    text = conclusion.sentence("code", rep)
    assert "drafted by the standalone draft model, it confirmed 2.00 tokens per target call (α = 0.60)" in text
    assert "d·c 0.30 + v 1.20 + o 0.01" in text and "predicted 1.32×" in text


def test_llama_cpp_is_shown_when_measured_and_not_installed_otherwise():
    rep = report([row("spec", 1.3), row("llamacpp_ar", 2.5), row("llamacpp_ar_f16", 3.5)])
    assert cells(conclusion.table({"chat": rep}, []), "chat")[4] == "f32 2.50× (faster); f16 3.50× (faster)"
    assert cells(conclusion.table({"chat": report([row("spec", 1.3)])}, []), "chat")[4] == "not installed"


def gpu_report(tiny: bool = False, date: str = "2026-12-01T10:00:00+00:00", name: str = "NVIDIA H100") -> dict:
    return {"kind": "gpu-scale", "tiny": tiny, "machine": {"name": name, "date": date},
            "models": {"big": {"v": {"1": 1.0, "3": 1.02, "5": 1.05}}},
            "pairs": [{"target": "big", "draft": "small", "preset": "p", "c": 0.2}]}


def test_the_gpu_column_uses_the_latest_full_report_and_the_category_alpha():
    rep = report([row("spec", 1.3, alpha=0.7)])
    assert cells(conclusion.table({"chat": rep}, []), "chat")[5] == "no GPU report yet"
    older, tiny = gpu_report(date="2026-01-01T00:00:00+00:00", name="old"), gpu_report(tiny=True, date="2027-01-01", name="tiny")
    cell = cells(conclusion.table({"chat": rep}, [older, gpu_report(), tiny]), "chat")[5]
    best = max((theory.speedup(0.7, g, 0.2, v), g) for g, v in ((2, 1.02), (4, 1.05)))  # γ + 1 = 3, 5 were measured
    assert cell == f"NVIDIA H100, 2026-12-01: S ≈ {best[0]:.2f}× (γ {best[1]}) at α 0.70, c 0.20 (big / small)"
    assert "no α of `spec`" in cells(conclusion.table({"chat": report([row("lookup", 1.3)])}, [gpu_report()]), "chat")[5]


def test_the_loaders_read_the_category_reports_and_the_gpu_files(tmp_path: Path):
    (tmp_path / "cpu-offline-copy.json").write_text(json.dumps(report([row("lookup", 1.2)])))
    (tmp_path / "cpu-offline-code.json").write_text(json.dumps({"schema": -1}))  # an older schema: left out
    (tmp_path / "gpu-nvidia-h100.json").write_text(json.dumps(gpu_report()))
    assert list(conclusion.load_reports(tmp_path, "cpu", "offline")) == ["copy"]
    assert [g["machine"]["name"] for g in conclusion.load_gpu_reports(tmp_path)] == ["NVIDIA H100"]
    assert conclusion.table({}, []).startswith("No benchmark reports")


@pytest.mark.parametrize("category, label", [("heldout", "held-out"), ("code", "code")])
def test_rows_carry_the_category_label(category: str, label: str):
    assert f"| {label} |" in conclusion.table({category: report([row("spec", 1.3)])}, [])


def test_a_report_from_before_the_engine_choice_still_names_its_engine() -> None:
    old = report([row("spec", 1.3)], engine={k: v for k, v in ENGINE.items() if k != "engine"} | {"precision": "f16"})
    assert cells(conclusion.table({"chat": old}, []), "chat")[2] == "static f16: 1.50× (faster)"
    assert conclusion.baseline(old) == "f32 prepacked"  # its settings said engine "fast"
    assert conclusion.baseline(old | {"engines": {"ar": "static bf16"}}) == "static bf16"
