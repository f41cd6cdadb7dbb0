"""What every decoding method shares: the result type, the output a loop emits into (:class:`Output`:
the budget and EOS), the common prefix of two token sequences, and the clocks that time a run
(:class:`Clock`: events on a GPU, read at the end) and a block (:class:`Timer`).

``stats.target_calls`` means one thing for every method, ours and transformers': the target
forwards that emit at least one token. AR: one per token (the prefill emits the first). Speculative
and assisted generation: one per verify step (a prefill that emits nothing is not counted;
transformers' first assisted forward prefills and verifies at once, and counts). Jacobi: one per
iteration. So ``tokens_per_call`` = new tokens ÷ target calls is 1 for AR and the gain elsewhere
(:mod:`specdec_core.records` holds every method's record).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import torch

from .records import RunStats


@dataclass
class Generation:
    """What a generation function returns.

    new_tokens: the generated token ids, prompt excluded (a plain list of ints).
    text:       ``tokenizer.decode(new_tokens)`` when a tokenizer was given, else ``None``.
    stats:      the run's record (:mod:`specdec_core.records`): ``wall_time`` (s), ``target_calls`` (target
                forwards that emit a token, see the module docstring) and the method family's own fields.
    """

    new_tokens: list[int]
    text: str | None = None
    stats: RunStats = field(default_factory=RunStats)

    def __post_init__(self) -> None:
        if not isinstance(self.stats, RunStats):
            raise TypeError(f"Generation.stats must be a record of specdec_core.records (e.g. RunStats(wall_time=…, "
                            f"target_calls=…)), not {type(self.stats).__name__}")
        self.stats.new_tokens = len(self.new_tokens)

    def __len__(self) -> int:
        return len(self.new_tokens)

    @property
    def tokens_per_second(self) -> float:
        wall = self.stats.wall_time
        return len(self.new_tokens) / wall if wall > 0 else float("nan")

    @property
    def tokens_per_call(self) -> float:
        """New tokens ÷ target calls (:func:`~specdec_core.records.tokens_per_call`)."""
        return self.stats.tokens_per_call


class Output:
    """The tokens a decoding loop emits, up to its budget and right after the first EOS (kept, as
    transformers does). Every method's loop ends the same way:

        out = Output(max_new_tokens, eos_token_id)
        while not out.done:
            ... a step that yields tokens [t1, t2, …] ...
            out.emit(tokens)        # the ones that fit: stops at the budget or after an EOS
    """

    def __init__(self, max_new_tokens: int, eos_token_id: int | Iterable[int] | None = None) -> None:
        self.budget, self.stops = max_new_tokens, eos_set(eos_token_id)
        self.tokens: list[int] = []

    @property
    def left(self) -> int:
        """Tokens the budget still allows."""
        return self.budget - len(self.tokens)

    @property
    def done(self) -> bool:
        return self.left <= 0 or bool(self.tokens and self.tokens[-1] in self.stops)

    def emit(self, tokens: Iterable[int]) -> list[int]:
        """Append ``tokens`` in order until the budget is spent or an EOS was appended; returns those appended."""
        taken = []
        for token in tokens:
            if self.done:
                break
            self.tokens.append(int(token))
            taken.append(int(token))
        return taken


def eos_set(eos_token_id: int | Iterable[int] | None) -> set[int]:
    """Normalise an EOS argument (None, one id or several) to a set of ids."""
    if eos_token_id is None:
        return set()
    if isinstance(eos_token_id, int):
        return {eos_token_id}
    return {int(t) for t in eos_token_id}


def common_prefix(a: Sequence[int] | torch.Tensor, b: Sequence[int] | torch.Tensor) -> int:
    """Length of the longest common prefix of two token sequences (lists or 1-D tensors).

    Equivalently the first position where they differ, or the shorter length if one is a prefix of
    the other. The course's one helper for it: drift of a fine-tune, Jacobi's correct prefix, ...
    """
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        n = min(a.numel(), b.numel())
        differ = (a.reshape(-1)[:n] != b.reshape(-1)[:n].to(a.device)).nonzero()
        return int(differ[0]) if differ.numel() else n
    a = a.tolist() if isinstance(a, torch.Tensor) else a
    b = b.tolist() if isinstance(b, torch.Tensor) else b
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def synchronize(device: torch.device | str | None = None) -> None:
    """Wait for queued GPU work, so a timer measures the work and not just its launch."""
    device = torch.device(device) if device is not None else None
    if torch.cuda.is_available() and (device is None or device.type == "cuda"):
        torch.cuda.synchronize(device)
    elif device is not None and device.type == "mps":
        torch.mps.synchronize()


Mark = float | torch.cuda.Event  # a point of a run: perf_counter seconds, or an event in a GPU stream


class Clock:
    """A run's time line, read without making the device wait.

        clock = Clock(device)          # waits once for earlier work, starts the wall clock
        a = clock.mark(); ...; b = clock.mark()
        wall = clock.stop()            # waits once for the run's work: the wall time
        clock.seconds(a, b)            # the time between two marks

    On a GPU a mark is a CUDA event recorded in the device's stream: the GPU stamps it when it gets
    there, so the time between two marks is the time the work between them took, and no mark waits for
    anything (``seconds`` reads an event the GPU has passed: after ``stop``, or after any host read
    that came later in the stream — a decode step's accept result). Elsewhere a mark is
    ``time.perf_counter()``: a CPU runs the work before the next line; on MPS ``mark`` synchronises first.
    """

    def __init__(self, device: torch.device | str | None) -> None:
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        self.events = self.device.type == "cuda" and torch.cuda.is_available()
        synchronize(self.device)
        self.start = time.perf_counter()

    def mark(self) -> Mark:
        """The present point of the run (in the device's stream on a GPU: no wait)."""
        if self.events:
            event = torch.cuda.Event(enable_timing=True)
            event.record(torch.cuda.current_stream(self.device))
            return event
        if self.device.type == "mps":
            synchronize(self.device)
        return time.perf_counter()

    def seconds(self, a: Mark, b: Mark) -> float:
        """Seconds from mark ``a`` to the later mark ``b`` (on a GPU, waits for ``b`` only if the device has not
        passed it yet)."""
        if isinstance(a, float):
            return b - a
        if not b.query():
            b.synchronize()
        return a.elapsed_time(b) / 1e3

    def spans(self, marks: Sequence[Mark]) -> list[float]:
        """Seconds between consecutive marks (a step's phases), read after :meth:`stop`."""
        return [self.seconds(a, b) for a, b in zip(marks, marks[1:])]

    def stop(self) -> float:
        """Wait for the run's work; the wall time since the clock started (s)."""
        synchronize(self.device)
        return time.perf_counter() - self.start


class Timer:
    """``with Timer(device) as t: ...`` then ``t.seconds``: the block timed alone (the device is drained on
    entry; on a GPU the end is an event, waited for when ``seconds`` is first read, not on exit)."""

    def __init__(self, device: torch.device | str | None = None) -> None:
        self.device = device
        self._seconds: float | None = 0.0

    def __enter__(self) -> Timer:
        self._clock = Clock(self.device)
        self._start, self._seconds = self._clock.mark(), None
        return self

    def __exit__(self, *exc: object) -> None:
        self._end = self._clock.mark()

    @property
    def seconds(self) -> float:
        if self._seconds is None:
            self._seconds = self._clock.seconds(self._start, self._end)
        return self._seconds
