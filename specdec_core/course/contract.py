"""A function's contract — its signature and docstring, not its body — for a lesson to show.

    print(contract(speculative.verify))

A lesson explains what a function does; the matching exercise asks the student to write its body.
Printing the whole source would hand the answer out, so lessons print the contract instead and point
to the file (``tests/test_exercises.py`` fails if a lesson prints the source of an exercise's function).
"""

from __future__ import annotations

import inspect
import textwrap
from collections.abc import Callable


class _Written:
    """An annotation kept as written (``from __future__ import annotations`` stores strings): no quotes."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def _unquoted(a: object) -> object:
    return _Written(a) if isinstance(a, str) else a


def contract(fn: Callable, exercise: str | None = None) -> str:
    """``def name(signature):`` with its docstring and the file it lives in; the body left out."""
    sig = inspect.signature(fn)
    sig = sig.replace(parameters=[p.replace(annotation=_unquoted(p.annotation)) for p in sig.parameters.values()],
                      return_annotation=_unquoted(sig.return_annotation))
    doc = textwrap.indent(inspect.cleandoc(fn.__doc__ or ""), "    ")
    # the function's own file, not its decorator's (torch.inference_mode wraps it)
    where = f"{inspect.getsourcefile(inspect.unwrap(fn)).rsplit('specdec_core', 1)[-1].lstrip('/')}"
    body = f"    ...  # the body: {exercise}" if exercise else "    ..."
    return f'def {fn.__name__}{sig}:\n    """\n{doc}\n    """\n{body}\n# specdec_core/{where}'
