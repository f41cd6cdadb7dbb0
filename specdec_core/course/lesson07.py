"""Checkers for lesson 07's exercise: one Jacobi iteration, the convergence test, a block solved.

    check_jacobi_iteration(jacobi_iteration)   # jacobi_iteration(model, prefix [1, P], state list[int]) -> list[int]
    check_converged_count(converged_count)     # converged_count(old list[int], new list[int]) -> int
    check_jacobi_block(jacobi_block)           # jacobi_block(model, prefix, guess) -> [guess, …, fixed point]

Each runs the student's function on tiny seeded random Llamas (``toy.tiny_llama``) against the
references in :mod:`specdec_core.jacobi` and prints ✓ / ✗ lines through :class:`Checks`.
"""

from __future__ import annotations

import torch

from ..ar import generate
from ..jacobi import converged_count as reference_converged_count
from ..jacobi import jacobi_iteration as reference_jacobi_iteration
from ..toy import tiny_llama
from .checks import Checks

PREFIX = torch.tensor([[3, 5, 7, 9]])


def reference_jacobi_block(model, prefix: torch.Tensor, guess: list[int]) -> list[list[int]]:
    """The answer of the third part: iterate from ``guess`` until the convergence test fixes all n."""
    states = [list(guess)]
    while True:
        new = reference_jacobi_iteration(model, prefix, states[-1])
        fixed = reference_converged_count(states[-1], new)
        states.append(new)
        if fixed == len(new):
            return states


def _toy(seed: int = 1, layers: int = 2):
    # logit_scale widens the gaps between logits: no argmax depends on rounding
    return tiny_llama(num_layers=layers, seed=seed, logit_scale=10.0)


def _ids(out) -> list[int] | None:
    """A list of ints from a list, tuple or 1-D tensor; None for anything else."""
    if isinstance(out, torch.Tensor):
        out = out.flatten().tolist() if out.dim() <= 2 else None
    if not isinstance(out, (list, tuple)):
        return None
    try:
        return [int(t) for t in out]
    except (TypeError, ValueError):
        return None


def check_jacobi_iteration(fn) -> None:
    """Test ``fn(model, prefix, state) -> new state`` (no cache) against the reference."""
    model = _toy(seed=0)
    greedy = generate(model, PREFIX, 6).new_tokens
    gen = torch.Generator().manual_seed(0)
    states = [torch.randint(0, 32, (n,), generator=gen).tolist() for n in (6, 6, 3)]
    with Checks("jacobi_iteration") as c:
        state = list(states[0])
        out = _ids(c.call(fn, model, PREFIX.clone(), state))
        c.expect(
            out is not None and len(out) == 6,
            "returns one token id per position of the block",
            "return a list of n ints: logits[0, -n:].argmax(-1).tolist()",
        )
        if out is None or len(out) != 6:
            return
        c.expect(state == states[0], "leaves the old state unchanged", "build a new list; do not write into `state`")
        c.expect(
            out[0] == greedy[0],
            "position 1 is the greedy next token after the prefix",
            "row i of the last n rows predicts position i; the first of them is the prefix's last token",
        )
        outs = [_ids(c.call(fn, model, PREFIX.clone(), list(s))) for s in states]
        refs = [reference_jacobi_iteration(model, PREFIX, s) for s in states]
        c.expect(
            outs == refs,
            "every position i is the argmax given prefix + state[:i]",
            "run ONE forward over torch.cat([prefix, state[:-1]]) and keep the last n rows: the input of "
            "position i is state[i-1] (off by one? feeding the whole state shifts every prediction)",
        )
        c.expect(
            _ids(c.call(fn, model, PREFIX.clone(), list(greedy))) == greedy,
            "the greedy continuation is a fixed point",
            "applied to the greedy output, one iteration must give it back unchanged",
        )


def check_converged_count(fn) -> None:
    """Test ``fn(old, new) -> int`` on hand-made pairs of states."""
    cases = [
        ([1, 2, 3, 4], [1, 2, 3, 4], "a state that did not change is fixed entirely",
         "if nothing changed, all n tokens are right: return n"),
        ([9, 9, 9, 9], [1, 2, 3, 4], "the first token is always fixed",
         "the first position only depends on the prefix, which is already right: count it even if it changed"),
        ([1, 2, 9, 4], [1, 2, 3, 4], "the unchanged leading tokens plus the next one are fixed",
         "count the leading positions where old == new, then add one: its prefix is now right"),
        ([9, 2, 3, 4], [1, 2, 3, 4], "only LEADING unchanged tokens count",
         "stop counting at the first position that changed: a later match may still have a wrong prefix"),
        ([1, 2, 5], [1, 2, 3], "never more than n", "cap the count at len(new)"),
        ([7], [7], "a block of one token", "with n = 1 the answer is 1"),
    ]
    with Checks("converged_count") as c:
        for old, new, what, hint in cases:
            got = c.call(fn, list(old), list(new))
            expected = reference_converged_count(old, new)
            c.expect(got == expected, what, f"{hint} (old {old}, new {new}: expected {expected}, got {got})")


def check_jacobi_block(fn) -> None:
    """Test ``fn(model, prefix, guess) -> states`` on two toys and two guesses."""
    runs = []
    for seed, layers, guess in [(1, 2, [9] * 8), (6, 1, [0, 1, 2, 3, 4, 5, 6, 7]), (0, 2, [5] * 6)]:
        model = _toy(seed, layers)
        runs.append((model, guess, reference_jacobi_block(model, PREFIX, guess), generate(model, PREFIX, len(guess)).new_tokens))
    with Checks("jacobi_block") as c:
        got = []
        for model, guess, _, _ in runs:
            states = c.call(fn, model, PREFIX.clone(), list(guess))
            got.append([_ids(s) for s in states] if isinstance(states, (list, tuple)) else [])
        c.expect(
            all(g and g[0] == guess for g, (_, guess, _, _) in zip(got, runs)),
            "the trajectory starts with the guess",
            "return [guess, state after iteration 1, …]: the first element is the guess itself",
        )
        c.expect(
            all(g and g[-1] == greedy for g, (*_, greedy) in zip(got, runs)),
            "it ends at the greedy output",
            "keep iterating until converged_count(old, new) == n; the last state is the fixed point",
        )
        c.expect(
            all(g and len(g) - 1 <= len(guess) for g, (_, guess, _, _) in zip(got, runs)),
            "n tokens take at most n iterations",
            "each iteration fixes at least one more token: stop when all n are fixed",
        )
        steps_ok = all(
            g and all(g[j + 1] == reference_jacobi_iteration(model, PREFIX, g[j]) for j in range(len(g) - 1))
            for g, (model, *_) in zip(got, runs)
        )
        c.expect(steps_ok, "each state is one Jacobi iteration of the one before",
                 "append the output of jacobi_iteration(model, prefix, state) after every iteration")
        c.expect(
            all(g == ref for g, (_, _, ref, _) in zip(got, runs)),
            "it stops as soon as the convergence test fixes all n tokens",
            "stop when converged_count(old, new) == n — no extra iteration to see the state repeat",
        )
