"""Precision rungs (specdec_core.precision): int8 weight-only against its own dequantized weight, and greedy
decoding at bf16 / f16 / int8 identical to f32 up to the first position whose f32 top-2 margin is narrower
than the rung's rounding can be trusted with (the test prints where that is)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from specdec_core.lm import Decoder
from specdec_core.precision import RESOLUTION, Int8Linear, at_precision, quality, top2_margin
from specdec_core.toy import tiny_llama


def test_int8_linear_rounds_each_weight_to_the_nearest_level_of_its_row() -> None:
    torch.manual_seed(0)
    linear = nn.Linear(48, 24)
    q = Int8Linear(linear)
    err = (q.dequantized() - linear.weight).abs()
    assert bool((err <= q.scale[:, None] / 2 + 1e-7).all())  # round to nearest: at most half a level
    assert int(q.weight_q.abs().amax(1).min()) == 127  # every row's largest weight uses the full range
    x = torch.randn(3, 5, 48)
    assert torch.allclose(q(x), x @ q.dequantized().T + linear.bias, atol=1e-4)


def test_a_truncating_int8_breaks_the_half_level_bound() -> None:
    """The bound above can fail: truncating instead of rounding leaves errors up to a whole level."""
    torch.manual_seed(0)
    linear = nn.Linear(48, 24)
    q = Int8Linear(linear)
    w = linear.weight.detach()
    truncated = torch.trunc(w / q.scale[:, None]) * q.scale[:, None]
    assert not bool(((truncated - w).abs() <= q.scale[:, None] / 2 + 1e-7).all())


def _greedy(model: nn.Module, n: int) -> tuple[list[int], torch.Tensor]:
    dec = Decoder(model)
    logits, tokens, rows = dec.prefill(torch.tensor([[2, 5, 9, 4]]))[0, -1], [], []
    for _ in range(n):
        rows.append(logits.float())
        tokens.append(int(logits.argmax()))
        logits = dec.step(torch.tensor([[tokens[-1]]]))[0, -1]
    return tokens, torch.stack(rows)


@pytest.mark.parametrize("rung", ["bf16", "f16", "int8", "int8-bf16"])
def test_greedy_tokens_match_f32_until_a_margin_the_rung_cannot_resolve(rung: str) -> None:
    model = tiny_llama(vocab_size=64, hidden_size=64, num_layers=2, seed=11, logit_scale=3.0)
    ref, logits = _greedy(model, 60)
    got, _ = _greedy(at_precision(model, rung), 60)
    resolution = RESOLUTION.get(rung, 1 / 127) + (RESOLUTION["bf16"] if rung == "int8-bf16" else 0.0)  # both roundings
    narrow = top2_margin(logits) < 4 * resolution * logits.abs().amax(-1)  # rounding could flip these
    trusted = int(narrow.float().argmax()) if bool(narrow.any()) else len(ref)
    print(f"{rung}: identical for the first {trusted} of {len(ref)} tokens the margin allows")
    assert got[:trusted] == ref[:trusted]
    assert trusted >= 5  # the test has positions to compare (bf16 18, f16 50, int8 8 here)


def test_quality_of_an_exact_copy_and_of_a_rung() -> None:
    model = tiny_llama(vocab_size=64, hidden_size=64, num_layers=2, seed=7, logit_scale=3.0)
    ids = torch.randint(2, 64, (1, 50), generator=torch.Generator().manual_seed(0))
    same = quality(model, at_precision(model, "f32"), ids)
    assert same["agreement"] == 1.0 and same["ppl"] == pytest.approx(same["ppl_reference"])
    int8 = quality(model, at_precision(model, "int8"), ids)
    assert int8["ppl"] != same["ppl"] and 0.5 < int8["agreement"] <= 1.0


def test_an_unknown_rung_says_which_exist() -> None:
    with pytest.raises(ValueError, match="bf16"):
        at_precision(tiny_llama(), "fp8")


def test_int8_off_the_kernels_devices_computes_the_same_product(monkeypatch) -> None:
    """On a device without torch's int8 kernel (CUDA) the layer writes the product out; on the CPU both agree."""
    torch.manual_seed(0)
    layer, x = Int8Linear(nn.Linear(24, 16)), torch.randn(3, 5, 24)
    kernel = layer(x)
    monkeypatch.setattr(Int8Linear, "KERNEL_DEVICES", ())
    written = layer(x)
    assert written.shape == (3, 5, 16) and torch.allclose(kernel, written, atol=1e-5)
    assert torch.allclose(written, x @ layer.dequantized().T + layer.bias, atol=1e-5)
