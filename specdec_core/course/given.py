"""What the grader gives a capstone's tests: the offline pair, its tokenizer and the vocabulary size; and
the record a student's own loop returns (capstone 1: :class:`LoopStats`).

    from specdec_core.course.given import offline
    pair, tok, V = offline()              # capstone 1: the plain pair
    pair, tok, V = offline(fast=True)     # capstones 2 and 3: the pair on prepacked linears (pair.fast())

otter runs a test in a copy of the submission's namespace, so a test that reads ``pair``, ``tok``,
``chat_ids`` or ``V`` from it reads whatever the student last bound to those names (``V = 2``, a toy
pair of their own): a correct answer could lose points and a wrong one could gain them. Every test of
a master therefore imports what it uses and takes the models from here; it reads from the notebook
only the names the student was asked to write (``tests/test_assignments_shadowing.py`` checks every
master). The pair is loaded once per grading kernel — a copy of its own, never the notebook's — and
kept across ``importlib.reload`` of :mod:`.grading`, which the hidden tests do.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..records import RunStats

_LOADED: dict = {}  # "plain" → the offline pair, loaded on first use
# the core goals' verdicts (core_goals.unmet), kept across the hidden tests' reloads of grading and core_goals:
# (capstone, grading seed, the answers' function and code objects) → the unmet goals' messages
VERDICTS: dict = {}


def offline(fast: bool = False):
    """``(pair, tokenizer, vocabulary size)`` of the course's offline pair, loaded by the grader."""
    if "plain" not in _LOADED:
        from ..models import load_pair

        _LOADED["plain"] = load_pair("offline")
    pair = _LOADED["plain"].fast() if fast else _LOADED["plain"]
    return pair, pair.tokenizer, pair.target.config.vocab_size


@dataclass
class LoopStats(RunStats):
    """What capstone 1's loop returns: the run fields (``target_calls``, ``new_tokens``; ``tokens_per_call``
    derived) and the ``alpha`` the loop counted itself — accepted ÷ examined guesses, which the grader checks
    against what really ran (the library's :class:`~specdec_core.records.SpecStats` derives it from its steps)."""

    alpha: float = math.nan
