"""Self-speculation: the target drafts for itself with a subset of its own layers — no second model, no training.

    draft = self_draft.layer_subset(pair.target, range(8))        # its first 8 layers, its own final norm and output
    draft = self_draft.layer_subset(pair.target, keep)            # any increasing subset (SWIFT skips some layers)
    out = speculative_generate(pair.target, ModelDrafter(draft), ids, 64, gamma=3)   # exact: the target verifies

A residual network refines one hidden state layer by layer, so the state after L′ < L layers, through the model's
own final norm and output layer, is already a guess at the next token (an "early exit"). Draft & Verify
(arXiv:2309.08168) and SWIFT (arXiv:2410.06916) skip a set of layers chosen on a little text, with no training;
LayerSkip (arXiv:2404.16710) trains the model so its early layers predict better. The draft here is a view of the
target: the same weight tensors (no memory added), its own module list and KV cache. The verify does not reuse the
draft's keys for the shared layers: a prefix draft has computed layers 1 … L′ of every guess already, which a fused
kernel could keep and save L′/L of the verify's layer work (not the output layer's) — the code would no longer be
"a drafter and a target", so it is left as a note.

What a subset costs: c ≈ its weight bytes ÷ the target's on a memory-bound step (:func:`byte_ratio`: every layer
kept and the shared output layer, which on a small model is a large share). What it buys: α, measured.
:func:`search` scores candidate subsets by the cost model's S = E(α, γ) ÷ (γ·c + v(γ + 1)) at the best γ.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Sequence

import torch
from torch import nn
from transformers import PreTrainedModel

from . import theory
from .drafters import ModelDrafter
from .memory import weight_bytes
from .speculative import speculative_generate


def layer_subset(model: PreTrainedModel, keep: Iterable[int]) -> PreTrainedModel:
    """A view of ``model`` that runs only the decoder layers ``keep`` (indices, increasing), then the model's own
    final norm and output layer. It shares every weight tensor with ``model`` (nothing is copied) and has its own
    module list, config and layer indices (each kept attention reads and writes its own slot of the draft's cache)."""
    layers = model.model.layers
    keep = sorted(set(int(i) for i in keep))
    if not keep or keep[0] < 0 or keep[-1] >= len(layers):
        raise ValueError(f"keep must name at least one of the model's {len(layers)} layers (0 … {len(layers) - 1}), "
                         f"got {keep}")
    out = copy.copy(model)  # a shallow copy: the same modules, and below its own tables where it differs
    out._modules = dict(model._modules)
    out.model = copy.copy(model.model)
    out.model._modules = dict(model.model._modules)
    out.config = copy.deepcopy(model.config)
    out.config.num_hidden_layers = len(keep)
    if getattr(out.config, "layer_types", None):
        out.config.layer_types = [out.config.layer_types[i] for i in keep]
    out.model.config = out.config
    out.model.layers = nn.ModuleList(_renumbered(layers[i], new) for new, i in enumerate(keep))
    return out


def _renumbered(layer: nn.Module, index: int) -> nn.Module:
    """A shallow copy of a decoder layer whose attention reads and writes cache slot ``index`` (same weights)."""
    out = copy.copy(layer)
    out._modules = dict(layer._modules)
    attention = copy.copy(layer.self_attn)
    attention.layer_idx = index
    out._modules["self_attn"] = attention
    return out


def prefix(model: PreTrainedModel, depth: int) -> PreTrainedModel:
    """The early exit after ``depth`` layers: :func:`layer_subset` of the first ``depth``."""
    return layer_subset(model, range(depth))


def byte_ratio(draft: PreTrainedModel, target: PreTrainedModel) -> float:
    """c estimated as a memory-bound step reads it: the subset's weight bytes ÷ the target's (shared tensors once)."""
    return weight_bytes(draft) / weight_bytes(target)


def score(alpha: float, c: float, v: Callable[[int], float], max_gamma: int = 8) -> tuple[float, int]:
    """(S, γ) at the γ ≤ ``max_gamma`` that maximises Leviathan's S(α, γ, c, v(γ + 1))."""
    gamma = theory.best_gamma(alpha, c, v, max_gamma)
    return theory.speedup(alpha, gamma, c, v), gamma


def search(target: PreTrainedModel, candidates: Sequence[Sequence[int]], alpha_of: Callable[[PreTrainedModel], float],
           v: Callable[[int], float] = lambda n: 1.0) -> list[dict]:
    """Each candidate subset (layer indices) scored: α by ``alpha_of(draft)`` (e.g. a short greedy speculative run on
    held-out text), c by :func:`byte_ratio`, S and γ by :func:`score`; best first."""
    rows = []
    for keep in candidates:
        draft = layer_subset(target, keep)
        alpha, c = alpha_of(draft), byte_ratio(draft, target)
        s, gamma = score(alpha, c, v)
        rows.append({"keep": list(keep), "layers": len(list(keep)), "alpha": alpha, "c": c, "gamma": gamma, "speedup": s})
    return sorted(rows, key=lambda r: -r["speedup"])


def candidates(n_layers: int) -> list[list[int]]:
    """A small search space over an L-layer model: early exits at L/4, L/3, L/2, 2L/3 and 3L/4, and the same
    budgets spent SWIFT's way, skipping every other layer of the later part (the first layers kept)."""
    out = []
    for frac in (1 / 4, 1 / 3, 1 / 2, 2 / 3, 3 / 4):
        depth = max(1, round(n_layers * frac))
        out.append(list(range(depth)))
        head = max(1, depth // 2)  # the first layers, then every other one until the budget is spent
        tail = [i for i in range(head, n_layers, 2)][: depth - head]
        if len(tail) == depth - head and tail[-1:] != [depth - 1]:
            out.append(list(range(head)) + tail)
    return [list(c) for c in dict.fromkeys(tuple(c) for c in out)]


def greedy_alpha(target: PreTrainedModel, draft: PreTrainedModel, ids: torch.Tensor, max_new_tokens: int = 24,
                 gamma: int = 3) -> float:
    """α of ``draft`` for ``target`` from one greedy speculative run on ``ids`` [1, T]."""
    run = speculative_generate(target, ModelDrafter(draft), ids, max_new_tokens, gamma=gamma)
    return theory.alpha_for_theory(run.stats.alpha)


def alpha_per_depth(target: PreTrainedModel, ids: torch.Tensor, depths: Sequence[int]) -> dict[int, float]:
    """Greedy α of the early exit at each depth (:func:`greedy_alpha` on ``ids`` [1, T])."""
    return {d: greedy_alpha(target, prefix(target, d), ids) for d in depths}


def choose(target: PreTrainedModel, ids: torch.Tensor, v: Callable[[int], float] = lambda n: 1.0) -> dict:
    """The best row of :func:`search` over :func:`candidates`, α measured on ``ids`` [1, T] (a short greedy run each)."""
    rows = search(target, candidates(target.config.num_hidden_layers), lambda d: greedy_alpha(target, d, ids), v)
    return rows[0]
