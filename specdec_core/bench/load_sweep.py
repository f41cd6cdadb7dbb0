"""The load sweep of ``make serving`` (the report's ``load`` entry, lesson 10 section 4): requests arriving at a few
rates, served by continuous batching (``scheduler.run_load``) with speculation off, on at a fixed γ, and adaptive.

    load = sweep(target, draft, prompts, costs, alpha0, capacity=ar_tokens_per_s, slots=8)
    load["rows"]   # per (rate, mode): median TTFT and TPOT (s), throughput (tokens/s), requests, γ

The rates are fractions of batched AR's capacity at ``slots`` rows (its summed tokens/s ÷ tokens a request), so
the lowest leaves the batch mostly empty and the highest keeps every slot busy, whatever the machine. Each
rate runs its three modes back to back on the same seeded arrivals, so they see the same load. The clock is the
scheduler's (each step's measured time; ``step_time`` prices the steps instead, for tests).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from transformers import PreTrainedModel

from ..load_costs import AdaptiveGamma, LoadCosts
from ..progress import tqdm
from ..scheduler import MODES, StepShape, run_load

FRACTIONS = (0.25, 0.6, 1.2)  # of batched AR's capacity: light, busy, over-full
SLOTS = 8
REQUESTS = 16
QUICK = {"fractions": (0.5, 1.2), "slots": 2, "requests": 3, "max_new_tokens": 4}


def rates(capacity: float, max_new_tokens: int, fractions: Sequence[float] = FRACTIONS) -> list[float]:
    """Requests per second at each fraction of the capacity: ``capacity`` summed tokens/s ÷ ``max_new_tokens``."""
    if not capacity > 0 or max_new_tokens < 1 or not fractions or min(fractions) <= 0:
        raise ValueError(f"the load sweep needs a capacity > 0 tokens/s, max_new_tokens >= 1 and fractions > 0, "
                         f"got {capacity}, {max_new_tokens}, {list(fractions)} (run the batch sweep first)")
    return [f * capacity / max_new_tokens for f in fractions]


def sweep(target: PreTrainedModel, draft: PreTrainedModel, prompts: Sequence[torch.Tensor], costs: LoadCosts,
          alpha0: float, capacity: float, *, gamma: int = 2, slots: int = SLOTS, requests: int = REQUESTS,
          max_new_tokens: int = 32, fractions: Sequence[float] = FRACTIONS, seed: int = 0,
          step_time: Callable[[StepShape], float] | None = None, progress: bool = True) -> dict:
    """The report's ``load`` entry (module docstring): ``requests`` prompts ([1, Tᵢ], cycled) per rate and mode,
    ``slots`` rows, greedy, up to ``max_new_tokens`` each; adaptive γ is a fresh ``AdaptiveGamma(costs, alpha0)``
    per run. ``capacity``: batched AR's summed tokens/s at ``slots`` rows."""
    if slots > max(costs.batches):
        raise ValueError(f"slots = {slots} but the cost table stops at B = {max(costs.batches)}: adaptive γ prices "
                         "every live B, so measure the batch sweep up to the slots (or use fewer slots)")
    if not prompts or requests < 1:
        raise ValueError("the load sweep needs at least one prompt and one request")
    queue = [prompts[i % len(prompts)] for i in range(requests)]
    per_second = rates(capacity, max_new_tokens, fractions)
    bar = tqdm(total=len(per_second) * len(MODES), desc="load sweep", disable=not progress)
    rows = []
    for rate in per_second:
        for mode in MODES:
            g = None if mode == "off" else gamma if mode == "on" else AdaptiveGamma(costs, alpha0)
            run = run_load((target, draft), queue, rate, slots, mode, g, seed, max_new_tokens=max_new_tokens,
                           step_time=step_time)
            rows.append({"rate": rate, "mode": mode, "gamma": run.gamma, "median_ttft": run.median_ttft,
                         "median_tpot": run.median_tpot, "throughput": run.throughput,
                         "requests": requests})
            bar.update(1)
    bar.close()
    return {"rows": rows, "slots": slots, "requests": requests, "max_new_tokens": max_new_tokens, "gamma": gamma,
            "fractions": list(fractions), "capacity": capacity, "seed": seed}


def from_batch_sweep(results: dict, target: PreTrainedModel, draft: PreTrainedModel, prompts: Sequence[torch.Tensor],
                     quick: bool = False, progress: bool = True) -> dict:
    """:func:`sweep` set from the batch sweep's own results (``bench.serving.sweep``): its cost table, its α0,
    and batched AR's measured tokens/s at the slots (at most the largest B measured) as the capacity."""
    kw = dict(QUICK) if quick else {}
    slots = min(kw.pop("slots", SLOTS), max(r["batch"] for r in results["ar"]))
    at = max((r for r in results["ar"] if r["batch"] <= slots), key=lambda r: r["batch"])
    return sweep(target, draft, prompts, LoadCosts.from_json(results["costs"]), results["settings"]["alpha0"],
                 at["tokens_per_s"]["median"], slots=slots, progress=progress, **kw)
