"""Writing files so that nothing is ever half-written: the one atomic writer of the course.

Every cache, checkpoint, report and shipped weight file goes through :func:`atomic_write` (a folder of files
through :func:`atomic_dir`): the data is written to a fresh temporary file in the same folder (a unique name,
so two writers never share it), flushed to disk, then renamed over the target in one step (``os.replace``).
A reader sees the old file or the new one, never a mixture; a crash leaves the old file in place.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any


def atomic_write(path: Path | str, data: bytes | str | Callable[[IO[bytes]], Any]) -> Path:
    """Write ``data`` to ``path`` atomically and return the path. ``data``: bytes, text (UTF-8), or a function
    that writes into the open binary file (``lambda f: torch.save(obj, f)``). Missing parent folders are
    created; a replaced file keeps its permissions, a new one gets the usual ones (0o666 less the umask)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o666 & ~_umask()
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            if callable(data):
                data(f)
            else:
                f.write(data.encode("utf-8", "surrogateescape") if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)  # mkstemp makes the file private
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


@contextmanager
def atomic_dir(path: Path | str) -> Iterator[Path]:
    """A folder that appears complete or not at all: ``with atomic_dir(path) as tmp:`` fill ``tmp``
    (a fresh folder beside ``path``); on success it is renamed to ``path``, on an error removed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp"))
    try:
        yield tmp
        os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp makes the folder private
        os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def json_safe(obj: Any) -> Any:
    """``obj`` with every non-finite float (NaN, ±inf) replaced by None: strict JSON has no NaN."""
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [json_safe(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def write_json(obj: Any, path: Path | str, indent: int | None = None) -> Path:
    """``json.dumps(json_safe(obj))`` written with :func:`atomic_write` (strict JSON: NaN → null)."""
    return atomic_write(path, json.dumps(json_safe(obj), indent=indent, allow_nan=False))


def read_report(path: Path | str, schema: int, command: str, key: str) -> dict | None:
    """A stored report (a JSON object of ``schema`` with a non-empty ``key``), or None when the file is absent (its
    make step has not run). Not JSON, another schema or no ``key``: an error saying to run ``command`` again."""
    path = Path(path)
    if not path.is_file():
        return None
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} is not JSON ({e}): run `{command}` to write it again") from e
    if not isinstance(report, dict) or report.get("schema") != schema or not report.get(key):
        found = report.get("schema") if isinstance(report, dict) else type(report).__name__
        raise ValueError(f"{path} has schema {found!r} or no {key!r}; this course reads schema {schema}: "
                         f"run `{command}` again")
    return report


def torch_save(obj: Any, path: Path | str) -> Path:
    """``torch.save(obj)`` written with :func:`atomic_write`."""
    import torch

    return atomic_write(path, lambda f: torch.save(obj, f))
