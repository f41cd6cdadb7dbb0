"""The source tutorial's "speculative decoding", reproduced as written, and the tools to take it apart.

What the tutorial does (docs/reference.md#the-tutorials-method):

1. the draft model's Hugging Face ``generate`` writes the whole answer;
2. the text (prompt included) is decoded, then re-tokenized with the target's tokenizer;
3. the target runs ONE forward pass over it and computes the average log-likelihood per token;
4. the draft's text is returned together with that score. Nothing is ever corrected.

So the output is the draft's output, and the "speed-up" is the draft's speed. Lesson 02 shows it
with numbers. Real speculative decoding (lesson 03) makes the target *decide* every token.

This module also holds the pure functions lesson 02's experiments need: a corrected scorer (only
the generated tokens), first-token distributions of both methods, total-variation distance, and the
"accept the whole draft if its score beats a threshold, else let the target write" variant.
"""

from __future__ import annotations

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from .exactness import total_variation
from .generation import Clock, Generation, common_prefix
from .records import NaiveStats
from .sampling import logits_to_probs

# ---------------------------------------------------------------------------------------------
# Scoring a text with the target
# ---------------------------------------------------------------------------------------------


@torch.inference_mode()
def token_log_probs(model: PreTrainedModel, ids: torch.Tensor) -> torch.Tensor:
    """log p(ids[t] | ids[<t]) for t = 1..T-1, from ONE forward pass over ``ids`` [1, T] → [T-1].

    The first token has no left context, so it gets no score.
    """
    if ids.dim() != 2 or ids.shape[0] != 1 or ids.shape[1] < 2:
        raise ValueError(f"ids must have shape [1, T] with T >= 2 (something to score), got {tuple(ids.shape)}")
    logits = model(input_ids=ids.to(model.device), use_cache=False).logits[0, :-1].float()  # [T-1, V]
    log_probs = torch.log_softmax(logits, dim=-1)
    return log_probs.gather(-1, ids[0, 1:, None].to(log_probs.device))[:, 0].cpu()  # host: a short score list


def average_log_likelihood(model: PreTrainedModel, ids: torch.Tensor, start: int = 1) -> float:
    """Mean of log p(ids[t] | ids[<t]) over t = start..T-1 (nats per token; higher = more likely).

    ``start=1`` is the tutorial's score: every token after the first, PROMPT INCLUDED.
    ``start=len(prompt)`` scores only the generated tokens (:func:`generated_log_likelihood`).
    """
    if not 1 <= start < ids.shape[-1]:
        raise ValueError(f"start={start}: must be in [1, {ids.shape[-1] - 1}] so that at least one token is scored")
    return token_log_probs(model, ids)[start - 1 :].mean().item()


def generated_log_likelihood(model: PreTrainedModel, prompt_ids: torch.Tensor, new_ids: list[int] | torch.Tensor) -> float:
    """The corrected score: mean log-likelihood of the generated tokens only, given the prompt.

    prompt_ids [1, T]; new_ids: the generated ids (a list or a 1-D / [1, n] tensor, n >= 1).
    """
    new = torch.as_tensor(new_ids, dtype=torch.long, device=prompt_ids.device).reshape(1, -1)
    if new.shape[1] == 0:
        raise ValueError("no generated tokens to score")
    ids = torch.cat([prompt_ids, new], dim=1)
    return average_log_likelihood(model, ids, start=prompt_ids.shape[1])


def score_text(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, text: str, prompt: str) -> dict:
    """Score ``text`` (which starts with ``prompt``) as the tutorial does, and the corrected way.

    The text is tokenized afresh; one forward pass gives log p of every token after the first.
    Returns ``score`` (mean over all of them: prompt included, the tutorial's), ``score_generated_only``
    (mean over the answer's tokens), ``scored_ids`` and ``prompt_tokens``. Where the prompt ends in the
    re-tokenized text: the longest common prefix with the prompt's own tokens (a prompt's trailing
    space may merge with the answer's first word into one token, which then counts as the answer's).
    """
    scored = tokenizer(text, return_tensors="pt").input_ids
    log_probs = token_log_probs(model, scored)  # [T-1]
    n_prompt = max(1, common_prefix(tokenizer(prompt).input_ids, scored[0].tolist()))
    answer = log_probs[n_prompt - 1 :]
    return {
        "score": log_probs.mean().item(),
        "score_generated_only": answer.mean().item() if answer.numel() else float("nan"),
        "scored_ids": scored[0].tolist(),
        "prompt_tokens": n_prompt,
    }


def best_threshold_accuracy(good: list[float], bad: list[float]) -> float:
    """The best share of texts any threshold on the score classifies right (good: score >= threshold,
    bad: below). 1.0: the score separates them; 0.5 on balanced sets: no better than a coin."""
    scores = sorted(set(good) | set(bad)) + [float("inf")]
    total = len(good) + len(bad)
    return max((sum(g >= t for g in good) + sum(b < t for b in bad)) / total for t in scores)


# ---------------------------------------------------------------------------------------------
# The tutorial's method
# ---------------------------------------------------------------------------------------------


@torch.inference_mode()
def naive_generate(
    draft: PreTrainedModel,
    target: PreTrainedModel,
    prompt: str,
    max_new_tokens: int,
    *,
    tokenizer: PreTrainedTokenizerBase,
    target_tokenizer: PreTrainedTokenizerBase | None = None,
    temperature: float = 0.0,
    top_k: int | None = None,
    top_p: float | None = None,
    eos_token_id: int | None = None,
    draft_generate_kwargs: dict | None = None,
) -> Generation:
    """The tutorial's "speculative decoding" on one text prompt, instrumented.

    It takes text, not ids — the decode → re-tokenize round trip *is* the method. ``tokenizer`` is
    the draft's; ``target_tokenizer`` (default: the same) re-tokenizes for the scoring forward.
    ``temperature``, ``top_k``, ``top_p`` mean what they mean everywhere in the course (0: greedy;
    None: no top-k / top-p cut) and are passed to the draft's Hugging Face ``generate``;
    ``draft_generate_kwargs`` adds anything else that ``generate`` takes. A draft on the static engine
    (:func:`~specdec_core.lm.on_static_engine`) decodes with ``generate``'s static cache.

    Returns a Generation whose ``new_tokens`` are the DRAFT's generated ids and ``text`` their decoded
    text (the output: nothing was corrected); stats: a :class:`~specdec_core.records.NaiveStats`.
    """
    target_tokenizer = target_tokenizer or tokenizer
    sampling = {"do_sample": False}
    if temperature > 0:  # HF's own defaults differ (top_k=50): say every knob explicitly
        sampling = {"do_sample": True, "temperature": temperature, "top_k": top_k or 0, "top_p": top_p or 1.0}
    pad = eos_token_id if eos_token_id is not None else 0
    # a draft on the static engine (lm.on_static_engine): Hugging Face's generate preallocates its cache too
    engine = {"cache_implementation": "static"} if getattr(draft, "static_engine", False) else {}
    clock = Clock(draft.device)
    start = clock.mark()

    # Step 1: the draft writes the whole answer.
    inputs = tokenizer(prompt, return_tensors="pt").to(draft.device)
    out = draft.generate(**inputs, max_new_tokens=max_new_tokens, eos_token_id=eos_token_id, pad_token_id=pad,
                         **sampling, **{**engine, **(draft_generate_kwargs or {})})
    new_tokens = out[0, inputs["input_ids"].shape[1] :].tolist()
    draft_text = tokenizer.decode(out[0], skip_special_tokens=True)
    drafted = clock.mark()

    # Steps 2-3: decode → text → re-tokenize with the target's tokenizer → one scoring forward.
    scored = score_text(target, target_tokenizer, draft_text, prompt)
    end, wall = clock.mark(), clock.stop()
    stats = NaiveStats(wall_time=wall, draft_text=draft_text, draft_time=clock.seconds(start, drafted),
                       score_time=clock.seconds(drafted, end), draft_calls=len(new_tokens), **scored)
    return Generation(new_tokens, tokenizer.decode(new_tokens, skip_special_tokens=True), stats)


def tutorial_speculative_decoding(
    small_model: PreTrainedModel,
    big_model: PreTrainedModel,
    small_tokenizer: PreTrainedTokenizerBase,
    big_tokenizer: PreTrainedTokenizerBase,
    prompt: str,
    max_new_tokens: int = 50,
) -> tuple[str, float]:
    """The tutorial's function, same name, arguments and return value: ``(draft text, avg log-likelihood)``.

    The draft text includes the prompt; nothing in it was checked, let alone corrected, by the big model.
    """
    gen = naive_generate(small_model, big_model, prompt, max_new_tokens, tokenizer=small_tokenizer,
                         target_tokenizer=big_tokenizer)
    return gen.stats.draft_text, gen.stats.score


# ---------------------------------------------------------------------------------------------
# Distributions: is the output the target's?
# ---------------------------------------------------------------------------------------------


@torch.inference_mode()
def first_token_distributions(
    draft: PreTrainedModel,
    target: PreTrainedModel,
    input_ids: torch.Tensor,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(q, p): the distributions of the first new token [V] under the naive method and the target.

    The naive method outputs the draft's text, so its first token is the draft's: q = draft(·|prompt).
    Sampling from the target itself gives p = target(·|prompt).
    """
    q_logits = draft(input_ids=input_ids.to(draft.device), logits_to_keep=1).logits[0, -1]
    p_logits = target(input_ids=input_ids.to(target.device), logits_to_keep=1).logits[0, -1]
    q = logits_to_probs(q_logits, temperature, top_k, top_p).cpu()  # host: the lesson plots and compares them
    p = logits_to_probs(p_logits, temperature, top_k, top_p).cpu()  # host: the lesson plots and compares them
    return q, p


def empirical_distribution(tokens: list[int] | torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Relative frequencies [vocab_size] of the sampled token ids."""
    tokens = torch.as_tensor(tokens, dtype=torch.long).reshape(-1)  # host: counts of sampled ids
    if tokens.numel() == 0:
        raise ValueError("no samples")
    return torch.bincount(tokens, minlength=vocab_size).float() / tokens.numel()


# ---------------------------------------------------------------------------------------------
# The threshold variant: accept the whole draft if the target's score is high enough
# ---------------------------------------------------------------------------------------------


def threshold_accepts(scores: list[float] | torch.Tensor, threshold: float) -> torch.Tensor:
    """Which drafts the variant keeps: score >= threshold (bool tensor, one per draft)."""
    return torch.as_tensor(scores, dtype=torch.float64) >= threshold  # host: statistics of a list of floats


def threshold_outcome(
    scores: list[float],
    threshold: float,
    draft_times: list[float],
    score_times: list[float],
    target_times: list[float],
    draft_is_target: list[bool],
) -> dict[str, float]:
    """The variant on a set of prompts (one entry per prompt): keep the draft if score >= threshold,
    else pay for the target writing the answer too.

    Returns ``accepted`` (fraction of drafts kept), ``speedup`` (total time of the target alone ÷
    total time of the variant) and ``target_output`` (fraction of answers that equal the target's own
    answer: a rejected draft is replaced by it; a kept draft equals it only if ``draft_is_target``).
    """
    keep = threshold_accepts(scores, threshold)
    d, s, t = (torch.as_tensor(x, dtype=torch.float64) for x in (draft_times, score_times, target_times))  # host: lists of times
    same = torch.as_tensor(draft_is_target, dtype=torch.bool)  # host: statistics of a list of flags
    variant_time = (d + s + torch.where(keep, 0.0, t)).sum()
    return {
        "accepted": keep.double().mean().item(),
        "speedup": (t.sum() / variant_time).item(),
        "target_output": (~keep | same).double().mean().item(),
    }


def threshold_first_token(q: torch.Tensor, p: torch.Tensor, threshold: float) -> tuple[torch.Tensor, float]:
    """The variant on ONE-token drafts, exactly: the draft proposes x ~ q; its score is the target's
    log p(x); keep x if log p(x) >= threshold, else the target samples from p.

    Output distribution r(x) = q(x)·1[log p(x) >= threshold] + (1 − A)·p(x), where
    A = Σ_x q(x)·1[log p(x) >= threshold] is the acceptance rate. Returns (r [V], A).
    r equals p only when A = 0 (every draft rejected) or in special cases such as q = p.
    """
    keep = p.double().clamp_min(1e-300).log() >= threshold
    kept = torch.where(keep, q.double(), 0.0)
    accepted = kept.sum()
    r = kept + (1.0 - accepted) * p.double()
    return r, accepted.item()


def threshold_sweep(q: torch.Tensor, p: torch.Tensor, thresholds: list[float]) -> tuple[list[float], list[float]]:
    """:func:`threshold_first_token` over many thresholds: (acceptance rates, TV(r, p)) — the trade-off
    curve. Speculative sampling (lesson 03) reaches acceptance 1 − TV(p, q) with TV(r, p) = 0."""
    rates, distances = [], []
    for t in thresholds:
        r, a = threshold_first_token(q, p, t)
        rates.append(a)
        distances.append(total_variation(r, p.double()))
    return rates, distances
