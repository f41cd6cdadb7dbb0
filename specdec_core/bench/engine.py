"""The engine ladder (lesson 01b): the same greedy AR on one model, from the eager f32 engine up, every rung
timed side by side with the others (interleaved rounds) and set against the memory floor.

    rung            what changes                                              where it can pay
    eager f32       transformers' forward, the dynamic KV cache (a torch.cat a step)
    prepacked f32   oneDNN-prepacked linears (fast.twin)                      CPU
    static f32      a preallocated KV cache and the engine's own mask         both (GPU: what a graph needs)
    static bf16/f16 2-byte weights                                            wherever a step reads weights
    static int8     1-byte weights, torch's int8 kernel                       if the kernel is fast here

A decode step of a small batch reads every weight once, so its time has a floor: the bytes it reads
(``memory.step_bytes``) ÷ the memory bandwidth (``costmodel.bandwidth``). MBU (model bandwidth utilisation)
= floor ÷ the measured time per token: 1 is as fast as reading the weights allows.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import PreTrainedModel

from ..ar import generate
from ..generation import common_prefix
from ..memory import step_bytes
from ..models import Pair
from .harness import Spread, interleaved, noise_band


@dataclass
class Rung:
    """One engine: a name, the model the AR loop runs and what it changes."""

    name: str
    model: PreTrainedModel
    note: str


def rungs(pair: Pair, precisions: Sequence[str] = ("bf16", "f16", "int8")) -> list[Rung]:
    """The ladder for ``pair``'s target on its device (the prepacked rung only where oneDNN runs: a CPU)."""
    out = [Rung("eager f32", pair.plain().target, "transformers' forward, dynamic KV cache")]
    if pair.device.type == "cpu":
        out.append(Rung("prepacked f32", pair.engine("f32", static=False).target, "oneDNN-prepacked linears"))
    out.append(Rung("static f32", pair.engine("f32").target, "preallocated KV cache, the engine's mask"))
    out += [Rung(f"static {p}", pair.engine(p).target, f"{p} weights") for p in precisions]
    return out


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
