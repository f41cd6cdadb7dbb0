"""What machine is this? The table lesson 00 shows and every benchmark records next to its numbers."""

from __future__ import annotations

import importlib.metadata
import os
import platform

import psutil
import torch


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def environment() -> dict[str, str]:
    """Versions, device, threads and memory, as strings."""
    info = {
        "python": platform.python_version(),
        "platform": f"{platform.system()} {platform.machine()}",
        "cpu": platform.processor() or platform.machine(),
        "cpu cores (logical)": str(os.cpu_count()),
        "torch threads": str(torch.get_num_threads()),
        "memory (GiB)": f"{psutil.virtual_memory().total / 2**30:.1f}",
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none",
        "mps": str(torch.backends.mps.is_available()),
    }
    for package in ("torch", "transformers", "accelerate", "bitsandbytes", "peft", "jupyterlab", "ipywidgets"):
        info[package] = _version(package)
    return info


def markdown_table(rows: dict[str, str], header: tuple[str, str] = ("what", "value")) -> str:
    """A two-column Markdown table (renders in Jupyter and on the web)."""
    lines = [f"| {header[0]} | {header[1]} |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in rows.items()]
    return "\n".join(lines)
