"""The peers: the same algorithms as transformers and llama.cpp run them, for side-by-side comparisons.

Same calling convention as the course's own methods — ``(model(s), input_ids, max_new_tokens, *, …)``
→ :class:`~specdec_core.generation.Generation` — and the same ``target_calls``: a forward hook counts
the target's forwards, each of which emits at least one token (greedy ``generate``: one per token;
assisted generation: one per verify step, the first one prefilling the prompt too).

llama.cpp (the optional extra ``make llama-cpp``; ``bench/llamacpp.py`` makes the GGUF and the model) is
driven through llama-cpp-python's ``Llama.generate`` with the same token ids; its ``target_calls`` are
its ``eval`` calls (the prefill emits the first token, each later eval at least one more).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from transformers import PreTrainedModel
from transformers.utils import logging as hf_logging

from .generation import Generation, Timer, eos_set
from .records import RunStats


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
    return Generation(out[0, ids.shape[1]:].tolist(), None, RunStats(wall_time=t.seconds, target_calls=len(calls)))


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


def llama_cpp_generate(
    llm: Any,
    input_ids: torch.Tensor,
    max_new_tokens: int,
    *,
    eos_token_id: int | None = None,
) -> Generation:
    """Greedy decoding in llama.cpp: ``llm`` is a ``llama_cpp.Llama`` (with ``draft_model=
    LlamaPromptLookupDecoding(...)`` for its prompt lookup), fed the ids of ``input_ids`` [1, T] as they are
    (no BOS added, no re-tokenizing). The context is reset first, so every run prefills the whole prompt
    (llama-cpp-python would otherwise reuse the KV cache of a prompt it has seen). Stops right after an EOS
    token (kept, as :func:`specdec_core.ar.generate` does)."""
    stops = eos_set(eos_token_id)
    evals = [0]
    plain_eval = llm.eval

    def counted(tokens):  # every eval emits at least one token: the target calls, counted as ours are
        evals[0] += 1
        return plain_eval(tokens)

    llm.reset()  # n_tokens = 0: the next eval drops the cached context and prefills from the start
    llm.eval = counted
    new: list[int] = []
    try:
        with Timer("cpu") as t:
            tokens = llm.generate([int(i) for i in input_ids[0].tolist()], top_k=1, top_p=1.0, min_p=0.0,
                                  temp=0.0, repeat_penalty=1.0, reset=True)
            for token in tokens:
                new.append(int(token))
                if len(new) >= max_new_tokens or new[-1] in stops:
                    break
            tokens.close()
    finally:
        del llm.eval  # back to the class's method
    return Generation(new, None, RunStats(wall_time=t.seconds, target_calls=evals[0]))
