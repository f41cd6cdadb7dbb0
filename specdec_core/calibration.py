"""How far a drafter's own probability can be trusted: its reliability curve and expected calibration error.

EAGLE-2's dynamic tree (:func:`specdec_core.tree_drafters.dynamic_tree`) grows where the draft's
cumulative probability is high, reading q as the chance that the target accepts a guess. That ranking
is only as good as the draft's *calibration*: of the guesses the draft gave probability ≈ 0.8, about
80 % should be accepted. Sort the (q, accepted?) pairs of many verifies into bins of q:

    confidence_b = mean q of the pairs in bin b       accept_b = share of them the target accepted
    ECE = Σ_b (n_b / N) · |accept_b − confidence_b|       (Guo et al. 2017; 0 for a calibrated draft)

A calibrated draft lies on the diagonal; an over-confident one below it (q says 0.9, the target takes
half). Ranking by q needs less than calibration — only that a higher q means a likelier acceptance
(a curve that rises) — but a calibrated q also makes the tree's score an estimate of τ.

    pairs = calibration_pairs(target, drafter, prompts_ids, 48)   # greedy tree runs, untimed
    curve = reliability(pairs, bins=10)                           # curve.ece, curve.accept_rate, …
    viz.calibration.reliability_plot(curve)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch
from transformers import PreTrainedModel

from .tree import tree_generate


@dataclass
class Reliability:
    """A reliability curve over ``bins`` equal bins of q in [0, 1]: for bin b (edges[b] ≤ q < edges[b + 1],
    the last bin closed), ``counts[b]`` pairs, their mean q ``confidence[b]`` and the share accepted
    ``accept_rate[b]`` (both None for an empty bin); ``ece`` the expected calibration error, ``total`` N."""

    edges: list[float]
    counts: list[int]
    confidence: list[float | None]
    accept_rate: list[float | None]
    ece: float
    total: int

    @property
    def gaps(self) -> list[float | None]:
        """accept_rate − confidence per bin: negative where the draft is over-confident."""
        return [None if a is None else a - c for a, c in zip(self.accept_rate, self.confidence)]


def reliability(pairs: Iterable[tuple[float, bool]], bins: int = 10) -> Reliability:
    """The reliability curve and the ECE of (draft probability q ∈ [0, 1], accepted?) pairs (module docstring).
    No pairs: every bin empty and ECE nan."""
    if bins < 1:
        raise ValueError(f"bins must be >= 1, got {bins}")
    sums, hits, counts = [0.0] * bins, [0] * bins, [0] * bins
    for q, accepted in pairs:
        q = float(q)
        if not 0.0 <= q <= 1.0:
            raise ValueError(f"a draft probability must lie in [0, 1], got {q}")
        b = min(int(q * bins), bins - 1)  # q = 1 falls in the last bin
        sums[b] += q
        hits[b] += bool(accepted)
        counts[b] += 1
    total = sum(counts)
    confidence = [s / n if n else None for s, n in zip(sums, counts)]
    accept = [h / n if n else None for h, n in zip(hits, counts)]
    ece = sum(n / total * abs(a - c) for n, a, c in zip(counts, accept, confidence) if n) if total else float("nan")
    return Reliability([b / bins for b in range(bins + 1)], counts, confidence, accept, ece, total)


@torch.inference_mode()
def calibration_pairs(target: PreTrainedModel, drafter, prompts: Sequence[torch.Tensor], max_new_tokens: int = 48,
                      shape=(3, 2, 1), eos_token_id: int | None = None) -> list[tuple[float, bool]]:
    """(q, accepted?) for every node the greedy verify tested (the children of the root and of each accepted
    node) in greedy token-tree runs (``tree_generate``, untimed) of ``drafter`` (a ``FeatureDrafter``, or any
    drafter with a ``calibration`` list it fills in ``accepted_path``) on each of ``prompts`` ([1, T] ids). q:
    the draft's probability of the node's token given its parent (temperature 1, what the dynamic tree ranks
    by); accepted: the node's token is the target's argmax there."""
    if not hasattr(drafter, "calibration"):
        raise TypeError(f"{type(drafter).__name__} records no calibration pairs: use a FeatureDrafter")
    pairs: list[tuple[float, bool]] = []
    before = drafter.calibration
    try:
        for ids in prompts:
            drafter.calibration = []
            tree_generate(target, drafter, ids, max_new_tokens, shape=shape, eos_token_id=eos_token_id)
            pairs.extend(drafter.calibration)
    finally:
        drafter.calibration = before
    return pairs


def pair_calibration(pair, texts: Sequence[str], drafter=None, max_new_tokens: int = 48, shape=(3, 2, 1)
                     ) -> list[tuple[float, bool]]:
    """:func:`calibration_pairs` on a model pair's chat prompts (e.g. ``prompts.HELDOUT``), with the
    pair's shipped feature head unless ``drafter`` is given."""
    from .models import chat_ids, load_drafter

    drafter = drafter if drafter is not None else load_drafter(pair, "feature")
    ids = [chat_ids(pair.tokenizer, text, pair.device) for text in texts]
    return calibration_pairs(pair.target, drafter, ids, max_new_tokens, shape, pair.tokenizer.eos_token_id)
