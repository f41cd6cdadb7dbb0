"""Greedy exactness on a rounding engine: when may a method's tokens differ from the same engine's AR?

On f32 a forward over n tokens gives each row the logits a one-token forward gives (to about 1e-5), so a speculative
method's greedy output equals AR's token for token. At bf16 or f16 a kernel sums in another order for another number
of rows, so the same position's logits differ a little between a width-1 step and a width-n verify. Where AR's two
best tokens are closer than that, the verify may pick the other one: a rounding of the engine, not a bug of the
method. The rule the course holds a method to on such an engine:

    its greedy output equals the same engine's width-1 AR token for token, or first differs at a position where
    that AR's top-2 margin is below the engine's width drift: the largest |logit(width 1) − logit(width n)|
    measured on held-out text.

    drift = width_drift(engine.target, text_ids, n=5)
    verdict = compare(engine.target, prompt, ar.new_tokens, method.new_tokens, drift)
    verdict.same or verdict.explained          # False: the method changed the output beyond rounding — a bug
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import PreTrainedModel

from .lm import Decoder
from .precision import top2_margin


@torch.inference_mode()
def width_drift(model: PreTrainedModel, ids: torch.Tensor, n: int) -> float:
    """The largest |logit| difference, over the positions of ``ids`` [1, T] and the vocabulary, between reading the
    text one token a forward and ``n`` tokens a forward (both after the same one-token prefill, teacher-forced)."""
    ids = ids.to(model.device)
    total = ids.shape[1]
    one, wide = Decoder(model), Decoder(model)
    one.prefill(ids[:, :1], capacity=total + n)
    wide.prefill(ids[:, :1], capacity=total + n)
    rows_one = torch.cat([one.step(ids[:, t : t + 1]) for t in range(1, total)], dim=1)  # [1, T − 1, V]
    rows_wide = torch.cat([wide.step(ids[:, s : min(s + n, total)]) for s in range(1, total, n)], dim=1)
    return (rows_one.float() - rows_wide.float()).abs().max().item()


@dataclass
class Verdict:
    """How a method's greedy tokens compare with the engine's AR: ``same``, or the ``first`` index where they
    differ, AR's top-2 ``margin`` there, the engine's ``drift``, and whether the margin is below it."""

    same: bool
    drift: float
    first: int | None = None
    margin: float | None = None

    @property
    def explained(self) -> bool:
        """True when the outputs are the same or first differ at a near-tie the engine's rounding can flip."""
        return self.same or (self.margin is not None and self.margin < self.drift)


@torch.inference_mode()
def ar_margins(model: PreTrainedModel, prompt: torch.Tensor, tokens: list[int]) -> list[float]:
    """AR's top-2 margin before each of its ``tokens`` (prefill's last row, then one width-1 step per token)."""
    dec = Decoder(model)
    rows = [dec.prefill(prompt.to(model.device), capacity=prompt.shape[1] + len(tokens))[0, -1]]
    for token in tokens[:-1]:
        rows.append(dec.step(torch.tensor([[token]], device=model.device))[0, -1])
    return top2_margin(torch.stack(rows)).tolist() if rows else []  # one host read for all positions


def compare(model: PreTrainedModel, prompt: torch.Tensor, ar_tokens: list[int], tokens: list[int],
            drift: float) -> Verdict:
    """The rule above for one prompt: ``tokens`` (the method's) against ``ar_tokens`` (the engine's width-1 AR)."""
    first = next((i for i, (a, b) in enumerate(zip(ar_tokens, tokens)) if a != b), None)
    if first is None:  # one is a prefix of the other: the same, or one stopped early without a flipped token
        return Verdict(True, drift) if len(ar_tokens) == len(tokens) else Verdict(False, drift, min(map(len, (ar_tokens, tokens))))
    return Verdict(False, drift, first, ar_margins(model, prompt, ar_tokens[: first + 1])[first])
