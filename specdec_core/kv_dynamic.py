"""The dynamic KV cache: transformers' ``DynamicCache``, exactly as long as the tokens it holds.

Each layer keeps keys and values [B, H_kv, T, d] (B = 1 here) and a forward concatenates the new
tokens' [B, H_kv, n, d] onto them, so the model finds the cache's length itself: a causal step needs
no positions and no mask. What a :class:`~specdec_core.lm.Decoder` asks of its cache kind:

    kv.reset(capacity)                       empty (capacity: ignored, the cache grows as it goes)
    kv.grow(length, needed)                  room for ``needed`` tokens: nothing to do
    kv.inputs(length, n, positions, mask)    positions [1, n] and a bool mask [n, length + n], or (None, None)
    kv.keep(start, slots)                    slots [k] (of the cache) → start .. start + k − 1, the rest dropped
    kv.crop(length, to)                      forget tokens to .. length − 1

Sliding-window layers (Gemma 2) drop keys older than the window; recording them (transformers'
``activate_past_recording``) lets ``crop`` reach behind the window after a rejected guess.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache, PreTrainedModel


class DynamicKV:
    """A ``DynamicCache`` behind the Decoder's interface (the module docstring). ``cache`` is what the model's
    forward takes; every length is the caller's (the Decoder's ``tokens``), none is kept here."""

    static = False
    capacity: int | None = None  # no bound: the cache grows by concatenation

    def __init__(self, model: PreTrainedModel) -> None:
        self.model = model
        self.reset()

    def reset(self, capacity: int = 0) -> None:
        self.cache = DynamicCache(config=self.model.config)
        for layer in getattr(self.cache, "layers", []):
            # costs memory like a full cache, buys a crop behind the window
            if hasattr(layer, "activate_past_recording"):
                layer.activate_past_recording()

    def grow(self, length: int, needed: int) -> None:
        """Nothing to do: a forward concatenates."""

    def inputs(self, length: int, n: int, positions: torch.Tensor | None = None, mask: torch.Tensor | None = None
               ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """Positions [1, n] and a bool mask [n, length + n] as given: (None, None) for a causal step, where
        the model counts positions from the cache and masks causally itself."""
        return positions, mask

    @torch.inference_mode()
    def keep(self, start: int, slots: torch.Tensor) -> None:
        """Keys and values of ``slots`` [k] (increasing, ≥ start) move to start .. start + k − 1; the cache
        is then start + k long (a concatenation per layer: the tensors are rebuilt, not written in place)."""
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

    @torch.inference_mode()
    def crop(self, length: int, to: int) -> None:
        """Forget the last length − to tokens. Raises ValueError or RuntimeError where this transformers
        cannot crop (an old release with a full sliding window): the Decoder then rebuilds."""
        self.cache.crop(-(length - to))  # transformers 5.x: a negative count removes the last tokens
