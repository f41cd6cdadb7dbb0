"""``Decoder``: one causal LM, its KV cache and its length — the only code that touches the cache.

Every algorithm in the course (autoregressive, speculative, Jacobi) drives a model through these
three calls:

    dec = Decoder(model)
    logits = dec.prefill(prompt_ids)     # run the prompt, fill the cache
    logits = dec.step(new_ids)           # run k new tokens on top of the cache → k rows of logits
    dec.rollback(length)                 # forget everything after the first `length` tokens

``rollback`` is what speculative and Jacobi decoding need: they run guessed tokens through the
model, then keep only the part that turned out right. Token trees and lookahead decoding run many
guesses that are NOT one sequence, each seeing only its own ancestors, then keep one path of them:

    logits = dec.step_masked(ids, positions, mask)   # n tokens, their positions, who sees whom among them
    dec.keep([0, 2, 5])                              # keep these of the last call's tokens, contiguously
"""

from __future__ import annotations

import copy
import inspect
import math
import warnings

import torch
from transformers import DynamicCache, PreTrainedModel, StaticCache

BUCKET = 256  # a static cache's slots come in multiples of this: few shapes, little waste


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

    _warned_rebuild = False  # the rebuild fallback of rollback warns once per process

    def __init__(self, model: PreTrainedModel, keep_hidden: bool = False, layers: tuple[int, ...] = (-1,),
                 static: bool | None = None) -> None:
        self.model = model
        self.keep_hidden, self.layers = keep_hidden, tuple(layers)
        self.static = getattr(model, "static_engine", False) if static is None else static
        self._cache_arg = cache_kwarg(model)
        self.reset()

    def reset(self, capacity: int = 0) -> None:
        """Empty the cache. Static: ``capacity`` slots (rounded up to :data:`BUCKET`) preallocated."""
        self.tokens = torch.empty(1, 0, dtype=torch.long, device=self.device)
        self.hidden: torch.Tensor | None = None
        if self.static:
            window = sliding_window(self.model)
            if window is not None and capacity > window:
                raise ValueError(f"the static engine holds at most this model's sliding window ({window} tokens), "
                                 f"{capacity} were asked for: shorten the prompt or the budget, or use "
                                 "Decoder(static=False)")
            self.capacity = min(-(-max(capacity, 1) // BUCKET) * BUCKET, window or math.inf)
            self.cache = StaticCache(config=self.model.config, max_cache_len=self.capacity)
            self._slots = torch.arange(self.capacity, device=self.device)
            return
        self.cache = DynamicCache(config=self.model.config)
        for layer in getattr(self.cache, "layers", []):
            # Sliding-window layers (Gemma 2) drop old keys once the window is full; recording
            # them lets us crop after a rejected guess. Costs memory like a full cache.
            if hasattr(layer, "activate_past_recording"):
                layer.activate_past_recording()

    @property
    def device(self) -> torch.device:
        return self.model.device

    @property
    def length(self) -> int:
        return self.tokens.shape[1]

    @torch.inference_mode()
    def _forward(self, ids: torch.Tensor, logits_to_keep: int, **extra: torch.Tensor) -> torch.Tensor:
        ids = ids.to(self.device)
        self._last_start = self.length
        if self.static:
            extra = self._static_inputs(ids.shape[1], **extra)
        out = self.model(
            input_ids=ids,
            use_cache=True,
            logits_to_keep=logits_to_keep,
            output_hidden_states=self.keep_hidden,
            **{self._cache_arg: self.cache},
            **extra,
        )
        self.tokens = torch.cat([self.tokens, ids], dim=1)
        if self.keep_hidden:
            states = out.hidden_states
            self.hidden = states[self.layers[0]] if len(self.layers) == 1 else torch.cat([states[i] for i in self.layers], -1)
        return out.logits

    def _static_inputs(self, n: int, position_ids: torch.Tensor | None = None,
                       attention_mask: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """The static engine's explicit inputs for n new tokens: positions [1, n] and an additive mask
        [1, 1, n, capacity] over the whole buffer (slots past the new tokens hidden), so attention never
        branches on how full the cache is. A full buffer grows by one bucket first (a copy, rare)."""
        past = self.length
        if past + n > self.capacity:
            self._grow(past + n)
        if position_ids is None:
            position_ids = (past + torch.arange(n, device=self.device)).view(1, n)
        if attention_mask is None:  # causal: new token i sees slots 0 .. past + i
            allowed = self._slots.view(1, -1) <= past + torch.arange(n, device=self.device).view(n, 1)
        else:  # step_masked's [1, 1, n, past + n], padded with hidden slots
            allowed = torch.zeros(n, self.capacity, dtype=torch.bool, device=self.device)
            allowed[:, : past + n] = attention_mask[0, 0] == 0
        dtype = next(self.model.parameters()).dtype
        return {"position_ids": position_ids, "attention_mask": additive(allowed, dtype)[None, None]}

    @torch.inference_mode()
    def _grow(self, needed: int) -> None:
        """Move the cache into a larger static buffer (``needed`` slots rounded up to a bucket)."""
        old, tokens, hidden = self.cache, self.tokens, self.hidden
        self.reset(needed)
        for new_layer, old_layer in zip(self.cache.layers, old.layers):
            if old_layer.is_initialized:
                new_layer.lazy_initialization(old_layer.keys, old_layer.values)
                new_layer.keys[..., : tokens.shape[1], :] = old_layer.keys[..., : tokens.shape[1], :]
                new_layer.values[..., : tokens.shape[1], :] = old_layer.values[..., : tokens.shape[1], :]
                new_layer.cumulative_length.fill_(tokens.shape[1])
        self.tokens, self.hidden = tokens, hidden

    def prefill(self, input_ids: torch.Tensor, logits_to_keep: int = 1, capacity: int = 0) -> torch.Tensor:
        """Start over with ``input_ids`` [1, T]. Returns logits [1, logits_to_keep, V] (0 = all T).
        ``capacity``: on the static engine, the slots to preallocate (the prompt + the budget + a step's
        width; the buffer grows by a bucket if it runs out)."""
        self.reset(max(capacity, input_ids.shape[1]))
        return self._forward(input_ids, logits_to_keep)

    def step(self, new_ids: torch.Tensor) -> torch.Tensor:
        """Append ``new_ids`` [1, k] to the cache (empty or not). Returns logits [1, k, V]: row i
        predicts the token after new_ids[:, i]."""
        return self._forward(new_ids, 0)

    def step_masked(self, new_ids: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Append ``new_ids`` [1, n] that are not one sequence: token i sits at position ``positions[i]``
        ([n], absolute: the cache's first token is position 0) and attends to the new tokens j with
        ``mask[i, j]`` (bool [n, n]: every cached token is visible too) — or, with ``mask`` [n, length + n],
        to exactly the cached and new slots it marks. A token must see itself. Returns logits [1, n, V].
        The cache then holds all n in call order, which no later token may attend to as a sequence:
        follow with :meth:`keep` (or :meth:`rollback`)."""
        n, past = new_ids.shape[1], self.length
        if positions.shape != (n,) or mask.shape not in ((n, n), (n, past + n)):
            raise ValueError(f"{n} tokens on a {past}-token cache need positions [{n}] and a mask [{n}, {n}] or "
                             f"[{n}, {past + n}], got {tuple(positions.shape)} and {tuple(mask.shape)}")
        # checked where the mask is built (the host, for every caller here): on a GPU it would cost a sync
        if mask.device.type == "cpu" and not bool(mask[:, -n:].diagonal().all()):
            raise ValueError("every token must see itself: mask[i, i] (of the new tokens) must be True")
        mask = mask.to(self.device, torch.bool)
        if mask.shape[1] == n:
            mask = torch.cat([torch.ones(n, past, dtype=torch.bool, device=self.device), mask], dim=1)
        dtype = next(self.model.parameters()).dtype
        return self._forward(new_ids, 0, position_ids=positions.view(1, n).to(self.device),
                             attention_mask=additive(mask, dtype)[None, None])

    @torch.inference_mode()
    def keep(self, indices: list[int] | torch.Tensor, start: int | None = None) -> None:
        """Of the last call's tokens keep ``indices`` (increasing, into that call's tokens), moved into
        contiguous slots right after what the cache held before the call; drop the rest. ``start``: count
        the indices from this cache slot instead (tokens appended by several calls). The accepted path
        of a token tree becomes an ordinary prefix again (EAGLE's ``update_inference_inputs`` does the same
        copy). Keys already carry their rotary position, so a kept token keeps the position it ran at."""
        start = self._last_start if start is None else start
        idx = [int(i) for i in (indices.tolist() if isinstance(indices, torch.Tensor) else indices)]
        n = self.length - start
        if any(b <= a for a, b in zip(idx, idx[1:])) or (idx and not 0 <= idx[0] <= idx[-1] < n):
            raise ValueError(f"keep({idx}): indices must increase and lie in [0, {n}) (the last call's tokens)")
        if idx == list(range(len(idx))):  # a prefix of the call: a plain crop
            self.rollback(start + len(idx))
            return
        slots = torch.tensor([start + i for i in idx], dtype=torch.long, device=self.device)
        if self.static:  # an index copy within the buffer, then the length
            for layer in self.cache.layers:
                if layer.is_initialized:
                    layer.keys[..., start : start + len(idx), :] = layer.keys.index_select(-2, slots)
                    layer.values[..., start : start + len(idx), :] = layer.values.index_select(-2, slots)
            self.tokens = torch.cat([self.tokens[:, :start], self.tokens[:, slots]], dim=1)
            for layer in self.cache.layers:
                if layer.is_initialized:
                    layer.cumulative_length.fill_(self.length)
            return
        layers = getattr(self.cache, "layers", None)
        if layers is None or any(type(layer).__name__ != "DynamicLayer" for layer in layers):
            kinds = sorted({type(layer).__name__ for layer in layers or []}) or [type(self.cache).__name__]
            raise NotImplementedError(
                f"Decoder.keep cannot compact a {', '.join(kinds)} cache (a sliding window drops old keys, so slots "
                "do not map to tokens): use a model with full attention for token trees and lookahead decoding")
        for layer in layers:
            if layer.is_initialized and layer.keys.numel():
                layer.keys = torch.cat([layer.keys[..., :start, :], layer.keys.index_select(-2, slots)], dim=-2)
                layer.values = torch.cat([layer.values[..., :start, :], layer.values.index_select(-2, slots)], dim=-2)
        self.tokens = torch.cat([self.tokens[:, :start], self.tokens[:, slots]], dim=1)

    @torch.inference_mode()
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
            if not Decoder._warned_rebuild:
                warnings.warn(f"{type(self.cache).__name__} cannot be cropped here: rolling back rebuilds the cache "
                              "from the kept tokens (correct, but each rollback costs a prefill)", stacklevel=2)
                Decoder._warned_rebuild = True
            kept = self.tokens[:, :length]
            self.reset()  # cannot crop this cache: rebuild it from the kept tokens
            if length:
                self._forward(kept, 1)
            return
        self.tokens = self.tokens[:, :length]


def on_static_engine(model: PreTrainedModel) -> PreTrainedModel:
    """The same model (a shallow copy: the same modules and weights) that every :class:`Decoder` runs on the
    static engine — how an engine is chosen once, for every method that decodes with it."""
    out = copy.copy(model)
    out.static_engine = True
    return out


def sliding_window(model: PreTrainedModel) -> int | None:
    """The attention window of a model whose layers see only the last W tokens (Gemma 2: 4,096), else None."""
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    return getattr(config, "sliding_window", None)


def additive(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A bool attention mask as the additive float mask every attention implementation accepts
    (0 where attending is allowed, the dtype's most negative number where not)."""
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(~mask, torch.finfo(dtype).min)
