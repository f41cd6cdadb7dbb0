"""The batched KV cache: B sequences of different lengths in one preallocated buffer, each written at its own offset.

transformers' ``StaticLayer`` keeps ONE counter (``cumulative_length``) for the whole batch: a forward writes
every row's new keys into the same slots. That is right for B copies of one prompt, wrong for a server, where
row 0 holds 900 tokens and row 1 has just arrived with 12. Two common ways around it cost something:

* one shared write pointer with masked holes: every row writes at the longest row's end and the mask hides the
  gap — but every prefill (a newcomer's too) advances every row, and a rollback of one row cannot happen;
* one packed sequence for all rows (a block-diagonal mask): the attention then spans B × the tokens.

So the course has a layer of its own (what transformers' continuous-batching code does with its page table, here
without pages): each layer holds keys and values [B, H_kv, S, d] and the cache holds ``offsets`` [B], the slot
where each row's next token goes. A forward of n tokens per row writes row b's keys at slots
offsets[b] .. offsets[b] + n − 1 (one ``scatter_``), and brings per-row positions [B, n] and a mask
[B, 1, n, S] that shows row b's token i the slots 0 .. offsets[b] + i of its own row:

    kv = BatchKV(model, batch=B, capacity=S)
    positions, mask = kv.inputs(lengths, n)     # lengths [B] (the owner's), written as this forward's offsets
    model(ids [B, n], position_ids=positions, attention_mask=additive(mask), cache=kv.cache)

Lengths are the owner's (:class:`~specdec_core.batch.BatchDecoder`): a rollback or a keep of row b is a write
of that row's length — slots past it are stale and hidden by the next mask, exactly as the single-row static
cache (``kv_static.py``) forgets. Refilling a row (continuous batching) is the same write: length 0, and the
newcomer's keys overwrite its predecessor's from slot 0 while the mask hides the rest. Nothing is reallocated
step to step, so shapes do not depend on the lengths.

A ragged forward (a newcomer's prompt beside other rows' single tokens) pads the short rows at their ends. A pad
is written like any token and forgotten by its row's length; one that would fall past the buffer goes to the
last slot instead, a scratch slot no real token ever uses (a row holds at most ``capacity − 1`` tokens) and no
real token sees (the causal mask stops at its own position).
"""

from __future__ import annotations

import torch
from transformers import Cache, PreTrainedModel
from transformers.cache_utils import CacheLayerMixin

from .kv_static import BUCKET, sliding_window


class BatchLayer(CacheLayerMixin):
    """One layer's keys and values [B, H_kv, S, d], written at each row's own offset (the owning
    :class:`BatchKV`'s ``offsets`` [B], shared by every layer of one forward)."""

    is_compileable = True
    is_croppable = False  # lengths are the owner's: a rollback writes them, the layer keeps none
    is_sliding = False

    def __init__(self, owner: BatchKV) -> None:
        super().__init__()
        self.owner = owner

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        batch, heads, _, _ = key_states.shape
        capacity = self.owner.capacity
        self.keys = key_states.new_zeros(batch, heads, capacity, key_states.shape[-1])
        self.values = value_states.new_zeros(batch, heads, capacity, value_states.shape[-1])
        self.device, self.is_initialized = key_states.device, True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """key_states, value_states [B, H_kv, n, d] → row b's at slots offsets[b] .. offsets[b] + n − 1; returns
        the whole buffers [B, H_kv, S, d] (the mask hides what a row must not see)."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        batch, heads, n, _ = key_states.shape
        slots = self.owner.offsets.view(batch, 1) + torch.arange(n, device=key_states.device)  # [B, n]
        slots = slots.clamp(max=self.owner.capacity - 1)  # a pad past the buffer lands in the scratch slot
        index = slots.view(batch, 1, n, 1)
        self.keys.scatter_(2, index.expand(batch, heads, n, self.keys.shape[-1]), key_states)
        self.values.scatter_(2, index.expand(batch, heads, n, self.values.shape[-1]), value_states)
        return self.keys, self.values

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.owner.capacity, 0

    def get_seq_length(self) -> int:
        return 0  # no one length: every forward brings its positions and its mask

    def get_max_length(self) -> int:
        return self.owner.capacity


class BatchKV:
    """B rows of at least ``capacity`` tokens each (the buffer: ``capacity`` + 1 slots, the last one the pads'
    scratch slot, rounded up to :data:`~specdec_core.kv_static.BUCKET`), one :class:`BatchLayer` per model
    layer; ``cache`` is what the model's forward takes. Keeps no length: the owner passes its lengths [B] to
    :meth:`inputs` before every forward."""

    static = True

    def __init__(self, model: PreTrainedModel, batch: int, capacity: int) -> None:
        config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
        window = sliding_window(model)
        if window is not None:
            raise ValueError(f"{type(model).__name__} has sliding-window layers ({window} tokens): the batched cache "
                             "holds full attention only; run its prompts one at a time")
        if batch < 1:
            raise ValueError(f"a batch needs at least one row, got {batch}")
        self.model, self.batch = model, batch
        self.capacity = -(-(max(capacity, 1) + 1) // BUCKET) * BUCKET  # slots, the scratch slot included
        self.offsets = torch.zeros(batch, dtype=torch.long, device=model.device)  # [B]: the next forward's
        self.cache = Cache(layers=[BatchLayer(self) for _ in range(config.num_hidden_layers)])
        self._slots = torch.arange(self.capacity, device=model.device)  # [S], the mask's column index

    def inputs(self, lengths: list[int], n: int, sizes: list[int] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """For n new tokens per row on top of ``lengths`` (B ints, written as this forward's offsets [B]), of
        which row b's first ``sizes[b]`` are real (default all n; the rest are pads): positions [B, n] =
        lengths[b] + i and a bool mask [B, n, S], True where row b's token i may look (slots 0 .. lengths[b] + i
        of its own row: the causal rule, row by row). The lengths are the host's, so checking them reads
        nothing from the device."""
        sizes = [n] * len(lengths) if sizes is None else sizes
        ends = [length + size for length, size in zip(lengths, sizes)]
        if max(ends) > self.capacity - 1:
            over = [b for b, end in enumerate(ends) if end > self.capacity - 1]
            raise ValueError(f"rows {over} would hold {[ends[b] for b in over]} tokens, past the batch's "
                             f"{self.capacity - 1} a row: give the batch a larger capacity")
        lengths = torch.tensor(lengths, dtype=torch.long).to(self.offsets.device)  # a copy up, no wait  # host: the owner's lengths (host ints), one copy up
        self.offsets.copy_(lengths)
        positions = lengths.view(-1, 1) + torch.arange(n, device=lengths.device)  # [B, n]
        return positions, self._slots.view(1, 1, -1) <= positions.view(-1, n, 1)
