"""One method's memory, measured alone in a fresh Python process.

The in-process probe (:mod:`specdec_core.bench.probes`) reads the peak of the process it runs in, and a
benchmark's or a lesson's process holds every model loaded so far: each method then prints the same
figure. Here a child process (``python -m specdec_core.bench.fresh JOB.json OUT.json``, started by
:func:`measure`) holds one method and nothing else:

1. it imports the libraries: **baseline** RSS (the interpreter, torch, transformers, the course's code;
   a library the recipe loads later, such as bitsandbytes, counts as the method's);
2. the job's recipe loads what the method runs, prepares it (e.g. quantizes a copy of the target) and
   frees the rest (:func:`keep_only`: every weight of the pair that the method's models do not hold,
   e.g. the fp32 target once its NF4 copy is made); the weights it keeps that still borrow the model
   file's memory map are copied into the process's own memory (:func:`own`: a mapping keeps every page
   of the file ever read resident, and RSS counts them, though the method may use only some — NF4 keeps
   the float embedding from the fp32 file); an optional short warm-up call follows, as in the
   benchmark (lazy set-up, lookahead's shape search, bitsandbytes' repacking on its first forward);
3. garbage is collected and freed heap handed back to the system (:func:`release`): **loaded** RSS;
4. the peak is reset (Linux ``/proc/self/clear_refs``, checked to have taken) and ONE generation runs:
   **peak** RSS, and **added** = peak − loaded (the KV cache, activations, temporary matrices);
5. the numbers go to ``OUT.json``, written atomically (:func:`specdec_core.files.write_json`).

So the peak includes the interpreter + libraries + that method's models (weights, the fast engine's
prepacked copies, NF4 codes) + the KV cache and activations of one generation — and no other model.
``load_peak`` is the high-water mark before the reset (loading and preparing; reported, not the
figure). On a CUDA device the same steps read ``torch.cuda.memory_allocated`` /
``max_memory_allocated`` (tensors only) instead; RSS is reported beside them.

Where the peak cannot be reset (not Linux), :func:`measure` raises :class:`FreshProbeError`: the
figure would be the high-water mark since the process started, loading included, not the run's peak.

Recipes: ``runner.method_recipe`` (one method of the benchmark's registry: ``runner.method_job``, the
report's column, lesson 01) and ``quantized.variant_recipe`` (one precision of lesson 06's pair).
"""

from __future__ import annotations

import ctypes
import gc
import importlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from torch import nn

from ..files import write_json
from ..generation import Generation
from ..memory import MB
from .probes import current_rss_bytes, peak_rss_bytes, reset_peak_rss

INCLUDES = ("the interpreter + libraries + that method's models (weights, prepacked copies, NF4 codes) "
            "+ the KV cache and activations of one generation; no other model")
RESET_SLACK = 4 * MB  # right after a reset the high-water mark may exceed the RSS by a page or two


class FreshProbeError(RuntimeError):
    """The fresh-process probe could not measure; the message says why and what a number would mean."""


@dataclass(frozen=True)
class Job:
    """What a fresh process runs: ``recipe`` ("module:function") called with ``kwargs`` returns a :class:`Loaded`."""

    recipe: str
    kwargs: dict


@dataclass
class Loaded:
    """A recipe's result: ``run()`` is the ONE measured generation; ``holds`` the models it runs;
    ``warmup()`` an untimed call before the reset (None: none); ``about`` what was loaded, in words."""

    run: Callable[[], Generation]
    holds: list[nn.Module]
    device: torch.device
    warmup: Callable[[], object] | None = None
    about: str = ""


@dataclass(frozen=True)
class FreshPeak:
    """One method's memory in its own process (bytes). ``kind``: "CPU peak RSS" or "CUDA max_memory_allocated"."""

    label: str
    kind: str
    baseline_bytes: int
    loaded_bytes: int
    peak_bytes: int
    load_peak_bytes: int
    held_bytes: int
    new_tokens: int
    prompt_tokens: int
    about: str = ""
    includes: str = INCLUDES
    rss: dict = field(default_factory=dict)  # on CUDA: the process's RSS figures beside the tensors'

    @property
    def added_bytes(self) -> int:
        """What the generation added on top of the loaded state (KV cache, activations)."""
        return self.peak_bytes - self.loaded_bytes

    @property
    def peak_mb(self) -> float:
        return self.peak_bytes / MB

    @property
    def added_mb(self) -> float:
        return self.added_bytes / MB

    def as_json(self) -> dict:
        return asdict(self) | {"added_bytes": self.added_bytes}

    @classmethod
    def from_json(cls, data: dict) -> FreshPeak:
        return cls(**{k: v for k, v in data.items() if k != "added_bytes"})

    def __str__(self) -> str:
        return (f"{self.kind} in a fresh process {self.peak_mb:,.0f} MB (loaded {self.loaded_bytes / MB:,.0f}, "
                f"+{self.added_mb:,.0f} for {self.new_tokens} tokens; libraries alone {self.baseline_bytes / MB:,.0f})")


# ---- freeing what a method does not run --------------------------------------------------------


def _tensors(module: nn.Module) -> Iterable[tuple[nn.Module, str, torch.Tensor]]:
    """Every tensor a module tree holds: parameters, buffers and plain tensor attributes (fast.PackedLinear's
    prepacked copy), as (owner, attribute, tensor)."""
    for m in module.modules():
        for name, t in list(m._parameters.items()) + list(m._buffers.items()):
            if t is not None:
                yield m, name, t
        for name, t in vars(m).items():
            if isinstance(t, torch.Tensor) and name not in m._parameters and name not in m._buffers:
                yield m, name, t


def _key(t: torch.Tensor) -> int:
    """The memory a tensor reads (its storage), so that views and shared weights count once."""
    try:
        return t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):  # an opaque (oneDNN) tensor has no storage to share
        return id(t)


def _nbytes(t: torch.Tensor) -> int:
    try:
        return t.untyped_storage().nbytes()
    except (RuntimeError, NotImplementedError):
        return t.element_size() * t.numel()


def held_bytes(models: Sequence[nn.Module]) -> int:
    """Bytes of every distinct tensor the models hold (prepacked copies included, shared storage once)."""
    seen = {_key(t): _nbytes(t) for m in models for _, _, t in _tensors(m)}
    return sum(seen.values())


def keep_only(keep: Sequence[nn.Module], models: Iterable[nn.Module]) -> int:
    """Empty every tensor of ``models`` that no module of ``keep`` holds (the module objects stay, so
    lookups keyed by them still work; a method that reads a freed weight fails loudly). Returns the bytes freed."""
    kept = {_key(t) for m in keep for _, _, t in _tensors(m)}
    freed: dict[int, int] = {}
    for model in models:
        for owner, name, t in list(_tensors(model)):
            if _key(t) in kept or t.numel() == 0:
                continue
            freed[_key(t)] = _nbytes(t)
            _assign(owner, name, torch.empty(0, dtype=t.dtype, device=t.device) if not t.is_mkldnn else torch.empty(0))  # host: mkldnn is CPU only
    return sum(freed.values())


def _assign(owner: nn.Module, name: str, new: torch.Tensor) -> None:
    if name in owner._parameters:
        owner._parameters[name].data = new
    elif name in owner._buffers:
        owner._buffers[name] = new
    else:
        setattr(owner, name, new)


def own(models: Sequence[nn.Module]) -> int:
    """Copy every CPU tensor of ``models`` whose memory is borrowed (not resizable: a memory-mapped weights
    file, a buffer) into memory of its own, one copy per storage (tied and viewed weights stay shared),
    so the mapping can close. Returns the bytes copied."""
    copies: dict[int, torch.UntypedStorage] = {}
    for model in models:
        for owner, name, t in list(_tensors(model)):
            if t.is_mkldnn or t.device.type != "cpu" or t.untyped_storage().resizable():
                continue
            key = _key(t)
            if key not in copies:
                copies[key] = t.untyped_storage().clone()
            _assign(owner, name, torch.empty(0, dtype=t.dtype, device=t.device).set_(copies[key], t.storage_offset(), t.size(), t.stride()))
    return sum(c.nbytes() for c in copies.values())


def release() -> None:
    """Collect garbage and hand the freed heap back to the system (glibc ``malloc_trim``), so RSS shows it."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: the allocator keeps what it keeps
        pass


# ---- the child's side ----------------------------------------------------------------------------


def _recipe(name: str) -> Callable[..., Loaded]:
    module, _, function = name.partition(":")
    return getattr(importlib.import_module(module), function)


def import_methods() -> None:
    """Import transformers and the code of every decoding method, so the baseline is the same whatever
    the recipe (imported here by name: the registry, ``bench.methods``, imports this module's callers)."""
    from .. import ar, fast, jacobi, lookahead, models, naive, nf4, peers, speculative, tree  # noqa: F401


def run_job(job: Job, reset_peak: bool = True) -> dict:
    """What the child process does (see the module docstring), in THIS process; returns the JSON record.
    ``reset_peak=False`` skips the reset: the peak is then the process's high-water mark since it started,
    loading included (kept to show what a probe without the reset reports)."""
    recipe = _recipe(job.recipe)
    import_methods()
    release()
    baseline = current_rss_bytes()
    loaded = recipe(**job.kwargs)
    own(loaded.holds)
    if loaded.warmup is not None:
        loaded.warmup()
    release()
    cuda = loaded.device.type == "cuda"
    loaded_rss, load_peak = current_rss_bytes(), peak_rss_bytes()
    if reset_peak:
        if not reset_peak_rss() or peak_rss_bytes() > current_rss_bytes() + RESET_SLACK:
            raise FreshProbeError(
                f"cannot reset the peak RSS on {sys.platform} (Linux's /proc/self/clear_refs is missing or had "
                "no effect): the peak would be this process's high-water mark since it started — loading and "
                "preparing the models included (e.g. the fp32 weights before quantizing) — not the peak of the "
                "run. Measure on Linux; elsewhere only the RSS once loaded is meaningful.")
    if cuda:
        torch.cuda.synchronize(loaded.device)
        cuda_loaded = torch.cuda.memory_allocated(loaded.device)
        torch.cuda.reset_peak_memory_stats(loaded.device)
    gen = loaded.run()
    if cuda:
        torch.cuda.synchronize(loaded.device)
    if not isinstance(gen, Generation):
        raise TypeError(f"{job.recipe}'s run() must return a Generation, got {type(gen).__name__}")
    rss = {"baseline_bytes": baseline, "loaded_bytes": loaded_rss, "peak_bytes": peak_rss_bytes(),
           "load_peak_bytes": load_peak}
    figures = ({"kind": "CUDA max_memory_allocated", "baseline_bytes": 0, "loaded_bytes": cuda_loaded,
                "peak_bytes": int(torch.cuda.max_memory_allocated(loaded.device)), "load_peak_bytes": cuda_loaded,
                "rss": rss} if cuda else {"kind": "CPU peak RSS"} | rss)
    prompt = job.kwargs.get("prompt_ids") or []
    return FreshPeak(label=job.kwargs.get("label", job.recipe), held_bytes=held_bytes(loaded.holds),
                     new_tokens=len(gen.new_tokens), prompt_tokens=len(prompt), about=loaded.about,
                     **figures).as_json()


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m specdec_core.bench.fresh JOB.json OUT.json [--no-reset]``."""
    args = list(sys.argv[1:] if argv is None else argv)
    job = Job(**json.loads(Path(args[0]).read_text()))
    write_json(run_job(job, reset_peak="--no-reset" not in args), args[1])
    return 0


# ---- the parent's side ---------------------------------------------------------------------------


def measure(job: Job, timeout_s: float = 900, reset_peak: bool = True) -> FreshPeak:
    """Run ``job`` in a fresh Python process and return its :class:`FreshPeak`. Raises
    :class:`FreshProbeError` with the child's last lines when it fails (its output never reaches ours)."""
    root = str(Path(__file__).resolve().parents[2])
    env = os.environ | {"PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}
    with tempfile.TemporaryDirectory(prefix="specdec-fresh-") as tmp:
        job_path, out_path = Path(tmp) / "job.json", Path(tmp) / "out.json"
        write_json(asdict(job), job_path)
        cmd = [sys.executable, "-m", "specdec_core.bench.fresh", str(job_path), str(out_path)]
        try:
            done = subprocess.run(cmd + ([] if reset_peak else ["--no-reset"]), env=env, cwd=root,
                                  capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired as err:
            raise FreshProbeError(f"the fresh process for {job.kwargs.get('label', job.recipe)} ran past "
                                  f"{timeout_s:.0f} s") from err
        if done.returncode != 0 or not out_path.exists():
            lines = [x for x in (done.stderr or done.stdout).strip().splitlines() if x.strip()]
            last = next((x for x in reversed(lines) if "Error" in x), lines[-1] if lines else "no output")
            raise FreshProbeError(last.split("FreshProbeError: ", 1)[-1])
        return FreshPeak.from_json(json.loads(out_path.read_text()))


# ---- the pairs a recipe loads (runner.method_recipe: a method of the benchmark's registry) -----------


def build_pair(spec: dict, device: str | None = None):
    """A pair from its description: ``{"preset": name}`` (``models.load_pair``), or ``{"toy": {...}}``: two
    random toys (``toy.tiny_llama``: vocab, hidden, target_layers, draft_layers, logit_scale) sharing a toy tokenizer."""
    from ..models import Pair, load_pair
    from ..toy import tiny_llama, toy_tokenizer

    if "preset" in spec:
        return load_pair(spec["preset"], device)
    t = {"vocab": 32, "hidden": 32, "target_layers": 2, "draft_layers": 1, "logit_scale": 1.0} | spec["toy"]
    target = tiny_llama(t["vocab"], t["hidden"], t["target_layers"], seed=0, logit_scale=t["logit_scale"])
    draft = tiny_llama(t["vocab"], t["hidden"], t["draft_layers"], seed=1, logit_scale=t["logit_scale"])
    return Pair(target, draft, toy_tokenizer(t["vocab"]), "toy", torch.device("cpu"))


if __name__ == "__main__":
    raise SystemExit(main())
