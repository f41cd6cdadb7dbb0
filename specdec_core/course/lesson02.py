"""Checker for lesson 02's exercise: the tutorial's average log-likelihood.

    check_average_log_likelihood(average_log_likelihood)
    # average_log_likelihood(model, ids [1, T], start=1) -> float:
    #   mean of log p(ids[t] | ids[<t]) over t = start..T-1 (start=1: the tutorial, prompt included)
"""

from __future__ import annotations

import torch

from ..naive import average_log_likelihood as reference_average_log_likelihood
from ..toy import tiny_llama
from .checks import Checks

__all__ = ["check_average_log_likelihood", "reference_average_log_likelihood"]


def check_average_log_likelihood(fn) -> None:
    """Test ``fn(model, ids, start=1) -> float`` against :func:`specdec_core.naive.average_log_likelihood`."""
    model = tiny_llama(vocab_size=40, seed=21, logit_scale=3.0)
    gen = torch.Generator().manual_seed(0)
    seqs = [torch.randint(0, 40, (1, n), generator=gen) for n in (9, 14)]
    with Checks("average_log_likelihood") as c:
        got = [c.call(fn, model, ids) for ids in seqs]
        want = [reference_average_log_likelihood(model, ids) for ids in seqs]
        c.expect(
            all(isinstance(g, (float, int)) or (torch.is_tensor(g) and g.numel() == 1) for g in got),
            "it returns one number",
            "return a Python float, e.g. log_likelihood / count or tensor.mean().item()",
        )
        got = [float(g) for g in got]
        c.expect(
            all(g <= 0 for g in got),
            "the score is a log-probability (≤ 0)",
            "use torch.log_softmax(logits, dim=-1), not the raw logits or the softmax probabilities",
        )
        c.expect(
            all(abs(g - w) < 1e-4 for g, w in zip(got, want)),
            "it equals the mean of log p(token t | tokens before t) over t = 1..T-1",
            "row t-1 of the logits predicts token t: average log_probs[0, t-1, ids[0, t]] over t = 1..T-1 "
            f"(divide by T-1). Got {got[0]:.4f}, expected {want[0]:.4f}",
        )
        ids = seqs[1]
        for start in (5, 13):
            g = float(c.call(fn, model, ids, start))
            w = reference_average_log_likelihood(model, ids, start)
            c.expect(
                abs(g - w) < 1e-4,
                f"start={start} scores only tokens {start}..{ids.shape[1] - 1}",
                f"average over t = start..T-1 only (that is how the generated part alone is scored). "
                f"Got {g:.4f}, expected {w:.4f}",
            )
