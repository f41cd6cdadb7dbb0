"""Continuous batching: requests arrive while others decode, and a finished row's slot is refilled at the next step.

    result = run_load(pair.engine(), prompts, rate=2.0, slots=4, mode="on", gamma=3, seed=0, max_new_tokens=64)
    result.median_ttft, result.median_tpot, result.throughput      # s, s per token, tokens/s

The server's loop, one step at a time (vLLM's scheduler without pages or chunks):

    1. admit     the requests that have arrived take the free slots, first come first served
    2. γ         0 (mode "off"), a fixed γ ("on") or a policy's choice from the live rows ("adaptive")
    3. one step  SpecBatch.step: a newcomer's whole prompt rides in the same verify forward as the other
                 rows' decode windows (ragged, the short rows padded), so its prefill costs no extra step
    4. the clock moves on by the step's time; each token the step emitted is stamped with it; a row that
       finished frees its slot, which step 1 refills next time

The clock is simulated, driven by the measured step times: ``now`` advances by each step's duration (the run's
:class:`~specdec_core.generation.Clock`, marked around the whole iteration: admission, the step, the bookkeeping),
and while no row is live it jumps to the next arrival instead of sleeping. Why not the wall clock: between
steps an idle server only waits, so a wall clock would give the same stamps plus a sleep's jitter, and would
spend the low rates of a sweep asleep (32 requests at 0.5 per second: a minute, nearly all of it idle). The
admission rule is a real server's that looks at its queue between steps. ``step_time`` replaces the measurement
(a cost model's price of each step, a constant in a test): the same loop then predicts a load point, repeatably.
On a GPU the step's end mark is an event recorded just after the step's one read, so reading it waits for no
queued work.

Per request (vLLM's definitions): TTFT = its first token's stamp − its arrival (time in the queue included),
TPOT = (last stamp − first) / (tokens − 1). Per run: throughput = tokens / (last stamp − first arrival).
"""

from __future__ import annotations

import math
import random
import statistics
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch
from transformers import PreTrainedModel

from .batch import Prompts, batch_rows
from .batch_speculative import GammaPolicy, SpecBatch, check_gamma, observe, step_gamma
from .drafters import Drafter, ModelDrafter
from .generation import Clock, Output
from .sampling import Warp

MODES = ("off", "on", "adaptive")


def poisson_arrivals(n: int, rate: float, seed: int) -> list[float]:
    """n arrival times (s, increasing) of a Poisson process of ``rate`` requests per second: independent
    exponential gaps of mean 1 / rate, the first after one gap. The same seed gives the same times."""
    check_rate(rate)
    draw, t, times = random.Random(seed), 0.0, []
    for _ in range(n):
        t += draw.expovariate(rate)
        times.append(t)
    return times


def check_rate(rate: float) -> None:
    if not rate > 0 or math.isinf(rate):
        raise ValueError(f"rate must be a finite number of requests per second > 0, got {rate!r}")


@dataclass
class Request:
    """One request of a run: its prompt, when it arrived and was admitted (s, on the run's clock), its output
    tokens and the time each one was emitted (a step's tokens share its stamp)."""

    prompt: list[int]
    arrival: float
    admitted: float = math.nan
    tokens: list[int] = field(default_factory=list)
    stamps: list[float] = field(default_factory=list)

    @property
    def ttft(self) -> float:
        """Time to first token (s): from the arrival, so the time spent queued for a slot counts."""
        return self.stamps[0] - self.arrival if self.stamps else math.nan

    @property
    def tpot(self) -> float:
        """Time per output token after the first (s); nan for a single token."""
        return (self.stamps[-1] - self.stamps[0]) / (len(self.stamps) - 1) if len(self.stamps) > 1 else math.nan


@dataclass(frozen=True)
class StepShape:
    """What one step ran, for ``step_time`` and the record: ``rows`` live, of which ``joined`` newcomers (their
    ``prefill`` prompt tokens ride in the verify forward), the step's ``gamma``, and ``width`` tokens per row in
    the verify forward (γ + 1, more when a newcomer's prompt rides in it)."""

    rows: int
    joined: int
    prefill: int
    gamma: int
    width: int


@dataclass
class LoadStep:
    """One step of a run: its shape, its duration (s), the clock after it (s) and the tokens it emitted."""

    shape: StepShape
    seconds: float
    end: float
    emitted: int


@dataclass
class LoadResult:
    """A run of :func:`run_load`. Per request, in arrival order: ``arrivals``, ``waits`` (queued for a slot),
    ``ttft``, ``tpot`` (s) and the output ``tokens``. Per run: its ``steps``, the guesses ``drafted`` and
    ``accepted``, ``makespan`` (first arrival → last token, s), ``throughput`` (tokens/s) and the medians of
    TTFT and TPOT (s; requests of one token have no TPOT). ``clock``: "measured", or "step_time" when the
    run's steps were priced by the given function."""

    mode: str
    rate: float
    slots: int
    gamma: int | str
    seed: int
    clock: str
    arrivals: list[float]
    waits: list[float]
    ttft: list[float]
    tpot: list[float]
    tokens: list[list[int]]
    steps: list[LoadStep]
    drafted: int
    accepted: int
    makespan: float = math.nan
    throughput: float = math.nan
    median_ttft: float = math.nan
    median_tpot: float = math.nan

    def __post_init__(self) -> None:
        done = sum(len(t) for t in self.tokens)
        self.makespan = (self.steps[-1].end - min(self.arrivals)) if self.steps else 0.0
        self.throughput = done / self.makespan if self.makespan > 0 else math.nan
        self.median_ttft = median(self.ttft)
        self.median_tpot = median(self.tpot)


def median(values: Iterable[float]) -> float:
    kept = [v for v in values if not math.isnan(v)]
    return statistics.median(kept) if kept else math.nan


def target_and_drafter(models, mode: str) -> tuple[PreTrainedModel, Drafter | None]:
    """A pair (``.target``, ``.draft``: the draft model drafts) or (target, drafter) with the drafter a
    ``ModelDrafter``, an ``NGramDrafter``, a draft model, or None; mode "off" drafts nothing."""
    if hasattr(models, "target") and hasattr(models, "draft"):
        target, drafter = models.target, models.draft
    elif isinstance(models, tuple | list) and len(models) == 2:
        target, drafter = models
    else:
        raise TypeError(f"models must be a pair (pair.engine(...)) or (target, drafter), got {type(models).__name__}")
    if mode == "off":
        return target, None
    if drafter is None:
        raise ValueError(f"mode {mode!r} drafts: give (target, drafter) a drafter, or run mode 'off'")
    return target, ModelDrafter(drafter) if isinstance(drafter, PreTrainedModel) else drafter


def check_mode(mode: str, gamma: int | GammaPolicy | None) -> None:
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES} (speculation off, on at a fixed γ, adaptive), got {mode!r}")
    if mode == "off" and gamma not in (None, 0):
        raise ValueError(f"mode 'off' drafts nothing: leave gamma out (got {gamma!r}), or run mode 'on'")
    if mode == "on" and (isinstance(gamma, bool) or not isinstance(gamma, int) or gamma < 1):
        raise ValueError(f"mode 'on' speculates at a fixed γ: gamma must be an int >= 1, got {gamma!r} "
                         "(a policy: mode 'adaptive')")
    if mode == "adaptive" and (isinstance(gamma, int) or not callable(gamma)):
        raise ValueError(f"mode 'adaptive' asks a policy for each step's γ (policy(batch) -> int), got {gamma!r} "
                         "(a fixed γ: mode 'on')")
    if gamma is not None:
        check_gamma(gamma)


@torch.inference_mode()
def run_load(
    models,
    prompts: Prompts,
    rate: float,
    slots: int,
    mode: str = "off",
    gamma: int | GammaPolicy | None = None,
    seed: int = 0,
    *,
    max_new_tokens: int = 64,
    temperature: float = 0.0,
    top_k: int | None = None,
    top_p: float | None = None,
    eos_token_id: int | Iterable[int] | None = None,
    step_time: Callable[[StepShape], float] | None = None,
) -> LoadResult:
    """Serve ``prompts`` (one request each, in order) arriving at seeded Poisson times of ``rate`` requests per
    second, on ``slots`` rows of one batch, up to ``max_new_tokens`` each (the module docstring).

    ``models``: a pair on the static engine (``pair.engine()``; its draft model drafts) or (target, drafter).
    ``mode``: "off" (γ = 0, plain batched AR), "on" (``gamma`` an int >= 1) or "adaptive" (``gamma`` a
    :class:`~specdec_core.batch_speculative.GammaPolicy`, asked before each step with the live rows and told
    what each step drafted and accepted). ``seed`` draws the arrivals; sampled runs (``temperature`` > 0) draw
    request i's tokens from a generator seeded ``seed * 1_000_003 + i``. ``step_time``: a function of the
    step's :class:`StepShape` that prices each step instead of measuring it."""
    check_mode(mode, gamma)
    check_rate(rate)
    if isinstance(slots, bool) or not isinstance(slots, int) or slots < 1:
        raise ValueError(f"slots (rows of the batch) must be an int >= 1, got {slots!r}")
    target, drafter = target_and_drafter(models, mode)
    rows = batch_rows(target, prompts, max_new_tokens)  # row i = request i: empty, too long, not static: clear errors
    requests = [Request(r.tolist(), t) for r, t in zip(rows, poisson_arrivals(len(rows), rate, seed))]
    state = SpecBatch(target, drafter, slots, max(r.numel() for r in rows) + max_new_tokens,
                      Warp(temperature, top_k, top_p), [None] * slots)
    owner: list[int | None] = [None] * slots  # the request in each slot
    outs: list[Output | None] = [None] * slots
    queue, clock, now, steps = deque(range(len(requests))), Clock(target.device), 0.0, []
    drafted = accepted = 0
    while queue or any(i is not None for i in owner):
        if all(i is None for i in owner) and requests[queue[0]].arrival > now:
            now = requests[queue[0]].arrival  # idle: the clock jumps to the next arrival
        start, joined = clock.mark(), []
        for b in range(slots):  # 1. the arrived requests take the free slots, first come first served
            if owner[b] is None and queue and requests[queue[0]].arrival <= now:
                owner[b] = i = queue.popleft()
                joined.append(len(requests[i].prompt))
                generator = torch.Generator(target.device).manual_seed(seed * 1_000_003 + i) if temperature else None
                state.admit(b, requests[i].prompt, generator)
                outs[b], requests[i].admitted = Output(max_new_tokens, eos_token_id), now
        live = [i is not None for i in owner]
        g = 0 if mode == "off" else step_gamma(gamma, sum(live))  # 2. the step's γ
        done = state.step([min(g, out.left) if on else 0 for out, on in zip(outs, live)], g, live, clock)  # 3.
        drafted += sum(len(s.drafted) for s in done if s is not None)
        accepted += sum(s.accepted for s in done if s is not None)
        emitted = {b: outs[b].emit(s.drafted[: s.accepted] + [s.next]) for b, s in enumerate(done) if s is not None}
        shape = StepShape(sum(live), len(joined), sum(joined), g, state.width)
        seconds = step_time(shape) if step_time is not None else clock.seconds(start, clock.mark())
        observe(gamma, done, None if joined else seconds)  # a policy reads a decode step's time (no prefill in it)
        now += seconds  # 4. the clock, the stamps, the freed slots
        steps.append(LoadStep(shape, seconds, now, sum(len(t) for t in emitted.values())))
        for b, tokens in emitted.items():
            request = requests[owner[b]]
            request.tokens += tokens
            request.stamps += [now] * len(tokens)
            if outs[b].done:
                owner[b] = outs[b] = None  # refilled at the next step
    return LoadResult(mode, rate, slots, type(gamma).__name__ if callable(gamma) else gamma or 0, seed,
                      "measured" if step_time is None else "step_time", [r.arrival for r in requests],
                      [r.admitted - r.arrival for r in requests], [r.ttft for r in requests], [r.tpot for r in requests],
                      [r.tokens for r in requests], steps, drafted, accepted)
