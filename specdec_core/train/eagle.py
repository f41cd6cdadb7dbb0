"""Training the feature head (EAGLE): the two recipes the course compares, and their evaluation.

    python -m specdec_core.train draft --kind feature                 # the shipped head (EAGLE-3 style)
    python -m specdec_core.train ablation                             # the ablation table of lesson 04

At position t the head sees the pair (feature g_t, token x_{t+1}) and predicts the target's feature
at t + 1; through the target's own output rows w_out [S, d] that prediction gives the distribution
of x_{t+2}. The first guess of a drafting step reads real features only; the 2nd, 3rd… read the
head's own predictions — which training must therefore teach it to continue from:

- **two passes** (EAGLE-1's recipe as the course first shipped it): pass 1 reads real features
  everywhere; pass 2 reads pass 1's predictions everywhere, under the usual causal mask;
- **training-time test** (EAGLE-3, Li et al. 2025): unroll k of the head's own steps exactly as
  drafting runs them. Step j's chain at t sits at position t + j, reads its own step j − 1 output
  and the token x_{t+j+1}, and attends to the *real* pairs 0…t and to its own earlier steps — the
  keys a drafting step has in its cache. One mask does it for every t at once (:func:`chain_mask`).

Both are scored with the same loss (feature regression + ``ce_weight`` × cross-entropy against the
target's distribution over S) and evaluated the same way: greedy agreement with the target at
drafting steps 1…k, unrolled as at decoding time (:func:`unrolled`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..feature_drafter import FeatureHead, KVCache
from . import features
from .features import Corpus

DECAY = 0.8  # weight of unrolled step j's loss: DECAY**j (later guesses matter less: they need the earlier ones)


def batch(corpus: Corpus, rows: list[int], seq_len: int, inputs: str) -> dict[str, torch.Tensor]:
    """:func:`.features.batch` with the head's ``inputs`` ("fused" or "last" features) as b["inputs"]
    and the last features (the regression targets) as b["last"]."""
    b = features.batch(corpus, rows, seq_len, tuple(dict.fromkeys([inputs, "last"])))
    return b | {"inputs": b[inputs]}


def chain_mask(T: int, steps: int) -> torch.Tensor:
    """[T, (steps + 1) · T] attention mask of unrolled step ``steps`` over [real keys | step 1 | … | step j]:
    chain t sees the real pairs 0…t (a causal block) and its own earlier steps (a diagonal each)."""
    eye = torch.eye(T, dtype=torch.bool)  # host: the drafts' trainer runs on the CPU
    return torch.cat([torch.ones(T, T, dtype=torch.bool).tril()] + [eye] * steps, dim=1)  # host: the drafts' trainer runs on the CPU


def unrolled(head: FeatureHead, embed: torch.Tensor, b: dict, k: int) -> list[torch.Tensor]:
    """The head's predictions when drafting k tokens from every position at once: a list of k
    tensors [B, T - 1, d]; entry j at chain t predicts the feature at t + j + 1 (so x_{t+j+2})."""
    tokens, n = b["tokens"], b["tokens"].shape[1] - 1
    cache = KVCache()
    feat = head.fuse(b["inputs"][:, :-1])  # real features g_0 … g_{T-2}
    preds = []
    for j in range(k):
        # the token after the chain's j-th position: x_{t+j+1} (past the end: any id, masked out later)
        nxt = F.pad(tokens[:, 1 + j :], (0, j))[:, :n]
        mask = None if j == 0 else chain_mask(n, j)
        feat = head(embed[nxt], feat, start=j, cache=cache, mask=mask)
        preds.append(feat)
    return preds


def target_probs(b: dict, w_out: torch.Tensor) -> torch.Tensor:
    """The target's distribution over S at every position of the batch [B, T, S], computed once per
    batch (every unrolled step reads it, shifted)."""
    with torch.no_grad():
        return (b["last"] @ w_out.T).softmax(-1)


def _step_losses(pred: torch.Tensor, j: int, b: dict, w_out: torch.Tensor, p_all: torch.Tensor, ce_weight: float):
    """(loss, agreement) of predictions ``pred`` [B, T-1, d] made for the feature at t + j + 1."""
    n = pred.shape[1]
    target = F.pad(b["last"][:, 1 + j :], (0, 0, 0, j))[:, :n]  # the real feature at t + j + 1
    p_target = F.pad(p_all[:, 1 + j :], (0, 0, 0, j))[:, :n]  # the target's distribution there
    valid = F.pad(b["mask"][:, 1 + j :], (0, j))[:, :n] & b["mask"][:, :n]
    logits = pred @ w_out.T
    loss = F.smooth_l1_loss(pred[valid], target[valid])
    if ce_weight:
        loss = loss + ce_weight * -(p_target * logits.log_softmax(-1)).sum(-1)[valid].mean()
    agree = (logits.argmax(-1) == p_target.argmax(-1))[valid].float().mean().item()
    return loss, agree


def ttt_losses(head: FeatureHead, embed: torch.Tensor, w_out: torch.Tensor, b: dict, ce_weight: float,
               k: int = 3) -> tuple[torch.Tensor, list[float]]:
    """Training-time test: the loss of k unrolled steps (weights DECAY**j) and each step's agreement."""
    p_all = target_probs(b, w_out)
    total, agree = 0.0, []
    for j, pred in enumerate(unrolled(head, embed, b, k)):
        loss, a = _step_losses(pred, j, b, w_out, p_all, ce_weight)
        total = total + DECAY**j * loss
        agree.append(a)
    return total, agree


def two_pass_losses(head: FeatureHead, embed: torch.Tensor, w_out: torch.Tensor, b: dict,
                    ce_weight: float) -> tuple[torch.Tensor, list[float]]:
    """The first recipe: pass 1 on real features, pass 2 on pass 1's (detached) predictions, both
    predicting the feature at t + 1 under a causal mask."""
    emb = embed[b["tokens"][:, 1:]]  # [B, T-1, d]
    real = head.fuse(b["inputs"][:, :-1])
    p_all = target_probs(b, w_out)
    total, agree, pred = 0.0, [], None
    for _ in range(2):
        inputs = real if pred is None else torch.cat([real[:, :1], pred.detach()[:, :-1]], dim=1)
        pred = head(emb, inputs)
        loss, a = _step_losses(pred, 0, b, w_out, p_all, ce_weight)
        total, agree = total + loss, agree + [a]
    return total, agree


@torch.no_grad()
def evaluate(head: FeatureHead, embed: torch.Tensor, w_out: torch.Tensor, valid: Corpus, seq_len: int,
             inputs: str, k: int = 3, batch_size: int = 8) -> list[float]:
    """Greedy agreement with the target at drafting steps 1…k on ``valid``, unrolled as at decoding
    time (the same measurement for every recipe)."""
    sums, count = [0.0] * k, 0
    for i in range(0, len(valid), batch_size):
        b = batch(valid, list(range(i, min(i + batch_size, len(valid)))), seq_len, inputs)
        p_all = target_probs(b, w_out)
        for j, pred in enumerate(unrolled(head, embed, b, k)):
            sums[j] += _step_losses(pred, j, b, w_out, p_all, 0.0)[1]
        count += 1
    return [round(s / count, 4) for s in sums]
