"""The autoregressive baseline: prefill the prompt, then one token per forward pass.

This is the loop every faster method is measured against. With the KV cache each step runs one
new token through the model; without it (``use_cache=False``, for lesson 01) each step re-runs the
whole sequence, so step t costs O(t) instead of O(1) in the sequence length.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

import torch
from transformers import PreTrainedModel

from .generation import Generation, eos_set, synchronize
from .lm import Decoder, check_inputs
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


@torch.inference_mode()
def generate(
    model: PreTrainedModel,
    input_ids: torch.Tensor,
    max_new_tokens: int,
    *,
    temperature: float = 0.0,
    top_k: int | None = None,
    top_p: float | None = None,
    eos_token_id: int | Iterable[int] | None = None,
    generator: torch.Generator | None = None,
    tokenizer=None,
    use_cache: bool = True,
) -> Generation:
    """Generate up to ``max_new_tokens`` tokens after ``input_ids`` [1, T], one per forward.

    Stops right after an EOS token (which is kept, as transformers does). stats: ``wall_time``,
    ``ttft`` (time to first token: the prefill), ``token_times`` (seconds per new token),
    ``target_calls`` (one per new token: the prefill emits the first, each step one more).
    """
    check_inputs(model, input_ids, max_new_tokens)
    stops = eos_set(eos_token_id)
    device = model.device
    decoder = Decoder(model)
    new_tokens: list[int] = []
    token_times: list[float] = []

    synchronize(device)
    start = last = time.perf_counter()
    logits = decoder.prefill(input_ids)[0, -1] if max_new_tokens else None
    while len(new_tokens) < max_new_tokens:
        token = next_token(logits, temperature, top_k, top_p, generator)
        new_tokens.append(token)
        synchronize(device)
        now = time.perf_counter()
        token_times.append(now - last)
        last = now
        if token in stops or len(new_tokens) == max_new_tokens:
            break
        ids = torch.tensor([[token]], device=device)
        if use_cache:
            logits = decoder.step(ids)[0, -1]
        else:  # no cache: run the whole sequence again, as a model without memory must
            full = torch.cat([input_ids.to(device), torch.tensor([new_tokens], device=device)], dim=1)
            logits = model(input_ids=full, use_cache=False, logits_to_keep=1).logits[0, -1]
    wall = time.perf_counter() - start

    stats = {
        "wall_time": wall,
        "ttft": token_times[0] if token_times else 0.0,
        "token_times": token_times,
        "target_calls": len(new_tokens),
    }
    text = tokenizer.decode(new_tokens) if tokenizer is not None else None
    return Generation(new_tokens, text, stats)
