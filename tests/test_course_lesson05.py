"""Lesson 05's checker passes right answers and rejects wrong ones, each with the right hint."""

from __future__ import annotations

import pytest
import torch

from specdec_core.course.checks import CheckFailed
from specdec_core.course.lesson05 import check_nf4_pack_block, reference_nf4_pack_block
from specdec_core.nf4 import NF4_CODE


def test_reference_passes(capsys):
    check_nf4_pack_block(reference_nf4_pack_block)
    out = capsys.readouterr().out
    assert "✗" not in out and "All 8 checks of nf4_pack_block passed." in out


def natural(block, swap=False, scale=None, grid=None, guard=True, dtype=torch.uint8, floor=False):
    """The way a student would write it: divide, argmin of the distance to each code value."""
    absmax = block.abs().max()
    denom = scale(block) if scale else absmax
    scaled = block / denom.clamp(min=1e-38) if guard else block / denom
    code = grid if grid is not None else NF4_CODE
    idx = (scaled.unsqueeze(-1) - code).abs().argmin(-1).to(dtype)
    if floor:  # the level at or below each value instead of the nearest one
        idx = (torch.searchsorted(code, scaled, right=True) - 1).to(dtype)
    hi, lo = (idx[1::2], idx[0::2]) if swap else (idx[0::2], idx[1::2])
    return (hi << 4) | lo, absmax


def test_a_different_correct_answer_passes():
    check_nf4_pack_block(natural)


MUTANTS = {
    "low nibble first": (dict(swap=True), "nibbles are swapped"),
    "scaled by the standard deviation": (dict(scale=lambda b: b.std()), "scale by the block's absmax"),
    "scaled by the whole range": (dict(scale=lambda b: b.max() - b.min()), "scale by the block's absmax"),
    "uniform int4 grid instead of NF4": (dict(grid=torch.arange(-8, 8) / 7), "evenly spaced grid"),
    "the level below instead of the nearest": (dict(floor=True), "NEAREST of the 16"),
    "no guard for a zero block": (dict(guard=False), "0 / 0 is NaN"),
    "indices left as int64": (dict(dtype=torch.int64), "uint8"),
}


@pytest.mark.parametrize("name", MUTANTS)
def test_wrong_answers_fail_with_a_hint(name, capsys):
    kwargs, hint = MUTANTS[name]
    with pytest.raises(CheckFailed):
        check_nf4_pack_block(lambda block: natural(block, **kwargs))
    out = capsys.readouterr().out
    assert "✗" in out and hint in out, out


def test_the_stub_fails(capsys):
    def stub(block):
        raise NotImplementedError

    with pytest.raises(CheckFailed):
        check_nf4_pack_block(stub)
    assert "replace `raise NotImplementedError`" in capsys.readouterr().out
