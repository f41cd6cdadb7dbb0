"""The autoregressive baseline: prefill the prompt, then one token per forward pass.

This is the loop every faster method is measured against. With the KV cache each step runs one
new token through the model; without it (``use_cache=False``, for lesson 01) each step re-runs the
whole sequence, so step t costs O(t) instead of O(1) in the sequence length.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from transformers import PreTrainedModel

from .batch import Prompts, generate_batch, is_batch
from .generation import Clock, Generation, Output
from .lm import Decoder, check_inputs
from .records import ARStats
from .sampling import logits_to_probs, sample


def next_token(
    logits: torch.Tensor,
    temperature: float,
    top_k: int | None,
    top_p: float | None,
    generator: torch.Generator | None,
) -> int:
    """Pick the next token from one row of logits [V] (greedy at temperature 0)."""
    if temperature == 0:
        return int(logits.argmax())
    return int(sample(logits_to_probs(logits, temperature, top_k, top_p), generator))


def ar_step(dec: Decoder, ids: torch.Tensor, use_cache: bool = True, **pick) -> int:
    """ONE forward, one token: ``ids`` [1, T] is the sequence so far; the cache holds a prefix of it and the
    forward runs the rest (the whole prompt at first, then the last token). Without the cache the model
    runs the whole sequence again, as a model without memory must. ``pick``: ``next_token``'s settings."""
    if use_cache:
        logits = dec.step(ids[:, dec.length :])[0, -1]
    else:
        logits = dec.model(input_ids=ids, use_cache=False, logits_to_keep=1).logits[0, -1]
    return next_token(logits, **pick)


@torch.inference_mode()
def generate(
    model: PreTrainedModel,
    input_ids: Prompts,
    max_new_tokens: int,
    *,
    temperature: float = 0.0,
    top_k: int | None = None,
    top_p: float | None = None,
    eos_token_id: int | Iterable[int] | None = None,
    generator: torch.Generator | list[torch.Generator] | None = None,
    tokenizer=None,
    use_cache: bool = True,
) -> Generation | list[Generation]:
    """Generate up to ``max_new_tokens`` tokens after ``input_ids`` [1, T], one per forward.

    A batch — ``input_ids`` [B, T], or a list of [1, Tᵢ] prompts of different lengths — runs on the static
    engine (:func:`~specdec_core.lm.on_static_engine`), one forward per step for all rows, and returns one
    Generation per row (:func:`~specdec_core.batch.generate_batch`; ``generator``: one per row, or one for all).

    Stops right after an EOS token (which is kept, as transformers does). stats (:class:`~specdec_core.records.ARStats`):
    ``wall_time``, ``ttft`` (time to first token: the prefill), ``token_times`` (seconds per new token),
    ``target_calls`` (one per new token: the prefill emits the first, each step one more).
    """
    if is_batch(input_ids):
        if not use_cache:
            raise ValueError("use_cache=False (lesson 01's model without memory) runs one sequence: pass one prompt")
        return generate_batch(model, input_ids, max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p,
                              eos_token_id=eos_token_id, generator=generator, tokenizer=tokenizer)
    check_inputs(model, input_ids, max_new_tokens)
    dec, out, clock = Decoder(model), Output(max_new_tokens, eos_token_id), Clock(model.device)
    length = input_ids.shape[1]
    ids = torch.empty(1, length + max_new_tokens, dtype=torch.long, device=model.device)
    ids[:, :length] = input_ids
    marks = [clock.mark()]
    while not out.done:
        token = ar_step(dec, ids[:, :length], use_cache, temperature=temperature, top_k=top_k, top_p=top_p,
                        generator=generator)
        ids[0, length], length = token, length + 1
        out.emit([token])
        marks.append(clock.mark())
    wall = clock.stop()
    times = clock.spans(marks)
    stats = ARStats(wall_time=wall, target_calls=len(out.tokens), ttft=times[0] if times else 0.0, token_times=times)
    return Generation(out.tokens, tokenizer.decode(out.tokens) if tokenizer is not None else None, stats)
