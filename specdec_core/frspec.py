"""FR-Spec (Zhao et al. 2025): a draft that guesses only among the S most frequent tokens.

A small draft spends most of its work in its output layer: the standalone offline draft's tied
49,152 × 128 embedding is 6.3M of its 7.3M parameters, the feature head's output rows are the
target's 49,152 × 576. Restricting that layer to the S tokens the target writes most often (8,192,
counted on the drafts' corpus) makes every guess several times cheaper and costs little agreement:
the rest of the vocabulary is rarely what the target picks.

Speculative sampling stays exact: the draft's q is 0 outside S (a token outside S is simply never
guessed), and the accept / residual rule corrects for whatever q is (lesson 03).

    draft_s = reduced_head(draft, vocab_ids)         # a copy whose lm_head has the S rows only
    q, token = kept_guess(logits_s, vocab_ids, ...)  # warp and draw over S, q scattered back to [V]
"""

from __future__ import annotations

import copy
import itertools

import torch
from torch import nn
from transformers import PreTrainedModel

from .fast import PackedLinear
from .precision import Int8Linear
from .sampling import Warp, sample


def reduced_head(model: PreTrainedModel, vocab_ids: torch.Tensor) -> PreTrainedModel:
    """A copy of ``model`` (sharing every weight) whose output layer keeps only the rows ``vocab_ids``
    [S]: its logits are [..., S], column i for token ``vocab_ids[i]``. ``model`` is unchanged."""
    shared = {id(t): t for t in itertools.chain(model.parameters(), model.buffers())}
    # a fast twin's prepacked weights (specdec_core.fast) are read-only copies: shared as well
    shared |= {id(m.packed): m.packed for m in model.modules() if isinstance(m, PackedLinear)}
    out = copy.deepcopy(model, shared)
    full = model.get_output_embeddings()
    if isinstance(full, Int8Linear):  # an int8 engine: the kept rows stay int8 (the same products)
        out.set_output_embeddings(full.rows(vocab_ids.to(full.weight_q.device)))
        return out.eval()
    head = nn.Linear(full.in_features, vocab_ids.numel(), bias=full.bias is not None, device=full.weight.device,
                     dtype=full.weight.dtype)
    with torch.no_grad():
        head.weight.copy_(full.weight[vocab_ids.to(full.weight.device)])
        if full.bias is not None:
            head.bias.copy_(full.bias[vocab_ids.to(full.weight.device)])
    head.requires_grad_(False)
    out.set_output_embeddings(PackedLinear(head) if isinstance(full, PackedLinear) else head)  # a twin stays packed
    return out.eval()


def kept_guess(logits: torch.Tensor, vocab_ids: torch.Tensor | None, warp: Warp, generator: torch.Generator | None,
               vocab_size: int, greedy: bool) -> tuple[torch.Tensor | None, torch.Tensor]:
    """One guess from a draft's logits over S [S] (or over the full vocabulary [V] when ``vocab_ids``
    is None): (q [V], the token drawn from exactly that q). Temperature, top-k and top-p over S keep
    what they would keep on the full vocabulary with -inf outside S. Greedy: (None, the argmax)."""
    if greedy:
        index = logits.argmax()
        return None, index if vocab_ids is None else vocab_ids[index]
    q = warp(logits)
    index = sample(q, generator)
    if vocab_ids is None:
        return q, index
    return torch.zeros(vocab_size, device=q.device).index_copy_(0, vocab_ids, q), vocab_ids[index]
