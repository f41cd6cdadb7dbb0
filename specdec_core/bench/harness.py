"""The one timing harness of the course: warm-up, interleaving, repeats, medians and spread.

Every comparison (the benchmark, drafters side by side, quantized variants, base vs CLLM) times its
calls with :func:`interleaved`:

- **warm-up** calls run first, untimed (lazy initialisation, allocator growth and kernel selection
  would otherwise land in the first measurement);
- then ``repeats`` **rounds**; each round runs every call once, in turn, so a slow phase of a shared
  machine hits all of them alike (interleaving), and the ratio of two calls is measured side by side;
- the device is **synchronised** around every timer (a GPU runs asynchronously: without it a timer
  measures how long it took to *queue* the work);
- results are summarised by their **median** with the **min–max** spread (:class:`Spread`): one slow
  run on a shared machine moves the median little, and the spread says how much runs differ.

``measure_latency_and_memory`` — the function the source tutorial calls but never defines — is the
same harness on one call, with the memory probe of :mod:`specdec_core.bench.probes`.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from ..generation import Generation, Timer
from ..memory import MB
from .probes import memory_probe

Call = Callable[[], Generation]


@dataclass(frozen=True)
class Spread:
    """Median and min–max of ``n`` measurements (NaNs dropped; all NaN → NaN and n = 0)."""

    median: float
    lo: float
    hi: float
    n: int

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        finite = [float(v) for v in values if v is not None and not math.isnan(v)]
        if not finite:
            return cls(math.nan, math.nan, math.nan, 0)
        return cls(statistics.median(finite), min(finite), max(finite), len(finite))

    def __str__(self) -> str:
        return f"{self.median:.3g} ({self.lo:.3g}–{self.hi:.3g}, n={self.n})"


def noise_band(samples: Sequence[Sequence[float]]) -> float:
    """The run-to-run noise of this machine: for each group of repeated measurements of the SAME call
    (same method, same prompt, interleaved), its relative spread (max − min) ÷ median; the median over
    the groups. NaN when no group has two measurements (a single run says nothing about noise)."""
    spreads = [(max(g) - min(g)) / statistics.median(g) for g in samples if len(g) >= 2 and statistics.median(g) > 0]
    return statistics.median(spreads) if spreads else math.nan


def classify(ratio: float, band: float) -> str:
    """A measured speed ratio (method ÷ baseline, > 1 is faster) as "faster", "slower" or "a tie":
    outside 1 ± ``band`` (:func:`noise_band`) it is a difference, inside it is noise. With no
    measured band (NaN: a single run) there is no verdict: "single run"."""
    if math.isnan(band) or math.isnan(ratio):
        return "single run"
    return "faster" if ratio > 1 + band else "slower" if ratio < 1 - band else "a tie"


@dataclass
class Run:
    """One timed call: wall seconds (device synchronised), its result, and — when measured — the
    memory probe's peak during the call and its value just before (bytes)."""

    seconds: float
    result: Generation
    peak_memory_bytes: int | None = None
    memory_before_bytes: int | None = None

    @property
    def tokens_per_s(self) -> float:
        return len(self.result.new_tokens) / self.seconds if self.seconds > 0 else math.nan


def interleaved(
    calls: dict[str, Call],
    *,
    repeats: int = 3,
    warmup: int = 1,
    device: torch.device | str | None = None,
    memory: bool = False,
    on_call: Callable[[str], None] | None = None,
) -> dict[str, list[Run]]:
    """Run every call ``warmup`` times untimed, then ``repeats`` interleaved rounds; returns the runs
    of each call in order. ``memory``: record the memory probe around each call. ``on_call(name)``
    is told before each timed call (for a progress bar)."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    if warmup < 0:
        raise ValueError(f"warmup must be >= 0, got {warmup}")
    for _ in range(warmup):
        for fn in calls.values():
            fn()
    runs: dict[str, list[Run]] = {name: [] for name in calls}
    for _ in range(repeats):
        for name, fn in calls.items():
            if on_call is not None:
                on_call(name)
            probe = memory_probe(device) if memory else None
            before = probe.start() if probe else None
            with Timer(device) as t:
                result = fn()
            if not isinstance(result, Generation):
                raise TypeError(f"{name}() must return a Generation, got {type(result).__name__}")
            runs[name].append(Run(t.seconds, result, probe.peak() if probe else None, before))
    return runs


@dataclass
class Measurement:
    """What :func:`measure_latency_and_memory` returns. Times in seconds, memory in bytes.

    latency:       median wall time of one ``fn()`` call (``spread``: median, min, max)
    tokens_per_s:  median over repeats of new tokens ÷ wall time of that call
    ttft:          median time to first token (``Generation.stats.ttft``), None if fn doesn't report it
    peak_memory:   the memory probe's peak over the runs (``memory_kind`` says which probe): the WHOLE
                   process, every model it holds; one method alone: :mod:`specdec_core.bench.fresh`
    """

    latency: float
    tokens_per_s: float
    ttft: float | None
    new_tokens: int
    peak_memory_bytes: int
    memory_before_bytes: int
    memory_kind: str
    latencies: list[float] = field(default_factory=list)
    result: Generation | None = None

    @property
    def spread(self) -> Spread:
        return Spread.of(self.latencies)

    @property
    def peak_memory_mb(self) -> float:
        return self.peak_memory_bytes / MB

    @property
    def added_memory_mb(self) -> float:
        """What the runs added on top of the memory in use before them (MB)."""
        return (self.peak_memory_bytes - self.memory_before_bytes) / MB

    def __str__(self) -> str:
        ttft = f"{self.ttft * 1e3:.0f} ms" if self.ttft is not None else "n/a"
        s = self.spread
        return (
            f"{self.latency:.2f} s (median of {s.n}, {s.lo:.2f}–{s.hi:.2f}), {self.tokens_per_s:.1f} tokens/s, "
            f"TTFT {ttft}, {self.new_tokens} tokens, {self.memory_kind} of the whole process {self.peak_memory_mb:,.0f} MB"
        )


def measurement(runs: list[Run], device: torch.device | str | None = None) -> Measurement:
    """The runs of one call (with memory recorded) as a :class:`Measurement`."""
    ttfts = [float(r.result.stats.ttft) for r in runs if hasattr(r.result.stats, "ttft")]
    return Measurement(
        latency=statistics.median(r.seconds for r in runs),
        tokens_per_s=statistics.median(r.tokens_per_s for r in runs),
        ttft=statistics.median(ttfts) if ttfts else None,
        new_tokens=len(runs[-1].result.new_tokens),
        peak_memory_bytes=max(r.peak_memory_bytes for r in runs),
        memory_before_bytes=runs[0].memory_before_bytes,
        memory_kind=memory_probe(device).kind,
        latencies=[r.seconds for r in runs],
        result=runs[-1].result,
    )


def measure_latency_and_memory(
    fn: Call,
    *,
    warmup: int = 1,
    repeats: int = 3,
    device: torch.device | str | None = None,
) -> Measurement:
    """Time ``fn()`` (which returns a :class:`Generation`) and record peak memory: ``warmup`` untimed
    calls, then ``repeats`` timed ones with the device synchronised around each; medians.
    ``device``: where the work runs (None: CUDA if available, else CPU); it picks the memory probe."""
    return measurement(interleaved({"fn": fn}, repeats=repeats, warmup=warmup, device=device, memory=True)["fn"], device)
