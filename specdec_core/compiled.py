"""A compiled step: the static engine's decode and verify forwards through ``torch.compile``, one graph per width.

    model = compiled.on_compiled_engine(pair.engine("bf16").target)   # or pair.engine("bf16", compiled=True)
    dec = Decoder(model)        # the prefill runs eagerly; every later forward of n tokens is padded to the next
                                # width of the menu (widths.WIDTHS: 1, 2, 4, … 64) and runs that width's graph

Why: on a CPU, a small model's step is hundreds of operator calls (norms, rotary, casts, attention, the
products) dispatched one by one through Python; once the weights are cheap to read (prepacked, 2 bytes), that
dispatch is a large share of the step. Inductor traces the forward once per input shape and emits fused C++
kernels for everything but the products, which it calls directly.

Why a menu: a graph is compiled for one shape (``dynamic=False``), and a verify's width changes step to step
(γ + 1, a tree's node count). Padding to the next menu width keeps seven shapes for any n ≤ 64; a pad token sits
after the real ones, sees only its own slot, and its key is dropped right after the forward (the cache's
counter moves back), so no real token ever sees it. A verify of n tokens then costs v at its menu width.

What it costs: tracing and compiling take tens of seconds per width per model (more on 2 cores). Compiled kernels
are kept on disk (inductor's cache, under ``$SPECDEC_CACHE/inductor``): ``make compile`` (:func:`warm`) compiles
every width once and records it (:func:`is_warm`); a later process reuses the kernels and only re-traces. The
engine choice (``engines``) lists a compiled engine as a candidate only once it is warm: compiling inside a
lesson would cost minutes.
"""

from __future__ import annotations

import copy
import os
import time

import torch
from transformers import PreTrainedModel

from . import machine
from .assets import cache_dir
from .files import write_json
from .widths import WIDTHS

VERSION = 1  # bump when the compiled step changes: warm markers are then stale
RECOMPILE_LIMIT = 64  # graphs per forward code object: 7 widths × a few buffer sizes × target and draft


def on_compiled_engine(model: PreTrainedModel) -> PreTrainedModel:
    """The same model (a shallow copy: the same modules and weights) on the static engine, with its decode and
    verify forwards compiled (``compiled_forward``: :class:`~specdec_core.lm.Decoder` pads to the menu and calls
    it; the prefill stays eager). On a GPU inductor emits Triton kernels; nothing here is CPU-specific."""
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(cache_dir() / "inductor"))  # kernels kept across processes
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, RECOMPILE_LIMIT)
    out = copy.copy(model)
    out.static_engine = True
    # freezing: the weights become constants of the graph, so inductor prepacks them for oneDNN itself (its
    # lowering of a prepacked product needs a constant weight: fast.twin's packed copies would be inputs).
    # cpp_wrapper and max_autotune were measured on top of it (issue 56's closing note): neither changed the step
    # beyond its min–max, and cpp_wrapper tripled the compile time, so neither is on.
    out.compiled_forward = torch.compile(model.forward, dynamic=False, options={"freezing": True})
    return out


def is_compiled(model: PreTrainedModel) -> bool:
    """Whether a :class:`~specdec_core.lm.Decoder` on ``model`` runs the compiled step."""
    return getattr(model, "compiled_forward", None) is not None


def _marker(name: str) -> dict:
    return machine.key() | {"model": name, "version": VERSION, "widths": list(WIDTHS)}


def is_warm(name: str) -> bool:
    """Whether :func:`warm` compiled every width for ``name`` (e.g. "offline static bf16") on this machine."""
    path = machine.cached_path("compiled", _marker(name))
    return path.exists()


@torch.inference_mode()
def warm(models: dict[str, PreTrainedModel], context: int = 64, log=print) -> dict[str, dict[int, float]]:
    """Compile every menu width of every model (name → a model from :func:`on_compiled_engine`) and record each
    as warm. Returns name → {width: seconds of its first call (trace + compile, or a load from the disk cache)}."""
    from .lm import Decoder

    out = {}
    for name, model in models.items():
        if not is_compiled(model):
            raise ValueError(f"{name} is not on the compiled engine: pass compiled.on_compiled_engine(model)")
        ids = torch.arange(context + WIDTHS[-1], device=model.device).view(1, -1) % model.config.vocab_size
        dec, seconds = Decoder(model), {}
        dec.prefill(ids[:, :context], capacity=context + 2 * WIDTHS[-1])
        for width in WIDTHS:
            start = time.perf_counter()
            dec.step(ids[:, context : context + width])
            seconds[width] = time.perf_counter() - start
            dec.rollback(context)
            log(f"{name}: width {width} ready in {seconds[width]:.1f} s")
        out[name] = seconds
        write_json({"key": _marker(name), "seconds": {str(w): s for w, s in seconds.items()}},
                   machine.cached_path("compiled", _marker(name)))
    return out
