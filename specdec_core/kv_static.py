"""The static KV cache: transformers' ``StaticCache``, a buffer of ``capacity`` slots allocated once.

Each layer keeps keys and values [B, H_kv, S, d] (B = 1 here, S = capacity, a multiple of
:data:`BUCKET`) and a counter ``cumulative_length``: a forward writes the new tokens' keys at slots
length .. length + n − 1 and moves the counter. Nothing is reallocated step to step, so a forward has
the same shapes whatever the cache holds — the precondition of a compiled step. The price: the model
cannot tell full slots from empty ones, so every forward brings its own positions and a mask over the
WHOLE buffer (empty slots hidden). The same interface as :mod:`~specdec_core.kv_dynamic`:

    kv.reset(capacity)                       ``capacity`` slots, rounded up to a bucket (≤ the sliding window)
    kv.grow(length, needed)                  a larger buffer if ``needed`` > capacity, the first ``length`` copied
    kv.inputs(length, n, positions, mask)    positions [1, n] and a bool mask [n, S]: never None
    kv.keep(start, slots)                    an index copy within the buffer, then the counter
    kv.crop(length, to)                      the counter only: slots past it are stale and hidden by the mask
"""

from __future__ import annotations

import math

import torch
from transformers import PreTrainedModel, StaticCache

BUCKET = 256  # a static cache's slots come in multiples of this: few shapes, little waste


def sliding_window(model: PreTrainedModel) -> int | None:
    """The attention window of a model whose layers see only the last W tokens (Gemma 2: 4,096), else None."""
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    return getattr(config, "sliding_window", None)


class StaticKV:
    """A ``StaticCache`` behind the Decoder's interface. ``cache`` is what the model's forward takes,
    ``capacity`` its slots S; every length is the caller's (the Decoder's ``tokens``), none is kept here."""

    static = True

    def __init__(self, model: PreTrainedModel) -> None:
        self.model = model
        self.reset()

    @property
    def device(self) -> torch.device:
        return self.model.device

    def reset(self, capacity: int = 0) -> None:
        """An empty buffer of ``capacity`` slots rounded up to :data:`BUCKET` (at least one bucket)."""
        window = sliding_window(self.model)
        if window is not None and capacity > window:
            raise ValueError(f"the static engine holds at most this model's sliding window ({window} tokens), "
                             f"{capacity} were asked for: shorten the prompt or the budget, or use "
                             "Decoder(static=False)")
        self.capacity: int = min(-(-max(capacity, 1) // BUCKET) * BUCKET, window or math.inf)
        self.cache = StaticCache(config=self.model.config, max_cache_len=self.capacity)
        self._slots = torch.arange(self.capacity, device=self.device)  # [S], the mask's column index

    @torch.inference_mode()
    def grow(self, length: int, needed: int) -> None:
        """A full buffer moves into a larger one (``needed`` slots rounded up to a bucket; a copy, rare)."""
        if needed <= self.capacity:
            return
        old = self.cache
        self.reset(needed)
        for new_layer, old_layer in zip(self.cache.layers, old.layers):
            if old_layer.is_initialized:
                new_layer.lazy_initialization(old_layer.keys, old_layer.values)
                new_layer.keys[..., :length, :] = old_layer.keys[..., :length, :]
                new_layer.values[..., :length, :] = old_layer.values[..., :length, :]
                new_layer.cumulative_length.fill_(length)

    def inputs(self, length: int, n: int, positions: torch.Tensor | None = None, mask: torch.Tensor | None = None
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """Positions [1, n] (default: length .. length + n − 1) and a bool mask [n, S] over the whole buffer,
        so attention never branches on how full the cache is: causal by default (new token i sees slots
        0 .. length + i), else ``mask`` [n, length + n] with every slot past it hidden. Call :meth:`grow` first."""
        if positions is None:
            positions = (length + torch.arange(n, device=self.device)).view(1, n)
        if mask is None:  # slot s ≤ length + i: the cache and the new tokens up to i itself
            return positions, self._slots.view(1, -1) <= length + torch.arange(n, device=self.device).view(n, 1)
        allowed = torch.zeros(n, self.capacity, dtype=torch.bool, device=self.device)
        allowed[:, : length + n] = mask
        return positions, allowed

    @torch.inference_mode()
    def keep(self, start: int, slots: torch.Tensor) -> None:
        """Keys and values of ``slots`` [k] (increasing, ≥ start) copied to start .. start + k − 1 within the
        buffer (index_select reads all k before any is written), then the counter set to start + k."""
        k = slots.numel()
        for layer in self.cache.layers:
            if layer.is_initialized:
                layer.keys[..., start : start + k, :] = layer.keys.index_select(-2, slots)
                layer.values[..., start : start + k, :] = layer.values.index_select(-2, slots)
                layer.cumulative_length.fill_(start + k)

    @torch.inference_mode()
    def crop(self, length: int, to: int) -> None:
        """Forget the last length − to tokens: the counter moves back, the slots stay (hidden from now on)."""
        self.cache.crop(-(length - to))
