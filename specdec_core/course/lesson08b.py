"""Checkers for lesson 08b's exercise: Jacobi Forcing's noise schedule and noise-aware mask, on plain tensors.

    check_progressive_levels(progressive_levels)
        # progressive_levels(n_blocks, window) -> list[float]: (b mod W + 1) / W for block b
    check_noise_aware_mask(noise_aware_mask)
        # noise_aware_mask(prompt_len, lengths) -> bool [S, S], S = prompt_len + 2 · sum(lengths)
        #   rows/columns: [prompt, noisy blocks, clean blocks]; True = row may attend to column

Both are compared with :mod:`specdec_core.jacobi_forcing` (the functions the fine-tune uses) on
hand-made cases and seeded random ones; when the mask is wrong, the hint names the mistake if the
student's mask equals a common wrong one (a plain causal mask, clean rows that see noisy tokens, no
causality inside a block, a prompt the blocks cannot see, a transposed mask, …). No model is needed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..jacobi_forcing import noise_aware_mask as reference_mask
from ..jacobi_forcing import progressive_levels as reference_levels
from .checks import Checks

RANDOM_CASES = 30


def check_progressive_levels(fn: Callable) -> None:
    """Test ``fn(n_blocks, window) -> list of floats`` against the schedule of the course."""
    gen = torch.Generator().manual_seed(81)
    cases = [(int(torch.randint(1, 13, (1,), generator=gen)), int(torch.randint(1, 6, (1,), generator=gen)))
             for _ in range(RANDOM_CASES)]

    def levels(n: int, w: int) -> list[float] | None:
        out = c.call(fn, n, w)
        try:
            return [float(x) for x in out]
        except TypeError:
            return None

    def same(got: list[float] | None, want: list[float]) -> bool:
        return got is not None and len(got) == len(want) and all(abs(a - b) < 1e-9 for a, b in zip(got, want))

    with Checks("progressive_levels") as c:
        got = levels(8, 4)
        c.expect(got is not None and len(got) == 8, "one level per block",
                 "return a list with n_blocks numbers")
        c.expect(same(got, [0.25, 0.5, 0.75, 1.0] * 2), "W = 4: 1/4, 2/4, 3/4, 1, then again from 1/4",
                 "block b gets (b mod W + 1) / W: the level rises across a window and starts again")
        c.expect(got is not None and min(got) > 0, "no block is clean (level 0 teaches nothing)",
                 "the +1: the first block of a window gets 1/W, not 0")
        c.expect(same(levels(3, 1), [1.0, 1.0, 1.0]), "W = 1: every block is pure noise (CLLM's hardest states)",
                 "with one block per window the level is always 1")
        c.expect(same(levels(5, 8), [1 / 8, 2 / 8, 3 / 8, 4 / 8, 5 / 8]),
                 "a window longer than the sequence: the levels only rise",
                 "divide by W, the window, not by the number of blocks")
        c.expect(all(same(levels(n, w), reference_levels(n, w)) for n, w in cases),
                 "matches the reference for random n_blocks (1-12) and W (1-5)", "(b % window + 1) / window")


def _mask_of(out: Any, S: int) -> torch.Tensor | None:
    try:
        mask = out if isinstance(out, torch.Tensor) else torch.as_tensor(out)
    except (TypeError, ValueError, RuntimeError):
        return None
    return mask.bool() if tuple(mask.shape) == (S, S) else None


def _copies(prompt_len: int, lengths: list[int]) -> torch.Tensor:
    """-1 for the prompt, 0 for the noisy copy, 1 for the clean copy, per position [S]."""
    total = sum(lengths)
    return torch.tensor([-1] * prompt_len + [0] * total + [1] * total)


def _wrong_masks(prompt_len: int, lengths: list[int]) -> dict[str, torch.Tensor]:
    """Common wrong answers for one case, each with what it gets wrong."""
    right = reference_mask(prompt_len, lengths)
    S, copy = right.shape[0], _copies(prompt_len, lengths)
    same_or_prompt = (copy[None, :] == copy[:, None]) | (copy[None, :] == -1)
    causal_index = torch.ones(S, S, dtype=torch.bool).tril()
    block_id = torch.cat([torch.full((prompt_len,), -1)] + [torch.full((n,), b) for b, n in enumerate(lengths)] * 2)
    same_block = (block_id[None, :] == block_id[:, None]) & (copy[None, :] == copy[:, None])
    return {
        "a plain causal mask over the packed sequence: clean rows must not see the noisy tokens "
        "(they come first in the sequence but belong to another copy)": causal_index,
        "each copy sees itself and the prompt, but without causality: a row must not see later positions "
        "of its own copy": same_or_prompt,
        "the transposed mask: row = the position that attends, column = the position it reads": right.T.clone(),
        "the blocks cannot see the prompt: every row may read the prompt's columns (causally)":
            right & ~((copy[None, :] == -1) & (copy[:, None] != -1)),
        "noisy blocks see only themselves: noisy block b must also see the noisy blocks before it "
        "(that is the point of Jacobi Forcing: a noisy context)": right & ~((copy[:, None] == 0) & (copy[None, :] == 0)
                                                                              & ~same_block),
        "the prompt sees answer tokens: the prompt's rows are plain causal over the prompt only":
            right | ((copy[:, None] == -1) & (copy[None, :] != -1)),
    }


def check_noise_aware_mask(fn: Callable) -> None:
    """Test ``fn(prompt_len, lengths) -> bool [S, S]`` against :func:`jacobi_forcing.noise_aware_mask`."""
    gen = torch.Generator().manual_seed(82)
    cases = []
    for _ in range(RANDOM_CASES):
        blocks = int(torch.randint(1, 4, (1,), generator=gen))
        cases.append((int(torch.randint(1, 6, (1,), generator=gen)),
                      [int(x) for x in torch.randint(1, 5, (blocks,), generator=gen)]))

    def ask(p: int, lengths: list[int]) -> torch.Tensor | None:
        return _mask_of(c.call(fn, p, list(lengths)), p + 2 * sum(lengths))

    with Checks("noise_aware_mask") as c:
        p, lengths = 3, [2, 2]
        raw = c.call(fn, p, list(lengths))
        got = _mask_of(raw, p + 2 * sum(lengths))
        c.expect(got is not None, "a square mask with one row and one column per packed position (S = 3 + 2·4 = 11)",
                 "S = prompt_len + 2 * sum(lengths): the prompt, the noisy copy, the clean copy")
        if got is None:
            return
        c.expect(isinstance(raw, torch.Tensor) and raw.dtype == torch.bool, "a bool tensor (True = may attend)",
                 "return a torch.bool tensor")
        right = reference_mask(p, lengths)
        copy = _copies(p, lengths)
        prompt_rows = copy == -1
        c.expect(torch.equal(got[prompt_rows], right[prompt_rows]), "the prompt is plain causal and sees no answer",
                 "prompt row i sees prompt columns 0..i, nothing after the prompt")
        clean = copy == 1
        c.expect(not (got[clean][:, copy == 0]).any(), "clean rows never see a noisy token",
                 "the teacher (clean rows) must compute the same as a forward over [prompt, clean answer]")
        noisy = copy == 0
        c.expect(not (got[noisy][:, copy == 1]).any(), "noisy rows never see a clean token",
                 "a noisy row seeing the fixed point would copy the answer: the student learns nothing")
        c.expect(bool(got.diagonal().all()), "every position sees itself", "causal masks include the diagonal")
        c.expect(torch.equal(got, right), "[prompt 3, blocks 2 and 2] matches the reference",
                 _hint(got, _wrong_masks(p, lengths)))
        c.expect(all((m := ask(pl, ls)) is not None and torch.equal(m, reference_mask(pl, ls)) for pl, ls in cases),
                 "matches the reference for random prompts (1-5 tokens) and 1-3 blocks of 1-4 tokens",
                 "a row may read a column when both are in the same copy (or the column is the prompt) and the "
                 "column's POSITION is not after the row's; the two copies of a block share positions")


def _hint(got: torch.Tensor, wrong: dict[str, torch.Tensor]) -> str:
    for what, mask in wrong.items():
        if torch.equal(got, mask):
            return f"you built {what}"
    return ("a row may read a column when both are in the same copy (or the column is the prompt) and the "
            "column comes at or before the row within that copy")
