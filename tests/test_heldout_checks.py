"""The course's unit tests for the CLLM's held-out code requests: each passes a reference solution and
fails a wrong one, whatever the answer names its function; code that does not parse or loops fails."""

from __future__ import annotations

import pytest

from specdec_core import code_prompts
from specdec_core.bench.quality import passes_checks

REFERENCE = {
    "fibonacci": "def fibonacci(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a",
    "average": "def average(numbers):\n    return sum(numbers) / len(numbers)",
    "remove_duplicates": "def remove_duplicates(items):\n    return list(dict.fromkeys(items))",
    "square_list": "def square_list(numbers):\n    return [x * x for x in numbers]",
    "invert_dict": "def invert_dict(d):\n    return {v: k for k, v in d.items()}",
    "is_sorted": "def is_sorted(items):\n    return all(a <= b for a, b in zip(items, items[1:]))",
    "is_leap_year": "def is_leap_year(year):\n    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)",
    "from_binary": "def from_binary(bits):\n    return int(bits, 2)",
    "longest_word": "def longest_word(text):\n    return max(text.split(), key=len)",
    "count_upper": "def count_upper(s):\n    return sum(c.isupper() for c in s)",
    "distance": "import math\ndef distance(p, q):\n    return math.dist(p, q)",
    "matrix_multiply": "def matrix_multiply(a, b):\n    return [[sum(x * y for x, y in zip(r, c)) for c in zip(*b)] for r in a]",
    "variance": "def variance(numbers):\n    m = sum(numbers) / len(numbers)\n    return sum((x - m) ** 2 for x in numbers) / len(numbers)",
    "extract_digits": "def extract_digits(s):\n    return [c for c in s if c.isdigit()]",
    "unique_chars": "def unique_chars(s):\n    return len(set(s)) == len(s)",
    "primes_below": "def primes_below(n):\n    return [p for p in range(2, n) if all(p % d for d in range(2, p))]",
    "count_positive": "def count_positive(numbers):\n    return sum(x > 0 for x in numbers)",
    "balanced_brackets": ("def balanced_brackets(s):\n    pairs, stack = {')': '(', ']': '[', '}': '{'}, []\n"
                          "    for c in s:\n        if c in '([{':\n            stack.append(c)\n"
                          "        elif c in pairs:\n            if not stack or stack.pop() != pairs[c]:\n"
                          "                return False\n    return not stack"),
    "replace_spaces": "def replace_spaces(s):\n    return s.replace(' ', '_')",
}


def _answer(code: str) -> str:
    return f"Here is the function:\n```python\n{code}\n```\nIt works for every input."


def test_every_held_out_task_has_checks_and_a_reference_passes_them():
    names = [name for name, _, _ in code_prompts.heldout_tasks()]
    assert len(names) == len(code_prompts.heldout()) == 19
    assert set(names) == set(code_prompts.HELDOUT_CHECKS) == set(REFERENCE)
    failed = [n for n in names if not passes_checks(_answer(REFERENCE[n]), n, code_prompts.HELDOUT_CHECKS[n])]
    assert not failed


@pytest.mark.parametrize("name", ["fibonacci", "is_leap_year", "balanced_brackets", "variance", "primes_below"])
def test_a_wrong_or_renamed_answer(name):
    checks = code_prompts.HELDOUT_CHECKS[name]
    renamed = REFERENCE[name].replace(f"def {name}(", "def solve(")
    assert passes_checks(_answer(renamed), name, checks)  # the model may choose its own name
    head, tail = REFERENCE[name].rsplit("return", 1)
    assert not passes_checks(_answer(f"{head}return None and{tail}"), name, checks)  # returns None


def test_code_that_does_not_parse_defines_nothing_or_never_ends_fails():
    checks = code_prompts.HELDOUT_CHECKS["count_upper"]
    assert not passes_checks("```python\ndef count_upper(s:\n```", "count_upper", checks)
    assert not passes_checks("```python\nprint('hello')\n```", "count_upper", checks)
    assert not passes_checks("```python\ndef count_upper(s):\n    while True: pass\n```", "count_upper", checks, timeout=2)
