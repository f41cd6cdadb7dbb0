"""The peer: the same algorithms as transformers runs them, for side-by-side comparisons.

Same calling convention as the course's own methods — ``(model(s), input_ids, max_new_tokens, *, …)``
→ :class:`~specdec_core.generation.Generation` — and the same ``target_calls``: a forward hook counts
the target's forwards, each of which emits at least one token (greedy ``generate``: one per token;
assisted generation: one per verify step, the first one prefilling the prompt too).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from transformers import PreTrainedModel
from transformers.utils import logging as hf_logging

from .generation import Generation, Timer


@contextmanager
def counting_forwards(model: torch.nn.Module) -> Iterator[list[int]]:
    """``with counting_forwards(model) as calls:`` → ``len(calls)`` forwards of ``model`` ran inside."""
    calls: list[int] = []
    hook = model.register_forward_hook(lambda *_: calls.append(1))
    try:
        yield calls
    finally:
        hook.remove()


@torch.inference_mode()
def hf_generate(
    model: PreTrainedModel,
    input_ids: torch.Tensor,
    max_new_tokens: int,
    *,
    eos_token_id: int | None = None,
    **generate_kwargs,
) -> Generation:
    """transformers' greedy ``generate``; ``generate_kwargs`` (e.g. ``prompt_lookup_num_tokens``) go to it."""
    ids = input_ids.to(model.device)
    with counting_forwards(model) as calls, Timer(model.device) as t:
        out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=max_new_tokens,
                             eos_token_id=eos_token_id, pad_token_id=eos_token_id if eos_token_id is not None else 0,
                             **generate_kwargs)
    return Generation(out[0, ids.shape[1]:].tolist(), None, {"wall_time": t.seconds, "target_calls": len(calls)})


@torch.inference_mode()
def transformers_assisted(
    target: PreTrainedModel,
    draft: PreTrainedModel,
    input_ids: torch.Tensor,
    max_new_tokens: int,
    *,
    gamma: int = 4,
    eos_token_id: int | None = None,
) -> Generation:
    """Speculative decoding in transformers (greedy ``generate(assistant_model=draft)``), with γ fixed.

    transformers reads γ from the *draft's* generation_config; since v4.45 it adapts γ and stops
    drafting below a confidence threshold, so we pin ``num_assistant_tokens=γ``, schedule
    "constant", threshold 0 (and restore the config afterwards).
    """
    config = draft.generation_config
    saved = {k: getattr(config, k, None) for k in
             ("num_assistant_tokens", "num_assistant_tokens_schedule", "assistant_confidence_threshold")}
    config.num_assistant_tokens, config.num_assistant_tokens_schedule = gamma, "constant"
    config.assistant_confidence_threshold = 0.0
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # transformers warns about its own internal call to the draft
    try:
        return hf_generate(target, input_ids, max_new_tokens, eos_token_id=eos_token_id, assistant_model=draft)
    finally:
        hf_logging.set_verbosity(verbosity)
        for k, v in saved.items():
            setattr(config, k, v)
