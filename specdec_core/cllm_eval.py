"""Measuring a CLLM against the model it came from, on prompts it never saw.

- speed: tokens per Jacobi iteration, fast-forwarded and stationary tokens (``jacobi_stats``) and
  wall-clock against greedy AR decoding of the original target, all interleaved prompt by prompt;
- drift: the fine-tune changes the model, so its greedy output can differ from the target's. We
  report where the two first part (a position in the answer; the whole answer if they never do);
- quality: HumanEval's unit tests on the greedy completions of both models (``passes`` runs the
  generated code in a separate Python process with a timeout), and whether their code parses at all.
"""

from __future__ import annotations

import ast
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from tqdm.auto import tqdm
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from . import code_prompts, prompts
from .ar import generate
from .distill_data import atomic_write_json
from .jacobi import jacobi_generate
from .models import chat_ids


def first_difference(a: list[int], b: list[int]) -> int:
    """The first position where two outputs differ (the shorter length if one is a prefix of the other)."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


@torch.inference_mode()
def compare(base: PreTrainedModel, cllm: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, chat_prompts: list[str],
            max_new_tokens: int = 64, block: int = 16, progress: bool = True) -> list[dict]:
    """Per prompt: AR of the base, Jacobi of the base and Jacobi of the CLLM, run one after the other
    (so all three see the same machine load). Jacobi's output is each model's greedy output."""
    eos = tokenizer.eos_token_id
    rows = []
    for prompt in tqdm(chat_prompts, desc="base vs CLLM", disable=not progress):
        ids = chat_ids(tokenizer, prompt)
        ar = generate(base, ids, max_new_tokens, eos_token_id=eos)
        jb = jacobi_generate(base, ids, max_new_tokens, block, eos_token_id=eos)
        jc = jacobi_generate(cllm, ids, max_new_tokens, block, eos_token_id=eos)
        assert jb.new_tokens == ar.new_tokens, "Jacobi must reproduce greedy AR exactly"
        rows.append({
            "prompt": prompt,
            "tokens": len(jc.new_tokens),
            "base_tpi": jb.stats["tokens_per_iteration"],
            "cllm_tpi": jc.stats["tokens_per_iteration"],
            "base_fast_forward": sum(jb.stats["fast_forward"]),
            "cllm_fast_forward": sum(jc.stats["fast_forward"]),
            "base_stationary": sum(jb.stats["stationary"]),
            "cllm_stationary": sum(jc.stats["stationary"]),
            "ar_s": ar.stats["wall_time"],
            "base_jacobi_s": jb.stats["wall_time"],
            "cllm_jacobi_s": jc.stats["wall_time"],
            "ar_tokens": len(ar.new_tokens),
            "drift": first_difference(ar.new_tokens, jc.new_tokens),
            "same_output": ar.new_tokens == jc.new_tokens,
            "cllm_trajectory": jc.stats["trajectory"],
            "cllm_tokens": jc.new_tokens,
        })
    return rows


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

def extract_code(text: str) -> str:
    """The first fenced code block of a chat answer (```python … ```), else the whole answer."""
    match = re.search(r"```(?:python|py)?\s*\n(.*?)(?:```|$)", text, re.S)
    return match.group(1) if match else text


def parses(answer: str) -> bool:
    """Whether the code in a chat answer is valid Python (a weaker quality signal than the tests)."""
    try:
        ast.parse(extract_code(answer))
    except (SyntaxError, ValueError):
        return False
    return True


def passes(problem: dict, answer: str, timeout: float = 10.0) -> bool:
    """Whether the code in a chat answer passes the problem's unit tests. The code runs in a fresh,
    isolated Python process (``-I``, a temporary working folder) that is killed after ``timeout`` s."""
    code = extract_code(answer)
    if f"def {problem['entry_point']}" not in code:  # an answer that only wrote the body
        code = problem["prompt"] + code
    program = f"{code}\n\n{problem['test']}\n\ncheck({problem['entry_point']})\n"
    with tempfile.TemporaryDirectory() as folder:
        try:
            run = subprocess.run([sys.executable, "-I", "-c", program], cwd=folder, capture_output=True,
                                 timeout=timeout, env={"PATH": os.environ.get("PATH", "")})
        except subprocess.TimeoutExpired:
            return False
    return run.returncode == 0


@torch.inference_mode()
def humaneval_answers(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, problems: list[dict],
                      max_new_tokens: int = 256, desc: str = "HumanEval") -> list[str]:
    """Greedy chat answers to HumanEval problems (asked as ``code_prompts.humaneval_prompt``)."""
    out = []
    for p in tqdm(problems, desc=desc):
        ids = chat_ids(tokenizer, code_prompts.humaneval_prompt(p))
        gen = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False,
                             max_new_tokens=max_new_tokens, pad_token_id=tokenizer.eos_token_id)
        out.append(tokenizer.decode(gen[0, ids.shape[1]:], skip_special_tokens=True))
    return out


def main(target: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, n_humaneval: int = 20,
         folder: Path | None = None) -> int:
    """``python -m specdec_core.cllm evaluate``: writes ``eval.json`` next to the adapter it measures
    (default: the shipped one)."""
    from .cllm_train import ADAPTER_DIR, load_cllm

    folder = folder or ADAPTER_DIR
    cllm = load_cllm(folder=folder)
    rows = compare(target, cllm, tokenizer, code_prompts.heldout())
    report = {"heldout": summary(rows), "rows": [{k: v for k, v in r.items() if k != "cllm_trajectory"} for r in rows]}
    if n_humaneval:
        problems = prompts.humaneval()[:n_humaneval]
        base = humaneval_answers(target, tokenizer, problems, desc="HumanEval, base")
        tuned = humaneval_answers(cllm, tokenizer, problems, desc="HumanEval, CLLM")
        base_ok, cllm_ok = [passes(p, a) for p, a in zip(problems, base)], [passes(p, a) for p, a in zip(problems, tuned)]
        report["humaneval"] = {"problems": n_humaneval, "base_passed": sum(base_ok), "cllm_passed": sum(cllm_ok),
                               "base_parses": sum(map(parses, base)), "cllm_parses": sum(map(parses, tuned)),
                               "base": base_ok, "cllm": cllm_ok, "base_answers": base, "cllm_answers": tuned}
    report["threads"] = torch.get_num_threads()
    atomic_write_json(report, folder / "eval.json", indent=1)
    print(json.dumps(report["heldout"], indent=1), json.dumps({k: v for k, v in report.get("humaneval", {}).items()
                                                              if k.endswith(("passed", "parses"))}))
    return 0
