"""NF4 from scratch (specdec_core.nf4) against bitsandbytes 0.50.2 on the CPU, bit for bit."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

from specdec_core import nf4
from specdec_core.bench.quality import perplexity
from specdec_core.bench.quantized import bnb_parity
from specdec_core.toy import tiny_llama

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import bitsandbytes.functional as bnbF

# docs/reference.md#nf4: bitsandbytes' get_4bit_type("nf4"), as printed in its source.
NF4_VALUES = [
    -1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
    -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
    0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
    0.7229568362236023, 1.0,
]  # fmt: skip


def make(kind: str, shape: tuple[int, ...], seed: int = 0) -> torch.Tensor:
    """Test tensors of several value ranges."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g)
    if kind == "uniform":
        x = torch.rand(shape, generator=g) * 6 - 3
    elif kind == "heavy":  # heavy tails: a few huge values dominate their block
        x = torch.randn(shape, generator=g) ** 5
    elif kind == "tiny":
        x = x * 1e-30
    elif kind == "huge":
        x = x * 1e30
    elif kind == "zeros":  # half the tensor zero: whole zero blocks and a zero tail
        x.view(-1)[: x.numel() // 2] = 0.0
        x.view(-1)[-5:] = 0.0
    elif kind == "constant":  # every value equal: each scaled value is exactly ±1
        x = torch.full(shape, -0.37)
    elif kind == "ties":  # values exactly on the midpoints of the sorted code, after scaling
        mids = (nf4.NF4_CODE[1:] + nf4.NF4_CODE[:-1]) / 2
        x = torch.cat([torch.ones(1), mids, torch.ones(1), -mids]).repeat(shape[0])[: shape[0]]
    return x


CASES = [
    ("normal", (64,)),
    ("normal", (3, 70)),  # a partial last block
    ("normal", (7,)),  # odd count, only a partial block
    ("normal", (1,)),
    ("uniform", (5, 64)),
    ("uniform", (33, 17)),  # odd count, many partial rows
    ("heavy", (128, 96)),
    ("heavy", (2, 3, 65)),
    ("tiny", (4, 100)),
    ("huge", (4, 100)),
    ("zeros", (6, 64)),
    ("zeros", (3, 45)),  # an all-zero partial last block
    ("constant", (2, 80)),
    ("ties", (64,)),
]


def ids(case):
    return f"{case[0]}-{'x'.join(map(str, case[1]))}"


def test_code_values_are_normal_quantiles_and_equal_bitsandbytes():
    code = nf4.normal_code()
    assert torch.equal(code, bnbF.get_4bit_type("nf4", device="cpu"))
    assert torch.equal(code, torch.tensor(NF4_VALUES))
    assert code[7] == 0 and code[0] == -1 and code[-1] == 1 and bool((code.diff() > 0).all())
    assert not torch.equal(nf4.normal_code(0.99), code)  # the offset matters


def test_fp4_and_dynamic_codes_equal_bitsandbytes():
    assert torch.equal(nf4.FP4_CODE, bnbF.get_4bit_type("fp4", device="cpu"))
    assert torch.equal(nf4.DYNAMIC_CODE, bnbF.create_dynamic_map())


@pytest.mark.parametrize("quant_type", ["nf4", "fp4"])
@pytest.mark.parametrize("case", CASES, ids=ids)
def test_quantize_is_bit_exact_with_bitsandbytes(case, quant_type):
    x = make(*case)
    packed, state = bnbF.quantize_4bit(x, blocksize=64, quant_type=quant_type)
    q = nf4.quantize_4bit(x, quant_type, blocksize=64)
    assert q.packed.dtype == torch.uint8 and q.packed.shape == packed.shape == ((x.numel() + 1) // 2, 1)
    assert torch.equal(q.packed, packed)
    assert torch.equal(q.absmax, state.absmax)


@pytest.mark.parametrize("blocksize", [32, 128, 256])
def test_other_block_sizes_are_bit_exact(blocksize):
    x = make("normal", (9, 100), seed=blocksize)
    packed, state = bnbF.quantize_4bit(x, blocksize=blocksize, quant_type="nf4")
    q = nf4.quantize_4bit(x, "nf4", blocksize)
    assert torch.equal(q.packed, packed) and torch.equal(q.absmax, state.absmax)


# bitsandbytes 0.50.2's AVX-512 dequantize kernel indexes absmax per row, which is wrong when a row
# length is a multiple of 16 but not of the block size (e.g. [128, 96]); we compare on the others.
DEQUANT_CASES = [c for c in CASES if not (c[1][-1] % 16 == 0 and c[1][-1] % 64 != 0)]


@pytest.mark.parametrize("quant_type", ["nf4", "fp4"])
@pytest.mark.parametrize("case", DEQUANT_CASES, ids=ids)
def test_dequantize_is_bit_exact_with_bitsandbytes(case, quant_type):
    x = make(*case)
    packed, state = bnbF.quantize_4bit(x, blocksize=64, quant_type=quant_type)
    ours = nf4.dequantize_4bit(nf4.quantize_4bit(x, quant_type))
    assert ours.shape == x.shape
    assert torch.equal(ours.reshape(-1), bnbF.dequantize_4bit(packed, state).reshape(-1))


@pytest.mark.parametrize("case", [("normal", (300, 64)), ("heavy", (5, 70)), ("zeros", (600, 64))], ids=ids)
def test_double_quantization_is_bit_exact_with_bitsandbytes(case):
    x = make(*case)
    packed, state = bnbF.quantize_4bit(x, blocksize=64, quant_type="nf4", compress_statistics=True)
    q = nf4.quantize_4bit(x, "nf4", 64, double_quant=True)
    assert q.absmax is None and q.double is not None
    assert torch.equal(q.packed, packed)
    assert torch.equal(q.double.qabsmax, state.absmax)
    assert torch.equal(q.double.absmax2, state.state2.absmax)
    assert torch.equal(q.double.offset, state.offset)
    assert torch.equal(nf4.dequantize_4bit(q).reshape(-1), bnbF.dequantize_4bit(packed, state).reshape(-1))


def test_8bit_lookup_table_matters_for_small_values():
    # Many values close to 0 after scaling: bitsandbytes' CPU kernel rounds them through its
    # 65,536-point table, which differs from plain nearest-code rounding. We must follow the table.
    g = torch.Generator().manual_seed(3)
    x = torch.randn(256 * 40, generator=g) * torch.rand(256 * 40, generator=g) ** 8
    ref, state = bnbF.quantize_blockwise(x, blocksize=256)
    idx, absmax = nf4.quantize_8bit(x, 256)
    assert torch.equal(idx, ref) and torch.equal(absmax, state.absmax)
    scaled = (x.view(-1, 256) / absmax.view(-1, 1)).reshape(-1)
    plain = torch.bucketize(scaled, (nf4.DYNAMIC_CODE[1:] + nf4.DYNAMIC_CODE[:-1]) / 2)
    assert (plain != ref.long()).sum() > 100


def test_double_quant_round_trip_is_close():
    absmax = torch.rand(1000, generator=torch.Generator().manual_seed(0)) + 0.5
    dq = nf4.double_quantize(absmax)
    assert dq.qabsmax.dtype == torch.uint8 and dq.absmax2.shape == (4,)
    assert (dq.dequantize() - absmax).abs().max() < 0.01


def test_nibble_packing_layout():
    assert nf4.pack_nibbles(torch.tensor([0xA, 0x3, 0x0, 0xF])).flatten().tolist() == [0xA3, 0x0F]
    idx = torch.randint(0, 16, (21,), generator=torch.Generator().manual_seed(0))
    packed = nf4.pack_nibbles(torch.cat([idx, torch.zeros(1)])).reshape(-1).long()
    assert torch.equal(torch.stack([packed >> 4, packed & 0xF], dim=-1).reshape(-1)[:21], idx)  # high, then low
    # odd count: the pad is 0.0, whose NF4 index 7 fills the last low nibble; 1.0 is index 15
    assert nf4.quantize_4bit(torch.tensor([1.0])).packed.flatten().tolist() == [0xF7]


def test_all_zero_blocks():
    q = nf4.quantize_4bit(torch.zeros(64 + 10))
    assert q.absmax[0] == 0  # a full zero block keeps absmax 0 ...
    assert q.absmax[1] == torch.tensor(1e-38)  # ... a partial one stores the clamp, as bitsandbytes
    assert (q.packed == 0x77).all() and (nf4.dequantize_4bit(q) == 0).all()


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_weights_raise_a_clear_error(bad):
    x = torch.randn(10, 64)
    x[3, 5] = bad
    with pytest.raises(ValueError, match="NaN/inf"):
        nf4.quantize_4bit(x)
    linear = nn.Linear(64, 10)
    with torch.no_grad():
        linear.weight[3, 5] = bad
    model = nn.Sequential(linear)
    with pytest.raises(ValueError, match="layer '0'"):
        nf4.quantize_model(model)


def test_bad_arguments():
    with pytest.raises(ValueError, match="quant_type"):
        nf4.quantize_4bit(torch.randn(8), "nf5")
    with pytest.raises(TypeError):
        nf4.quantize_4bit(torch.arange(8))
    with pytest.raises(ValueError, match="blocksize"):
        nf4.quantize_4bit(torch.randn(8), blocksize=0)


def test_bits_per_parameter():
    assert nf4.bits_per_parameter(64) == 4.5
    assert nf4.bits_per_parameter(64, double_quant=True) == pytest.approx(4.127, abs=5e-4)
    w = torch.randn(32, 64 * 256, generator=torch.Generator().manual_seed(0))
    assert nf4.quantize_4bit(w).bits_per_parameter == 4.5
    measured = nf4.quantize_4bit(w, double_quant=True).bits_per_parameter
    assert measured == pytest.approx(nf4.bits_per_parameter(64, True), abs=1e-4)  # + the 32-bit offset


def test_nf4_beats_fp4_and_int4_on_gaussian_weights():
    w = torch.randn(128, 256, generator=torch.Generator().manual_seed(0))
    err = {t: nf4.tradeoff(w, 64, t)["rmse"] for t in ("nf4", "fp4", "int4")}
    assert err["nf4"] < err["int4"] < err["fp4"]
    assert 0.07 < err["nf4"] < 0.12  # about 9% of the weights' std with blocks of 64


def test_tradeoff_smaller_blocks_cost_bits_and_save_error():
    w = torch.randn(64, 512, generator=torch.Generator().manual_seed(1))
    rows = [nf4.tradeoff(w, b) for b in (16, 64, 256, 1024)]
    errors, bits = [r["rmse"] for r in rows], [r["bits_per_parameter"] for r in rows]
    assert errors == sorted(errors) and bits == sorted(bits, reverse=True)
    assert bits[1] == 4.5 and rows[0]["relative_error"] == pytest.approx(errors[0] / float(w.pow(2).mean().sqrt()))


@pytest.mark.parametrize("double_quant", [False, True])
def test_nf4_linear_close_to_float_and_stores_no_float_weight(double_quant):
    torch.manual_seed(0)
    linear = nn.Linear(96, 40)
    layer = nf4.NF4Linear.from_linear(linear, double_quant=double_quant)
    assert not any(p.is_floating_point() and p.numel() == linear.weight.numel() for p in layer.state_dict().values())
    assert layer.packed.shape == (96 * 40 // 2, 1)
    x = torch.randn(3, 5, 96)
    ref, out = linear(x), layer(x)
    assert out.shape == ref.shape
    assert (out - ref).norm() / ref.norm() < 0.1
    exact = nn.functional.linear(x, nf4.dequantize_4bit(nf4.quantize_4bit(linear.weight.detach())), linear.bias)
    if not double_quant:
        assert torch.allclose(out, exact, atol=1e-6)


def test_quantize_model_on_a_toy_llama():
    model = tiny_llama(vocab_size=64, hidden_size=64, num_layers=2, seed=0)
    ids = torch.randint(0, 64, (1, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ref = model(ids).logits
    report = nf4.quantize_model(model)
    assert len(report.replaced) == 7 * 2 and report.skipped == ["lm_head"]
    assert isinstance(model.lm_head, nn.Linear) and isinstance(model.model.layers[0].mlp.up_proj, nf4.NF4Linear)
    assert report.bytes_after < report.bytes_before
    saved = report.quantized_parameters * (4 - 0.5 - 4 / 64)  # float32 → 4 bits + a 4-byte absmax per 64
    assert report.bytes_before - report.bytes_after == pytest.approx(saved, rel=1e-6)
    assert "MB" in str(report)
    with torch.no_grad():
        out = model(ids).logits
    assert (out - ref).norm() / ref.norm() < 0.15
    assert (out.argmax(-1) == ref.argmax(-1)).float().mean() > 0.7


def test_perplexity_matches_the_models_own_loss():
    model = tiny_llama(seed=2)
    ids = torch.randint(0, 32, (1, 20), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        loss = model(ids, labels=ids).loss
    assert perplexity(model, ids, window=64) == pytest.approx(float(loss.exp()), rel=1e-5)
    assert perplexity(model, ids, window=8) != pytest.approx(float(loss.exp()), rel=1e-5)


def test_quantize_model_equals_transformers_bitsandbytes(tmp_path):
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    tiny_llama(vocab_size=64, hidden_size=64, num_layers=1, seed=0).save_pretrained(tmp_path)
    ours = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32)
    config = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = AutoModelForCausalLM.from_pretrained(tmp_path, quantization_config=config, device_map="cpu")
    nf4.quantize_model(ours)
    parity = bnb_parity(ours, theirs)
    assert parity == {"layers": 7, "packed_equal": 7, "absmax_equal": 7}
    ids = torch.randint(0, 64, (1, 10), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        a, b = ours(ids).logits, theirs(ids).logits
    assert (a - b).abs().max() < 0.05  # bitsandbytes may compute in bf16 on AVX-512 CPUs


def test_quantization_panel_calls_tradeoff_for_each_setting(monkeypatch):
    from specdec_core.viz import widgets

    calls, original = [], nf4.tradeoff

    def spy(weights, blocksize, quant_type="nf4", double_quant=False):
        calls.append((blocksize, quant_type, double_quant))
        return original(weights, blocksize, quant_type, double_quant)

    monkeypatch.setattr(nf4, "tradeoff", spy)
    panel = widgets.quantization_panel(torch.randn(16, 128), sizes=(16, 64))
    assert (64, "nf4", False) in calls  # the default setting is drawn at once
    (size, double), kind = panel.children[0].children, panel.children[1]
    size.value, kind.value, double.value = 16, "int4", True
    assert (16, "int4", True) in calls
