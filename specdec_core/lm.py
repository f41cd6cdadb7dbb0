"""``Decoder``: one causal LM, its KV cache and its length — the only code that touches the cache.

Every algorithm in the course (autoregressive, speculative, Jacobi) drives a model through these
three calls:

    dec = Decoder(model)
    logits = dec.prefill(prompt_ids)     # run the prompt, fill the cache
    logits = dec.step(new_ids)           # run k new tokens on top of the cache → k rows of logits
    dec.rollback(length)                 # forget everything after the first `length` tokens

``rollback`` is what speculative and Jacobi decoding need: they run guessed tokens through the
model, then keep only the part that turned out right.
"""

from __future__ import annotations

import inspect

import torch
from transformers import DynamicCache, PreTrainedModel


def cache_kwarg(model: torch.nn.Module) -> str:
    """Name of the forward argument that takes the KV cache.

    transformers 5.24 calls it ``cache``; older releases (e.g. on the GPU machines) ``past_key_values``.
    """
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def max_context(model: PreTrainedModel) -> int | None:
    """The longest sequence the model was built for, or None if its config does not say."""
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    return getattr(config, "max_position_embeddings", None)


def check_inputs(model: PreTrainedModel, input_ids: torch.Tensor, max_new_tokens: int) -> None:
    """Raise a clear error for inputs every generation function refuses."""
    if input_ids.dim() != 2:
        raise ValueError(f"input_ids must have shape [1, T], got {tuple(input_ids.shape)}")
    if input_ids.shape[0] != 1:
        raise ValueError(
            f"batch size {input_ids.shape[0]}: the course's decoders run one sequence at a time "
            "(batch size 1, as speculative decoding does in transformers too). Loop over your prompts."
        )
    if input_ids.shape[1] == 0:
        raise ValueError(
            "input_ids is empty: give the model at least one prompt token "
            "(e.g. tokenizer.apply_chat_template(...) or tokenizer(text).input_ids)."
        )
    if max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
    limit = max_context(model)
    if limit is not None and input_ids.shape[1] + max_new_tokens > limit:
        raise ValueError(
            f"prompt ({input_ids.shape[1]} tokens) + max_new_tokens ({max_new_tokens}) is longer than the "
            f"model's context of {limit} tokens: shorten the prompt or ask for fewer new tokens."
        )


class Decoder:
    """A model plus its KV cache. Batch size 1; ``length`` = tokens the cache holds.

    ``tokens`` keeps the ids in the cache, so a cache that cannot be cropped (an old transformers
    with a full sliding window) is rebuilt by running them again — slower, never wrong.
    ``hidden`` (when ``keep_hidden``) holds the latest call's hidden states at ``layers`` (indices
    into ``hidden_states``: 0 = the embeddings, -1 = the last layer after the final norm), side by
    side: [1, k, len(layers) · d].
    """

    def __init__(self, model: PreTrainedModel, keep_hidden: bool = False, layers: tuple[int, ...] = (-1,)) -> None:
        self.model = model
        self.keep_hidden, self.layers = keep_hidden, tuple(layers)
        self._cache_arg = cache_kwarg(model)
        self.reset()

    def reset(self) -> None:
        self.cache = DynamicCache(config=self.model.config)
        for layer in getattr(self.cache, "layers", []):
            # Sliding-window layers (Gemma 2) drop old keys once the window is full; recording
            # them lets us crop after a rejected guess. Costs memory like a full cache.
            if hasattr(layer, "activate_past_recording"):
                layer.activate_past_recording()
        self.tokens = torch.empty(1, 0, dtype=torch.long, device=self.device)
        self.hidden: torch.Tensor | None = None

    @property
    def device(self) -> torch.device:
        return self.model.device

    @property
    def length(self) -> int:
        return self.tokens.shape[1]

    @torch.inference_mode()
    def _forward(self, ids: torch.Tensor, logits_to_keep: int) -> torch.Tensor:
        ids = ids.to(self.device)
        out = self.model(
            input_ids=ids,
            use_cache=True,
            logits_to_keep=logits_to_keep,
            output_hidden_states=self.keep_hidden,
            **{self._cache_arg: self.cache},
        )
        self.tokens = torch.cat([self.tokens, ids], dim=1)
        if self.keep_hidden:
            states = out.hidden_states
            self.hidden = states[self.layers[0]] if len(self.layers) == 1 else torch.cat([states[i] for i in self.layers], -1)
        return out.logits

    def prefill(self, input_ids: torch.Tensor, logits_to_keep: int = 1) -> torch.Tensor:
        """Start over with ``input_ids`` [1, T]. Returns logits [1, logits_to_keep, V] (0 = all T)."""
        self.reset()
        return self._forward(input_ids, logits_to_keep)

    def step(self, new_ids: torch.Tensor) -> torch.Tensor:
        """Append ``new_ids`` [1, k] to the cache (empty or not). Returns logits [1, k, V]: row i
        predicts the token after new_ids[:, i]."""
        return self._forward(new_ids, 0)

    def rollback(self, length: int) -> None:
        """Keep only the first ``length`` tokens of the cache (0 <= length <= self.length)."""
        if not 0 <= length <= self.length:
            raise ValueError(f"rollback to {length}: the cache holds {self.length} tokens")
        removed = self.length - length
        if removed == 0:
            return
        try:
            self.cache.crop(-removed)  # transformers 5.x: a negative count removes the last tokens
        except (ValueError, RuntimeError):
            kept = self.tokens[:, :length]
            self.reset()  # cannot crop this cache: rebuild it from the kept tokens
            if length:
                self._forward(kept, 1)
            return
        self.tokens = self.tokens[:, :length]
