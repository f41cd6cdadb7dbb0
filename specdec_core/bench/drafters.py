"""Measuring drafters side by side: α, tokens per target call, c, v, and the speed-up over our AR —
next to what Leviathan's formula S = E(α, γ) / (γc + v) predicts from those measured numbers.

    rows = compare_drafters(pair, {"feature": (load_drafter(pair, "feature"), 4), ...}, prompts)

For each prompt, our AR runs first, then every drafter in turn (interleaved by
:func:`specdec_core.bench.harness.interleaved`, so a slow phase of a shared machine hits them all
alike); one untimed warm-up call each comes before. With ``repeats`` ≥ 2 every prompt runs that many
interleaved rounds: a speed-up is the median over rounds, then over prompts; its min–max over all runs is
kept, and the spread of the same call across rounds gives the comparison's noise band
(:func:`harness.noise_band`), against which each row's ``verdict`` is faster, slower or a tie. All numbers
are medians over prompts. c and v are measured *inside* each speculative run:

    c = (drafting time per drafted token) ÷ (one target decode step)
    v = (time of one verify forward)       ÷ (one target decode step)

with the decode step taken from the AR run on the same prompt (the median time of its tokens after the
first, so the prompt's prefill is not counted as a step).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass

import torch
from transformers import PreTrainedModel

from .. import costmodel, theory
from ..ar import generate as ar_generate
from ..models import Pair, chat_ids
from ..progress import tqdm
from ..records import SpecStats
from ..speculative import speculative_generate
from .harness import Spread, classify, interleaved, noise_band


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
    speedup_lo: float = math.nan  # min–max of the speed-up over every run (prompt × round)
    speedup_hi: float = math.nan
    band: float = math.nan  # the comparison's noise band (NaN: one run each, no verdict)
    prediction: costmodel.Prediction | None = None  # the cost model's S = τ / (d·c + v(n) + o), when given one

    @property
    def verdict(self) -> str:
        """"faster", "slower" or "a tie" with our AR, from the noise band ("single run" without one)."""
        return classify(self.speedup, self.band)

    def as_dict(self) -> dict:
        return asdict(self) | {"verdict": self.verdict}

    def prediction_line(self) -> str:
        """The cost model's prediction beside this row's measured speed-up (the course's one comparison)."""
        if self.prediction is None:
            return "no cost model given: no prediction"
        return self.prediction.line(self.speedup, self.band)


def _costs(stats: SpecStats, step_s: float) -> tuple[float, float]:
    """(c, v) of one speculative run, relative to one target decode step ``step_s``."""
    drafted = sum(len(s.drafted) for s in stats.steps)
    c = stats.draft_time / drafted / step_s if drafted else 0.0
    v = stats.verify_time / stats.target_calls / step_s
    return c, v


@torch.inference_mode()
def compare_drafters(
    pair: Pair,
    drafters: dict,
    prompts: list[str],
    max_new_tokens: int = 64,
    temperature: float = 0.0,
    seed: int = 0,
    repeats: int = 1,
    costs: costmodel.CostModel | None = None,
) -> list[DrafterRow]:
    """``drafters``: name → (drafter, γ). Returns one :class:`DrafterRow` per drafter; ``repeats``
    interleaved rounds per prompt (≥ 2 for a noise band and a verdict). With the machine's ``costs``
    each row also carries the cost model's prediction (:func:`costmodel.predict`, median over prompts)."""
    eos = pair.tokenizer.eos_token_id
    inputs = [chat_ids(pair.tokenizer, p, pair.device) for p in prompts]

    def generator() -> torch.Generator | None:
        return torch.Generator().manual_seed(seed) if temperature > 0 else None  # host: sampled paths draw from a seeded host generator

    def calls(ids: torch.Tensor, n: int) -> dict:
        # the baseline samples at the same temperature; a fresh generator per call
        out = {"ar": lambda: ar_generate(pair.target, ids, n, temperature=temperature, eos_token_id=eos,
                                         generator=generator())}
        for name, (drafter, gamma) in drafters.items():
            out[name] = lambda d=drafter, g=gamma: speculative_generate(
                pair.target, d, ids, n, gamma=g, temperature=temperature, eos_token_id=eos, generator=generator())
        return out

    interleaved(calls(inputs[0], 8), repeats=1, warmup=0)  # warm-up, untimed
    timed = [interleaved(calls(ids, max_new_tokens), repeats=repeats, warmup=0)
             for ids in tqdm(inputs, desc="drafters side by side")]
    tps = {name: [[len(r.result) / r.result.stats.wall_time for r in t[name]] for t in timed]
           for name in ["ar", *drafters]}  # [prompt][round]
    band = noise_band([rounds for per_prompt in tps.values() for rounds in per_prompt])

    rows = []
    med = statistics.median
    for name, (_, gamma) in drafters.items():
        alphas, tpc, ups, cs, vs, preds, same = [], [], [], [], [], [], 0
        for t, ours, base in zip(timed, tps[name], tps["ar"]):
            ar, out = t["ar"][0].result, t[name][0].result  # the first round's outputs and statistics
            times = ar.stats.token_times[1:] or ar.stats.token_times
            c, v = _costs(out.stats, statistics.median(times))
            alphas.append(out.stats.alpha)
            tpc.append(out.stats.tokens_per_call)
            ups.append([a / b for a, b in zip(ours, base)])  # side by side, round by round
            cs.append(c)
            vs.append(v)
            if costs is not None:
                preds.append(costmodel.predict(out.stats, costs))
            same += out.new_tokens == ar.new_tokens
        alpha, c, v = theory.alpha_for_theory(Spread.of(alphas).median), med(cs), med(vs)  # NaN α: nothing examined
        every = [u for rounds in ups for u in rounds]
        rows.append(DrafterRow(name, gamma, temperature, alpha, med(tpc), med(map(med, tps[name])),
                               med(map(med, tps["ar"])), med(map(med, ups)), c, v, theory.speedup(alpha, gamma, c, v),
                               same if temperature == 0 else -1, len(prompts), min(every), max(every), band,
                               costmodel.Prediction.median(preds) if preds else None))
    return rows


@torch.inference_mode()
def acceptance(target: PreTrainedModel, tokenizer, drafter, prompts: list[str], gamma: int, max_new_tokens: int = 64,
               temperature: float = 0.0, seed: int = 0) -> dict:
    """How well ``drafter`` agrees with ``target`` on ``prompts``, untimed: α pooled over every
    examined guess (accepted ÷ examined), α at each draft position, and tokens per target call."""
    pooled = SpecStats()  # every prompt's steps in one record: α over every examined guess
    for prompt in tqdm(prompts, desc="acceptance"):
        gen = torch.Generator().manual_seed(seed) if temperature > 0 else None  # host: sampled paths draw from a seeded host generator
        out = speculative_generate(target, drafter, chat_ids(tokenizer, prompt, target.device), max_new_tokens,
                                   gamma=gamma, temperature=temperature, eos_token_id=tokenizer.eos_token_id,
                                   generator=gen)
        pooled.steps += out.stats.steps
        pooled.new_tokens, pooled.target_calls = pooled.new_tokens + len(out), pooled.target_calls + out.stats.target_calls
    return {"alpha": 0.0 if math.isnan(pooled.alpha) else pooled.alpha, "tokens_per_call": pooled.tokens_per_call,
            "alpha_per_position": [None if math.isnan(a) else round(a, 4) for a in pooled.alpha_per_position],
            "gamma": gamma, "temperature": temperature, "prompts": len(prompts), "max_new_tokens": max_new_tokens}


def gamma_sweep(pair: Pair, drafter, prompt: str, gammas: list[int], max_new_tokens: int = 48,
                temperature: float = 0.0, repeats: int = 1,
                costs: costmodel.CostModel | None = None) -> list[DrafterRow]:
    """The same drafter at several γ on one prompt: the measured speed-up curve, next to theory's."""
    return compare_drafters(pair, {f"γ={g}": (drafter, g) for g in gammas}, [prompt], max_new_tokens, temperature,
                            repeats=repeats, costs=costs)


def table(rows: list[DrafterRow]) -> str:
    """A Markdown table of the rows."""
    head = ("| drafter | γ | T | α | tokens/call | tok/s | AR tok/s | speed-up (min–max) | verdict | c | v | "
            "Leviathan S (α, c, v) | cost model S (τ, d·c, v(n), o) | same as AR |")
    lines = [head, "|" + "---|" * 14]
    for r in rows:
        same = f"{r.same_as_ar}/{r.prompts}" if r.same_as_ar >= 0 else "n/a (sampled)"
        spread = f" ({r.speedup_lo:.2f}–{r.speedup_hi:.2f})" if r.speedup_lo < r.speedup_hi else ""
        model = f"{r.prediction.speedup:.2f}×" if r.prediction is not None else "–"
        lines.append(f"| {r.name} | {r.gamma} | {r.temperature:g} | {r.alpha:.2f} | {r.tokens_per_call:.2f} | "
                     f"{r.tokens_per_s:.1f} | {r.ar_tokens_per_s:.1f} | {r.speedup:.2f}×{spread} | {r.verdict} | "
                     f"{r.c:.3f} | {r.v:.2f} | {r.predicted:.2f}× | {model} | {same} |")
    return "\n".join(lines)


@dataclass
class Point:
    """One speculative run next to the AR baseline on the same prompt (lesson 03's widget)."""

    gamma: int
    temperature: float
    alpha: float
    tokens_per_call: float
    measured_speedup: float  # AR wall time ÷ speculative wall time, same prompt and length
    predicted_speedup: float  # E(α, γ) / (γc + v) with the measured α, c, v


def speedup_point(
    target: PreTrainedModel,
    drafter,
    input_ids: torch.Tensor,
    gamma: int,
    temperature: float,
    c: float,
    v: theory.VerifyCost,
    ar_seconds_per_token: float,
    max_new_tokens: int = 32,
    seed: int = 0,
) -> Point:
    """Run speculative decoding once and put the measurement next to Leviathan's prediction from
    the draft's cost ``c`` and the verify cost ``v`` (a number or the machine's v(n), e.g.
    ``costmodel.CostModel.v``)."""
    gen = torch.Generator().manual_seed(seed)  # host: sampled paths draw from a seeded host generator
    out = speculative_generate(target, drafter, input_ids, max_new_tokens, gamma=gamma, temperature=temperature,
                               generator=gen)
    alpha = out.stats.alpha
    measured = ar_seconds_per_token * len(out) / out.stats.wall_time if len(out) else float("nan")
    return Point(gamma, temperature, alpha, out.stats.tokens_per_call, measured,
                 theory.speedup(theory.alpha_for_theory(alpha), gamma, c, v))
