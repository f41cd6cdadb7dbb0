"""llama.cpp, the peer a CPU user would pick instead: the offline target as a GGUF, and the benchmark's rows.

An optional extra (pyproject's ``llamacpp``; ``make llama-cpp`` builds llama-cpp-python from its source
distribution, several minutes on 2 cores, and keeps that distribution in ``$SPECDEC_CACHE/wheels``).
``make setup`` and ``make test`` never need it: without it the rows below are listed in the report's
``not_available`` with that command (``methods.NOT_AVAILABLE``).

The GGUF (f32 and f16) is made once per precision from the converted offline target
(``assets.ensure_target_dir()``) with the converter llama.cpp's source distribution ships
(``vendor/llama.cpp/convert_hf_to_gguf.py`` with its ``conversion/`` package and its own ``gguf-py``:
the converter needs that tree's gguf, newer than PyPI's gguf 0.19.0 pinned in requirements.txt although
both carry the label 0.19.0, so it runs in a subprocess with its own, as llama.cpp runs it). It is cached
like the model, ``$SPECDEC_CACHE/models/smollm2-135m-instruct-gguf/{f32,f16}.gguf`` beside a manifest
naming the source it was made from (a re-converted target makes it again), written atomically.

The rows (``methods.build_methods`` adds them when the extra is installed): llama.cpp's greedy decoding at f32
and f16, and its own prompt lookup (``LlamaPromptLookupDecoding``, n-grams up to 3 as ours, ``k`` tokens per
step as ``--lookup-tokens``), fed the same chat-template token ids as our methods, on as many threads as torch
uses, the context reset before each run so every run prefills (``peers.llama_cpp_generate``).

They are timed in the bench's own process, interleaved with torch's rows. Could torch's OpenMP threads, still
spinning after a torch call, slow the llama.cpp call that follows? Measured (issue 56's closing note: the same f16
GGUF, 64 tokens, 6 runs, in a process of its own against interleaved with our AR): no — the rates agreed within
their min–max. Setting ``OMP_WAIT_POLICY=PASSIVE`` to calm torch's threads halved both (this llama.cpp build uses
OpenMP too), so the bench leaves it unset.

    python -m specdec_core.bench.llamacpp --gguf f32 f16   # make (or find) the GGUFs and print their sizes
    python -m specdec_core.bench.llamacpp --rows           # ",llamacpp_ar,…" when installed, else "" (make bench)
"""

from __future__ import annotations

import argparse
import atexit
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import torch
from filelock import FileLock

from .. import assets
from ..files import atomic_dir, atomic_write
from ..generation import Generation
from ..memory import MB
from ..models import OFFLINE, Pair
from ..peers import llama_cpp_generate

VERSION = "0.3.36"  # llama-cpp-python: the same pin as pyproject's extra "llamacpp" and the Makefile's (a test checks)
INSTALL = "make llama-cpp"
SDIST = f"llama_cpp_python-{VERSION}.tar.gz"
VENDOR = f"llama_cpp_python-{VERSION}/vendor/llama.cpp/"  # where the converter lies inside the source distribution
CONVERTER = ("convert_hf_to_gguf.py", "conversion", "gguf-py")  # what of it the converter needs
CONVERTER_SCRIPT = "convert_hf_to_gguf.py"
OUTTYPES = ("f32", "f16")
GGUF_DIRNAME = f"{assets.TARGET_DIRNAME}-gguf"
GGUF_MANIFEST_VERSION = 1
N_CTX = 2048  # the llama.cpp context: the longest prompt of the benchmark and its new tokens fit

ROWS: dict[str, tuple[str, bool]] = {  # name → (GGUF precision, llama.cpp's prompt lookup?)
    "llamacpp_ar": ("f32", False),
    "llamacpp_ar_f16": ("f16", False),
    "llamacpp_lookup": ("f32", True),
    "llamacpp_lookup_f16": ("f16", True),
}


def installed() -> bool:
    """True when llama-cpp-python can be imported (found without importing it: loading its library is not free)."""
    return importlib.util.find_spec("llama_cpp") is not None


def not_available(is_installed: bool | None = None) -> dict[str, str]:
    """The rows' one-line reasons, for ``methods.NOT_AVAILABLE``: empty when the extra is installed."""
    if is_installed if is_installed is not None else installed():
        return {}
    return {name: f"{row_label(name, 4)}, needs the optional llama.cpp extra: run `{INSTALL}` (builds "
                  "llama-cpp-python from source, several minutes)" for name in ROWS}


def row_label(name: str, lookup_tokens: int) -> str:
    outtype, lookup = ROWS[name]
    what = f"prompt lookup (n-gram ≤ 3), k={lookup_tokens}" if lookup else "greedy"
    return f"llama.cpp {what}, {outtype} GGUF"


# ---- the GGUF ------------------------------------------------------------------------------------


def missing_extra(what: str) -> assets.AssetMissingError:
    return assets.AssetMissingError(f"{what} is not on this machine: run `{INSTALL}` (the optional llama.cpp extra; "
                                    "it builds llama-cpp-python from source and keeps its source distribution, "
                                    "whose converter makes the GGUF)")


def converter_dir() -> Path:
    """The folder with llama.cpp's converter (``convert_hf_to_gguf.py``, ``conversion/``, ``gguf-py/``), taken
    once out of the source distribution ``make llama-cpp`` keeps in ``$SPECDEC_CACHE/wheels``."""
    folder = assets.cache_dir() / f"llama-cpp-converter-{VERSION}"
    if (folder / CONVERTER_SCRIPT).is_file():
        return folder
    sdist = assets.cache_dir() / "wheels" / SDIST
    if not sdist.is_file():
        raise missing_extra(f"llama.cpp's GGUF converter (in {SDIST}, looked for in {assets.shown(sdist.parent)})")
    with FileLock(str(assets.cache_dir() / f"llama-cpp-converter-{VERSION}.lock")):
        if not (folder / CONVERTER_SCRIPT).is_file():
            extract_converter(sdist, folder)
    return folder


def extract_converter(sdist: Path, folder: Path) -> None:
    """``folder`` ← the converter's files of ``sdist`` (paths relative to ``vendor/llama.cpp``), all or nothing."""
    safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}  # no link or path out of the folder
    with tarfile.open(sdist) as tar, atomic_dir(folder) as tmp:
        members = [m for m in tar.getmembers()
                   if m.name.startswith(VENDOR) and m.name[len(VENDOR):].split("/")[0] in CONVERTER]
        if not any(m.name == VENDOR + CONVERTER_SCRIPT for m in members):
            raise RuntimeError(f"{sdist.name} has no {VENDOR}{CONVERTER_SCRIPT}")
        for m in members:
            m.name = m.name[len(VENDOR):]
        tar.extractall(tmp, members=members, **safe)


def gguf_path(outtype: str) -> Path:
    return assets.cache_dir() / "models" / GGUF_DIRNAME / f"{outtype}.gguf"


def read_manifest(outtype: str) -> dict | None:
    try:
        return json.loads(gguf_path(outtype).with_suffix(".json").read_text())
    except (OSError, ValueError):
        return None


def ensure_gguf(outtype: str = "f32", rebuild: bool = False) -> Path:
    """The offline target as a GGUF in ``outtype`` ("f32" or "f16"), converted once with llama.cpp's own converter
    (about as long as loading the target; a clear error naming ``make llama-cpp`` without the extra)."""
    if outtype not in OUTTYPES:
        raise ValueError(f"outtype must be one of {OUTTYPES}, not {outtype!r}")
    converter = converter_dir()
    if importlib.util.find_spec("sentencepiece") is None:  # the converter imports it for every Llama vocabulary
        raise missing_extra("sentencepiece (which llama.cpp's converter imports)")
    source = assets.ensure_target_dir()
    stamp = {"version": GGUF_MANIFEST_VERSION, "llama_cpp_python": VERSION, "outtype": outtype,
             "source": json.loads((source / assets.MANIFEST).read_text())["source"]}
    path = gguf_path(outtype)
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path.parent / f".{outtype}.lock")):
        made = read_manifest(outtype)
        if not rebuild and made and path.is_file() and made.get("stamp") == stamp and made.get("bytes") == path.stat().st_size:
            return path
        with tempfile.TemporaryDirectory(dir=path.parent, prefix=f".{outtype}-") as scratch:
            out = Path(scratch) / path.name
            convert(converter, source, outtype, out)
            with open(out, "rb") as made_file:
                atomic_write(path, lambda f: shutil.copyfileobj(made_file, f, 1 << 20))
        atomic_write(path.with_suffix(".json"), json.dumps(
            {"stamp": stamp, "bytes": path.stat().st_size, "tensor_bytes": tensor_bytes(path)}, indent=1))
    return path


def convert(converter: Path, source: Path, outtype: str, out: Path) -> None:
    """Run ``convert_hf_to_gguf.py`` (with the gguf-py beside it: NO_LOCAL_GGUF unset) on ``source``."""
    env = {k: v for k, v in os.environ.items() if k != "NO_LOCAL_GGUF"}
    done = subprocess.run([sys.executable, str(converter / CONVERTER_SCRIPT), "--outtype", outtype,
                           "--outfile", str(out), str(source)], capture_output=True, text=True, env=env)
    if done.returncode != 0 or not out.is_file():
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-12:])
        raise RuntimeError(f"llama.cpp's converter failed on the offline target ({outtype}, exit {done.returncode}):\n{tail}")


def tensor_bytes(path: Path) -> int:
    """Bytes of the GGUF's tensors (the file less its metadata: the tokenizer, the hyper-parameters)."""
    from gguf import GGUFReader

    return sum(int(t.n_bytes) for t in GGUFReader(path).tensors)


class GgufWeights(torch.nn.Module):
    """A GGUF file as the benchmark counts weights: one buffer on the meta device (no memory) as large as the
    file's tensors, so ``memory.weight_bytes`` reads their bytes, and a fresh process (``bench.fresh``) keeps no
    torch weight of the pair for a llama.cpp row (llama.cpp reads its own file)."""

    def __init__(self, nbytes: int) -> None:
        super().__init__()
        self.register_buffer("tensors", torch.empty(nbytes, dtype=torch.uint8, device="meta"), persistent=False)


# ---- the model and the benchmark's rows ------------------------------------------------------------


def load_llama(outtype: str = "f32", lookup_tokens: int | None = None, n_ctx: int = N_CTX) -> Any:
    """A ``llama_cpp.Llama`` on the offline target's GGUF, as many threads as torch uses; with ``lookup_tokens``,
    llama.cpp's prompt lookup (n-grams up to 3, ``lookup_tokens`` draft tokens per step) as its draft model."""
    if not installed():
        raise missing_extra("llama.cpp (llama-cpp-python)")
    from llama_cpp import Llama
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    draft = LlamaPromptLookupDecoding(max_ngram_size=3, num_pred_tokens=lookup_tokens) if lookup_tokens else None
    threads = torch.get_num_threads()
    llm = Llama(model_path=str(ensure_gguf(outtype)), n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads,
                draft_model=draft, seed=0, verbose=False)
    atexit.register(llm.close)  # freed before the interpreter tears llama_cpp down (else its __del__ fails noisily)
    return llm


def rows(lookup_tokens: int = 4) -> dict[str, dict[str, Any]]:
    """The llama.cpp rows as keyword arguments of ``methods.Method`` (fn, label, models, prepare). Each
    model is loaded once, in ``prepare`` (untimed); the offline preset only (the GGUF is its target's)."""
    made: dict[tuple[str, int | None], Any] = {}
    weights: dict[str, GgufWeights] = {}

    def model(pair: Pair, outtype: str, k: int | None) -> Any:
        if pair.preset != OFFLINE:
            raise ValueError(f"the llama.cpp rows run the offline target's GGUF, not the {pair.preset!r} preset")
        if (outtype, k) not in made:
            made[outtype, k] = load_llama(outtype, k)
        return made[outtype, k]

    def held(pair: Pair, outtype: str) -> list[torch.nn.Module]:
        if outtype not in weights:
            manifest = read_manifest(outtype) or {}
            weights[outtype] = GgufWeights(manifest.get("tensor_bytes") or tensor_bytes(ensure_gguf(outtype)))
        return [weights[outtype]]

    def run(get: Callable[[Pair], Any], pair: Pair, ids: torch.Tensor, n: int) -> Generation:
        return llama_cpp_generate(get(pair), ids, n, eos_token_id=pair.tokenizer.eos_token_id)

    out = {}
    for name, (outtype, lookup) in ROWS.items():
        get = partial(model, outtype=outtype, k=lookup_tokens if lookup else None)
        out[name] = {"fn": partial(run, get), "label": row_label(name, lookup_tokens),
                     "models": partial(held, outtype=outtype), "prepare": get}
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m specdec_core.bench.llamacpp", description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", action="store_true", help="print ',name,…' of the rows when installed, else nothing")
    p.add_argument("--gguf", nargs="*", choices=OUTTYPES, help="make (or find) the offline target's GGUF(s)")
    p.add_argument("--rebuild", action="store_true", help="with --gguf: convert again")
    args = p.parse_args(argv)
    if args.rows:
        print("".join(f",{name}" for name in ROWS) if installed() else "")
    for outtype in args.gguf or ():
        path = ensure_gguf(outtype, args.rebuild)
        tensors = (read_manifest(outtype) or {}).get("tensor_bytes", 0)
        print(f"{outtype}: {assets.shown(path)}, {path.stat().st_size / MB:,.1f} MB ({tensors / MB:,.1f} MB of tensors)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
