"""Measuring drafters side by side: α, tokens per target call, c, v, and the speed-up over our AR —
next to what Leviathan's formula S = E(α, γ) / (γc + v) predicts from those measured numbers.

    rows = compare_drafters(pair, {"feature": (load_drafter(pair, "feature"), 4), ...}, prompts)

For each prompt, our AR runs first, then every drafter in turn (interleaved by
:func:`specdec_core.bench.harness.interleaved`, so a slow phase of a shared machine hits them all
alike); one untimed warm-up call each comes before. All numbers are
medians over prompts. c and v are measured *inside* each speculative run:

    c = (drafting time per drafted token) ÷ (one target decode step)
    v = (time of one verify forward)       ÷ (one target decode step)

with the decode step taken from the AR run on the same prompt (the median time of its tokens after the
first, so the prompt's prefill is not counted as a step).
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass

import torch
from tqdm.auto import tqdm

from .. import theory
from ..ar import generate as ar_generate
from ..models import Pair, chat_ids
from ..speculative import speculative_generate
from .harness import Spread, interleaved


@dataclass
class DrafterRow:
    """One drafter at one γ and temperature; every number a median over prompts."""

    name: str
    gamma: int
    temperature: float
    alpha: float
    tokens_per_call: float
    tokens_per_s: float
    ar_tokens_per_s: float
    speedup: float  # AR wall time ÷ speculative wall time for the same number of tokens
    c: float
    v: float
    predicted: float  # E(α, γ) / (γc + v) with this row's α, c, v
    same_as_ar: int  # prompts whose output equals AR's exactly (greedy only)
    prompts: int

    def as_dict(self) -> dict:
        return asdict(self)


def _costs(stats: dict, step_s: float) -> tuple[float, float]:
    """(c, v) of one speculative run, relative to one target decode step ``step_s``."""
    drafted = sum(len(s["drafted"]) for s in stats["steps"])
    c = stats["draft_time"] / drafted / step_s if drafted else 0.0
    v = stats["verify_time"] / stats["target_calls"] / step_s
    return c, v


@torch.inference_mode()
def compare_drafters(
    pair: Pair,
    drafters: dict,
    prompts: list[str],
    max_new_tokens: int = 64,
    temperature: float = 0.0,
    seed: int = 0,
) -> list[DrafterRow]:
    """``drafters``: name → (drafter, γ). Returns one :class:`DrafterRow` per drafter."""
    eos = pair.tokenizer.eos_token_id
    inputs = [chat_ids(pair.tokenizer, p, pair.device) for p in prompts]
    runs = {name: [] for name in drafters}
    ar_runs = []

    def generator() -> torch.Generator | None:
        return torch.Generator().manual_seed(seed) if temperature > 0 else None

    def calls(ids: torch.Tensor, n: int) -> dict:
        # the baseline samples at the same temperature; a fresh generator per call
        out = {"ar": lambda: ar_generate(pair.target, ids, n, temperature=temperature, eos_token_id=eos,
                                         generator=generator())}
        for name, (drafter, gamma) in drafters.items():
            out[name] = lambda d=drafter, g=gamma: speculative_generate(
                pair.target, d, ids, n, gamma=g, temperature=temperature, eos_token_id=eos, generator=generator())
        return out

    interleaved(calls(inputs[0], 8), repeats=1, warmup=0)  # warm-up, untimed
    for ids in tqdm(inputs, desc="drafters side by side"):
        timed = interleaved(calls(ids, max_new_tokens), repeats=1, warmup=0)
        ar_runs.append(timed["ar"][0].result)
        for name in drafters:
            runs[name].append(timed[name][0].result)

    rows = []
    med = statistics.median
    for name, (_, gamma) in drafters.items():
        alphas, tpc, tps, ar_tps, ups, cs, vs, same = [], [], [], [], [], [], [], 0
        for ar, out in zip(ar_runs, runs[name]):
            times = ar.stats["token_times"][1:] or ar.stats["token_times"]
            step = statistics.median(times)
            c, v = _costs(out.stats, step)
            alphas.append(out.stats["alpha"])
            tpc.append(out.stats["tokens_per_call"])
            tps.append(len(out) / out.stats["wall_time"])
            ar_tps.append(len(ar) / ar.stats["wall_time"])
            ups.append(tps[-1] / ar_tps[-1])
            cs.append(c)
            vs.append(v)
            same += out.new_tokens == ar.new_tokens
        alpha, c, v = theory.alpha_for_theory(Spread.of(alphas).median), med(cs), med(vs)  # NaN α: nothing examined
        rows.append(DrafterRow(name, gamma, temperature, alpha, med(tpc), med(tps), med(ar_tps), med(ups), c, v,
                               theory.speedup(alpha, gamma, c, v), same if temperature == 0 else -1, len(prompts)))
    return rows


def gamma_sweep(pair: Pair, drafter, prompt: str, gammas: list[int], max_new_tokens: int = 48,
                temperature: float = 0.0) -> list[DrafterRow]:
    """The same drafter at several γ on one prompt: the measured speed-up curve, next to theory's."""
    return compare_drafters(pair, {f"γ={g}": (drafter, g) for g in gammas}, [prompt], max_new_tokens, temperature)


def table(rows: list[DrafterRow]) -> str:
    """A Markdown table of the rows."""
    head = "| drafter | γ | T | α | tokens/call | tok/s | AR tok/s | speed-up | c | v | predicted S | same as AR |"
    lines = [head, "|" + "---|" * 12]
    for r in rows:
        same = f"{r.same_as_ar}/{r.prompts}" if r.same_as_ar >= 0 else "n/a (sampled)"
        lines.append(f"| {r.name} | {r.gamma} | {r.temperature:g} | {r.alpha:.2f} | {r.tokens_per_call:.2f} | "
                     f"{r.tokens_per_s:.1f} | {r.ar_tokens_per_s:.1f} | {r.speedup:.2f}× | {r.c:.3f} | {r.v:.2f} | "
                     f"{r.predicted:.2f}× | {same} |")
    return "\n".join(lines)
