"""width_drift: the rule for greedy exactness on a rounding engine — same tokens as the engine's AR, or a first
difference at a near-tie the engine's width rounding can flip. f32 has (almost) no drift; a method that changes a
token where AR was sure is caught."""

from __future__ import annotations

import torch

from specdec_core.ar import generate
from specdec_core.drafters import ModelDrafter
from specdec_core.lm import on_static_engine
from specdec_core.precision import at_precision
from specdec_core.speculative import speculative_generate
from specdec_core.toy import tiny_llama
from specdec_core.width_drift import Verdict, ar_margins, compare, width_drift

PROMPT = torch.tensor([[3, 1, 4, 1, 5]])
TEXT = torch.randint(0, 64, (1, 33), generator=torch.Generator().manual_seed(0))


def test_f32_drifts_by_rounding_only_and_f16_by_more() -> None:
    model = on_static_engine(tiny_llama(64, hidden_size=256, seed=0, logit_scale=3.0))
    f32 = width_drift(model, TEXT, 5)
    f16 = width_drift(on_static_engine(at_precision(model, "f16")), TEXT, 5)  # F.linear: one kernel per row count
    assert f32 < 1e-4 and f16 > 10 * f32


def test_the_margins_are_ars_own_and_an_unexplained_change_is_caught() -> None:
    model = on_static_engine(tiny_llama(64, hidden_size=64, seed=0, logit_scale=3.0))
    ar = generate(model, PROMPT, 10).new_tokens
    margins = ar_margins(model, PROMPT, ar)
    assert len(margins) == len(ar) and all(m >= 0 for m in margins)
    assert compare(model, PROMPT, ar, list(ar), drift=0.0) == Verdict(True, 0.0)
    sure = max(range(len(ar)), key=margins.__getitem__)  # where AR was most sure: no rounding flips it
    changed = ar[:sure] + [(ar[sure] + 1) % 64] + ar[sure + 1 :]
    verdict = compare(model, PROMPT, ar, changed, drift=1e-3)
    assert (verdict.first, verdict.explained) == (sure, False) and abs(verdict.margin - margins[sure]) < 1e-5
    assert compare(model, PROMPT, ar, changed, drift=margins[sure] + 1).explained  # a drift that large could flip it
    assert not compare(model, PROMPT, ar, ar[:4], drift=1e9).explained  # stopped early, not at a near-tie


def test_speculation_on_an_f16_engine_keeps_the_rule() -> None:
    target = on_static_engine(at_precision(tiny_llama(64, hidden_size=256, seed=0, logit_scale=3.0), "f16"))
    draft = on_static_engine(at_precision(tiny_llama(64, seed=1, num_layers=1, logit_scale=3.0), "f16"))
    drift = width_drift(target, TEXT, 4)
    for prompt in (PROMPT, torch.tensor([[7, 7, 2]]), torch.tensor([[9, 30, 12, 44]])):
        ar = generate(target, prompt, 16).new_tokens
        spec = speculative_generate(target, ModelDrafter(draft), prompt, 16, gamma=3).new_tokens
        assert compare(target, prompt, ar, spec, drift).explained
