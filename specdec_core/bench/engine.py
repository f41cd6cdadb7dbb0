"""The engine ladder (lesson 01b): the same greedy AR on one model, from the eager f32 engine up, every rung
timed side by side with the others (interleaved rounds) and set against the memory floor.

    rung            what changes                                              where it can pay
    eager f32       transformers' forward, the dynamic KV cache (a torch.cat a step)
    prepacked f32   oneDNN-prepacked linears (fast.twin)                      CPU
    static f32      a preallocated KV cache and the engine's own mask         both (GPU: what a graph needs)
    static bf16/f16 2-byte weights                                            wherever a step reads weights
    static int8     1-byte weights, torch's int8 kernel                       if the kernel is fast here

A decode step of a small batch reads every weight once, so its time has a floor: the bytes it reads
(``memory.step_bytes``) ÷ the memory bandwidth (``machine.bandwidth``: one figure per machine). MBU (model bandwidth utilisation)
= floor ÷ the measured time per token: 1 is as fast as reading the weights allows.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from functools import partial

import torch
from transformers import PreTrainedModel

from .. import engines
from ..ar import generate
from ..generation import common_prefix
from ..memory import step_bytes
from ..models import Pair
from ..width_drift import compare, width_drift
from .harness import Spread, interleaved, noise_band


@dataclass
class Rung:
    """One engine: a name, the model the AR loop runs and what it changes."""

    name: str
    model: PreTrainedModel
    note: str


NOTES = {"eager f32": "transformers' forward, dynamic KV cache", "prepacked f32": "oneDNN-prepacked linears",
         "static f32": "preallocated KV cache, the engine's mask", "static bf16": "bf16 weights (prepacked where oneDNN takes them)",
         "static f16": "f16 weights", "static int8": "int8 weights, torch's int8 kernel",
         "static int8-bf16": "int8 weights on bf16 rows"}


def rungs(pair: Pair, names: Sequence[str] = engines.CANDIDATES) -> list[Rung]:
    """The ladder for ``pair``'s target on its device: the candidate engines of ``specdec_core.engines`` (the
    prepacked rung only where oneDNN runs: a CPU)."""
    return [Rung(name, engines.on_engine(pair, name).target, NOTES[name]) for name in names
            if name != "prepacked f32" or pair.device.type == "cpu"]


def decode_seconds(gen) -> float:
    """Seconds per token after the first (the prefill's token): the decode step the ladder compares."""
    times = gen.stats.token_times[1:]
    return sum(times) / len(times) if times else float("nan")


def measure(ladder: Sequence[Rung], prompts: Sequence[torch.Tensor], max_new_tokens: int, bandwidth: float,
            repeats: int = 3, on_call=None) -> list[dict]:
    """Every rung on every prompt, ``repeats`` interleaved rounds (after one untimed warm-up round). Per rung:
    tokens/s (median, min–max), the speed-up over the first rung measured pair by pair in the same round,
    MBU, and how many greedy tokens equal the first rung's (a rung that rounds differently may drift)."""
    calls = {f"{r.name}|{i}": (lambda m=r.model, ids=ids: generate(m, ids, max_new_tokens))
             for r in ladder for i, ids in enumerate(prompts)}
    runs = interleaved(calls, repeats=repeats, warmup=1, on_call=on_call)
    base = ladder[0].name
    rows = []
    for rung in ladder:
        mine = [runs[f"{rung.name}|{i}"] for i in range(len(prompts))]
        ref = [runs[f"{base}|{i}"] for i in range(len(prompts))]
        secs = [[decode_seconds(r.result) for r in group] for group in mine]
        ratios = [decode_seconds(b.result) / decode_seconds(a.result)
                  for group, refs in zip(mine, ref) for a, b in zip(group, refs)]
        floor = step_bytes(rung.model) / bandwidth
        same = sum(common_prefix(g[0].result.new_tokens, r[0].result.new_tokens) for g, r in zip(mine, ref))
        rows.append({
            "rung": rung.name, "note": rung.note,
            "tokens_per_s": Spread.of([1 / s for group in secs for s in group]),
            "speedup": Spread.of(ratios), "band": noise_band(secs),
            "ms_per_token": 1e3 * statistics.median(s for group in secs for s in group),
            "floor_ms": 1e3 * floor, "mbu": floor / statistics.median(s for group in secs for s in group),
            "step_mb": step_bytes(rung.model) / 1e6,
            "same_tokens": same, "tokens": sum(len(r[0].result.new_tokens) for r in ref),
        })
    return rows


# ---- the benchmark's engine rows ----------------------------------------------------------------

OURS_EXACT = ("spec", "spec_self", "spec_feature", "spec_best", "tree", "tree_lookup", "tree_feature", "lookup", "jacobi",
              "lookahead", "lookahead_prompt")  # our greedy methods whose output is the target's own


def engine_rows(pair: Pair, registry: dict, rows: list[dict], inputs: Sequence[torch.Tensor], max_new_tokens: int,
                repeats: int, engine: Pair, name: str, log=print, on_call=None) -> dict:
    """The benchmark's second phase: our AR (``pair``, the main table's engine), AR on ``engine`` (the speculation
    engine, called ``name``) and the best of our exact methods of the first phase (``rows``) on that engine,
    interleaved on the same prompts. Gains are per-prompt medians of tokens/s ratios: the engine's (engine AR ÷ our
    AR), the method's on the engine (÷ engine AR), and both together (÷ our AR)."""
    best = None
    for row in sorted((r for r in rows if r["name"] in OURS_EXACT), key=lambda r: -r["ratio_to_ar"]):
        method = registry[row["name"]]
        try:  # a method may not run at this precision (a drafter with f32 weights on bf16 features)
            if method.prepare is not None:
                method.prepare(engine)
            method.fn(engine, inputs[0], min(max_new_tokens, 16))
            best = row["name"]
            break
        except Exception as err:  # noqa: BLE001 — left out with the reason, the next best is tried
            log(f"{row['name']} does not run on {name} and is left out: {type(err).__name__}: {err}")
    plan = {"ar": (pair, registry["ar"].fn), "ar on the engine": (engine, registry["ar"].fn)}
    if best:
        plan[f"{best} on the engine"] = (engine, registry[best].fn)
    tps: dict[str, list[list[float]]] = {name: [] for name in plan}
    verdicts = []
    for ids in inputs:
        calls = {key: partial(fn, p, ids, max_new_tokens) for key, (p, fn) in plan.items()}
        runs = interleaved(calls, repeats=repeats, warmup=1, device=pair.device, on_call=on_call)
        for key in plan:
            tps[key].append([r.tokens_per_s for r in runs[key]])
        if best:
            verdicts.append((ids, runs["ar on the engine"][-1].result.new_tokens,
                             runs[f"{best} on the engine"][-1].result.new_tokens))
    exact = exactness_on_engine(engine, verdicts) if best else {}

    def gain(a: str, b: str) -> dict:
        return asdict(Spread.of([statistics.median(x) / statistics.median(y) for x, y in zip(tps[a], tps[b])]))

    out = {"engine": name, "method": best, "band": noise_band([g for v in tps.values() for g in v]),
           "engine_gain": gain("ar on the engine", "ar"), "prompts": len(inputs)}
    if best:
        out |= {"method_gain": gain(f"{best} on the engine", "ar on the engine"),
                "together": gain(f"{best} on the engine", "ar"), **exact}
    return out


def exactness_on_engine(engine: Pair, outputs: Sequence[tuple[torch.Tensor, list[int], list[int]]]) -> dict:
    """The engine rule for greedy exactness (``width_drift``) over (prompt, engine AR's tokens, method's tokens):
    how many prompts match fully, and how many of the others first differ at a near-tie the engine's width
    rounding can flip (AR's top-2 margin below the drift, measured on held-out text at widths 2, 5 and 9)."""
    same = sum(ar == got for _, ar, got in outputs)
    out = {"same_as_engine_ar": same, "explained_by_rounding": 0, "width_drift": None}
    if same < len(outputs):
        text = engines.heldout_ids(engine.tokenizer, 64)
        drift = max(width_drift(engine.target, text, n) for n in (2, 5, 9))
        out |= {"width_drift": drift, "explained_by_rounding": sum(
            compare(engine.target, ids, ar, got, drift).explained for ids, ar, got in outputs if ar != got)}
    return out
