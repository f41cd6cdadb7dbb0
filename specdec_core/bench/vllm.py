"""vLLM beside the course (lesson 10): ``make vllm``'s results read back, and each method's name there.

``make vllm`` (an optional extra, like llama.cpp: ``make setup`` and ``make test`` never need it) builds vLLM's
CPU build in its own environment (``bench/vllm_env.sh``) and serves the offline pair with it
(``bench/vllm_serve.py``), writing ``results/vllm-cpu.json``. This module reads that file in the course's own
environment — no vLLM needed — and sets vLLM's counters beside the course's words:

- vLLM's *mean acceptance length* 1 + accepted / drafts is the course's τ (tokens per verify step);
- vLLM's per-position counter ``num_accepted_tokens_per_pos[i]`` counts drafts whose guess i was accepted,
  so accepted_i / drafts is the share of ALL drafts that got that far (vLLM's "acceptance per position"),
  while the course's α_i (``records.SpecStats.alpha_per_position``) is accepted ÷ examined: of the drafts
  whose guesses 0 … i−1 were all accepted, the share whose guess i was too. One is the other's running
  product: α_i = accepted_i / accepted_{i−1} (accepted_{−1} = drafts).

    report = load()                 # None when make vllm has not run here
    markdown(report)                # the lesson's table, or how to get one
    mapping_markdown()              # each course method's name in vLLM and SGLang
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import assets
from ..files import read_report

RESULT = "vllm-cpu.json"
SCHEMA = 1  # vllm_serve.py's SCHEMA
INSTALL = "make vllm"
LABELS = {"ar": "AR", "ngram": "n-gram", "draft_model": "draft model", "eagle": "EAGLE-style head"}


def default_path() -> Path:
    return assets.results_dir() / RESULT


def load(path: Path | str | None = None) -> dict[str, Any] | None:
    """``results/vllm-cpu.json`` as written by ``vllm_serve.py``; None when it is absent (``make vllm`` has
    not run). A file of another schema or not JSON is an error that says to rerun ``make vllm``."""
    return read_report(path if path is not None else default_path(), SCHEMA, INSTALL, "methods")


def mean_acceptance_length(num_accepted: int, num_drafts: int) -> float:
    """vLLM's mean acceptance length, the course's τ: 1 + accepted guesses per draft (NaN without drafts)."""
    return 1.0 + num_accepted / num_drafts if num_drafts else math.nan


def alpha_per_position(accepted_per_pos: Sequence[int], num_drafts: int) -> list[float]:
    """The course's α per position (accepted ÷ examined) from vLLM's counters: guess i is examined in the
    drafts whose guesses 0 … i−1 were accepted, so α_i = accepted_i / accepted_{i−1}, accepted_{−1} = drafts.
    Exact when every draft has all k guesses (a draft model's); an n-gram draft may be shorter, and then
    the examined count is an upper bound (α_i a lower bound)."""
    examined = [num_drafts, *accepted_per_pos[:-1]]
    return [a / e if e else math.nan for a, e in zip(accepted_per_pos, examined)]


@dataclass(frozen=True)
class Row:
    """One cell of the report: a method at a concurrency."""

    method: str
    concurrency: int
    tokens_per_s: float  # summed over the concurrent sequences
    per_sequence: float  # tokens/s of one sequence
    vs_ar: float  # tokens/s ÷ AR's at the same concurrency (NaN without AR)
    tau: float  # vLLM's mean acceptance length (NaN for AR)
    alpha: list[float]  # the course's α per position
    vllm_acceptance: list[float]  # vLLM's accepted_i / drafts
    rows_equal_ar: float | None  # share of sequences whose tokens equal AR's


def rows(report: dict[str, Any]) -> list[Row]:
    """Every (method, concurrency) of ``report``, AR first, with its speed against AR's at that concurrency."""
    runs = [r for m in report["methods"].values() for r in m.get("runs", [])]
    ar = {r["concurrency"]: r["tokens_per_s"] for r in runs if r["method"] == "ar"}
    out = []
    for r in sorted(runs, key=lambda r: (r["concurrency"], list(LABELS).index(r["method"]) if r["method"] in LABELS else 9)):
        drafts = r.get("num_drafts", 0)
        out.append(Row(
            method=r["method"], concurrency=r["concurrency"], tokens_per_s=r["tokens_per_s"],
            per_sequence=r["tokens_per_s"] / r["concurrency"],
            vs_ar=r["tokens_per_s"] / ar[r["concurrency"]] if r["concurrency"] in ar else math.nan,
            tau=mean_acceptance_length(r.get("num_accepted_tokens", 0), drafts),
            alpha=alpha_per_position(r.get("accepted_per_pos", []), drafts) if drafts else [],
            vllm_acceptance=[a / drafts for a in r.get("accepted_per_pos", [])] if drafts else [],
            rows_equal_ar=r.get("rows_equal_ar")))
    return out


def _num(x: float, fmt: str = ".1f") -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, fmt)


def markdown(report: dict[str, Any] | None) -> str:
    """The lesson's table of vLLM's run (speed, τ, α per position, exactness against AR), or what to run."""
    if report is None:
        return (f"vLLM is not installed here, or has not run: `{INSTALL}` builds its CPU build in `.venv-vllm` "
                "(about 1.5 GB) and serves the offline pair with it (several minutes: each engine compiles "
                f"the model first; run it on a quiet machine). It writes `results/{RESULT}`, which this cell then shows.")
    m, s = report["machine"], report["settings"]
    head = (f"vLLM {m['vllm']} (CPU build, torch {m['torch']}) on {m['cpu']}, {m['cores']} cores, "
            f"{m['date'][:10]}: {s['dtype']}, greedy, {s['max_new_tokens']} new tokens, n-gram k = {s['ngram_k']}, "
            f"draft model k = {s['draft_k']}.")
    if "reserved_cpus" in m:  # vLLM's default binds the model to the cores it does not keep for itself
        head += f" Cores vLLM kept for its own processes (VLLM_CPU_NUM_OF_RESERVED_CPU): {m['reserved_cpus']}."
    lines = [head, "", "| method | concurrent | tokens/s (summed) | per sequence | × AR | τ | α per position "
             "(course) | accepted_i / drafts (vLLM) | rows = AR |", "|---|---:|---:|---:|---:|---:|---|---|---:|"]
    for r in rows(report):
        seq = lambda xs: ", ".join(_num(x, ".2f") for x in xs) or "–"  # noqa: E731
        lines.append(f"| {LABELS.get(r.method, r.method)} | {r.concurrency} | {_num(r.tokens_per_s)} | {_num(r.per_sequence)} | "
                     f"{_num(r.vs_ar, '.2f')} | {_num(r.tau, '.2f')} | {seq(r.alpha)} | {seq(r.vllm_acceptance)} | "
                     f"{_num(r.rows_equal_ar, '.0%')} |")
    for name, why in report.get("not_run", {}).items():  # the reason's first clause; the whole one stays in the JSON
        short = why.split(": ")[0].split(". ")[0].rstrip(".")
        lines += ["", f"*{LABELS.get(name, name)}: not run.* {short} (the details: `not_run` in `{RESULT}`)."]
    return "\n".join(lines)


# ---- each course method's name in vLLM and SGLang ---------------------------------------------------------


@dataclass(frozen=True)
class Peer:
    course: str  # the course's method
    lesson: str
    vllm: tuple[str, ...]  # speculative_config's method, or the key that does it; () when vLLM has no counterpart
    sglang: tuple[str, ...]  # --speculative-algorithm, or the flag that does it; () likewise
    note: str = ""


# Checked in vllm-cpu 0.32.0's source (vllm/config/speculative.py: SpeculativeMethod, SpeculativeConfig) and
# the documentation pages in SOURCES.
METHODS: tuple[Peer, ...] = (
    Peer("autoregressive decoding", "01", (), (), "plain decoding: no speculative_config, no algorithm"),
    Peer("naive log-likelihood verification", "02", (), (), "not exact; neither server offers it"),
    Peer("speculative sampling, standalone draft model", "03, 04", ("draft_model",), ("STANDALONE",),
         "speculative_config={'method': 'draft_model', 'model': …, 'num_speculative_tokens': k}"),
    Peer("prompt lookup (n-gram)", "04, 04b, 09", ("ngram",), ("NGRAM",),
         "vLLM: prompt_lookup_min/max bound the n-gram (vLLM also has suffix); SGLang's NGRAM is CUDA-only"),
    Peer("EAGLE-style feature head", "04", ("eagle", "eagle3"), ("EAGLE", "EAGLE3"),
         "a head in their checkpoint layout; the course's has another (no fc bias there, other norms; vllm_serve.py says which)"),
    Peer("FR-Spec reduced draft vocabulary", "04", ("eagle3",), ("--speculative-token-map",),
         "vLLM: an EAGLE-3 head's own draft vocabulary (draft_vocab_size, its d2t map)"),
    Peer("Medusa heads", "04c", ("medusa",), (), "not among SGLang's algorithms"),
    Peer("multi-token prediction (MTP)", "04c", ("mtp",), ("EAGLE",),
         "only models trained with MTP layers (DeepSeek-V3, MiMo, …); SGLang drafts with them as EAGLE (NextN)"),
    Peer("self-speculation (early exit, layer skip)", "04c", (), ()),
    Peer("token trees", "04b", (), ("EAGLE", "--speculative-eagle-topk"),
         "SGLang: topk > 1 grows a tree; vLLM had speculative_token_tree (EAGLE, GPU) before 0.32.0, whose "
         "config has none"),
    Peer("γ chosen per step from the load", "10", ("num_speculative_tokens_per_batch_size",), ("EAGLE",),
         "vLLM's dynamic SD: k per range of batch sizes; SGLang's adaptive speculative decoding follows the acceptance "
         "rate instead (EAGLE, topk 1), as the course's AutoGamma"),
    Peer("Jacobi decoding, lookahead", "07, 07b", (), ()),
    Peer("CLLM, Jacobi Forcing", "08, 08b", (), (),
         "the fine-tuned model serves as a plain model; its speed-up needs Jacobi decoding"),
    Peer("batches, continuous batching", "10", (), (), "always on in both: their schedulers batch every step"),
)

SOURCES = (
    "https://docs.vllm.ai/en/latest/features/speculative_decoding/",
    "https://docs.vllm.ai/en/latest/features/speculative_decoding/dynamic_speculative_decoding/",
    "https://docs.vllm.ai/en/latest/api/vllm/v1/spec_decode/metrics/",
    "https://docs.vllm.ai/en/latest/examples/observability/metrics/",
    "https://docs.sglang.io/docs/advanced_features/speculative_decoding",
)


def mapping_markdown() -> str:
    """:data:`METHODS` as a Markdown table, with the pages it was checked against."""
    lines = ["| the course | lesson | vLLM (`speculative_config`) | SGLang (`--speculative-algorithm`) | note |",
             "|---|---|---|---|---|"]
    names = lambda xs: ", ".join(f"`{x}`" for x in xs) or "–"  # noqa: E731
    lines += [f"| {p.course} | {p.lesson} | {names(p.vllm)} | {names(p.sglang)} | {p.note} |" for p in METHODS]
    return "\n".join(lines + ["", "Checked against vllm-cpu 0.32.0's source and " + ", ".join(SOURCES) + "."])
