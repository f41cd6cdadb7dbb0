"""Lesson 01's checkers pass the reference answers and reject wrong ones."""

from __future__ import annotations

import pytest
import torch

from specdec_core.course.checks import CheckFailed
from specdec_core.course.lesson01 import (
    check_decode_step,
    check_sample_step,
    reference_decode_step,
    reference_sample_step,
)
from specdec_core.lm import cache_kwarg


def test_sample_step_reference_passes(capsys):
    check_sample_step(reference_sample_step)
    out = capsys.readouterr().out
    assert "✗" not in out and "All 7 checks of sample_step passed." in out


def test_sample_step_own_sampler_passes():
    """A correct answer that draws differently (inverse CDF instead of multinomial) also passes."""

    def inverse_cdf(logits, temperature, top_k, top_p, generator):
        if temperature == 0:
            return int(logits.argmax())
        logits = logits / temperature
        if top_k is not None:
            logits = logits.masked_fill(logits < torch.topk(logits, top_k).values[-1], float("-inf"))
        probs = logits.softmax(-1)
        if top_p is not None:
            order = probs.argsort(descending=True)
            before = probs[order].cumsum(0) - probs[order]
            drop = torch.zeros_like(probs, dtype=torch.bool)
            drop[order] = before >= top_p
            probs = probs.masked_fill(drop, 0.0)
            probs = probs / probs.sum()
        u = torch.rand((), generator=generator)
        return int(torch.searchsorted(probs.cumsum(0), u * probs.sum()).clamp(max=len(probs) - 1))

    check_sample_step(inverse_cdf)


def _mutant(kind):
    def fn(logits, temperature, top_k, top_p, generator):
        if temperature == 0:
            return int(logits.argmin()) if kind == "argmin" else int(logits.argmax())
        if kind == "no_temperature":
            temperature = 1.0
        if kind == "temperature_after_softmax":
            probs = logits.softmax(-1) / temperature
            probs = probs / probs.sum()
            logits = probs.log()
            temperature = 1.0
        logits = logits / temperature
        if top_k is not None and kind != "no_top_k":
            logits = logits.masked_fill(logits < torch.topk(logits, top_k).values[-1], float("-inf"))
        probs = logits.softmax(-1)
        if top_p is not None:
            order = probs.argsort(descending=True)
            mass = probs[order].cumsum(0)
            if kind == "top_p_drops_crossing":
                drop_sorted = mass >= top_p  # drops the token that crosses top_p
            else:
                drop_sorted = mass - probs[order] >= top_p
            drop = torch.zeros_like(drop_sorted)
            drop[order] = drop_sorted
            probs = probs.masked_fill(drop, 0.0)
        if kind == "global_rng":
            return int(torch.multinomial(probs, 1))
        return int(torch.multinomial(probs, 1, generator=generator))

    return fn


@pytest.mark.parametrize(
    "kind", ["argmin", "no_temperature", "temperature_after_softmax", "no_top_k", "top_p_drops_crossing", "global_rng"]
)
def test_sample_step_mutants_fail(kind, capsys):
    with pytest.raises(CheckFailed):
        check_sample_step(_mutant(kind))
    assert "✗" in capsys.readouterr().out


def test_sample_step_stub_fails_with_one_line(capsys):
    def stub(*args):
        raise NotImplementedError

    with pytest.raises(CheckFailed):
        check_sample_step(stub)
    out = capsys.readouterr().out
    assert out.count("✗") == 1 and "raise NotImplementedError" in out


def test_decode_step_reference_passes(capsys):
    check_decode_step(reference_decode_step)
    assert "All 4 checks of decode_step passed." in capsys.readouterr().out


@torch.inference_mode()
def _no_cache(model, cache, token_id):
    return model(input_ids=torch.tensor([[token_id]])).logits[0, -1]


@torch.inference_mode()
def _probs(model, cache, token_id):
    return reference_decode_step(model, cache, token_id).softmax(-1)


@torch.inference_mode()
def _fresh_cache(model, cache, token_id):
    from transformers import DynamicCache

    fresh = DynamicCache(config=model.config)
    return model(input_ids=torch.tensor([[token_id]]), use_cache=True, **{cache_kwarg(model): fresh}).logits[0, -1]


@torch.inference_mode()
def _twice(model, cache, token_id):
    model(input_ids=torch.tensor([[token_id]]), use_cache=True, **{cache_kwarg(model): cache})
    return model(input_ids=torch.tensor([[token_id]]), use_cache=True, **{cache_kwarg(model): cache}).logits[0, -1]


@pytest.mark.parametrize("mutant", [_no_cache, _probs, _fresh_cache, _twice])
def test_decode_step_mutants_fail(mutant):
    with pytest.raises(CheckFailed):
        check_decode_step(mutant)
