"""gpu-check's scale section (bench/gpuscale.py) and its report (bench/gpureport.py), on the CPU.

The section runs end to end on two-layer stand-ins of each architecture (``tiny``): the same code a GPU
runs at the real shapes. The tests check the report's structure and that its figures agree with each
other (floors, ratios, c, S), never a time.
"""

from __future__ import annotations

import datetime
import json
import math
from pathlib import Path

import pytest
import torch

from specdec_core import theory
from specdec_core.bench import gpureport, gpuscale

ROOT = Path(__file__).resolve().parents[1]
BUILD = gpuscale.build
PUBLISHED = {"gemma-2-9b": "9.24e+09", "gemma-2-2b": "2.61e+09", "smollm2-1.7b": "1.71e+09", "smollm2-135m": "1.35e+08",
             "smollm2-360m": "3.62e+08"}  # parameters, to the three digits each model's Hub page states
PAIRS = {("gemma-2-9b", "gemma-2-2b", "gemma2"), ("smollm2-1.7b", "smollm2-135m", "smollm2"),
         ("smollm2-1.7b", "smollm2-360m", None)}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """One tiny run of the whole section, its checkpoints, and its files."""
    out = tmp_path_factory.mktemp("gpu")
    seen = []
    report = gpuscale.run_section("cpu", tiny=True, log=lambda _: None, checkpoint=seen.append)
    return report, seen, gpureport.write(report, out)


@pytest.mark.parametrize("name", list(gpuscale.ARCHS))
def test_each_architecture_has_its_published_size(name):
    """The shapes are typed from the Hub configs: a typo shows up as a wrong parameter count (meta device)."""
    count = gpuscale.planned_parameters(gpuscale.config_of(gpuscale.ARCHS[name]))
    assert f"{count:.3g}" == PUBLISHED[name], f"{name}: {count:,} parameters"


def test_the_tiny_configs_keep_each_family_and_its_head_layout():
    for name, arch in gpuscale.ARCHS.items():
        full, small = gpuscale.config_of(arch), gpuscale.config_of(arch, tiny=True)
        assert small.model_type == full.model_type == arch.family and small.num_hidden_layers == 2
        grouped = full.num_key_value_heads < full.num_attention_heads
        assert (small.num_key_value_heads < small.num_attention_heads) == grouped, name
        assert full.eos_token_id is None  # random weights decode every token asked for


def test_the_tiny_section_measures_every_model_and_pair(tiny):
    report, _, _ = tiny
    s = report["settings"]
    assert report["kind"] == "gpu-scale" and report["tiny"] and not report["errors"] and not report["notes"]
    assert list(report["models"]) == list(gpuscale.ARCHS)
    ns = {str(n) for n in s["ns"]}
    assert max(s["ns"]) == 64
    for name, m in report["models"].items():
        expected = 2 * gpuscale.planned_parameters(gpuscale.config_of(gpuscale.ARCHS[name], tiny=True))
        assert expected <= m["weight_bytes"] < expected + 4096, name  # bf16 weights (+ the rotary tables)
        assert m["architecture"] == {"gemma2": "Gemma2ForCausalLM", "llama": "LlamaForCausalLM"}[gpuscale.ARCHS[name].family]
        assert set(m["v"]) == set(m["v_tree"]) == ns and m["v"]["1"] == 1.0
        assert all(v > 0 for v in [*m["v"].values(), *m["v_tree"].values()])
        for key in ("step_s", "chained_s", "alone_s", "ar_s_per_token", "hf_s_per_token", "floor_s"):
            assert m[key] > 0, (name, key)
        assert m["overhead_s"] >= 0
        assert m["floor_s"] == pytest.approx(m["weight_bytes"] / report["bandwidth"])
        assert m["floor_ratio"] == pytest.approx(m["step_s"] / m["floor_s"])
        assert m["overhead"] == pytest.approx(m["overhead_s"] / m["step_s"])
        assert m["ar_vs_hf"] == pytest.approx(m["hf_s_per_token"] / m["ar_s_per_token"])
        # our AR and transformers' generate decode the same tokens from the same random model
        assert m["same_tokens"] and m["agree"] == m["compared"] == s["new_tokens"], name


def test_each_pair_has_its_c_and_the_gamma_it_allows(tiny):
    report, _, _ = tiny
    models = report["models"]
    assert {(p["target"], p["draft"], p["preset"]) for p in report["pairs"]} == PAIRS
    for p in report["pairs"]:
        t, d = models[p["target"]], models[p["draft"]]
        assert p["c"] == pytest.approx(d["step_s"] / t["step_s"])
        assert p["c_chained"] == pytest.approx(d["chained_s"] / t["chained_s"])
        assert set(p["by_alpha"]) == {str(a) for a in gpuscale.ALPHAS}
        v = {int(n): x for n, x in t["v"].items()}
        cm = gpuscale.costmodel.CostModel({}, t["step_s"], v, (0, 0), 1.0, 0)
        for alpha, best in p["by_alpha"].items():
            a = float(alpha)
            assert best["gamma"] == theory.best_gamma(a, p["c"], cm.v)
            assert best["speedup"] == pytest.approx(theory.speedup(a, best["gamma"], p["c"], cm.v))
            assert all(theory.speedup(a, g, p["c"], cm.v) <= best["speedup"] + 1e-12 for g in range(1, 17))


def test_the_files_hold_the_report_and_the_machine(tiny):
    report, seen, (json_path, md_path) = tiny
    assert json_path.name == "gpu-cpu-tiny.json" and md_path.name == "gpu-cpu-tiny.md"
    assert json.loads(json_path.read_text()) == report
    assert not list(json_path.parent.glob("*.tmp"))  # written atomically: nothing left behind
    m = report["machine"]
    assert m["torch"] == torch.__version__ and m["transformers"] and m["commit"] and len(m["source_sha256"]) == 12
    assert datetime.datetime.fromisoformat(m["date"]).tzinfo is not None
    md = md_path.read_text()
    assert gpureport.headline(report) in md and "Tiny run" in md
    assert all(f"| {name} |" in md for name in gpuscale.ARCHS)
    assert all(f"| {p['target']} / {p['draft']} |" in md for p in report["pairs"])
    # a checkpoint after each model, each a complete report of the models so far
    assert [list(c["models"]) for c in seen] == [list(gpuscale.ARCHS)[: i + 1] for i in range(len(gpuscale.ARCHS))]


class Clock:
    """A stand-in for the time module: each perf_counter() call is ``tick`` seconds after the last."""

    def __init__(self, tick: float) -> None:
        self.now, self.tick = 0.0, tick

    def perf_counter(self) -> float:
        self.now += self.tick
        return self.now


def test_past_its_budget_the_section_skips_with_a_note(monkeypatch):
    # start 10, deadline 45: the first model starts (checked at 20, begun at 30), AR runs (40), the rest is past it
    monkeypatch.setattr(gpuscale, "time", Clock(10.0))
    s = gpuscale.settings_for(True, budget_s=35.0)
    report = gpuscale.run_section("cpu", tiny=True, settings=s, names=["smollm2-135m", "smollm2-360m"], log=lambda _: None)
    m = report["models"]["smollm2-135m"]
    assert "step_s" in m and "floor_ratio" in m and "v" not in m and "overhead_s" not in m and m["overhead"] is None
    assert "smollm2-360m" not in report["models"] and report["pairs"] == []
    notes = "\n".join(report["notes"])
    assert "smollm2-135m: v(n) not measured" in notes and "smollm2-360m: not measured" in notes and "35 s" in notes
    md = gpureport.markdown(report)
    assert "## Skipped and failed" in md and "| smollm2-135m |" in md


def test_a_failing_phase_is_recorded_with_its_site_and_the_rest_runs(monkeypatch):
    from specdec_core.lm import Decoder

    calls = []

    def broken(model, s):  # the first model's chained steps roll back past the cache: lm.py raises
        calls.append(model)
        if len(calls) == 1:
            Decoder(model).rollback(5)
        return 1e-3

    def failing_build(config, device):
        if config.num_key_value_heads == config.num_attention_heads:  # smollm2-1.7b's stand-in: no grouped heads
            raise MemoryError("no room")
        return BUILD(config, device)

    monkeypatch.setattr(gpuscale, "chained_step", broken)
    monkeypatch.setattr(gpuscale, "build", failing_build)
    report = gpuscale.run_section("cpu", tiny=True, names=["smollm2-135m", "smollm2-1.7b", "smollm2-360m"],
                                  log=lambda _: None)
    assert list(report["errors"]) == ["smollm2-135m: chained steps", "smollm2-1.7b: build"]
    assert "ValueError" in report["errors"]["smollm2-135m: chained steps"]
    assert "specdec_core/lm.py:" in report["errors"]["smollm2-135m: chained steps"]
    assert "MemoryError: no room" in report["errors"]["smollm2-1.7b: build"]
    first, last = report["models"]["smollm2-135m"], report["models"]["smollm2-360m"]
    assert "chained_s" not in first and "v" in first and "overhead_s" in first  # the phases after it still ran
    assert "chained_s" in last and "smollm2-1.7b" not in report["models"]
    assert "smollm2-135m: chained steps failed" in gpureport.markdown(report)


def test_failure_site_is_the_innermost_package_frame():
    from specdec_core.lm import check_inputs

    with pytest.raises(ValueError) as caught:
        check_inputs(None, torch.zeros(3, dtype=torch.long), 1)
    site = gpureport.failure_site(caught.value)
    assert site.startswith("specdec_core/lm.py:") and site.endswith("(check_inputs)")
    line = int(site.split(":")[1].split()[0])
    assert "raise ValueError" in (ROOT / "specdec_core/lm.py").read_text().splitlines()[line - 1]
    with pytest.raises(ZeroDivisionError) as outside:
        _ = 1 / 0
    assert gpureport.failure_site(outside.value) == "outside specdec_core"


def test_the_readme_shows_the_latest_full_report(tiny, tmp_path):
    report, _, (json_path, _) = tiny
    readme = (ROOT / "README.md").read_text()
    assert gpureport.readme_with_gpu_report(readme) == readme, \
        "the README's GPU report is stale: run `python -m specdec_core.bench.gpureport --write-readme`"
    results = tmp_path / "results"
    results.mkdir()
    (results / json_path.name).write_text(json_path.read_text())  # a tiny report is never shown
    assert "No GPU report yet" in gpureport.readme_block(results)
    older = report | {"tiny": False, "machine": report["machine"] | {"slug": "gpu-a", "name": "GPU A", "date": "2026-01-01T00:00:00+00:00"}}
    newer = report | {"tiny": False, "machine": report["machine"] | {"slug": "gpu-b", "name": "GPU B", "date": "2026-02-01T00:00:00+00:00"}}
    for r in (newer, older):
        gpureport.write(r, results)
    block = gpureport.readme_block(results)
    assert "GPU B" in block and "2026-02-01" in block and "GPU A" not in block
    assert "[`results/gpu-gpu-b.md`](results/gpu-gpu-b.md)" in block
    step = report["models"]["gemma-2-9b"]["step_s"]
    assert f"| gemma-2-9b | 0.00 | {step * 1e3:.2f} |" in block  # the figures come from the file
    rendered = gpureport.readme_with_gpu_report(readme, results)
    assert "GPU B" in rendered and rendered != readme
    assert gpureport.readme_with_gpu_report(rendered, results) == rendered  # its own output is current
    with pytest.raises(ValueError, match="no GPU-report block"):
        gpureport.readme_with_gpu_report("# a README without the block\n", results)


def test_a_cpu_run_at_full_size_is_refused_not_attempted(capsys):
    from specdec_core.bench import gpucheck

    args = gpucheck.argparse.Namespace(device="cpu", tiny=False, scale_budget=None, out="unused")
    assert gpucheck.scale_section(args, 300.0) == 0
    assert "--tiny" in capsys.readouterr().out
    assert math.isfinite(gpuscale.FULL.budget_s) and gpuscale.TINY.budget_s < gpuscale.FULL.budget_s
