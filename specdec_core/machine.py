"""The machine the course runs on: its name, whether a measurement here may be kept, and its memory bandwidth.

    machine.key()            {"cpu": "AMD EPYC …", "threads": 2, "torch": "2.13.0+cpu"}: what a cached measurement is keyed by
    machine.bandwidth()      bytes/s of reading memory, measured once per machine and cached: every floor uses it

A decode step of a small batch reads every weight once, so bytes ÷ bandwidth is its floor (lesson 01b). There is
ONE bandwidth per machine: a read-only streaming pass on all threads over a buffer of at least four times the
last-level cache (so the caches serve almost none of it), the best of a few passes. A copy (read + write) measures
something else (the writes cost more than the reads on many CPUs), and a buffer that fits the cache measures the
cache: both gave a different figure per lesson before. The measurement is cached as JSON under
``$SPECDEC_CACHE/machine/`` (atomically), keyed by :func:`key`; never stored from a quick run, CI or a test.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
from pathlib import Path

import torch

from .assets import cache_dir
from .files import write_json
from .generation import Timer

VERSION = 1  # bump when the way of measuring changes: cached bandwidths are then measured again
MIN_STREAM_MB = 256


def cpuinfo(field: str) -> str | None:
    """The first value of ``field`` in Linux's /proc/cpuinfo (e.g. "model name", "flags"); None elsewhere."""
    try:
        with open("/proc/cpuinfo") as f:
            return next((line.split(":", 1)[1].strip() for line in f if line.startswith(field)), None)
    except OSError:
        return None


def cpu_name() -> str:
    """The CPU's model name (Linux: /proc/cpuinfo; elsewhere what ``platform`` says)."""
    return cpuinfo("model name") or platform.processor() or platform.machine()


def key(device: torch.device | str = "cpu") -> dict:
    """What a measurement on this machine depends on: the CPU (and the GPU, for a CUDA device), the threads
    torch uses and torch's version."""
    device = torch.device(device)
    cpu = cpu_name() + (f" + {torch.cuda.get_device_name(device)}" if device.type == "cuda" else "")
    return {"cpu": cpu, "threads": torch.get_num_threads(), "torch": torch.__version__, "device": device.type}


def may_cache() -> bool:
    """Whether a fresh measurement may be stored as this machine's truth: not in a quick run, not in CI
    (it uses a throwaway cache anyway), not from tests (``tests/conftest.py`` sets ``SPECDEC_TESTING``; a
    pytest worker shares the cores with others)."""
    return not (os.environ.get("SPECDEC_QUICK") == "1" or os.environ.get("CI")
                or os.environ.get("PYTEST_XDIST_WORKER") or os.environ.get("SPECDEC_TESTING"))


def cached_path(kind: str, what: dict) -> Path:
    """Where a per-machine measurement ``kind`` keyed by ``what`` lives: ``$SPECDEC_CACHE/<kind>/<digest>.json``."""
    digest = hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:16]
    return cache_dir() / kind / f"{digest}.json"


def last_level_cache_bytes() -> int:
    """The largest CPU cache's size in bytes (Linux sysfs), 32 MiB where the system does not say."""
    sizes = []
    for entry in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = entry.read_text().strip().upper()
        scale = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
        try:
            sizes.append(int(text.rstrip("KMG")) * scale)
        except ValueError:
            continue
    return max(sizes, default=32 * 2**20)


def stream_read(megabytes: int | None = None, repeats: int = 5, device: torch.device | str = "cpu") -> float:
    """Bytes per second of one read-only pass (a max-reduction, on all of torch's threads) over a buffer of
    ``megabytes`` (default: 4 × the last-level cache, at least :data:`MIN_STREAM_MB`); the best of ``repeats``
    passes, each read once as f32 and once as int64 (on a CPU whose f32 max is slower than its memory, the wider
    integer lanes keep the pass memory-bound: any pass is a lower bound on the bandwidth)."""
    size = megabytes * 10**6 if megabytes else max(MIN_STREAM_MB * 10**6, 4 * last_level_cache_bytes())
    buf = torch.ones(size // 8 * 2, device=device)  # an even count: the int64 view reads the same bytes
    views = (buf, buf.view(torch.int64))
    torch.amax(buf)  # touch the pages first

    def once(view: torch.Tensor) -> float:
        with Timer(buf.device) as t:  # synchronises a GPU on both ends: the pass, not its launch
            torch.amax(view)
        return t.seconds

    return buf.numel() * buf.element_size() / min(once(v) for _ in range(repeats) for v in views)


@functools.cache
def bandwidth(device: torch.device | str = "cpu") -> float:
    """This machine's memory bandwidth (bytes/s, :func:`stream_read`), measured once: read from the cache when a
    measurement for :func:`key` is there, else measured (and stored when :func:`may_cache`)."""
    what = key(device) | {"version": VERSION}
    path = cached_path("machine", what)
    if path.exists():
        data = json.loads(path.read_text())
        if data.get("key") == what:
            return float(data["bandwidth"])
    rate = stream_read(device=device)
    if may_cache():
        write_json({"key": what, "bandwidth": rate, "how": "read-only stream, 4 × the last-level cache"}, path)
    return rate
