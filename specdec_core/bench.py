"""Honest measurement: latency, tokens/s, time to first token, and memory.

The source tutorial calls ``measure_latency_and_memory`` but never defines it; this is that
function, written the way timing on an accelerator must be done:

- **warm-up** runs first (lazy initialisation, allocator growth and kernel selection would otherwise
  land in the first measurement);
- the device is **synchronised** around every timer (a GPU runs asynchronously: without
  ``torch.cuda.synchronize`` a timer measures how long it took to *queue* the work);
- several **repeats**, summarised by their **median** (robust to one slow run on a shared machine).

Memory (say which one you report — they are different things):

- CUDA: ``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats`` — the largest amount of
  GPU memory held by tensors during the runs (weights + KV cache + activations; not the allocator's
  reserved-but-unused memory, which ``nvidia-smi`` would also show).
- CPU: the process's **peak resident set size** (RSS, its high-water mark) — everything the Python
  process holds in RAM: weights, activations, the interpreter, libraries. On Linux the high-water
  mark is reset before the runs (``/proc/self/clear_refs``), elsewhere it is the peak since the
  process started.

Both come with ``memory_before_bytes`` (the same quantity's current value just before the runs), so
``peak - before`` is what the runs added on top of what was already loaded.
"""

from __future__ import annotations

import os
import resource
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import psutil
import torch
from transformers import DynamicCache, PretrainedConfig, PreTrainedModel

from .generation import Generation, Timer
from .lm import Decoder, cache_kwarg

MB = 1024**2


# ---------------------------------------------------------------------------------------------
# Memory probes
# ---------------------------------------------------------------------------------------------


def _is_cuda(device: torch.device | str | None) -> bool:
    if device is None:
        return torch.cuda.is_available()
    return torch.device(device).type == "cuda"


def current_rss_bytes() -> int:
    """The process's resident set size now (bytes)."""
    return psutil.Process().memory_info().rss


def peak_rss_bytes() -> int:
    """The process's peak resident set size (bytes): Linux ``VmHWM``, else ``getrusage``."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024  # reported in kB
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # macOS: bytes, Linux: kB


def reset_peak_rss() -> bool:
    """Reset the peak-RSS high-water mark to the current RSS (Linux only). True if it worked."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


# ---------------------------------------------------------------------------------------------
# measure_latency_and_memory
# ---------------------------------------------------------------------------------------------


@dataclass
class Measurement:
    """What :func:`measure_latency_and_memory` returns. Times in seconds, memory in bytes.

    latency:       median wall time of one ``fn()`` call
    tokens_per_s:  median over repeats of new tokens ÷ wall time of that call
    ttft:          median time to first token (``Generation.stats["ttft"]``), None if fn doesn't report it
    peak_memory:   see the module docstring (``memory_kind`` says which one was measured)
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
    def peak_memory_mb(self) -> float:
        return self.peak_memory_bytes / MB

    @property
    def added_memory_mb(self) -> float:
        """What the runs added on top of the memory in use before them (MB)."""
        return (self.peak_memory_bytes - self.memory_before_bytes) / MB

    def __str__(self) -> str:
        ttft = f"{self.ttft * 1e3:.0f} ms" if self.ttft is not None else "n/a"
        return (
            f"{self.latency:.2f} s (median of {len(self.latencies)}), {self.tokens_per_s:.1f} tokens/s, "
            f"TTFT {ttft}, {self.new_tokens} tokens, {self.memory_kind} {self.peak_memory_mb:,.0f} MB"
        )


def measure_latency_and_memory(
    fn: Callable[[], Generation],
    *,
    warmup: int = 1,
    repeats: int = 3,
    device: torch.device | str | None = None,
) -> Measurement:
    """Time ``fn()`` (which returns a :class:`Generation`) and record peak memory.

    Runs ``fn`` ``warmup`` times untimed, then ``repeats`` times with the device synchronised
    around each call; reports medians. ``device``: where the work runs (None: CUDA if available,
    else CPU); it picks the memory probe and what to synchronise.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    if warmup < 0:
        raise ValueError(f"warmup must be >= 0, got {warmup}")
    for _ in range(warmup):
        fn()

    cuda = _is_cuda(device)
    if cuda:
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before, kind = torch.cuda.memory_allocated(device), "CUDA max_memory_allocated"
    else:
        reset_peak_rss()
        before, kind = current_rss_bytes(), "CPU peak RSS"

    latencies, rates, ttfts, result = [], [], [], None
    for _ in range(repeats):
        with Timer(device) as t:
            result = fn()
        if not isinstance(result, Generation):
            raise TypeError(f"fn() must return a Generation, got {type(result).__name__}")
        latencies.append(t.seconds)
        rates.append(len(result.new_tokens) / t.seconds if t.seconds > 0 else float("nan"))
        if "ttft" in result.stats:
            ttfts.append(float(result.stats["ttft"]))

    peak = torch.cuda.max_memory_allocated(device) if cuda else peak_rss_bytes()
    return Measurement(
        latency=statistics.median(latencies),
        tokens_per_s=statistics.median(rates),
        ttft=statistics.median(ttfts) if ttfts else None,
        new_tokens=len(result.new_tokens),
        peak_memory_bytes=int(peak),
        memory_before_bytes=int(before),
        memory_kind=kind,
        latencies=latencies,
        result=result,
    )


# ---------------------------------------------------------------------------------------------
# Weights vs KV cache (lesson 01)
# ---------------------------------------------------------------------------------------------


def weight_bytes(model: torch.nn.Module) -> int:
    """Bytes of the model's parameters and buffers, each shared (tied) tensor counted once."""
    seen, total = set(), 0
    for t in list(model.parameters()) + list(model.buffers()):
        if t.data_ptr() in seen:
            continue
        seen.add(t.data_ptr())
        total += t.numel() * t.element_size()
    return total


def kv_cache_bytes(config: PretrainedConfig, num_tokens: int, dtype: torch.dtype = torch.float32, batch: int = 1) -> int:
    """The KV-cache formula: 2 (K and V) × layers × KV heads × head dim × tokens × batch × bytes.

    Grouped-query attention (``num_key_value_heads`` < ``num_attention_heads``) is what keeps it small.
    """
    config = config.get_text_config() if hasattr(config, "get_text_config") else config
    heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    bytes_per = torch.empty((), dtype=dtype).element_size()
    return 2 * config.num_hidden_layers * heads * head_dim * num_tokens * batch * bytes_per


def cache_tensor_bytes(cache: DynamicCache) -> int:
    """Measured size of a filled cache: the bytes of every key and value tensor it holds."""
    total = 0
    for layer in cache.layers:
        for t in (getattr(layer, "keys", None), getattr(layer, "values", None)):
            if isinstance(t, torch.Tensor):
                total += t.numel() * t.element_size()
    return total


@torch.inference_mode()
def filled_cache(model: PreTrainedModel, num_tokens: int, seed: int = 0) -> DynamicCache:
    """A KV cache after prefilling ``num_tokens`` random token ids (to measure its size)."""
    ids = torch.randint(0, model.config.vocab_size, (1, num_tokens), generator=torch.Generator().manual_seed(seed))
    cache = DynamicCache(config=model.config)
    model(input_ids=ids.to(model.device), use_cache=True, logits_to_keep=1, **{cache_kwarg(model): cache})
    return cache


# ---------------------------------------------------------------------------------------------
# One decode step with and without the cache, as the context grows (lesson 01)
# ---------------------------------------------------------------------------------------------


@torch.inference_mode()
def step_latency(
    model: PreTrainedModel,
    context_lengths: Sequence[int],
    use_cache: bool,
    repeats: int = 3,
    seed: int = 0,
) -> list[float]:
    """Median seconds to produce ONE next token after a context of each length.

    With the cache: the context is prefilled once (untimed); each repeat runs 1 new token on top
    of it and rolls the cache back. Without: each repeat re-runs the whole context + 1 tokens, as a
    model without memory must. Returns one median per entry of ``context_lengths``.
    """
    device = model.device
    gen = torch.Generator().manual_seed(seed)
    decoder = Decoder(model)
    out = []
    for length in context_lengths:
        ids = torch.randint(0, model.config.vocab_size, (1, length + 1), generator=gen).to(device)
        if use_cache:
            decoder.prefill(ids[:, :length])
        times = []
        for _ in range(repeats):
            with Timer(device) as t:
                if use_cache:
                    decoder.step(ids[:, length:])
                else:
                    model(input_ids=ids, use_cache=False, logits_to_keep=1)
            times.append(t.seconds)
            if use_cache:
                decoder.rollback(length)
        out.append(statistics.median(times))
    return out


def cpu_threads() -> str:
    """A one-line description of the CPU budget (timings depend on it)."""
    return f"{os.cpu_count()} CPU cores, torch uses {torch.get_num_threads()} threads"


if __name__ == "__main__":  # python -m specdec_core.bench: the benchmark CLI (specdec_core/benchmark.py)
    from specdec_core.benchmark import main

    raise SystemExit(main())
