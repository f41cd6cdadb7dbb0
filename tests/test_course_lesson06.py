"""Lesson 06's checkers pass right answers and reject wrong ones, each with the right hint."""

from __future__ import annotations

import math

import pytest
from torch import nn

from specdec_core.course.checks import CheckFailed
from specdec_core.course.lesson06 import (
    check_model_weight_bytes,
    check_stored_bytes,
    reference_model_weight_bytes,
    reference_stored_bytes,
)


def test_references_pass(capsys):
    check_stored_bytes(reference_stored_bytes)
    check_model_weight_bytes(reference_model_weight_bytes)
    out = capsys.readouterr().out
    assert "✗" not in out
    assert "All 5 checks of stored_bytes passed." in out and "All 8 checks of model_weight_bytes passed." in out


def stored(n, fmt, blocksize=64, dq_blocksize=256, *, rounding=math.ceil, absmax_bytes=4, dq_absmax_bytes=1,
           dq_extras=True, as_float=False):
    """The way a student would write it, with knobs to break it."""
    per_weight = {"fp32": 4, "bf16": 2}
    if fmt in per_weight:
        return per_weight[fmt] * n
    if as_float:
        return n * (4 + 32 / blocksize) / 8
    blocks = rounding(n / blocksize)
    size = rounding(n / 2)
    if fmt == "nf4":
        return size + absmax_bytes * blocks
    extras = 4 * rounding(blocks / dq_blocksize) + 4 if dq_extras else 0
    return size + dq_absmax_bytes * blocks + extras


def test_a_different_correct_answer_passes():
    check_stored_bytes(lambda n, fmt, blocksize=64, dq_blocksize=256: stored(n, fmt, blocksize, dq_blocksize,
                                                                               rounding=lambda x: -int(-x // 1)))


STORED_MUTANTS = {
    "rounds down": (dict(rounding=math.floor), "round UP"),
    "forgets the absmax": (dict(absmax_bytes=0), "the 4-bit codes are not all"),
    "absmax in 2 bytes": (dict(absmax_bytes=2), "float32: 4 bytes"),
    "double-quantized absmax still 4 bytes": (dict(dq_absmax_bytes=4), "1 byte (8 bits)"),
    "no second-level scales or offset": (dict(dq_extras=False), "one float32 offset"),
    "bits per weight instead of bytes": (dict(as_float=True), "whole number of bytes"),
}


@pytest.mark.parametrize("name", STORED_MUTANTS)
def test_wrong_stored_bytes_fail_with_a_hint(name, capsys):
    kwargs, hint = STORED_MUTANTS[name]
    with pytest.raises(CheckFailed):
        check_stored_bytes(lambda n, fmt, blocksize=64, dq_blocksize=256: stored(n, fmt, blocksize, dq_blocksize, **kwargs))
    out = capsys.readouterr().out
    assert "✗" in out and hint in out, out


def model_bytes_by_modules(model, fmt, skip=("lm_head",), *, buffers=True, quantize_head=False, bf16_bytes=2):
    """A student's version walking the modules: each module's own parameters, Linear weights in fmt."""
    float_bytes = {"fp32": 4, "bf16": bf16_bytes}.get(fmt, 4)
    total, seen = 0, set()
    for name, module in model.named_modules():
        for pname, p in module.named_parameters(recurse=False):
            if quantize_head is not None and id(p) in seen:
                continue
            seen.add(id(p))
            linear = isinstance(module, nn.Linear) and pname == "weight"
            if fmt.startswith("nf4") and linear and (quantize_head or name not in skip):
                total += reference_stored_bytes(p.numel(), fmt)
            else:
                total += float_bytes * p.numel()
    if buffers:
        total += sum(float_bytes * b.numel() for b in model.buffers())
    return total


def test_a_module_walking_answer_passes():
    check_model_weight_bytes(model_bytes_by_modules)


MODEL_MUTANTS = {
    "forgets the buffers": (dict(buffers=False), "add the buffers"),
    "counts a tied weight twice": (dict(quantize_head=None), "count that tensor once"),
    "quantizes the output layer": (dict(quantize_head=True), "lm_head) stays in float"),
    "bf16 at 4 bytes": (dict(bf16_bytes=4), "off by"),
}


@pytest.mark.parametrize("name", MODEL_MUTANTS)
def test_wrong_model_bytes_fail_with_a_hint(name, capsys):
    kwargs, hint = MODEL_MUTANTS[name]
    with pytest.raises(CheckFailed):
        check_model_weight_bytes(lambda model, fmt, skip=("lm_head",): model_bytes_by_modules(model, fmt, skip, **kwargs))
    out = capsys.readouterr().out
    assert "✗" in out and hint in out, out


def test_stubs_fail(capsys):
    def stub(*args, **kwargs):
        raise NotImplementedError

    for check in (check_stored_bytes, check_model_weight_bytes):
        with pytest.raises(CheckFailed):
            check(stub)
    assert capsys.readouterr().out.count("replace `raise NotImplementedError`") == 2
