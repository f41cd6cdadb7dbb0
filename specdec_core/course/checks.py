"""The check protocol of the exercises: deterministic ✓ / ✗ lines, and an exception on failure.

    with Checks("sample_step") as c:
        out = c.call(student_fn, logits, 0.0)
        c.expect(out == 3, "greedy picks the argmax", "at temperature 0 return logits.argmax()")

prints one line per expectation and raises :class:`CheckFailed` at the end if any failed, so
nbval and nbgrader's autograde both see the failure.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from typing import Any


class CheckFailed(AssertionError):
    """At least one expectation of an exercise check failed (the printed ✗ lines say which)."""


class _Skip(Exception):
    """Raised by :meth:`Checks.call` after a crash, to skip the remaining expectations."""


class Checks:
    """Collects expectations about a student's function and reports them."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.passed: list[str] = []
        self.failed: list[str] = []

    def __enter__(self) -> Checks:
        return self

    def expect(self, condition: Any, what: str, hint: str) -> bool:
        ok = bool(condition)
        if ok:
            self.passed.append(what)
            print(f"✓ {what}")
        else:
            self.failed.append(what)
            print(f"✗ {what} — hint: {hint}")
        return ok

    def call(self, fn: Callable, *args: Any, **kwargs: Any) -> Any:
        """Run the student's function; a crash is reported as one ✗ and ends the check."""
        try:
            return fn(*args, **kwargs)
        except NotImplementedError:
            self.expect(False, f"{self.name} runs", "replace `raise NotImplementedError` with your code")
        except Exception as err:  # the student's bug, shown briefly
            last = traceback.extract_tb(err.__traceback__)[-1]
            self.expect(False, f"{self.name} runs", f"it raised {type(err).__name__}: {err} (line {last.lineno})")
        raise _Skip

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is not None and not issubclass(exc_type, _Skip):
            return False
        if self.failed:
            raise CheckFailed(f"{self.name}: {len(self.failed)} check(s) failed: {'; '.join(self.failed)}")
        n = len(self.passed)
        print(f"All {n} checks of {self.name} passed." if n > 1 else f"The check of {self.name} passed.")
        return True
