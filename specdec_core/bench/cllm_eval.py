"""Measuring a CLLM against the model it came from, on prompts it never saw.

- speed: tokens per Jacobi iteration, fast-forwarded and stationary tokens (``JacobiStats``) and
  wall-clock against greedy AR decoding of the original target, interleaved prompt by prompt
  (:func:`specdec_core.bench.harness.interleaved`);
- drift: the fine-tune changes the model, so its greedy output can differ from the target's. We
  report where the two first part (a position in the answer; the whole answer if they never do);
- quality: HumanEval's unit tests on the greedy completions of both models (``passes`` runs the
  generated code in a separate Python process with a timeout), and whether their code parses at all.
"""

from __future__ import annotations

import json
import statistics
from functools import partial
from pathlib import Path

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from .. import code_prompts, fast, prompts
from ..ar import generate
from ..assets import CLLM_DIR
from ..files import write_json
from ..generation import common_prefix
from ..jacobi import jacobi_generate
from ..models import chat_ids, load_cllm
from ..progress import tqdm
from .harness import interleaved, noise_band
from .jf_eval import greedy_answers
from .quality import parses, passes


@torch.inference_mode()
def compare(base: PreTrainedModel, cllm: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, chat_prompts: list[str],
            max_new_tokens: int = 64, block: int = 16, progress: bool = True, repeats: int = 1) -> list[dict]:
    """Per prompt: AR of the base, Jacobi of the base and Jacobi of the CLLM, interleaved (``repeats``
    rounds, so all three see the same machine load; times are medians over rounds, and ``*_runs`` keep
    every round for :func:`noise_band_of`). Jacobi's output is each model's greedy output."""
    eos = tokenizer.eos_token_id
    rows = []
    for prompt in tqdm(chat_prompts, desc="base vs CLLM", disable=not progress):
        ids = chat_ids(tokenizer, prompt, base.device)
        runs = interleaved({
            "ar": partial(generate, base, ids, max_new_tokens, eos_token_id=eos),
            "base": partial(jacobi_generate, base, ids, max_new_tokens, block_size=block, eos_token_id=eos),
            "cllm": partial(jacobi_generate, cllm, ids, max_new_tokens, block_size=block, eos_token_id=eos),
        }, repeats=repeats, warmup=0)
        ar, jb, jc = (runs[k][0].result for k in ("ar", "base", "cllm"))
        assert jb.new_tokens == ar.new_tokens, "Jacobi must reproduce greedy AR exactly"
        rows.append({
            "prompt": prompt,
            "tokens": len(jc.new_tokens),
            "base_tpi": jb.stats.tokens_per_iteration,
            "cllm_tpi": jc.stats.tokens_per_iteration,
            "base_fast_forward": sum(jb.stats.fast_forward),
            "cllm_fast_forward": sum(jc.stats.fast_forward),
            "base_stationary": sum(jb.stats.stationary),
            "cllm_stationary": sum(jc.stats.stationary),
            "ar_s": statistics.median(r.seconds for r in runs["ar"]),
            "base_jacobi_s": statistics.median(r.seconds for r in runs["base"]),
            "cllm_jacobi_s": statistics.median(r.seconds for r in runs["cllm"]),
            "runs_s": {k: [r.seconds for r in v] for k, v in runs.items()},
            "ar_tokens": len(ar.new_tokens),
            "drift": common_prefix(ar.new_tokens, jc.new_tokens),
            "same_output": ar.new_tokens == jc.new_tokens,
            "cllm_trajectory": jc.stats.trajectory,
            "cllm_tokens": jc.new_tokens,
        })
    return rows


def noise_band_of(rows: list[dict]) -> float:
    """The comparison's noise band (:func:`harness.noise_band`) from the rounds of each call (NaN with one
    round, and for rows of a stored report, which keep no rounds)."""
    return noise_band([times for r in rows for times in r.get("runs_s", {}).values()])


def summary(rows: list[dict]) -> dict:
    """Totals and medians of :func:`compare`'s rows. Speed-ups are per-token rates, base AR = 1."""
    tok = sum(r["tokens"] for r in rows)
    ar_tok = sum(r["ar_tokens"] for r in rows)
    it_base = sum(r["ar_tokens"] / r["base_tpi"] for r in rows)
    it_cllm = sum(r["tokens"] / r["cllm_tpi"] for r in rows)
    ar_rate = ar_tok / sum(r["ar_s"] for r in rows)
    return {
        "prompts": len(rows),
        "base_tokens_per_iteration": round(ar_tok / it_base, 3),
        "cllm_tokens_per_iteration": round(tok / it_cllm, 3),
        "base_jacobi_vs_ar": round(ar_tok / sum(r["base_jacobi_s"] for r in rows) / ar_rate, 3),
        "cllm_jacobi_vs_ar": round(tok / sum(r["cllm_jacobi_s"] for r in rows) / ar_rate, 3),
        "fast_forwarded": sum(r["cllm_fast_forward"] for r in rows),
        "stationary": sum(r["cllm_stationary"] for r in rows),
        "median_drift": statistics.median(r["drift"] for r in rows),
        "same_output": sum(r["same_output"] for r in rows),
    }


# --- HumanEval -------------------------------------------------------------------------------------------

def humaneval_answers(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, problems: list[dict],
                      max_new_tokens: int = 256, desc: str = "HumanEval") -> list[str]:
    """Greedy chat answers to HumanEval problems (asked as ``code_prompts.humaneval_prompt``), as text."""
    asked = [code_prompts.humaneval_prompt(p) for p in problems]
    return [tokenizer.decode(a, skip_special_tokens=True) for a in greedy_answers(model, tokenizer, asked, max_new_tokens, desc)]


def evaluate(target: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, n_humaneval: int = 20,
             folder: Path | None = None) -> int:
    """``python -m specdec_core.train cllm evaluate``: writes ``eval.json`` next to the adapter it
    measures (default: the shipped one). Both models run on the fast path's prepacked twins, as AR does."""
    folder = folder or CLLM_DIR
    cllm = load_cllm(folder=folder)
    rows = compare(fast.twin(target), fast.twin(cllm), tokenizer, code_prompts.heldout())
    report = {"heldout": summary(rows), "engine": "fast",
              "rows": [{k: v for k, v in r.items() if k != "cllm_trajectory"} for r in rows]}
    if n_humaneval:
        problems = prompts.humaneval()[:n_humaneval]
        base = humaneval_answers(target, tokenizer, problems, desc="HumanEval, base")
        tuned = humaneval_answers(cllm, tokenizer, problems, desc="HumanEval, CLLM")
        base_ok, cllm_ok = [passes(p, a) for p, a in zip(problems, base)], [passes(p, a) for p, a in zip(problems, tuned)]
        report["humaneval"] = {"problems": n_humaneval, "base_passed": sum(base_ok), "cllm_passed": sum(cllm_ok),
                               "base_parses": sum(map(parses, base)), "cllm_parses": sum(map(parses, tuned)),
                               "base": base_ok, "cllm": cllm_ok, "base_answers": base, "cllm_answers": tuned}
    report["threads"] = torch.get_num_threads()
    write_json(report, folder / "eval.json", indent=1)
    print(json.dumps(report["heldout"], indent=1), json.dumps({k: v for k, v in report.get("humaneval", {}).items()
                                                              if k.endswith(("passed", "parses"))}))
    return 0
