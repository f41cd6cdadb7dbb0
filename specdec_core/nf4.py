"""NF4 from scratch: the 4-bit NormalFloat code book, blockwise quantization, nibble packing, double
quantization, and a Linear layer that keeps only the packed weights (QLoRA, arXiv:2305.14314).

The recipe, per weight tensor W with n elements:

    1. cut W.flatten() into blocks of 64 values;                      absmax[b] = max |W_block|
    2. scale each block into [-1, 1]:                                 s = W_block / absmax[b]
    3. replace each s by the index of the nearest of 16 code values:  q in 0..15
    4. pack two 4-bit indices per byte (even element in the HIGH nibble)
    dequantize:  W ≈ code[q] * absmax[b]

Everything here reproduces bitsandbytes 0.50.2 on the CPU bit for bit (tests/test_nf4.py): full
blocks are scaled by multiplying with 1/absmax, the partial last block by dividing; "nearest" is a
``bucketize`` on the midpoints of the sorted code; an odd count is padded with one 0.0; an all-zero
block keeps absmax 0. Double quantization compresses the float32 absmax values to 8 bits with
bitsandbytes' CPU kernel, which rounds through a 65,536-entry lookup table (reproduced below).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .memory import weight_bytes

NF4_OFFSET = 0.9677083  # the outermost quantile: norm.ppf(0.9677083) ≈ 1.848 standard deviations


def normal_code(offset: float = NF4_OFFSET) -> torch.Tensor:
    """The 16 NF4 values [16] (float32, sorted, in [-1, 1]), built from standard-normal quantiles: 8 positive
    values at the quantiles linspace(offset, 0.5, 9)[:-1], 7 negative ones at linspace(offset, 0.5, 8)[:-1]
    (mirrored), and an exact 0, divided by the largest: each of the 16 bins then holds about the same share of a
    normal distribution. Same arithmetic as bitsandbytes' ``create_normal_map`` (float32 linspace, float64 ppf,
    float32 result)."""
    from scipy.stats import norm

    positive = norm.ppf(torch.linspace(offset, 0.5, 9)[:-1].numpy()).tolist()  # host: SciPy's ppf takes NumPy
    negative = (-norm.ppf(torch.linspace(offset, 0.5, 8)[:-1].numpy())).tolist()  # host: SciPy's ppf takes NumPy
    values = torch.tensor(positive + [0.0] + negative, dtype=torch.float32).sort().values  # host: a constant table
    return values / values.max()


NF4_CODE = normal_code()
# bitsandbytes' FP4 (1 sign, 2 exponent, 1 mantissa bit) in bit-pattern order: index i decodes to
# FP4_CODE[i] (bit 3 is the sign). Values 0, 0.0625, 8, 12, 4, 6, 2, 3, scaled so the largest is 1.
FP4_CODE = torch.tensor([0, 0.0625, 8, 12, 4, 6, 2, 3, -0.0, -0.0625, -8, -12, -4, -6, -2, -3]) / 12  # host: a constant
# Plain int4 absmax: 15 evenly spaced levels k/7, k = -7..7, stored as k + 8 (index 0, -8/7, is never
# used because the scaled values never go below -1: symmetric int4 wastes one of its 16 levels).
INT4_CODE = torch.arange(-8, 8, dtype=torch.float32) / 7  # host: a constant table, moved where it is used
CODES = {"nf4": NF4_CODE, "fp4": FP4_CODE, "int4": INT4_CODE}


def get_code(quant_type: str) -> torch.Tensor:
    """The 16 code values [16] of ``quant_type`` ('nf4', 'fp4' or 'int4'), indexed by the nibble."""
    if quant_type not in CODES:
        raise ValueError(f"unknown quant_type {quant_type!r}: choose one of {sorted(CODES)}")
    return CODES[quant_type]


def check_finite(x: torch.Tensor, what: str = "the tensor") -> None:
    """Raise a clear error if ``x`` holds NaN or inf (one such value would spoil a whole block)."""
    if not torch.isfinite(x).all():
        bad = int((~torch.isfinite(x)).sum())
        raise ValueError(
            f"{what} holds {bad} NaN/inf value(s) out of {x.numel()}: absmax quantization needs finite "
            "numbers (one NaN makes its whole block NaN). Find where they come from (a diverged "
            "training run, a bad checkpoint) or replace them first, e.g. with torch.nan_to_num."
        )


def absmax_scale(flat: torch.Tensor, blocksize: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Scale each block of ``flat`` [n] into [-1, 1]: → (scaled [n] float32, absmax [ceil(n/bs)]). As bitsandbytes:
    full blocks multiply by 1/absmax (absmax clamped to 1e-38 so an all-zero block gives zeros, with absmax 0
    stored); the partial last block divides by its clamped absmax."""
    flat = flat.reshape(-1).float()
    n = flat.numel()
    rem = n % blocksize
    full = flat[: n - rem].reshape(-1, blocksize)
    absmax = full.abs().max(dim=-1).values if full.numel() else flat.new_zeros(0)
    scaled = (full * (1.0 / absmax.clamp(min=1e-38).view(-1, 1))).clamp_(-1, 1).reshape(-1)
    if rem:
        last = flat[n - rem :].abs().max().clamp(min=1e-38)
        absmax = torch.cat([absmax, last.unsqueeze(0)])
        scaled = torch.cat([scaled, torch.clamp(flat[n - rem :] / last, -1, 1)])
    return scaled, absmax


def nearest_code(scaled: torch.Tensor, code: torch.Tensor) -> torch.Tensor:
    """Index [n] (integer) of the nearest code value for each entry of ``scaled`` [n] in [-1, 1]: the gap between
    the midpoints of the sorted code it falls in (on a midpoint: the lower one). ``order`` maps sorted positions
    back to code indices (identity for NF4 and int4, a permutation for FP4's bit-pattern order)."""
    order = torch.argsort(code)
    midpoints = (code[order[:-1]] + code[order[1:]]) / 2
    idx = torch.bucketize(scaled, midpoints, out_int32=True)
    if bool((order == torch.arange(len(code), device=code.device)).all()):
        return idx
    return order.to(torch.uint8).index_select(0, idx)  # (a uint8 table is the fast gather on CPUs)


def pack_nibbles(idx: torch.Tensor) -> torch.Tensor:
    """Pack 4-bit indices [n] (n even) into bytes [n/2, 1] (uint8): element 2i in the high nibble,
    element 2i+1 in the low one. :func:`quantize_4bit` pads an odd count first."""
    q = idx.to(torch.uint8)
    return ((q[0::2] << 4) | q[1::2]).unsqueeze(1)


@dataclass
class DoubleQuant:
    """The absmax values [k] stored in 8 bits: absmax ≈ DYNAMIC_CODE[qabsmax] * absmax2[block] + offset."""

    qabsmax: torch.Tensor  # uint8 [k]
    absmax2: torch.Tensor  # float32 [ceil(k / blocksize)]
    offset: torch.Tensor  # float32 scalar: the mean absmax, subtracted first
    blocksize: int = 256

    def dequantize(self, code: torch.Tensor | None = None) -> torch.Tensor:
        return dequantize_8bit(self.qabsmax, self.absmax2, self.blocksize, code) + self.offset

    @property
    def nbytes(self) -> int:
        return self.qabsmax.numel() + 4 * self.absmax2.numel() + 4


@dataclass
class Quantized4bit:
    """A tensor in 4 bits: ``packed`` [ceil(n/2), 1] uint8 plus one scale per block of ``blocksize``."""

    packed: torch.Tensor
    absmax: torch.Tensor | None  # float32 [n_blocks], or None when ``double`` holds them
    shape: torch.Size
    blocksize: int
    quant_type: str
    double: DoubleQuant | None = None

    def scales(self, dynamic: torch.Tensor | None = None) -> torch.Tensor:
        """The per-block absmax values [n_blocks] (float32), decoded (with ``dynamic``) if double-quantized."""
        return self.double.dequantize(dynamic) if self.double is not None else self.absmax

    @property
    def nbytes(self) -> int:
        scales = self.double.nbytes if self.double is not None else 4 * self.absmax.numel()
        return self.packed.numel() + scales

    @property
    def bits_per_parameter(self) -> float:
        return 8 * self.nbytes / math.prod(self.shape)


def quantize_4bit(x: torch.Tensor, quant_type: str = "nf4", blocksize: int = 64, double_quant: bool = False
                  ) -> Quantized4bit:
    """Quantize ``x`` (any shape, float) blockwise to 4 bits, as bitsandbytes' ``quantize_4bit``: packed bytes
    [ceil(n/2), 1] uint8 and absmax [ceil(n/blocksize)] float32 (in 8 bits with ``double_quant``)."""
    if blocksize < 1:
        raise ValueError(f"blocksize must be a positive number of values, got {blocksize}")
    if not x.is_floating_point():
        raise TypeError(f"quantize_4bit needs a float tensor, got {x.dtype}")
    if x.numel() == 0:
        raise ValueError("cannot quantize an empty tensor")
    code = get_code(quant_type).to(x.device)
    scaled, absmax = absmax_scale(x.reshape(-1), blocksize)
    if not bool(torch.isfinite(absmax).all()):  # a NaN or inf anywhere shows up in its block's absmax
        check_finite(x)
    if scaled.numel() % 2:  # an odd count: pad with 0.0, whose code gives the last low nibble
        scaled = F.pad(scaled, (0, 1))
    packed = pack_nibbles(nearest_code(scaled, code))
    if double_quant:
        return Quantized4bit(packed, None, x.shape, blocksize, quant_type, double_quantize(absmax))
    return Quantized4bit(packed, absmax, x.shape, blocksize, quant_type)


def dequantize_4bit(q: Quantized4bit, dtype: torch.dtype = torch.float32, code: torch.Tensor | None = None,
                    dynamic: torch.Tensor | None = None) -> torch.Tensor:
    """Back to floats, shape ``q.shape``: code[index] * absmax of its block (float32 math, as bnb).
    ``code``, ``dynamic``: the code books on q's device (default: copied there from the tables)."""
    n = math.prod(q.shape)
    code = get_code(q.quant_type).to(q.packed.device) if code is None else code
    # one lookup per byte instead of per nibble: pairs[b] = (code[b >> 4], code[b & 15])
    pairs = torch.stack([code.repeat_interleave(16), code.repeat(16)], dim=-1)
    values = pairs.index_select(0, q.packed.reshape(-1).long()).reshape(-1)[:n]
    absmax = q.scales(dynamic)
    rem = n % q.blocksize
    full = (values[: n - rem].view(-1, q.blocksize) * absmax[: (n - rem) // q.blocksize].view(-1, 1)).reshape(-1)
    if rem:
        full = torch.cat([full, values[n - rem :] * absmax[-1]])
    return full.reshape(q.shape).to(dtype)


# ---- double quantization: the absmax constants in 8 bits --------------------------------------


def dynamic_code() -> torch.Tensor:
    """bitsandbytes' signed 8-bit dynamic map [256] (float32, sorted; ``create_dynamic_map()``): for e = 0..6,
    ±10^(e-6) × the 2^e midpoints of linspace(0.1, 1, 2^e + 1) — many levels near 0 and 64 between 0.1 and 1, a
    floating-point-like grid — plus 0 and 1."""
    data: list[float] = []
    for e in range(7):
        bounds = torch.linspace(0.1, 1, 2**e + 1, dtype=torch.float32)  # host: builds a constant table
        means = (bounds[:-1] + bounds[1:]) / 2.0
        data += (10 ** (e - 6) * means).tolist() + (-(10 ** (e - 6)) * means).tolist()  # float32 products
    return torch.tensor(sorted(data + [0.0, 1.0]), dtype=torch.float32)  # host: a constant, moved where it is used


DYNAMIC_CODE = dynamic_code()
_LUT_SIZE = 65536


def _dynamic_lut() -> torch.Tensor:
    """The CPU kernel's table: for each of 65,536 points of [-1, 1], the index of the nearest code."""
    midpoints = 0.5 * (DYNAMIC_CODE[:-1] + DYNAMIC_CODE[1:])
    grid = -1.0 + (2.0 * torch.arange(_LUT_SIZE, dtype=torch.float32)) / (_LUT_SIZE - 1)  # host: a constant table
    return torch.bucketize(grid, midpoints)  # how many midpoints lie strictly below each point


_DYNAMIC_LUT = _dynamic_lut()


def quantize_8bit(x: torch.Tensor, blocksize: int = 256) -> tuple[torch.Tensor, torch.Tensor]:
    """8-bit blockwise quantization with the dynamic map, as bitsandbytes' CPU kernel does it: x [k] → (indices
    [k] uint8, absmax [ceil(k/blocksize)] float32). Each value times 1/absmax is rounded onto a grid of 65,536
    points first and looked up in a table (rounding straight to the nearest code differs for tiny values); an
    all-zero block gets absmax 0 and index 0."""
    flat = x.reshape(-1).float()
    n = flat.numel()
    pad = -n % blocksize
    blocks = F.pad(flat, (0, pad)).view(-1, blocksize)
    absmax = blocks.abs().max(dim=-1).values
    inv = torch.where(absmax > 0, 1.0 / absmax, torch.zeros_like(absmax))
    scaled = torch.clamp(blocks * inv.view(-1, 1), -1, 1)
    grid = ((scaled + 1.0) * 0.5 * (_LUT_SIZE - 1) + 0.5).long()  # truncation, as the C cast does
    idx = _DYNAMIC_LUT.to(grid.device)[grid]
    idx[absmax == 0] = 0
    return idx.reshape(-1)[:n].to(torch.uint8), absmax


def dequantize_8bit(idx: torch.Tensor, absmax: torch.Tensor, blocksize: int = 256,
                    code: torch.Tensor | None = None) -> torch.Tensor:
    """Inverse of :func:`quantize_8bit`: code[idx] * absmax of the block → [k] float32 (code: DYNAMIC_CODE)."""
    values = (DYNAMIC_CODE if code is None else code).to(idx.device)[idx.long()]
    return values * absmax.repeat_interleave(blocksize)[: values.numel()]


def double_quantize(absmax: torch.Tensor, blocksize: int = 256) -> DoubleQuant:
    """Store the absmax values [k] in 8 bits: subtract their mean, quantize blockwise (QLoRA §3)."""
    offset = absmax.mean()
    qabsmax, absmax2 = quantize_8bit(absmax - offset, blocksize)
    return DoubleQuant(qabsmax, absmax2, offset, blocksize)


def bits_per_parameter(blocksize: int = 64, double_quant: bool = False, dq_blocksize: int = 256) -> float:
    """Storage per weight: 4 bits + the scale's share. 64 → 4 + 32/64 = 4.5 bits; with double
    quantization 4 + 8/64 + 32/(64·256) ≈ 4.127 bits."""
    if double_quant:
        return 4 + 8 / blocksize + 32 / (blocksize * dq_blocksize)
    return 4 + 32 / blocksize


def tradeoff(weights: torch.Tensor, blocksize: int, quant_type: str = "nf4", double_quant: bool = False
             ) -> dict[str, float]:
    """Error and storage of quantizing ``weights`` one way: rmse, relative error, bits per parameter (pure:
    lesson 05's block-size widget calls it)."""
    q = quantize_4bit(weights, quant_type, blocksize, double_quant)
    err = dequantize_4bit(q) - weights.float()
    rmse = float(err.pow(2).mean().sqrt())
    return {"blocksize": blocksize, "rmse": rmse, "relative_error": rmse / float(weights.float().pow(2).mean().sqrt()),
            "bits_per_parameter": q.bits_per_parameter}


# ---- a Linear layer and a whole model in 4 bits ------------------------------------------------


class NF4Linear(nn.Module):
    """``nn.Linear`` whose weight [out, in] lives packed in 4 bits and is dequantized in ``forward``: x [..., in]
    → [..., out]. Buffers: ``packed`` [ceil(out·in/2), 1] uint8 and ``absmax`` [n_blocks] float32 (or, with double
    quantization, ``qabsmax`` uint8, ``absmax2`` float32 and ``offset``); the code books are ``lookup_tables``
    buffers (not weights, not saved): they follow ``.to(device)`` once instead of being copied in every forward."""

    lookup_tables = ("code", "dynamic_code")

    def __init__(self, q: Quantized4bit, bias: torch.Tensor | None = None) -> None:
        super().__init__()
        if len(q.shape) != 2:
            raise ValueError(f"NF4Linear needs a 2-D weight [out, in], got shape {tuple(q.shape)}")
        self.out_features, self.in_features = q.shape
        self.quant_type, self.blocksize = q.quant_type, q.blocksize
        self.register_buffer("packed", q.packed)
        self.register_buffer("code", get_code(q.quant_type).to(q.packed.device, copy=True), persistent=False)
        if q.double is None:
            self.register_buffer("absmax", q.absmax)
        else:
            self.dq_blocksize = q.double.blocksize
            self.register_buffer("qabsmax", q.double.qabsmax)
            self.register_buffer("absmax2", q.double.absmax2)
            self.register_buffer("offset", q.double.offset.reshape(()))
            self.register_buffer("dynamic_code", DYNAMIC_CODE.to(q.packed.device, copy=True), persistent=False)
        self.bias = nn.Parameter(bias.detach().clone(), requires_grad=False) if bias is not None else None

    @classmethod
    def from_linear(cls, linear: nn.Linear, quant_type: str = "nf4", blocksize: int = 64, double_quant: bool = False
                    ) -> NF4Linear:
        return cls(quantize_4bit(linear.weight.detach(), quant_type, blocksize, double_quant), linear.bias)

    def quantized(self) -> Quantized4bit:
        shape = torch.Size([self.out_features, self.in_features])
        if not hasattr(self, "qabsmax"):
            return Quantized4bit(self.packed, self.absmax, shape, self.blocksize, self.quant_type)
        double = DoubleQuant(self.qabsmax, self.absmax2, self.offset, self.dq_blocksize)
        return Quantized4bit(self.packed, None, shape, self.blocksize, self.quant_type, double)

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """The weight [out, in] as floats (what the layer multiplies by)."""
        return dequantize_4bit(self.quantized(), dtype, self.code, getattr(self, "dynamic_code", None))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        bias = self.bias.to(x.dtype) if self.bias is not None else None
        return F.linear(x, self.dequantize(x.dtype), bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, {self.quant_type}, block={self.blocksize}"


@dataclass
class MemoryReport:
    """What :func:`quantize_model` did: bytes before and after, and which layers it replaced."""

    bytes_before: int
    bytes_after: int
    replaced: list[str]
    skipped: list[str]
    quantized_parameters: int

    def __str__(self) -> str:
        return (
            f"{len(self.replaced)} Linear layers → 4 bits ({self.quantized_parameters:,} weights), "
            f"{len(self.skipped)} kept in float ({', '.join(self.skipped) or 'none'}): "
            f"{self.bytes_before / 1e6:.1f} MB → {self.bytes_after / 1e6:.1f} MB "
            f"({self.bytes_after / self.bytes_before:.1%})"
        )


@torch.no_grad()
def quantize_model(model: nn.Module, quant_type: str = "nf4", blocksize: int = 64, double_quant: bool = False,
                   skip: Sequence[str] = ("lm_head",)) -> MemoryReport:
    """Replace every ``nn.Linear`` of ``model`` (in place) by an :class:`NF4Linear`, but a layer whose name, or a
    dotted part of it, is in ``skip`` (by default the output head, as transformers' BitsAndBytesConfig does)."""
    before = weight_bytes(model)
    replaced, skipped, count = [], [], 0
    for name, module in list(model.named_modules()):
        if not isinstance(module, nn.Linear):
            continue
        if name in skip or any(part in skip for part in name.split(".")):
            skipped.append(name)
            continue
        try:
            layer = NF4Linear.from_linear(module, quant_type, blocksize, double_quant)
        except ValueError as err:
            raise ValueError(f"layer {name!r}: {err}") from None
        parent_name, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent_name) if parent_name else model, child, layer)
        replaced.append(name)
        count += module.weight.numel()
    return MemoryReport(before, weight_bytes(model), replaced, skipped, count)
