"""Fine-tuned parallel decoders side by side: the base model, a CLLM, Jacobi Forcing — speed and quality.

    python -m specdec_core.train cllm compare --adapter cllm=specdec_core/drafts/cllm --adapter jf=/tmp/jf

- **speed** (held-out code requests, greedy): per prompt, AR of the base model and every model's Jacobi
  decoding — one block, and ``blocks`` blocks in flight with rejection recycling — interleaved on the
  fast path's prepacked twins (:mod:`specdec_core.fast`). Tokens per iteration (= per forward), each
  forward's window (pads excluded), wall-clock against AR with the noise band;
- **drift**: where each model's greedy answer first parts from the base model's;
- **quality**: the course's unit tests for the held-out requests (``code_prompts.HELDOUT_CHECKS``),
  HumanEval code that parses, perplexity on the base model's answers to the held-out requests (the
  domain) and on Python's documentation (prose, outside it), and repetition collapse (a repeated
  10-gram in an answer).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from functools import partial

import torch
import torch.nn.functional as F
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from .. import code_prompts, fast, prompts
from ..ar import generate
from ..cllm import has_repeated_ngram
from ..generation import common_prefix
from ..jacobi import jacobi_generate
from ..models import chat_ids
from ..progress import tqdm
from ..records import JacobiStats
from .harness import interleaved, noise_band
from .quality import parses, passes_checks, perplexity


def decoders(models: dict[str, PreTrainedModel], block: int = 16, blocks: int = 2, recycle: int = 3
             ) -> dict[str, Callable]:
    """name → call(ids, max_new_tokens, eos) for every model's Jacobi decoding: one block of ``block``
    (``name``) and ``blocks`` blocks in flight with rejection recycling of ``recycle``-grams
    (``name ×K``)."""
    out = {}
    for name, model in models.items():
        out[name] = partial(jacobi_generate, model, block_size=block)
        out[f"{name} ×{blocks}"] = partial(jacobi_generate, model, block_size=block, blocks=blocks, recycle=recycle)
    return out


@torch.inference_mode()
def speed(base: PreTrainedModel, models: dict[str, PreTrainedModel], tokenizer: PreTrainedTokenizerBase,
          chat_prompts: list[str], max_new_tokens: int = 64, block: int = 16, blocks: int = 2,
          repeats: int = 2) -> list[dict]:
    """Per prompt and method: tokens, iterations, forward widths, seconds (every round), drift from the
    base model's AR answer. All on prepacked twins; ``models`` should include the base model itself."""
    twins = {name: fast.twin(m) for name, m in models.items()}
    base_twin = next((twins[k] for k, m in models.items() if m is base), None) or fast.twin(base)  # one twin each
    parallel = decoders(twins, block, blocks)
    eos = tokenizer.eos_token_id
    rows = []
    for prompt in tqdm(chat_prompts, desc="parallel decoders, side by side"):
        ids = chat_ids(tokenizer, prompt, base.device)
        calls = {"ar": partial(generate, base_twin, ids, max_new_tokens, eos_token_id=eos)}
        calls |= {k: partial(f, ids, max_new_tokens, eos_token_id=eos) for k, f in parallel.items()}
        runs = interleaved(calls, repeats=repeats, warmup=0)
        ar = runs["ar"][0].result.new_tokens
        row = {"prompt": prompt, "ar_tokens": len(ar), "methods": {}}
        for name, rs in runs.items():
            gen = rs[0].result
            jacobi = isinstance(gen.stats, JacobiStats)
            row["methods"][name] = {
                "tokens": len(gen.new_tokens),
                "iterations": gen.stats.target_calls,  # AR: one per token
                "width": sum(gen.stats.used[1:]) if jacobi else None,  # tokens of the later windows (pads excluded)
                "seconds": [r.seconds for r in rs],
                "drift": common_prefix(ar, gen.new_tokens),
            }
        rows.append(row)
    return rows


def speed_summary(rows: list[dict]) -> dict:
    """Per method: tokens per iteration (Σ tokens / Σ iterations), mean window (tokens per later forward, pads
    excluded; none for AR), speed against the base model's AR (tokens per second ÷ AR's, medians over rounds),
    median drift; and the comparison's noise band."""
    def rate(name: str) -> float:
        return sum(r["methods"][name]["tokens"] for r in rows) / sum(
            statistics.median(r["methods"][name]["seconds"]) for r in rows)

    out = {}
    for name in rows[0]["methods"]:
        m = [r["methods"][name] for r in rows]
        width = [x["width"] for x in m if x["width"] is not None]
        out[name] = {
            "tokens_per_iteration": round(sum(x["tokens"] for x in m) / sum(x["iterations"] for x in m), 3),
            "mean_width": round(sum(width) / sum(x["iterations"] - 1 for x in m), 2) if width else None,
            "vs_ar": round(rate(name) / rate("ar"), 3),
            "median_drift": statistics.median(x["drift"] for x in m),
        }
    band = noise_band([x["seconds"] for r in rows for x in r["methods"].values()])
    return {"methods": out, "noise_band": None if math.isnan(band) else round(band, 3), "prompts": len(rows)}


@torch.inference_mode()
def tokens_per_iteration(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, chat_prompts: list[str],
                         max_new_tokens: int = 64, block: int = 16) -> float:
    """Σ tokens / Σ iterations of one-block greedy Jacobi decoding over the prompts. Untimed, so it needs
    no quiet machine: the data curve's measure."""
    tokens = iterations = 0
    for prompt in tqdm(chat_prompts, desc="tokens per iteration"):
        gen = jacobi_generate(model, chat_ids(tokenizer, prompt, model.device), max_new_tokens, block_size=block,
                              eos_token_id=tokenizer.eos_token_id)
        tokens, iterations = tokens + len(gen.new_tokens), iterations + gen.stats.iterations
    return tokens / iterations


# --- quality -------------------------------------------------------------------------------------------

@torch.inference_mode()
def greedy_answers(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, chat_prompts: list[str],
                   max_new_tokens: int, desc: str) -> list[list[int]]:
    """Greedy answer tokens to chat prompts (transformers' ``generate``; AR, so no parallel decoding)."""
    out = []
    for p in tqdm(chat_prompts, desc=desc):
        ids = chat_ids(tokenizer, p, model.device)
        gen = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False,
                             max_new_tokens=max_new_tokens, pad_token_id=tokenizer.eos_token_id)
        out.append(gen[0, ids.shape[1]:].tolist())
    return out


@torch.inference_mode()
def answer_perplexity(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, chat_prompts: list[str],
                      answers: list[list[int]]) -> float:
    """exp(mean NLL) of the answer tokens, each given its chat prompt."""
    total, count = 0.0, 0
    for p, a in zip(chat_prompts, answers):
        ids = chat_ids(tokenizer, p, model.device)
        seq = torch.cat([ids[0], torch.tensor(a, dtype=torch.long, device=ids.device)])[None]
        logits = model(input_ids=seq).logits[0, ids.shape[1] - 1 : -1].float()  # row k predicts a[k]
        total += float(F.cross_entropy(logits, seq[0, ids.shape[1]:], reduction="sum"))
        count += len(a)
    return math.exp(total / count)


def quality(base: PreTrainedModel, models: dict[str, PreTrainedModel], tokenizer: PreTrainedTokenizerBase,
            prose: torch.Tensor, n_humaneval: int = 20, answer_tokens: int = 192) -> dict:
    """Per model (the base model included): held-out unit tests passed, HumanEval code that parses,
    answers that collapse into repetition, and perplexity in and outside the domain (``prose`` [1, T]: token
    ids of text outside it, e.g. ``train.corpus.heldout_prose``)."""
    held = code_prompts.heldout()
    names = [name for name, _, _ in code_prompts.heldout_tasks()]
    problems = prompts.humaneval()[:n_humaneval]
    he_prompts = [code_prompts.humaneval_prompt(p) for p in problems]
    base_answers = greedy_answers(base, tokenizer, held, answer_tokens, "held-out answers, base")
    report = {}
    for name, model in models.items():
        answers = base_answers if model is base else greedy_answers(model, tokenizer, held, answer_tokens,
                                                                     f"held-out answers, {name}")
        he = greedy_answers(model, tokenizer, he_prompts, 256, f"HumanEval, {name}") if problems else []
        texts = [tokenizer.decode(a, skip_special_tokens=True) for a in answers]
        he_texts = [tokenizer.decode(a, skip_special_tokens=True) for a in he]
        report[name] = {
            "heldout_tests_passed": sum(passes_checks(t, n, code_prompts.HELDOUT_CHECKS[n]) for t, n in zip(texts, names)),
            "heldout_parses": sum(map(parses, texts)),
            "humaneval_parses": sum(map(parses, he_texts)),
            "collapsed": sum(has_repeated_ngram(a) for a in answers + he),
            "ppl_domain": round(answer_perplexity(model, tokenizer, held, base_answers), 3),
            "ppl_prose": round(perplexity(model, prose), 3),
            "heldout_answers": texts,
            "humaneval_answers": he_texts,
        }
    report["counts"] = {"heldout": len(held), "humaneval": len(problems), "answers": len(held) + len(problems)}
    return report


# The course's quality bar for a fine-tune (lesson 08b): perplexity outside the domain at most PPL_RISE × the
# base model's, no more collapsed answers, at most PARSES_SLACK fewer HumanEval answers whose code parses.
PPL_RISE, PARSES_SLACK = 1.10, 1


def keeps_the_model(r: dict, base: dict) -> bool:
    """Whether a fine-tune meets the quality bar against its base model. ``r``, ``base``: rows with
    ``ppl_prose``, ``collapsed`` and ``humaneval_parses``, as :func:`quality` reports them."""
    return (r["ppl_prose"] <= PPL_RISE * base["ppl_prose"] and r["collapsed"] <= base["collapsed"]
            and r["humaneval_parses"] >= base["humaneval_parses"] - PARSES_SLACK)
