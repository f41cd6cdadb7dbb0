"""The machine's cost model, measured once and reused: what a forward costs here, as a function of n.

    cm = costmodel.load_or_measure(pair.target, "offline target", drafters={"feature": drafter})
    cm.step_s        one decode step of the target: the AR loop's time per token (``ar.generate``, back to back)
    cm.v(n)          a forward over n new tokens ÷ one step (v(1) = 1); speculation verifies n = γ + 1
    cm.v(n, tree=True)  the same forward with an explicit 4-D mask and positions (token trees, lookahead)
    cm.overhead_s    the loop's own cost per step (accept test, cache crop, host syncs, Python), measured
                     by a verify-only loop beside the bare forwards it runs
    cm.c["feature"]  a drafter's time per guess ÷ one step, inside a speculative run (warp, draw, bookkeeping)
    cm.bandwidth     the machine's bytes/s (``machine.bandwidth``: one read-only stream, measured once per
                     machine): weight bytes ÷ bandwidth is the floor of a step (a memory-bound forward reads
                     every weight once — the roofline's flat part)

How v(n) is timed is how the methods run (:func:`forward_times`): n ∈ :data:`NS` new tokens on caches
of :data:`CONTEXTS` tokens, a causal forward and a tree-masked one for every n, the n in a shuffled order
each round, the cache growing by one kept token after each verify and cropped back, and — when a draft
model is given — one draft forward before each (its weights then compete for the CPU caches, as in a
run). v(n) is the median over rounds and contexts of each forward ÷ the one-token forward of the same
round and context. Past the largest measured n, v raises: a forward nobody timed has no price.

Machines differ a lot (docs/reference.md#why-a-cpu-differs), so every number is measured on the machine
it is used on. A measurement is cached as JSON under ``$SPECDEC_CACHE/costmodel/``, keyed by the CPU,
the thread count, torch's version, the model, the forward engine and this file's version; any change
measures again. It is never cached under ``SPECDEC_QUICK``, in CI, or from tests running in parallel:
a v(n) measured while another process competes for the cores must never be stored as the truth.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import statistics
import time
from dataclasses import asdict, dataclass, field

import torch
from filelock import FileLock
from transformers import PreTrainedModel

from . import machine, theory
from .assets import cache_dir
from .fast import is_twin
from .files import write_json
from .generation import Timer, synchronize
from .lm import Decoder
from .memory import weight_bytes
from .records import SpecStep

VERSION = 3  # bump when the way of measuring changes: cached models are then measured again
NS = (1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 24, 32, 48, 64)  # new tokens per forward
CONTEXTS = (64, 256, 512)  # tokens already in the cache: a prompt's worth, a long answer, a long chat
AR_TOKENS = 48  # tokens of the AR runs that time the step (the first few of each are a warm-up)


@dataclass
class CostModel:
    """Measured costs of one model on one machine (seconds; ratios to one decode step)."""

    key: dict
    step_s: float
    v_by_n: dict[int, float]
    step_spread: tuple[float, float]  # min, max of the AR loop's steps (s)
    bandwidth: float  # bytes/s of reading memory on this machine (machine.bandwidth)
    weight_bytes: int
    c: dict[str, float] = field(default_factory=dict)
    v_tree_by_n: dict[int, float] = field(default_factory=dict)  # the same forwards with a 4-D tree mask
    overhead_s: float = 0.0  # the loop's own seconds per step, beyond its forward (verify-only loop)
    v_by_context: dict[int, dict[int, float]] = field(default_factory=dict)  # context → causal v(n) there

    def v(self, n: int, tree: bool = False) -> float:
        """v(n): measured where measured, linear between the nearest measured n; an n past the largest
        measured one raises. ``tree``: the forward with an explicit mask and positions."""
        table = self.v_tree_by_n if tree and self.v_tree_by_n else self.v_by_n
        return _interpolate(table, n)

    @property
    def overhead(self) -> float:
        """o: the loop's own cost per step ÷ one step."""
        return self.overhead_s / self.step_s

    @property
    def floor_s(self) -> float:
        """The memory floor of one step: every weight byte read once at the measured bandwidth."""
        return self.weight_bytes / self.bandwidth

    def as_json(self) -> dict:
        out = asdict(self)
        for name in ("v_by_n", "v_tree_by_n"):
            out[name] = {str(n): v for n, v in out[name].items()}
        out["v_by_context"] = {str(k): {str(n): v for n, v in t.items()} for k, t in self.v_by_context.items()}
        return out

    @classmethod
    def from_json(cls, data: dict) -> CostModel:
        data = dict(data)
        for name in ("v_by_n", "v_tree_by_n"):
            data[name] = {int(n): v for n, v in data.get(name, {}).items()}
        data["v_by_context"] = {int(k): {int(n): v for n, v in t.items()} for k, t in data.get("v_by_context", {}).items()}
        data["step_spread"] = tuple(data["step_spread"])
        return cls(**data)


def _interpolate(table: dict[int, float], n: int) -> float:
    """table[n] where measured, else linear between the nearest measured n; outside the range: an error."""
    if n in table:
        return table[n]
    ns = sorted(table)
    if not ns or n < ns[0] or n > ns[-1]:
        raise ValueError(f"v({n}): this cost model measured n in {ns[0]}..{ns[-1]} only; a wider forward was never "
                         "timed here (measure it: costmodel.measure(..., ns=...) with that n)")
    lo = max(m for m in ns if m < n)
    hi = min(m for m in ns if m > n)
    return table[lo] + (table[hi] - table[lo]) * (n - lo) / (hi - lo)


def machine_key(model: PreTrainedModel, model_name: str, engine: str | None = None, ns=None, contexts=None) -> dict:
    """What a measurement depends on: change any of it and the model is measured again."""
    device = next(model.parameters()).device
    here = machine.key(device)
    return {"cpu": here["cpu"], "threads": here["threads"], "torch": here["torch"], "model": model_name,
            "weight_bytes": weight_bytes(model), "engine": engine or engine_of(model),
            "device": str(device), "version": VERSION, "ns": list(ns or NS), "contexts": list(contexts or CONTEXTS)}


def engine_of(model: PreTrainedModel) -> str:
    """How the model's forwards run: eager PyTorch or prepacked oneDNN linears (``fast.twin``), its weights'
    precision (int8 when ``precision.Int8Linear`` layers hold them) and its KV cache (static or dynamic)."""
    dtype = next(model.parameters()).dtype
    weights = "int8" if any(type(m).__name__ == "Int8Linear" for m in model.modules()) else str(dtype)
    cache = "static" if getattr(model, "static_engine", False) else "dynamic"
    return f"{'prepacked oneDNN' if is_twin(model) else 'eager'} {weights}, {cache} cache"


may_cache = machine.may_cache  # the one rule for every per-machine measurement


def tree_shape(n: int, device: torch.device | str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """A tree of n nodes to time the masked forward with: a binary tree filled breadth-first (node i's
    parent is (i − 1) // 2; node 0 is the root). Returns (depths [n], mask bool [n, n]: node i sees its
    ancestors and itself). Its shape hardly matters to the cost — the mask path is what is timed. Built on
    the host, returned on ``device`` (the model's: the timed forward then copies nothing)."""
    parents = [-1] + [(i - 1) // 2 for i in range(1, n)]
    depth, mask = [0] * n, torch.eye(n, dtype=torch.bool)  # host: n row updates, one copy to the device below
    for i in range(1, n):
        depth[i] = depth[parents[i]] + 1
        mask[i] |= mask[parents[i]]
    return torch.tensor(depth, device=device), mask.to(device)


@torch.inference_mode()
def forward_times(model: PreTrainedModel, ns=NS, contexts=CONTEXTS, repeats: int = 5, seed: int = 0,
                  draft: PreTrainedModel | None = None) -> dict[tuple[str, int, int], list[float]]:
    """Seconds of each forward as a method runs it: ``(kind, context, n)`` → ``repeats`` times, kind
    "causal" (``Decoder.step``) or "tree" (``Decoder.step_masked`` with :func:`tree_shape`'s mask and
    positions context + depth). Per context: prefill, then round by round (one untimed warm-up round
    first) every (kind, n) in a shuffled order; after each forward one token is kept (the cache grows as
    in a run) and the rest cropped; each round starts again from the context. ``draft``: one draft
    forward before each timed one, so the two models' weights compete for the caches as in a run."""
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)  # host: one seed, the same ids on every device
    grow = 2 * len(ns)
    ids = torch.randint(0, model.config.vocab_size, (1, max(contexts) + grow + max(ns)),  # host: drawn from gen
                        generator=gen).to(model.device)
    decoder, helper = Decoder(model), Decoder(draft) if draft is not None else None
    times: dict[tuple[str, int, int], list[float]] = {(k, c, n): [] for c in contexts for k in ("causal", "tree") for n in ns}
    for context in contexts:
        decoder.prefill(ids[:, :context])
        if helper is not None:
            helper.prefill(ids[:, :context])
        shapes = {n: tree_shape(n, model.device) for n in ns}
        for round_ in range(repeats + 1):
            decoder.rollback(context)
            order = [(k, n) for k in ("causal", "tree") for n in ns]
            rng.shuffle(order)
            for kind, n in order:
                length = decoder.length
                new = ids[:, length : length + n]
                if helper is not None:
                    helper.rollback(min(helper.length, length))
                    helper.step(ids[:, helper.length : length + 1])
                with Timer(model.device) as t:
                    if kind == "causal":
                        decoder.step(new)
                    else:
                        depth, mask = shapes[n]
                        decoder.step_masked(new, length + depth, mask)
                decoder.rollback(length + 1)  # one token kept, as a verify keeps at least one
                if round_:
                    times[(kind, context, n)].append(t.seconds)
    return times


def ratios(times: dict[tuple[str, int, int], list[float]], kind: str, context: int | None = None) -> dict[int, float]:
    """v(n) from :func:`forward_times`: the median, over rounds (and contexts unless ``context``), of each
    forward ÷ the one-token causal forward of the same round and context."""
    out: dict[int, list[float]] = {}
    for (k, c, n), ts in times.items():
        if k == kind and (context is None or c == context):
            out.setdefault(n, []).extend(t / one for t, one in zip(ts, times[("causal", c, 1)]))
    return {n: 1.0 if kind == "causal" and n == 1 else statistics.median(r) for n, r in sorted(out.items())}


OVERHEAD_STEPS = 24  # verify-only steps timed for the loop's overhead o (4 in a quick look)


@torch.inference_mode()
def loop_overhead(model: PreTrainedModel, gamma: int = 3, context: int = CONTEXTS[0], steps: int = OVERHEAD_STEPS,
                  seed: int = 0) -> float:
    """o, the loop's own seconds per step: a verify-only speculative loop (fixed guesses, no drafter:
    write the guesses into the id buffer, one forward over γ + 1 tokens, the greedy accept test with its
    host sync, the cache crop, the bookkeeping) timed step by step, interleaved with the same bare forward
    on the same cache; the median of (loop step − bare forward), never below 0."""
    from .accept import verify_greedy

    gen = torch.Generator().manual_seed(seed)  # host: one seed, the same ids on every device
    total = context + 2 * steps * (gamma + 1) + gamma + 1
    ids = torch.randint(0, model.config.vocab_size, (1, total), generator=gen).to(model.device)  # host: drawn from gen
    decoder = Decoder(model)
    decoder.prefill(ids[:, :context])
    loop, bare = [], []
    for i in range(steps + 1):
        length = decoder.length
        with Timer(model.device) as t_bare:
            decoder.step(ids[:, length : length + gamma + 1])
        decoder.rollback(length)
        start = time.perf_counter()
        guesses = ids[0, length + 1 : length + 1 + gamma].clone()
        ids[0, length + 1 : length + 1 + gamma] = guesses
        synchronize(model.device)
        logits = decoder.step(ids[:, length : length + gamma + 1])[0]
        n, token, kind = verify_greedy(guesses, logits)
        decoder.rollback(length + 1)  # keep one token, whatever was accepted: the loop's work, not its luck
        record = SpecStep(guesses.tolist(), n, token, kind, gamma)
        _ = record.drafted[:n] + [record.next]
        synchronize(model.device)
        if i:
            loop.append(time.perf_counter() - start)
            bare.append(t_bare.seconds)
    return max(0.0, statistics.median(lp - b for lp, b in zip(loop, bare)))


def ar_step_times(model: PreTrainedModel, context: int = CONTEXTS[0], tokens: int = AR_TOKENS, runs: int = 3,
                  seed: int = 0) -> list[float]:
    """Seconds per token of the AR loop itself (``ar.generate``, greedy, one forward per token, back to back) on
    a random prompt of ``context`` tokens, ``runs`` runs after one warm-up run: the step every cost is a ratio of,
    on the engine and precision the methods run on (the model as given). The prefill is not a step."""
    from .ar import generate

    gen = torch.Generator().manual_seed(seed)  # host: one seed, the same ids on every device
    ids = torch.randint(0, model.config.vocab_size, (1, context), generator=gen).to(model.device)  # host: from gen
    generate(model, ids, 8)  # warm-up
    return [t for _ in range(runs) for t in generate(model, ids, tokens).stats.token_times[1:]]


def drafter_cost(target: PreTrainedModel, drafter, input_ids: torch.Tensor, step_s: float, gamma: int = 2,
                 max_new_tokens: int = 32) -> float:
    """c of a drafter in run conditions: its drafting time per guess inside a greedy speculative run
    (warp, draw and bookkeeping included) ÷ one target step ``step_s``."""
    from .speculative import speculative_generate

    speculative_generate(target, drafter, input_ids, 8, gamma=gamma)  # warm-up
    stats = speculative_generate(target, drafter, input_ids, max_new_tokens, gamma=gamma).stats
    drafted = sum(len(s.drafted) for s in stats.steps)
    return stats.draft_time / drafted / step_s if drafted else 0.0


def measure(target: PreTrainedModel, model_name: str, drafters: dict | None = None,
            input_ids: torch.Tensor | None = None, engine: str | None = None, repeats: int = 5,
            contexts=CONTEXTS, ns=NS, overhead_steps: int = OVERHEAD_STEPS) -> CostModel:
    """Measure the cost model of ``target`` here (``drafters``: name → drafter, measured on ``input_ids``;
    the first model drafter's forwards are interleaved with the target's, see :func:`forward_times`;
    ``overhead_steps``: verify-only steps timed for the loop's overhead o, :func:`loop_overhead`)."""
    draft = next((d.decoder.model for d in (drafters or {}).values() if hasattr(d, "decoder")), None)
    times = forward_times(target, ns=ns, contexts=contexts, repeats=repeats, draft=draft)
    ones = ar_step_times(target, contexts[0], runs=max(1, min(repeats, 3)))  # the step the AR loop runs
    step = statistics.median(ones)
    costs = CostModel(machine_key(target, model_name, engine, ns, contexts), step, ratios(times, "causal"),
                      (min(ones), max(ones)), machine.bandwidth(target.device), weight_bytes(target),
                      v_tree_by_n=ratios(times, "tree"), overhead_s=loop_overhead(target, steps=overhead_steps),
                      v_by_context={c: ratios(times, "causal", c) for c in contexts})
    for name, drafter in (drafters or {}).items():
        costs.c[name] = drafter_cost(target, drafter, _needs(input_ids), step)
    return costs


@dataclass
class Prediction:
    """A run's speed-up over AR predicted from its own numbers: S = τ / (d·c + v(n) + o) (theory.py)."""

    tokens_per_call: float  # τ, measured in the run
    draft: float  # d·c: the run's drafting seconds per step ÷ one step
    v: float  # the cost model's v(n), averaged over the run's verify widths n
    overhead: float  # o: the loop's own cost per step ÷ one step (verify-only calibration)
    speedup: float

    def verdict(self, measured: float, band: float) -> str:
        """Whether ``measured`` lies within the run's noise ``band`` of the prediction."""
        if math.isnan(band) or math.isnan(measured):
            return "single run"
        ratio = measured / self.speedup
        return "within the noise band" if abs(ratio - 1) <= band else (
            "outside: over-predicted" if ratio < 1 else "outside: under-predicted")

    @classmethod
    def median(cls, predictions: list[Prediction]) -> Prediction:
        """The median of each term and of S over several calls of one method (one row of a table)."""
        return cls(*(statistics.median(getattr(p, f) for p in predictions)
                     for f in ("tokens_per_call", "draft", "v", "overhead", "speedup")))

    def line(self, measured: float, band: float) -> str:
        """The one comparison every lesson and the bench print."""
        return (f"predicted {self.speedup:.2f}× = τ {self.tokens_per_call:.2f} ÷ (d·c {self.draft:.2f} + v {self.v:.2f} "
                f"+ o {self.overhead:.2f}); measured {measured:.2f}× — {self.verdict(measured, band)} (±{band:.0%})")


def predict(stats, costs: CostModel, tree: bool = False) -> Prediction:
    """The prediction for one speculative (or tree, or lookahead) run from its record ``stats``: its τ, its
    drafting time per step, and v at each step's verify width (``stats.verify_widths`` where the method
    records them, else γ + 1 per step: a chain's verify is γ + 1 wide, padded or not), priced by ``costs``."""
    widths = getattr(stats, "verify_widths", None) or [s.gamma + 1 for s in stats.steps]
    draft = getattr(stats, "draft_time", 0.0) / max(len(widths), 1) / costs.step_s
    v = statistics.fmean(costs.v(n, tree=tree) for n in widths) if widths else 1.0
    tau = stats.tokens_per_call
    return Prediction(tau, draft, v, costs.overhead, theory.predicted_speedup(tau, draft, v, costs.overhead))


def cache_path(key: dict):
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return cache_dir() / "costmodel" / f"{digest}.json"


def load_or_measure(target: PreTrainedModel, model_name: str, drafters: dict | None = None,
                    input_ids: torch.Tensor | None = None, engine: str | None = None,
                    refresh: bool = False, repeats: int = 5, ns=None, contexts=None) -> CostModel:
    """The cached cost model of ``target`` on this machine, measured first if there is none for its
    key (or it lacks a drafter asked for, or ``refresh``). A fresh measurement is stored only when
    :func:`may_cache` allows it; the file is written atomically, under a lock. ``repeats``: timed
    rounds of a fresh measurement (fewer for a quick look, which is never cached anyway); ``ns`` and
    ``contexts``: a smaller measured set for a slow model (the key records it)."""
    ns, contexts = tuple(ns or NS), tuple(contexts or CONTEXTS)
    key = machine_key(target, model_name, engine, ns, contexts)
    path = cache_path(key)
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock"):
        cached = CostModel.from_json(json.loads(path.read_text())) if path.exists() and not refresh else None
        if cached is not None and cached.key == key:
            missing = {k: d for k, d in (drafters or {}).items() if k not in cached.c}
            if not missing:
                return cached
            costs = cached  # only the new drafters need measuring, against the cached step
            for name, drafter in missing.items():
                costs.c[name] = drafter_cost(target, drafter, _needs(input_ids), costs.step_s)
        else:
            quick = os.environ.get("SPECDEC_QUICK") == "1"  # a quick look, never stored: 1 round, 1 context
            costs = measure(target, model_name, drafters, input_ids, engine, 1 if quick else repeats,
                            contexts[:1] if quick else contexts, ns, overhead_steps=4 if quick else OVERHEAD_STEPS)
        if may_cache():
            write_json(costs.as_json(), path, indent=1)
        return costs


def _needs(input_ids: torch.Tensor | None) -> torch.Tensor:
    if input_ids is None:
        raise ValueError("measuring a drafter's c needs input_ids (a prompt to draft on)")
    return input_ids
