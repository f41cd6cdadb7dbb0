"""Memory probes and the lesson-01 step timer.

Memory (say which one you report — they are different things):

- CUDA: ``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats`` — the largest amount of
  GPU memory held by tensors during the runs (weights + KV cache + activations; not the allocator's
  reserved-but-unused memory, which ``nvidia-smi`` would also show).
- CPU: the process's **peak resident set size** (RSS, its high-water mark) — everything the Python
  process holds in RAM: weights, activations, the interpreter, libraries. On Linux the high-water
  mark is reset before the runs (``/proc/self/clear_refs``), elsewhere it is the peak since the
  process started.

Both come with the same quantity's value just before the runs, so ``peak - before`` is what the runs
added on top of what was already loaded. Timing itself is :mod:`specdec_core.bench.harness`.
"""

from __future__ import annotations

import contextlib
import os
import resource
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import PreTrainedModel

from ..generation import Timer
from ..lm import Decoder

# ---------------------------------------------------------------------------------------------
# Memory probes
# ---------------------------------------------------------------------------------------------


def _is_cuda(device: torch.device | str | None) -> bool:
    if device is None:
        return torch.cuda.is_available()
    return torch.device(device).type == "cuda"


def current_rss_bytes() -> int:
    """The process's resident set size now (bytes)."""
    import psutil  # here, not at the top: a bare GPU machine (make gpu-check) may lack it

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


@dataclass
class MemoryProbe:
    """``before = probe.start()`` (resets the peak), run, then ``probe.peak()``; ``kind`` names it."""

    device: torch.device | str | None
    cuda: bool

    @property
    def kind(self) -> str:
        return "CUDA max_memory_allocated" if self.cuda else "CPU peak RSS"

    def start(self) -> int:
        if self.cuda:
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            return torch.cuda.memory_allocated(self.device)
        reset_peak_rss()
        return current_rss_bytes()

    def peak(self) -> int:
        return int(torch.cuda.max_memory_allocated(self.device)) if self.cuda else peak_rss_bytes()


def memory_probe(device: torch.device | str | None = None) -> MemoryProbe:
    """The probe for ``device`` (None: CUDA if available, else the CPU process)."""
    return MemoryProbe(device, _is_cuda(device))


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
    gen = torch.Generator().manual_seed(seed)  # host: sampled paths draw from a seeded host generator
    decoder = Decoder(model)
    out = []
    for length in context_lengths:
        ids = torch.randint(0, model.config.vocab_size, (1, length + 1), generator=gen).to(device)  # host: drawn from gen
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


# Operator names as the profiler reports them, grouped the way lesson 01 explains a step.
_MATMUL = {"aten::mm", "aten::addmm", "aten::bmm", "aten::matmul", "aten::linear", "mkldnn::_linear_pointwise",
           "aten::_weight_int8pack_mm"}  # the last: the int8 engines' products (precision.Int8Linear)
_ATTENTION = {"aten::_scaled_dot_product_flash_attention_for_cpu", "aten::scaled_dot_product_attention",
              "aten::_scaled_dot_product_efficient_attention", "aten::_scaled_dot_product_flash_attention"}


@torch.inference_mode()
@contextlib.contextmanager
def _native_stderr_muted():
    """Mute file descriptor 2 meanwhile: the profiler's C++ side prints a line at start and stop straight
    to it, which would land in a notebook's output. Python exceptions still propagate."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def step_breakdown(model: PreTrainedModel, n: int = 1, context: int = 64, repeats: int = 5, seed: int = 0
                   ) -> dict[str, float]:
    """Where a forward over ``n`` new tokens on a ``context``-token cache spends its time (seconds per
    forward, from ``torch.profiler``'s self CPU time): "matrix products" (the linear layers, the
    output layer included), "attention", "everything else" (norms, activations, copies, the
    framework's dispatch of ~10 small operations per layer), and "total"."""
    from torch.profiler import ProfilerActivity, profile

    gen = torch.Generator().manual_seed(seed)  # host: sampled paths draw from a seeded host generator
    ids = torch.randint(0, model.config.vocab_size, (1, context + n), generator=gen).to(model.device)  # host: drawn from gen
    decoder = Decoder(model)
    decoder.prefill(ids[:, :context])
    decoder.step(ids[:, context:])  # warm-up
    decoder.rollback(context)
    with _native_stderr_muted(), profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(repeats):
            decoder.step(ids[:, context:])
            decoder.rollback(context)
    parts = {"matrix products": 0.0, "attention": 0.0, "everything else": 0.0}
    for event in prof.key_averages():
        part = "matrix products" if event.key in _MATMUL else "attention" if event.key in _ATTENTION else "everything else"
        parts[part] += event.self_cpu_time_total / 1e6 / repeats  # µs over all repeats → s per forward
    return parts | {"total": sum(parts.values())}


def before_after(plain: PreTrainedModel, fast: PreTrainedModel, widths: Sequence[int], repeats: int = 5,
                 name: str = "") -> dict[str, dict[str, float]]:
    """:func:`step_breakdown` of a plain model and its fast twin (``fast.twin``) at each forward width n,
    in the order a bar chart reads them: ``{"<name> plain, n = 1": …, "<name> fast, n = 1": …, …}``."""
    prefix = f"{name} " if name else ""
    return {f"{prefix}{label}, n = {n}": step_breakdown(model, n, repeats=repeats)
            for n in widths for label, model in (("plain", plain), ("fast", fast))}


def cpu_threads() -> str:
    """A one-line description of the CPU budget (timings depend on it)."""
    return f"{os.cpu_count()} CPU cores, torch uses {torch.get_num_threads()} threads"
