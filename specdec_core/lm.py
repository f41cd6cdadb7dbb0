"""``Decoder``: one causal LM, its KV cache and its length — the only code that drives the cache.

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

What varies is the cache kind, each in its own file behind one narrow interface (:class:`KV`):
``kv_dynamic.py`` (transformers' ``DynamicCache``: grows by concatenation, the model masks causally
itself) and ``kv_static.py`` (``StaticCache``: one preallocated buffer, positions and a mask over all of
it on every forward — the static engine). The Decoder keeps what they share: the tokens, the forward,
and the rules of keep and rollback.
"""

from __future__ import annotations

import copy
import inspect
import warnings
from typing import Protocol

import torch
from transformers import Cache, PreTrainedModel

from .kv_dynamic import DynamicKV
from .kv_static import StaticKV
from .widths import WIDTHS, menu_width


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
    """Raise a clear error for inputs every one-sequence generation function refuses (``ar.generate`` and
    ``speculative_generate`` take a batch too: :func:`specdec_core.batch.batch_rows` checks theirs)."""
    if not isinstance(input_ids, torch.Tensor):
        raise ValueError(f"input_ids must be one tensor [1, T], got a {type(input_ids).__name__}: this method runs "
                         "one sequence (batches: ar.generate and speculative_generate)")
    if input_ids.dim() != 2:
        raise ValueError(f"input_ids must have shape [1, T], got {tuple(input_ids.shape)}")
    if input_ids.shape[0] != 1:
        raise ValueError(
            f"batch size {input_ids.shape[0]}: token trees, lookahead and Jacobi decoding run one sequence at a "
            "time (batch size 1); ar.generate and speculative_generate take a batch on the static engine. "
            "Loop over your prompts here."
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


class KV(Protocol):
    """What a :class:`Decoder` asks of its cache kind (:class:`~specdec_core.kv_dynamic.DynamicKV`,
    :class:`~specdec_core.kv_static.StaticKV`). Lengths are the Decoder's (its ``tokens``), passed in:
    the cache kinds keep none, so a batch can later pass one length per row."""

    static: bool  # a preallocated buffer (positions and mask always explicit)
    capacity: int | None  # its slots (None: unbounded)
    cache: Cache  # what the model's forward takes

    def reset(self, capacity: int = 0) -> None: ...
    def grow(self, length: int, needed: int) -> None: ...
    def inputs(self, length: int, n: int, positions: torch.Tensor | None = None, mask: torch.Tensor | None = None
               ) -> tuple[torch.Tensor | None, torch.Tensor | None]: ...
    def keep(self, start: int, slots: torch.Tensor) -> None: ...
    def crop(self, length: int, to: int) -> None: ...


class Decoder:
    """A model plus its KV cache. Batch size 1; ``length`` = tokens the cache holds.

    The cache kind (dynamic or static) is a :class:`KV` of its own file; this class holds what they share:
    the tokens, the forward, the checks and the rules of keep and rollback.
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
        static = getattr(model, "static_engine", False) if static is None else static
        self.kv: KV = StaticKV(model) if static else DynamicKV(model)
        self._cache_arg = cache_kwarg(model)
        self.reset()

    def reset(self, capacity: int = 0) -> None:
        """Empty the cache. Static: ``capacity`` slots (rounded up to :data:`~specdec_core.kv_static.BUCKET`)
        preallocated."""
        self.tokens = torch.empty(1, 0, dtype=torch.long, device=self.device)
        self.hidden: torch.Tensor | None = None
        self.kv.reset(capacity)

    @property
    def device(self) -> torch.device:
        return self.model.device

    @property
    def length(self) -> int:
        return self.tokens.shape[1]

    @property
    def static(self) -> bool:
        """Whether the cache is a preallocated buffer (the static engine)."""
        return self.kv.static

    @property
    def cache(self) -> Cache:
        """The transformers cache the model's forward takes (``DynamicCache`` or ``StaticCache``)."""
        return self.kv.cache

    @property
    def capacity(self) -> int | None:
        """The static buffer's slots (None on the dynamic cache: unbounded)."""
        return self.kv.capacity

    @torch.inference_mode()
    def _forward(self, ids: torch.Tensor, logits_to_keep: int, positions: torch.Tensor | None = None,
                 mask: torch.Tensor | None = None) -> torch.Tensor:
        """ids [1, n] on top of the cache → logits [1, logits_to_keep or n, V]. ``positions`` [1, n] and
        ``mask`` (bool [n, length + n]) where the new tokens are not one causal sequence; the cache kind
        turns them into the forward's inputs (the static buffer needs both on every call)."""
        ids = ids.to(self.device)
        self._last_start = self.length
        n = ids.shape[1]
        compiled = getattr(self.model, "compiled_forward", None)
        on_graph = compiled is not None and self.length > 0 and n <= WIDTHS[-1]  # the prefill stays eager
        width = menu_width(n) if on_graph else n
        self.kv.grow(self.length, self.length + width)
        positions, mask = self.kv.inputs(self.length, n, positions, mask)
        if width > n:  # the compiled step: pad to the menu width (compiled.py says why)
            ids, positions, mask = self._padded(ids, positions, mask, width)
        extra = {} if positions is None else {"position_ids": positions}
        if mask is not None:  # [1, 1, n, S]: one head-broadcast additive mask
            extra["attention_mask"] = additive(mask, next(self.model.parameters()).dtype)[None, None]
        out = (compiled if on_graph else self.model)(
            input_ids=ids,
            use_cache=True,
            logits_to_keep=0 if on_graph else logits_to_keep,  # a graph keeps every row: one shape a width
            output_hidden_states=self.keep_hidden,
            **{self._cache_arg: self.cache},
            **extra,
        )
        logits, states = out.logits, out.hidden_states
        if on_graph:  # the pads' keys leave the cache, their rows the outputs
            if width > n:
                self.kv.crop(self.length + width, self.length + n)
            logits = logits[:, n - logits_to_keep : n] if logits_to_keep else logits[:, :n]
            states = tuple(h[:, :n] for h in states) if states is not None else None
        self.tokens = torch.cat([self.tokens, ids[:, :n]], dim=1)
        if self.keep_hidden:
            self.hidden = states[self.layers[0]] if len(self.layers) == 1 else torch.cat([states[i] for i in self.layers], -1)
        return logits

    def _padded(self, ids: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor, width: int
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """ids [1, n], positions [1, n] and mask [n, S] padded to ``width`` rows: pad j sits at slot and position
        length + n + j and sees only itself, so it changes no real token's output."""
        n, pad = ids.shape[1], width - ids.shape[1]
        slots = self.length + n + torch.arange(pad, device=self.device)  # [pad]
        own = torch.zeros(pad, mask.shape[1], dtype=torch.bool, device=self.device)
        own[torch.arange(pad, device=self.device), slots] = True
        return (torch.cat([ids, ids.new_zeros(1, pad)], dim=1), torch.cat([positions, slots.view(1, pad)], dim=1),
                torch.cat([mask, own], dim=0))

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
        return self._forward(new_ids, 0, positions=positions.view(1, n).to(self.device), mask=mask)

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
        self.kv.keep(start, slots)
        self.tokens = torch.cat([self.tokens[:, :start], self.tokens[:, slots]], dim=1)

    @torch.inference_mode()
    def rollback(self, length: int) -> None:
        """Keep only the first ``length`` tokens of the cache (0 <= length <= self.length)."""
        if not 0 <= length <= self.length:
            raise ValueError(f"rollback to {length}: the cache holds {self.length} tokens")
        if length == self.length:
            return
        try:
            self.kv.crop(self.length, length)
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


def additive(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A bool attention mask as the additive float mask every attention implementation accepts
    (0 where attending is allowed, the dtype's most negative number where not)."""
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(~mask, torch.finfo(dtype).min)
