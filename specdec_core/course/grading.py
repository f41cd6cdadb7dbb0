"""What the capstones' autograder tests use: tripwires on the library's own answers, and counters.

    with blocked("specdec_core.speculative.speculative_generate", "specdec_core.ar.generate"):
        out = student_function(...)          # a RuntimeError if it calls either, however imported

    with counting(model) as calls:           # forward passes of a model, and the tokens they read
        student_function(model, ...)
    calls.forwards, calls.tokens

A capstone asks the student to *write* something the library already has. Its hidden tests run the
student's code with the library's version blocked: :func:`blocked` swaps the function's code object
for one that raises, so every reference to it — ``import specdec_core.speculative as s``, ``from …
import speculative_generate as sg``, a method bound earlier — hits the tripwire, and restores it
afterwards. Calls are counted with forward hooks, so a student's own count (``stats``) can be checked
against what really ran.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch

BLOCKED = "blocked while grading"  # in the message of the error a blocked function raises


def _tripwire_code(like):
    """A code object that raises, with the same free variables as ``like`` (a function's code can
    only be swapped for one with as many: a decorated function is a closure over what it wraps)."""
    names = like.co_freevars
    body = "    def tripwire(*args, **kwargs):\n"
    if names:
        body += f"        {', '.join(names)}\n"  # reference each, so the closure has exactly these
    # only builtins may be named: the code runs with the blocked function's module globals
    body += "        raise RuntimeError('this assignment asks you to write it yourself: the library\\'s version is blocked while grading')\n"
    source = "def outer():\n" + "".join(f"    {n} = None\n" for n in names) + body + "    return tripwire\n"
    scope: dict = {}
    exec(source, scope)  # noqa: S102 (a fixed template; names come from a code object)
    return scope["outer"]().__code__.replace(co_name=like.co_name)


def _resolve(dotted: str):
    module, _, name = dotted.rpartition(".")
    owner = importlib.import_module(module)
    for part in name.split(".")[:-1]:
        owner = getattr(owner, part)
    return getattr(owner, name.split(".")[-1])


@contextmanager
def blocked(*functions: str) -> Iterator[None]:
    """Make the named functions (dotted paths, e.g. ``specdec_core.speculative.verify``) raise a
    RuntimeError saying :data:`BLOCKED` inside the ``with`` block, wherever they are referenced from."""
    targets = [_resolve(f) for f in functions]
    targets += [fn.__wrapped__ for fn in targets if hasattr(fn, "__wrapped__")]  # what a decorator wraps, too
    saved = [fn.__code__ for fn in targets]
    try:
        for fn in targets:
            fn.__code__ = _tripwire_code(fn.__code__)
        yield
    finally:
        for fn, code in zip(targets, saved):
            fn.__code__ = code


@dataclass
class Calls:
    forwards: int = 0  # forward passes of the model
    tokens: int = 0  # input positions they read (batch 1), summed


@contextmanager
def counting(model: torch.nn.Module) -> Iterator[Calls]:
    """Count ``model``'s forward passes and the input positions they read, inside the block."""
    calls = Calls()

    def hook(module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        calls.forwards += 1
        calls.tokens += 0 if ids is None else int(ids.shape[-1])

    handle = model.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        yield calls
    finally:
        handle.remove()


# --- capstone 1: the speculative loop ---------------------------------------------------------------

SPECULATIVE_LIBRARY = ("specdec_core.speculative.speculative_generate", "specdec_core.speculative.verify",
                       "specdec_core.speculative.verify_greedy", "specdec_core.ar.generate")


def greedy_matches(loop, target, drafter, ids: torch.Tensor, n: int, gamma: int, eos=None) -> bool:
    """Whether ``loop(target, drafter, ids, n, gamma=…, eos_token_id=…)`` returns, with the library's
    loop blocked, exactly the target's greedy tokens (computed here first, unblocked)."""
    from ..ar import generate

    reference = generate(target, ids, n, eos_token_id=eos).new_tokens
    with blocked(*SPECULATIVE_LIBRARY):
        got, _ = loop(target, drafter, ids, n, gamma=gamma, eos_token_id=eos)
    return list(got) == reference


def sampled_pvalue(loop, seed: int, temperature: float, top_p: float | None = None, draws: int = 1000,
                   gamma: int = 2) -> float:
    """χ² p-value of ``draws`` 2-token samples of ``loop`` (library blocked) on a pair of toy models
    with an 8-token vocabulary, against the target's exact law at the same warp."""
    from ..exactness import chi_square_pvalue, empirical_law, exact_law
    from ..speculative import ModelDrafter
    from ..toy import tiny_llama

    target = tiny_llama(8, hidden_size=32, seed=seed, logit_scale=20.0)
    draft = tiny_llama(8, hidden_size=32, seed=seed + 50, num_layers=1, logit_scale=4.0)
    prompt = torch.tensor([[2, 5, 3]])
    gen = torch.Generator().manual_seed(seed)

    def draw() -> list[int]:
        return list(loop(target, ModelDrafter(draft), prompt, 2, gamma=gamma, temperature=temperature,
                         top_p=top_p, generator=gen)[0])

    with blocked(*SPECULATIVE_LIBRARY):
        counts = empirical_law(draw, (8, 8), draws)
    return chi_square_pvalue(counts, exact_law(target, prompt, 2, temperature, top_p=top_p))
