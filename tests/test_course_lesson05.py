"""Lesson 05's checker passes right answers and rejects wrong ones, each with the right hint."""

from __future__ import annotations

import pytest
import torch

from specdec_core.course.checks import CheckFailed
from specdec_core.course.lesson05 import check_nf4_quantize, reference_nf4_quantize
from specdec_core.nf4 import NF4_CODE

CHECKS = 8  # seven inputs and the all-zero block


def test_reference_passes(capsys):
    check_nf4_quantize(reference_nf4_quantize)
    out = capsys.readouterr().out
    assert "✗" not in out and f"All {CHECKS} checks of nf4_quantize passed." in out


def natural(weights, blocksize=64, swap=False, one_scale=False, divide=False, grid=None, guard=True,
            dtype=torch.uint8, no_pad=False, partial_like_previous=False):
    """The way a student would write it (argmin of the distance, not bucketize), with optional bugs."""
    n = weights.numel()
    full = n - n % blocksize
    blocks = weights[:full].view(-1, blocksize)
    absmax = blocks.abs().max(-1).values
    if one_scale:
        absmax = torch.full_like(absmax, float(weights.abs().max()))
    denom = absmax.clamp(min=1e-38) if guard else absmax
    scaled = (blocks / denom[:, None]) if divide else torch.clamp(blocks * (1 / denom)[:, None], -1, 1)
    scaled = scaled.flatten()
    if full < n:
        last = absmax[-1] if partial_like_previous else weights[full:].abs().max()
        absmax = torch.cat([absmax, last[None]])
        scaled = torch.cat([scaled, torch.clamp(weights[full:] / last.clamp(min=1e-38), -1, 1)])
    if n % 2 and not no_pad:
        scaled = torch.cat([scaled, scaled.new_zeros(1)])
    code = grid if grid is not None else NF4_CODE
    idx = (scaled[:, None] - code).abs().argmin(-1).to(dtype)
    if no_pad and n % 2:
        idx = idx[:-1]
    hi, lo = (idx[1::2], idx[0::2]) if swap else (idx[0::2], idx[1::2])
    return (hi << 4) | lo, absmax


def test_a_different_correct_answer_passes():
    check_nf4_quantize(natural)


MUTANTS = {
    "low nibble first": (dict(swap=True), "nibbles are swapped"),
    "one absmax for the whole tensor": (dict(one_scale=True), "absmax[b] is the largest |weight| of block b"),
    "full blocks divided, not multiplied by the reciprocal": (dict(divide=True), "multiply by the reciprocal"),
    "the partial block scaled by the previous block's absmax": (dict(partial_like_previous=True), "absmax[b]"),
    "an odd count not padded": (dict(no_pad=True), "padded with one 0.0"),
    "uniform int4 grid instead of NF4": (dict(grid=torch.arange(-8, 8) / 7), "evenly spaced grid"),
    "no guard for a zero block": (dict(guard=False), "0 / 0 is NaN"),
    "indices left as int64": (dict(dtype=torch.int64), "uint8"),
}


@pytest.mark.parametrize("name", MUTANTS)
def test_wrong_answers_fail_with_a_hint(name, capsys):
    kwargs, hint = MUTANTS[name]
    with pytest.raises(CheckFailed):
        check_nf4_quantize(lambda weights, blocksize=64: natural(weights, blocksize, **kwargs))
    out = capsys.readouterr().out
    assert "✗" in out and hint in out, out


def test_one_block_only_is_not_enough(capsys):
    """Lesson 05's cell quantizes one block: that code, run on a whole tensor, must not pass."""

    def lesson_cell(weights, blocksize=64):
        absmax = weights.abs().max()
        s = weights * (1 / absmax)
        idx = torch.bucketize(s, (NF4_CODE[1:] + NF4_CODE[:-1]) / 2)
        return ((idx[0::2] << 4) | idx[1::2]).to(torch.uint8), absmax

    with pytest.raises(CheckFailed):
        check_nf4_quantize(lesson_cell)
    assert "one absmax per block" in capsys.readouterr().out


def test_the_stub_fails(capsys):
    def stub(weights, blocksize=64):
        raise NotImplementedError

    with pytest.raises(CheckFailed):
        check_nf4_quantize(stub)
    assert "replace `raise NotImplementedError`" in capsys.readouterr().out
