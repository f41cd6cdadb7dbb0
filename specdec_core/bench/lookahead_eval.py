"""Lesson 07b's numbers: lookahead shapes swept on one prompt (untimed: τ, hits and widths, priced by the
cost model), and the side-by-side rows of ``make bench-lookahead``'s reports."""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from pathlib import Path

import torch

from ..costmodel import CostModel
from ..lookahead import lookahead_generate

CATEGORIES = ("chat", "copy", "code")
NAMES = ("jacobi", "lookup", "lookahead", "lookahead_prompt", "jf_ar", "jacobi_forcing", "lookahead_jf")


def sweep(model, input_ids: torch.Tensor, shapes: Sequence[tuple[int, int, int]], max_new_tokens: int,
          costs: CostModel, eos_token_id=None, seeded: Sequence[bool] = (False, True), progress=None) -> tuple[dict, list[dict]]:
    """Greedy lookahead at each shape, with and without the prompt's n-grams: (runs keyed (W, N, G, seeded),
    rows with τ, pool hits, mean width and the predicted S = τ / (v_tree(width) + o + host))."""
    runs, rows = {}, []
    for shape in shapes:
        for seed_pool in seeded:
            gen = lookahead_generate(model, input_ids, max_new_tokens, shape=shape, prompt_ngrams=seed_pool,
                                     eos_token_id=eos_token_id)
            runs[(*shape, seed_pool)] = gen
            s = gen.stats
            v = statistics.fmean(costs.v(x, tree=True) for x in s.verify_widths)
            host = s.draft_time / s.target_calls / costs.step_s
            rows.append({"shape": shape, "seeded": seed_pool, "tau": gen.tokens_per_call, "hits": s.pool_hits,
                         "steps": s.target_calls, "width": statistics.fmean(s.verify_widths), "v": v,
                         "predicted": gen.tokens_per_call / (v + costs.overhead + host), "tokens": gen.new_tokens})
            if progress is not None:
                progress.update()
    return runs, rows


def load_reports(folder: Path, preset: str = "offline", categories: Sequence[str] = CATEGORIES) -> dict[str, dict]:
    """``make bench-lookahead``'s reports that exist, by category."""
    out = {}
    for category in categories:
        path = folder / f"cpu-{preset}-{category}.json"
        if path.exists():
            out[category] = json.loads(path.read_text())
    return out


def chosen_shapes(report: dict, name: str) -> list:
    """The shapes a method's timed calls ran with (the one "auto" chose on the warm-up)."""
    return sorted({tuple(r["shape"]) for p in report["prompts"] for r in p["runs"].get(name, []) if r.get("shape")})


def own_baseline_ratio(report: dict, name: str, baseline: str) -> float | None:
    """Median over prompts of (method's tokens/s ÷ baseline's tokens/s), both medians over repeats in the
    same interleaved run: a fine-tune against its own AR."""
    ratios = []
    for p in report["prompts"]:
        if name in p["runs"] and baseline in p["runs"]:
            a = statistics.median(r["tokens_per_s"] for r in p["runs"][name])
            b = statistics.median(r["tokens_per_s"] for r in p["runs"][baseline])
            ratios.append(a / b)
    return statistics.median(ratios) if ratios else None
