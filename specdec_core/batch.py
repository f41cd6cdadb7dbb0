"""Batches: B sequences of different lengths decoded together, one forward per step for all of them.

A server never runs one sequence: it runs B, and a step costs little more for B rows than for one while
reading the weights dominates. This file holds what a batch adds to the batch-1 code:

    dec = BatchDecoder(model, batch=B, capacity=S)    # the batched cache of kv_batch.py, lengths per row
    logits = dec.prefill(rows)                        # B prompts of different lengths → [B, V] at each row's end
    logits = dec.step(ids)                            # ids [B, n]: n tokens on top of each row → [B, n, V]
    logits = dec.step(ids, sizes, keep)               # ragged: row b's first sizes[b] real; logits where kept
    dec.rollback(lengths)                             # row b keeps its first lengths[b] tokens: a length write
    dec.reset(b)                                      # row b starts over (a newcomer's slot): length 0

and :func:`generate_batch`, the autoregressive loop over a batch (``ar.generate`` calls it when given one).
Rows never wait for each other: each has its own length, its own positions and its own place in the
buffer, so a row that accepts 3 guesses and a row that accepts none roll back to different lengths in the
same step (:mod:`specdec_core.batch_speculative`). A finished row stays in the batch until all are done:
its tokens are computed and ignored, its length never moves. Refilling its slot is continuous batching
(:mod:`specdec_core.scheduler`): ``reset`` the row, and its newcomer's prompt joins the next step's forward
beside the other rows' decode tokens — a ragged forward, each row's short end padded with pads that its
length forgets, so the step is still one forward for the batch.

The lengths live on the host: the loop reads the device once per step for the whole batch (the picked
tokens, or the accept counts), and every length follows from that read.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch
from transformers import PreTrainedModel

from .generation import Clock, Generation, Output
from .kv_batch import BatchKV
from .lm import additive, cache_kwarg, max_context
from .records import ARStats
from .sampling import logits_to_probs, sample

Prompts = torch.Tensor | Sequence[torch.Tensor]  # [B, T], or B prompts [1, Tᵢ] (or [Tᵢ]) of different lengths


def is_batch(input_ids: Prompts) -> bool:
    """Whether a generation function was given a batch: a list of prompts, or a tensor [B, T] with B ≠ 1."""
    return not isinstance(input_ids, torch.Tensor) or (input_ids.dim() == 2 and input_ids.shape[0] != 1)


def batch_rows(model: PreTrainedModel, input_ids: Prompts, max_new_tokens: int) -> list[torch.Tensor]:
    """The batch's prompts as B 1-D id tensors, after the checks every batched function makes: B ≥ 1, the model
    on the static engine, no empty row, every row + ``max_new_tokens`` within the model's context."""
    if isinstance(input_ids, torch.Tensor):
        if input_ids.dim() != 2:
            raise ValueError(f"input_ids must have shape [B, T] (or be a list of [1, T] prompts), got "
                             f"{tuple(input_ids.shape)}")
        rows = list(input_ids)
    else:
        rows = [torch.as_tensor(r) for r in input_ids]  # host: the prompts as given (a tensor keeps its device)
        if any(r.dim() not in (1, 2) or (r.dim() == 2 and r.shape[0] != 1) for r in rows):
            raise ValueError("a list of prompts holds one [1, T] (or [T]) tensor per row, got shapes "
                             f"{[tuple(r.shape) for r in rows]}")
        rows = [r.reshape(-1) for r in rows]
    if not rows:
        raise ValueError("batch size 0: give at least one prompt")
    if not getattr(model, "static_engine", False):
        raise ValueError(f"batch size {len(rows)}: a batch runs on the static engine, where each row has its own "
                         "length in one buffer — pass lm.on_static_engine(model), or the target of pair.engine(...)")
    empty = [b for b, r in enumerate(rows) if r.numel() == 0]
    if empty:
        raise ValueError(f"rows {empty} of the batch are empty: give every row at least one prompt token")
    if max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
    limit = max_context(model)
    long = [b for b, r in enumerate(rows) if limit is not None and r.numel() + max_new_tokens > limit]
    if long:
        raise ValueError(f"rows {long} of the batch ({[rows[b].numel() for b in long]} tokens) + max_new_tokens "
                         f"({max_new_tokens}) are longer than the model's context of {limit} tokens: shorten them "
                         "or ask for fewer new tokens")
    return [r.to(model.device, torch.long) for r in rows]


def row_generators(generator: torch.Generator | Sequence[torch.Generator] | None, batch: int
                   ) -> list[torch.Generator | None]:
    """One generator per row: a list of B (row b draws from its own: the same tokens as its batch-1 run at
    that seed), or one shared by all rows (drawn from in row order), or None."""
    if generator is None or isinstance(generator, torch.Generator):
        return [generator] * batch
    generators = list(generator)
    if len(generators) != batch:
        raise ValueError(f"{len(generators)} generators for a batch of {batch}: give one per row, one for all, or None")
    return generators


class BatchDecoder:
    """A model and the batched cache (:class:`~specdec_core.kv_batch.BatchKV`): B rows, ``lengths`` (host ints)
    the tokens each row's cache holds. The batch's counterpart of :class:`~specdec_core.lm.Decoder`'s
    prefill / step / rollback; no token trees (``keep``) and no compiled step yet."""

    def __init__(self, model: PreTrainedModel, batch: int, capacity: int) -> None:
        self.model, self.kv = model, BatchKV(model, batch, capacity)
        self.lengths = [0] * batch
        self._cache_arg = cache_kwarg(model)
        self._dtype = next(model.parameters()).dtype

    @property
    def device(self) -> torch.device:
        return self.model.device

    @torch.inference_mode()
    def step(self, ids: torch.Tensor, sizes: Sequence[int] | None = None,
             keep: Sequence[Sequence[int]] | None = None) -> torch.Tensor:
        """ids [B, n]: row b's first sizes[b] tokens (default all n) go on top of its lengths[b]; the rest are pads,
        which come last (no real token sees them) and which its length forgets. Returns logits [B, n, V], or
        [B, k, V] at the columns ``keep`` (B lists of k column indices: only those go through the output layer)."""
        n = ids.shape[1]
        sizes = [n] * len(self.lengths) if sizes is None else [int(s) for s in sizes]
        positions, mask = self.kv.inputs(self.lengths, n, sizes)  # [B, n], [B, n, S]
        # the output layer runs on the union of the kept columns only (a newcomer's prompt needs its last one)
        cols = sorted({c for row in keep for c in row}) if keep is not None else list(range(n))
        where = torch.tensor(cols, device=self.device) if len(cols) < n else 0
        out = self.model(input_ids=ids.to(self.device), position_ids=positions, use_cache=True, logits_to_keep=where,
                         attention_mask=additive(mask, self._dtype)[:, None], **{self._cache_arg: self.kv.cache})
        self.lengths = [length + size for length, size in zip(self.lengths, sizes)]
        if keep is None:
            return out.logits
        at = {c: i for i, c in enumerate(cols)}
        index = torch.tensor([[at[c] for c in row] for row in keep], device=self.device)  # [B, k]
        return out.logits.gather(1, index[..., None].expand(-1, -1, out.logits.shape[-1]))

    def prefill(self, rows: Sequence[torch.Tensor]) -> torch.Tensor:
        """Start over with B prompts (1-D, different lengths; empty allowed). They run in one forward, right-padded
        to the longest (pads come last, so no real token sees them, and each row's length forgets its pads).
        Returns logits [B, V] after each row's last token (garbage for an empty row)."""
        sizes = [r.numel() for r in rows]
        self.lengths = [0] * len(rows)
        if max(sizes) == 0:
            return torch.zeros(len(rows), self.model.config.vocab_size, device=self.device)
        ids = torch.zeros(len(rows), max(sizes), dtype=torch.long, device=self.device)
        for b, r in enumerate(rows):
            ids[b, : sizes[b]] = r
        return self.step(ids, sizes, keep=[[max(s - 1, 0)] for s in sizes])[:, 0]

    def reset(self, row: int) -> None:
        """Row ``row`` starts over, empty (a finished row's slot, about to take a newcomer): a length write. Its
        next tokens go in from slot 0, and every mask hides what its predecessor left past them."""
        self.lengths[row] = 0

    def rollback(self, lengths: Sequence[int]) -> None:
        """Row b keeps its first lengths[b] tokens (0 ≤ lengths[b] ≤ its length): one length write per row, the
        slots past it stale and hidden by the next forward's mask."""
        if len(lengths) != len(self.lengths) or any(not 0 <= n <= m for n, m in zip(lengths, self.lengths)):
            raise ValueError(f"rollback to {list(lengths)}: the rows hold {self.lengths} tokens")
        self.lengths = [int(n) for n in lengths]


def pick(logits: torch.Tensor, temperature: float, top_k: int | None, top_p: float | None,
         generators: Sequence[torch.Generator | None], live: Sequence[bool]) -> torch.Tensor:
    """The next token of every row from logits [B, V] → [B] on the device. Greedy: one argmax for the batch.
    Sampled: row b draws from its own generator, exactly as ``ar.next_token`` does for one row; a finished
    row (``live[b]`` False) draws nothing and takes its argmax."""
    tokens = logits.argmax(-1)
    if temperature == 0:
        return tokens
    drawn = [sample(logits_to_probs(logits[b], temperature, top_k, top_p), g) if on else tokens[b]
             for b, (g, on) in enumerate(zip(generators, live))]
    return torch.stack(drawn)


@torch.inference_mode()
def generate_batch(
    model: PreTrainedModel,
    input_ids: Prompts,
    max_new_tokens: int,
    *,
    temperature: float = 0.0,
    top_k: int | None = None,
    top_p: float | None = None,
    eos_token_id: int | Iterable[int] | None = None,
    generator: torch.Generator | Sequence[torch.Generator] | None = None,
    tokenizer=None,
) -> list[Generation]:
    """``ar.generate`` for a batch: one forward per step gives every row its next token. Returns one
    :class:`~specdec_core.generation.Generation` per row, each with its own :class:`~specdec_core.records.ARStats`
    (``wall_time`` and ``ttft`` the batch's, ``token_times`` the steps while the row was running). The device
    is read once per step: the B tokens."""
    rows = batch_rows(model, input_ids, max_new_tokens)
    batch = len(rows)
    generators = row_generators(generator, batch)
    outs = [Output(max_new_tokens, eos_token_id) for _ in rows]
    clock = Clock(model.device)
    dec = BatchDecoder(model, batch, max(r.numel() for r in rows) + max_new_tokens + 1)
    marks = [clock.mark()]
    logits = dec.prefill(rows)  # [B, V]
    while not all(out.done for out in outs):
        live = [not out.done for out in outs]
        tokens = pick(logits, temperature, top_k, top_p, generators, live)  # [B]
        for out, token, on in zip(outs, tokens.tolist(), live):  # the step's one read
            if on:
                out.emit([token])
        marks.append(clock.mark())
        if not all(out.done for out in outs):
            logits = dec.step(tokens.view(batch, 1))[:, -1]
    wall = clock.stop()
    times = clock.spans(marks)
    return [Generation(out.tokens, tokenizer.decode(out.tokens) if tokenizer is not None else None,
                       ARStats(wall_time=wall, target_calls=len(out.tokens), ttft=times[0] if times else 0.0,
                               token_times=times[: len(out.tokens)]))
            for out in outs]
