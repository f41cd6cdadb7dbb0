"""The narrow domain of lesson 08 (CLLM): chat requests for short Python functions — all offline.

Every task is a (name, arguments, description) triple; four request patterns turn it into four chat
prompts. Every fifth task is held out: ``train()`` never contains it, ``heldout()`` only it, so
the CLLM is measured on functions it never saw. HumanEval (``prompts.humaneval()``) is never trained
on either; ``humaneval_prompt`` asks for a HumanEval problem in the same chat form.
"""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path

# (function name, arguments, what it does: a phrase that follows "that ..."), one task a line in the JSON file
_TASKS_FILE = Path(__file__).parent / "data" / "code_tasks.json"
TASKS: list[tuple[str, str, str]] = [tuple(task) for task in json.loads(_TASKS_FILE.read_text(encoding="utf-8"))]

PATTERNS: list[str] = [
    "Write a Python function that {desc}.",
    "Write a Python function `{name}({args})` that {desc}.",
    'Complete this Python function:\n```python\ndef {name}({args}):\n    """{Desc}."""\n```',
    "How do I write a function in Python that {desc}?",
]


# Unit tests the course wrote for the held-out tasks: expressions about ``f``, the answer's function
# (the task's name if the answer defines it, else the last function it defines). Each must be true;
# where a request leaves a convention open (F(0) = 0 or 1, population or sample variance) both count.
HELDOUT_CHECKS: dict[str, list[str]] = {
    "fibonacci": ["f(10) in (34, 55)", "f(20) in (4181, 6765)"],
    "average": ["abs(f([1, 2, 3, 4]) - 2.5) < 1e-9", "f([5]) == 5"],
    "remove_duplicates": ["list(f([3, 1, 3, 2, 1])) == [3, 1, 2]", "list(f([])) == []"],
    "square_list": ["list(f([1, -2, 3])) == [1, 4, 9]"],
    "invert_dict": ["f({'a': 1, 'b': 2}) == {1: 'a', 2: 'b'}"],
    "is_sorted": ["f([1, 2, 2, 5])", "not f([3, 1, 2])"],
    "is_leap_year": ["f(2000)", "not f(1900)", "f(2024)", "not f(2023)"],
    "from_binary": ["f('1011') == 11", "f('0') == 0"],
    "longest_word": ["f('the quick brownish fox') == 'brownish'"],
    "count_upper": ["f('Hello World ABC') == 5", "f('abc') == 0"],
    "distance": ["abs(f((0, 0), (3, 4)) - 5) < 1e-9"],
    "matrix_multiply": ["[list(r) for r in f([[1, 2], [3, 4]], [[5, 6], [7, 8]])] == [[19, 22], [43, 50]]"],
    "variance": ["min(abs(f([2, 4, 4, 4, 5, 5, 7, 9]) - v) for v in (4, 32 / 7)) < 1e-9"],
    "extract_digits": ["''.join(map(str, f('a1b22c3'))) == '1223'"],
    "unique_chars": ["f('abc')", "not f('abca')"],
    "primes_below": ["list(f(20)) == [2, 3, 5, 7, 11, 13, 17, 19]"],
    "count_positive": ["f([1, -2, 3, 0, 5]) == 3"],
    "balanced_brackets": ["f('([]{})')", "not f('(]')", "not f('(()')"],
    "replace_spaces": ["f('a b c') == 'a_b_c'"],
}


def _render(pattern: str, task: tuple[str, str, str]) -> str:
    name, args, desc = task
    return pattern.format(name=name, args=args, desc=desc, Desc=desc[0].upper() + desc[1:])


def train(seed: int = 0) -> list[str]:
    """Chat prompts of the training tasks (4 of every 5), every pattern, shuffled with ``seed``."""
    tasks = [t for i, t in enumerate(TASKS) if i % 5 != 4]
    prompts = [_render(p, t) for t, p in itertools.product(tasks, PATTERNS)]
    random.Random(seed).shuffle(prompts)
    return prompts


def heldout() -> list[str]:
    """Chat prompts of the held-out tasks (every fifth), one pattern each in turn — never trained on."""
    return [_render(PATTERNS[i % len(PATTERNS)], t) for i, t in enumerate(heldout_tasks())]


def heldout_tasks() -> list[tuple[str, str, str]]:
    """The held-out tasks, in the order of ``heldout()``'s prompts."""
    return [t for i, t in enumerate(TASKS) if i % 5 == 4]


def humaneval_prompt(problem: dict) -> str:
    """A HumanEval problem asked in the same chat form as the training prompts."""
    return "Complete this Python function:\n```python\n" + problem["prompt"].strip("\n") + "\n```"
