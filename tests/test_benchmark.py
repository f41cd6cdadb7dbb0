"""The benchmark (specdec_core.bench: runner, report, the CLI ``python -m specdec_core.bench``) on a toy pair.

Structure and bookkeeping only: never a wall-clock assertion.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys

import pytest
import torch

from specdec_core import ar, engines
from specdec_core.bench import __main__ as cli
from specdec_core.bench import llamacpp, methods, runner
from specdec_core.bench import report as report_module
from specdec_core.bench.methods import Method
from specdec_core.files import atomic_dir, atomic_write, json_safe
from specdec_core.generation import Generation
from specdec_core.models import Pair
from specdec_core.records import RunStats
from specdec_core.toy import tiny_llama, toy_tokenizer

VOCAB = 32
PROMPTS = ["w3 w4 w5 w6 w3 w4 w5", "w9 w2 w7 w9 w2", "w10 w11 w12"]
FLAGS = ["--n-prompts", "2", "--max-new-tokens", "6", "--repeats", "2", "--gamma", "2"]


def toy_pair() -> Pair:
    """A 32-word word-level tokenizer (id 1 = EOS) and two different random toys that share it."""
    tok = toy_tokenizer(VOCAB)
    target = tiny_llama(VOCAB, seed=0, num_layers=2, logit_scale=4.0)
    draft = tiny_llama(VOCAB, seed=1, num_layers=1, logit_scale=4.0)
    return Pair(target, draft, tok, "toy", torch.device("cpu"))


def broken(pair: Pair, ids: torch.Tensor, n: int) -> Generation:
    """A 'method' that returns AR's tokens shifted by one id: its output must be flagged different."""
    out = ar.generate(pair.target, ids, n, eos_token_id=pair.tokenizer.eos_token_id)
    return Generation([(t + 1) % VOCAB for t in out.new_tokens], None, out.stats)


@pytest.fixture(scope="module")
def pair():
    return toy_pair()


@pytest.fixture(scope="module")
def written(pair, tmp_path_factory):
    """The CLI once, on the real registry plus the broken method: (report, out folder)."""
    out = tmp_path_factory.mktemp("results")
    registry = methods.build_methods(gamma=2, lookup_tokens=3) | {"broken": Method(broken, "broken on purpose")}
    code = cli.main(FLAGS + ["--out", str(out), "--name", "toy"], pair=pair, methods=registry,
                          prompt_texts=PROMPTS, progress=False)
    assert code == 0
    return json.loads((out / "toy.json").read_text()), out


def test_writes_three_files_with_the_expected_keys(written):
    report, out = written
    assert sorted(p.name for p in out.iterdir()) == ["toy.json", "toy.md", "toy.png"]  # no temp file left
    assert (out / "toy.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert {"settings", "environment", "calibration", "methods", "prompts", "not_available", "device"} <= set(report)
    assert report["environment"]["torch"] == torch.__version__
    assert report["calibration"]["gamma"] == 2 and report["calibration"]["chosen_by"] == "--gamma"
    v = report["calibration"]["v_by_gamma"]
    assert sorted(v, key=int) == [str(g) for g in range(1, 9)] and report["calibration"]["v"] == v["2"]
    names = [row["name"] for row in report["methods"]]
    offline_only = sorted(["bnb_nf4_ar", "cllm", "jacobi_forcing", "jf_ar", "lookahead_jf", "spec_best", "spec_feature",
                           "spec_feature_sampled", "tree_feature", "tree_feature_sampled", "spec_medusa", "spec_medusa_sampled",
                           "tree_medusa", "tree_medusa_sampled"]  # need a preset: weights that ship
                          + [n for n in llamacpp.ROWS if n not in methods.NOT_AVAILABLE])  # the target's GGUF (the extra)
    assert names == [n for n in methods.build_methods(2) if n not in offline_only] + ["broken"]
    assert sorted(report["failed"]) == offline_only and all("offline" in why for why in report["failed"].values())
    for row in report["methods"]:
        assert {"tokens_per_s", "ratio_to_ar", "alpha", "tokens_per_call", "process_peak_mb", "fresh_peak_mb", "same_as_ar"} <= set(row)
        assert row["tokens_per_s"] > 0 and row["process_peak_mb"] > 0 and row["prompts"] == 2
        assert row["fresh_peak_mb"] is None  # a pair built in memory: no fresh process can load it
    assert len(report["prompts"]) == 2 and report["prompts"][0]["prompt"] == PROMPTS[0]
    for record in report["prompts"]:
        assert all(len(runs) == 2 for runs in record["runs"].values())  # two repeats of every method
    assert report["noise_band"] is not None and report["noise_band"] >= 0  # two repeats measure the noise
    verdicts = {row["name"]: row["verdict"] for row in report["methods"]}
    assert verdicts["ar"] == "baseline" and set(verdicts.values()) <= {"baseline", "faster", "slower", "a tie"}
    md = (out / "toy.md").read_text()
    assert md.count("\n| ") == len(names) + 1  # header + one row per method
    assert "transformers assisted, γ=2" in md
    assert ("Not available yet" in md) == bool(methods.NOT_AVAILABLE)  # only the llama.cpp rows, without the extra
    pinned = report["engines"]  # a test times nothing: the engine choice is pinned, and the report says so
    assert pinned["ar"] == engines.PINNED and pinned["choice"]["why"].startswith("pinned")
    assert f": **{engines.PINNED}**; the engine rows below" in md and "pinned" in md


def test_ratios_come_from_the_same_run(written):
    report, _ = written
    rows = {row["name"]: row for row in report["methods"]}

    def per_prompt(name):
        return [statistics.median(r["tokens_per_s"] for r in p["runs"][name]) for p in report["prompts"]]

    assert rows["ar"]["ratio_to_ar"] == 1.0
    for name, row in rows.items():
        expected = statistics.median(m / a for m, a in zip(per_prompt(name), per_prompt("ar")))
        assert row["ratio_to_ar"] == pytest.approx(expected, rel=1e-12)
        assert row["tokens_per_s"] == pytest.approx(statistics.median(per_prompt(name)), rel=1e-12)


def test_output_equality_flags(written, pair):
    report, _ = written
    rows = {row["name"]: row for row in report["methods"]}
    for exact in ("ar", "hf_ar", "spec", "hf_assisted", "lookup", "hf_lookup", "jacobi"):
        assert rows[exact]["same_as_ar"] == 2, exact
    assert rows["broken"]["same_as_ar"] == 0
    assert rows["spec_sampled"]["same_as_ar"] is None and not rows["spec_sampled"]["greedy"]
    for record in report["prompts"]:
        assert record["same_as_ar"]["broken"] is False and record["same_as_ar"]["spec_sampled"] is None
        # the naive method outputs the draft's greedy text: flagged equal iff the draft agrees with the target
        ids = torch.tensor([pair.tokenizer(record["prompt"]).input_ids])
        eos = pair.tokenizer.eos_token_id
        draft_says = ar.generate(pair.draft, ids, 6, eos_token_id=eos).new_tokens
        assert record["outputs"]["naive"] == draft_says
        assert record["same_as_ar"]["naive"] == (draft_says == ar.generate(pair.target, ids, 6, eos_token_id=eos).new_tokens)
    assert rows["naive"]["same_as_ar"] < 2  # the two toys are different models


def test_speculative_methods_report_alpha_and_tokens_per_call(written):
    rows = {row["name"]: row for row in written[0]["methods"]}
    for name in ("spec", "spec_sampled", "lookup"):
        assert 0.0 <= rows[name]["alpha"] <= 1.0, name
    assert rows["ar"]["tokens_per_call"] == 1.0 and rows["ar"]["alpha"] is None
    assert rows["spec"]["tokens_per_call"] >= 1.0 and rows["jacobi"]["tokens_per_call"] >= 1.0
    assert rows["nf4_ar"]["weights_mb"] < rows["ar"]["weights_mb"]  # 4-bit weights


def test_methods_run_interleaved_after_a_warm_up(pair):
    calls = []

    def fake(name):
        def fn(p, ids, n):
            calls.append((name, ids.shape[1], n))
            return Generation([2] * n, None, RunStats(wall_time=1.0, target_calls=n))
        return Method(fn, name)

    registry = {name: fake(name) for name in ("a", "ar", "b")}
    settings = runner.parse_args(["--n-prompts", "2", "--max-new-tokens", "20", "--repeats", "2", "--gamma", "1",
                                  "--spec-engine", "none"])  # the engine's phase: tests/test_bench_engine.py
    runner.run(settings, pair, registry, PROMPTS, progress=False, log=lambda _: None)
    lengths = [len(pair.tokenizer(p).input_ids) for p in PROMPTS[:2]]
    warm = [(name, lengths[0], 16) for name in ("a", "ar", "b")]
    timed = [(name, t, 20) for t in lengths for _ in range(2) for name in ("a", "ar", "b")]
    assert calls == warm + timed


def test_method_selection_and_bad_names(pair, capsys, monkeypatch):
    registry = methods.build_methods(gamma=2)
    assert runner.select_methods(registry, ["jacobi", "spec"]) == ["ar", "spec", "jacobi"]  # AR always runs
    assert runner.select_methods(registry, None) == list(registry)
    with pytest.raises(ValueError, match="choose from"):
        runner.select_methods(registry, ["specc"])
    monkeypatch.setitem(methods.NOT_AVAILABLE, "future", "a method announced but not written")
    assert cli.main(["--methods", "future"], pair=pair, prompt_texts=PROMPTS, progress=False) == 2
    assert "not available yet" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        runner.parse_args(["--max-new-tokens", "0"])


def test_estimate_grows_with_the_work():
    base = methods.estimate_seconds(0.1, ["ar", "jacobi"], 5, 1, 64, 16)
    assert base == pytest.approx(0.1 * (1.0 + 2.0) * (64 * 5 + 16))
    assert methods.estimate_seconds(0.1, ["ar", "jacobi"], 5, 2, 64, 16) > base


def test_atomic_write_replaces_and_leaves_no_temp(tmp_path):
    path = tmp_path / "sub" / "x.md"
    atomic_write(path, b"one")
    atomic_write(path, b"two")
    assert path.read_bytes() == b"two" and [p.name for p in path.parent.iterdir()] == ["x.md"]


def test_atomic_dir_appears_complete_or_not_at_all(tmp_path):
    with atomic_dir(tmp_path / "chunk") as tmp:
        (tmp / "a.npy").write_bytes(b"1")
        assert not (tmp_path / "chunk").exists()
    assert [p.name for p in (tmp_path / "chunk").iterdir()] == ["a.npy"]
    with pytest.raises(KeyboardInterrupt), atomic_dir(tmp_path / "other") as tmp:
        (tmp / "a.npy").write_bytes(b"1")
        raise KeyboardInterrupt
    assert sorted(p.name for p in tmp_path.iterdir()) == ["chunk"]  # nothing half-written left


def test_python_m_bench_is_the_cli():
    from specdec_core.assets import repo_root

    root = repo_root()
    out = subprocess.run([sys.executable, "-m", "specdec_core.bench", "--list"], cwd=root, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "jacobi" in out.stdout and "cllm" in out.stdout


def test_a_method_that_fails_in_the_warm_up_is_left_out(pair, tmp_path):
    def crash(p, ids, n):
        raise RuntimeError("no kernel for this")

    registry = {"ar": methods.build_methods(1)["ar"], "crash": Method(crash, "crashes")}
    args = runner.parse_args(["--n-prompts", "1", "--max-new-tokens", "4", "--gamma", "1"])
    report = runner.run(args, pair, registry, PROMPTS, progress=False, log=lambda _: None)
    assert [row["name"] for row in report["methods"]] == ["ar"]
    assert report["failed"] == {"crash": "RuntimeError: no kernel for this"}
    assert "Failed (left out): `crash`" in report_module.markdown(report)


def test_json_never_holds_nan():
    assert json_safe({"a": [1.0, float("nan")], "b": (float("inf"), "x", 2)}) == {"a": [1.0, None], "b": [None, "x", 2]}


def test_default_report_name_and_a_report_read_back_from_json(written, tmp_path):
    assert report_module.report_name("cpu", "offline", "chat") == "cpu-offline-chat"  # what make bench writes
    assert report_module.report_name("cuda:0", "smollm2", "humaneval") == "cuda-smollm2-humaneval"
    report, out = written  # lesson 09 loads the JSON and renders it again: the loaded report must do
    paths = report_module.write_report(report, tmp_path)
    assert paths["json"] == tmp_path / "cpu-toy-chat.json"
    assert json.loads(paths["json"].read_text()) == report
    assert paths["md"].read_text() == (out / "toy.md").read_text() == report_module.markdown(report)
