"""The one result type every decoding method returns, and a small timer."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass
class Generation:
    """What a generation function returns.

    new_tokens: the generated token ids, prompt excluded (a plain list of ints).
    text:       ``tokenizer.decode(new_tokens)`` when a tokenizer was given, else ``None``.
    stats:      at least ``wall_time`` (s) and ``target_calls`` (forwards of the target after the
                prefill); each method adds its own keys (DESIGN.md lists them).
    """

    new_tokens: list[int]
    text: str | None = None
    stats: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.new_tokens)

    @property
    def tokens_per_second(self) -> float:
        wall = self.stats.get("wall_time", 0.0)
        return len(self.new_tokens) / wall if wall > 0 else float("nan")


def synchronize(device: torch.device | str | None = None) -> None:
    """Wait for queued GPU work, so a timer measures the work and not just its launch."""
    device = torch.device(device) if device is not None else None
    if torch.cuda.is_available() and (device is None or device.type == "cuda"):
        torch.cuda.synchronize(device)
    elif device is not None and device.type == "mps":
        torch.mps.synchronize()


class Timer:
    """``with Timer(device) as t: ...`` then ``t.seconds``; synchronises the device on both ends."""

    def __init__(self, device: torch.device | str | None = None) -> None:
        self.device = device
        self.seconds = 0.0

    def __enter__(self) -> Timer:
        synchronize(self.device)
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        synchronize(self.device)
        self.seconds = time.perf_counter() - self._start
