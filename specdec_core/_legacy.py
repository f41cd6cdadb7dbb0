"""Old module paths, kept working for one release after the package was reorganised.

A student's edited exercise is never regenerated, so ``from specdec_core.distill import FEATURE_FILE``
must keep working for a while. Each old path below is served by a small module that looks every name
up in the new places (in order) and says, once, where it lives now. Delete this file (and its two
lines in ``__init__.py``) in the next release.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings

# old module → (new modules to search, in order; names that were renamed: old → "module:new")
MOVED: dict[str, tuple[tuple[str, ...], dict[str, str]]] = {
    "benchmark": (("bench.runner", "bench.report", "bench.__main__"), {}),
    "methods": (("bench.methods",), {"hf_generate": "peers:hf_generate"}),
    "drafter_eval": (("bench.drafters",), {}),
    "quantized": (("bench.quantized", "memory"), {}),
    "cllm_eval": (("bench.cllm_eval", "bench.quality"),
                  {"first_difference": "generation:common_prefix", "main": "bench.cllm_eval:evaluate"}),
    "cllm_train": (("train.cllm_finetune", "models"), {"ADAPTER_DIR": "assets:CLLM_DIR"}),
    "distill": (("train.distill", "assets"), {"LOG_FILE": "assets:DRAFTS_LOG", "main": "train.__main__:main"}),
    "distill_data": (("train.corpus", "train.requests"), {"atomic_save": "files:torch_save", "atomic_write_json": "files:write_json"}),
    "viz_drafts": (("viz.drafts",), {"_smooth": "viz.drafts:moving_average"}),
    "viz_cllm": (("viz.cllm",), {}),
    "widgets": (("viz.widgets",), {}),
}


class _Moved(types.ModuleType):
    """A stand-in for an old module: attribute lookups go to the new modules."""

    def __init__(self, old: str, targets: tuple[str, ...], renamed: dict[str, str]) -> None:
        super().__init__(f"{__package__}.{old}", f"Moved: use {', '.join(f'specdec_core.{t}' for t in targets)}.")
        self._targets, self._renamed = targets, renamed

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        if name in self._renamed:
            module, _, new = self._renamed[name].partition(":")
            return getattr(importlib.import_module(f"{__package__}.{module}"), new)
        for target in self._targets:
            module = importlib.import_module(f"{__package__}.{target}")
            if hasattr(module, name):
                return getattr(module, name)
        raise AttributeError(f"{self.__name__} has no {name!r} (the module moved: {self.__doc__})")


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        package, _, old = fullname.rpartition(".")
        if package == __package__ and old in MOVED:
            return importlib.machinery.ModuleSpec(fullname, self)
        return None

    def create_module(self, spec):
        old = spec.name.rpartition(".")[2]
        module = _Moved(old, *MOVED[old])
        warnings.warn(f"{spec.name} moved in this release — {module.__doc__} The old path goes away in the next one.",
                      FutureWarning, stacklevel=2)
        return module

    def exec_module(self, module) -> None:
        pass


def install() -> None:
    """Serve the old paths (idempotent)."""
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.append(_Finder())
