"""Counting the device→host transfers ("host syncs") a piece of code makes, transformers' code included.

A GPU runs ahead of the Python that feeds it until Python needs a value the GPU computes: ``.item()``,
``.tolist()``, ``bool(t)``, ``int(t)``, indexing with a 0-dim or boolean tensor, ``nonzero`` (its output
size depends on the data), a copy to the host. Each is a stall: the queue drains and the host waits.
gpt-fast's decode loop makes one per token; this module counts them so a test can pin a loop's count.

    with HostSyncs() as syncs:
        syncs.step_at(speculative, "draft")    # every call of speculative.draft starts a new step
        speculative_generate(...)
    syncs.per_step()                           # → [transfers in step 1, step 2, …]

Two interception levels, so nothing is counted twice and nothing hides:

    function level  (TorchFunctionMode)  Tensor.item / tolist / numpy / cpu / __bool__ / __int__ / __float__ /
                                         __index__ / __contains__, torch.nonzero / masked_select / equal /
                                         allclose / unique, x[i] and x[i] = v with a 0-dim or bool tensor index,
                                         .to(cpu) of a device tensor
    dispatch level  (TorchDispatchMode)  what C++ does on its own, out of Python's sight: aten._local_scalar_dense,
                                         nonzero, masked_select, is_nonzero, equal, unique, repeat_interleave
                                         without output_size, index / index_put_ with a bool index, a copy to
                                         the host — unless a counted call is running (a kernel's own reads stay
                                         hidden: the mode sees the ops a composite op decomposes into, not
                                         what a backend kernel does inside)

``where="any"`` (the default) counts every such read as if its tensor lived on an accelerator: on a
CPU-only machine nothing else can be seen, so the count bounds a GPU run's from above (a host tensor
made on purpose, e.g. a tree's mask, is counted too). ``where="device"`` counts reads of non-CPU tensors
only, which is a GPU run's exact count. Explicit waits (``torch.cuda.synchronize``, an event's or a
stream's ``synchronize``, ``generation.synchronize``) are recorded under the name "synchronize".
:func:`cuda_sync_warnings` is the GPU's own check: CUDA's sync debug mode, which warns at every
synchronising call the driver sees.
"""

from __future__ import annotations

import contextlib
import sys
import warnings
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

# Tensor methods / torch functions whose result is a host value computed from device data.
_READS = {"item", "tolist", "numpy", "cpu", "__bool__", "__int__", "__float__", "__index__", "__contains__",
          "__format__", "nonzero", "masked_select", "equal", "allclose", "unique", "unique_consecutive", "argwhere"}
# The same at the dispatch level (C++ calls that never pass through Python's torch functions).
_ATEN = {"_local_scalar_dense", "nonzero", "masked_select", "is_nonzero", "equal", "unique_dim",
         "_unique", "_unique2", "unique_consecutive", "argwhere"}
_MISSING = object()  # an attribute a patch added (restored by deleting it)


@dataclass(frozen=True)
class Sync:
    """One host sync: ``what`` (e.g. "tolist", "aten._local_scalar_dense", "synchronize"), the step it
    happened in (0: before the first step, -1: after the last, see ``HostSyncs.step_at``) and ``where``,
    the innermost frame outside torch and this module."""

    what: str
    step: int
    where: str = ""


def _on_device(t: object) -> bool:
    return isinstance(t, torch.Tensor) and t.device.type != "cpu"


def _index_syncs(index: object) -> bool:
    """Does this index read device data on the host: a 0-dim integer tensor, or a bool / uint8 mask?"""
    parts = index if isinstance(index, tuple) else (index,)
    return any(isinstance(p, torch.Tensor) and (p.dim() == 0 or p.dtype in (torch.bool, torch.uint8)) for p in parts)


def _index_tensors(index: object) -> list[torch.Tensor]:
    parts = index if isinstance(index, tuple) else (index,)
    return [p for p in parts if isinstance(p, torch.Tensor)]


def _caller() -> str:
    """file:line of the innermost frame that is not torch's nor this module's (where the sync was asked)."""
    import traceback

    for frame in reversed(traceback.extract_stack()[:-2]):
        name = frame.filename.replace("\\", "/")
        if "/torch/" not in name and not name.endswith("/syncs.py"):
            return f"{'/'.join(name.split('/')[-2:])}:{frame.lineno}"
    return "?"


class _FunctionLevel(TorchFunctionMode):
    def __init__(self, owner: HostSyncs) -> None:
        super().__init__()
        self.owner = owner

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        what = None
        if name in _READS:
            what = name
            tensors = [a for a in args if isinstance(a, torch.Tensor)]
        elif name in ("__getitem__", "__setitem__") and len(args) > 1 and _index_syncs(args[1]):
            what = f"{name} with a tensor index"
            tensors = _index_tensors(args[1])
        elif name == "to" and args and isinstance(args[0], torch.Tensor):
            target = kwargs.get("device", next((a.device if isinstance(a, torch.Tensor) else a for a in args[1:]
                                                if isinstance(a, (str, torch.device, torch.Tensor))), None))
            if target is not None and torch.device(target).type == "cpu" and args[0].device.type != "cpu":
                what, tensors = "to(cpu)", [args[0]]
        if what is None or self.owner.counting:  # not a read, or inside one already counted
            return func(*args, **kwargs)
        if self.owner.where == "any" or any(_on_device(t) for t in tensors):
            self.owner.record(what)
        self.owner.counting += 1
        try:
            return func(*args, **kwargs)
        finally:
            self.owner.counting -= 1


class _DispatchLevel(TorchDispatchMode):
    def __init__(self, owner: HostSyncs) -> None:
        super().__init__()
        self.owner = owner

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if not self.owner.counting:
            what = self._what(func, args, kwargs)
            if what is not None:
                self.owner.record(f"aten.{what}")
        return func(*args, **kwargs)

    def _what(self, func, args, kwargs) -> str | None:
        name = func.__name__.split(".")[0]  # "index.Tensor" → "index"
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        anywhere = self.owner.where == "any"
        if name in _ATEN:
            return name if anywhere or any(_on_device(t) for t in tensors) else None
        if name in ("index", "index_put", "index_put_") and len(args) > 1:
            masks = [i for i in args[1] if isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8)]
            return f"{name} with a bool index" if masks and (anywhere or any(map(_on_device, masks))) else None
        if name == "repeat_interleave" and func.__name__.endswith("Tensor") and kwargs.get("output_size") is None:
            # the output's length is the repeats' sum: read on the host unless the caller gives output_size
            return name if anywhere or any(map(_on_device, tensors)) else None
        if name == "_to_copy" and tensors and _on_device(tensors[0]):
            device = kwargs.get("device")
            return "copy to the host" if device is not None and torch.device(device).type == "cpu" else None
        if name == "copy_" and len(tensors) > 1 and tensors[0].device.type == "cpu" and _on_device(tensors[1]):
            return "copy to the host"
        return None


class HostSyncs:
    """``with HostSyncs() as syncs: …`` records every host sync inside (module docstring); ``syncs.events``,
    ``syncs.counts()`` (by name), ``syncs.per_step()``. ``where``: "any" (every read, the CPU's upper
    bound) or "device" (reads of accelerator tensors only)."""

    def __init__(self, where: str = "any") -> None:
        if where not in ("any", "device"):
            raise ValueError(f'where must be "any" (count every read) or "device" (non-CPU tensors only), got {where!r}')
        self.where, self.events, self.step, self.steps, self.counting = where, [], 0, 0, 0
        self._patches: list[tuple[object, str, object]] = []
        self._stack = contextlib.ExitStack()

    def record(self, what: str) -> None:
        self.events.append(Sync(what, self.step, _caller()))

    def new_step(self) -> None:
        """Start the next step's bucket (``step_at`` calls it for you)."""
        self.steps += 1
        self.step = self.steps

    def step_at(self, owner: object, name: str, end: bool = False) -> None:
        """Every call of ``owner.name`` (a module's function or an object's method) starts a new step — or,
        with ``end``, closes the steps: what follows (the end of a run) is counted as step -1. Undone on exit."""
        original = getattr(owner, name)

        def marked(*args, **kwargs):
            if end:
                self.step = -1
            else:
                self.new_step()
            return original(*args, **kwargs)

        self._patch(owner, name, marked)

    def _patch(self, owner: object, name: str, new: object) -> None:
        self._patches.append((owner, name, vars(owner).get(name, _MISSING)))  # restored as it was, on exit
        setattr(owner, name, new)

    def _wait(self, original):
        def wait(*args, **kwargs):
            if not self.counting:
                self.record("synchronize")
            self.counting += 1
            try:
                return original(*args, **kwargs)
            finally:
                self.counting -= 1

        return wait

    def __enter__(self) -> HostSyncs:
        from .. import generation

        original = generation.synchronize
        wait = self._wait(original)
        for module in [m for name, m in sys.modules.items() if name.startswith("specdec_core") and m is not None]:
            if vars(module).get("synchronize") is original:  # also `from .generation import synchronize`
                self._patch(module, "synchronize", wait)
        self._patch(torch.cuda, "synchronize", self._wait(torch.cuda.synchronize))
        for cls in (torch.cuda.Event, torch.cuda.Stream):
            self._patch(cls, "synchronize", self._wait(cls.synchronize))
        if hasattr(torch, "mps"):
            self._patch(torch.mps, "synchronize", self._wait(torch.mps.synchronize))
        self._stack.enter_context(_FunctionLevel(self))
        self._stack.enter_context(_DispatchLevel(self))
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()
        for owner, name, original in reversed(self._patches):
            if original is _MISSING:
                delattr(owner, name)  # it was inherited (a class's method) or a class's (on an instance)
            else:
                setattr(owner, name, original)
        self._patches.clear()

    def counts(self, step: int | None = None) -> Counter:
        """Syncs by name, of one step or (None) of the whole block."""
        return Counter(e.what for e in self.events if step is None or e.step == step)

    def per_step(self, what: str | None = None) -> list[int]:
        """Syncs in each step 1 … n (those named ``what`` only, if given; "synchronize" excluded unless named)."""
        out = [0] * self.steps
        for e in self.events:
            if e.step > 0 and (e.what == what if what else e.what != "synchronize"):
                out[e.step - 1] += 1
        return out

    def report(self, step: int) -> str:
        """One line per sync of ``step``: what and where (for an assertion's message)."""
        return "\n".join(f"  {e.what} at {e.where}" for e in self.events if e.step == step) or "  (none)"


@contextlib.contextmanager
def cuda_sync_warnings() -> Iterator[list[str]]:
    """``with cuda_sync_warnings() as found: …`` runs the block under ``torch.cuda.set_sync_debug_mode("warn")``
    and collects the message of every synchronising CUDA call it makes (an empty list without CUDA: a CPU
    has nothing to wait for). The mode is restored afterwards."""
    found: list[str] = []
    if not torch.cuda.is_available():
        yield found
        return
    before = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield found
        found.extend(str(w.message) for w in caught if "synchroniz" in str(w.message).lower())
    finally:
        torch.cuda.set_sync_debug_mode(before)
