"""Checker for lesson 05's exercise: NF4 quantization of a whole tensor, bit-exact with bitsandbytes.

    check_nf4_quantize(nf4_quantize)
        # nf4_quantize(weights [n] float32, blocksize=64) -> (packed [ceil(n/2)] uint8, absmax [ceil(n/blocksize)])

Lesson 05 quantizes one block of 64 by hand. The exercise asks for what bitsandbytes does to a whole
tensor: every block scaled by its own absmax, the partial last block, an odd count, an all-zero block
and the exact rounding of a full block (a multiply by the reciprocal, where the partial block divides).
The checker compares with :func:`specdec_core.nf4.quantize_4bit` (itself bit-exact with bitsandbytes)
on seeded tensors and prints ✓ / ✗ lines with a hint through :class:`Checks`.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from ..nf4 import NF4_CODE, quantize_4bit
from .checks import Checks

BLOCK = 64


def reference_nf4_quantize(weights: torch.Tensor, blocksize: int = BLOCK) -> tuple[torch.Tensor, torch.Tensor]:
    """The answer: weights [n] float32 → (packed [ceil(n/2)] uint8, absmax [ceil(n/blocksize)] float32)."""
    q = quantize_4bit(weights, "nf4", blocksize=blocksize)
    return q.packed.reshape(-1), q.absmax


def _rounding_block() -> torch.Tensor:
    """A full block where ``w * (1 / absmax)`` and ``w / absmax`` fall on two sides of an NF4 midpoint:
    only the multiply (bitsandbytes' way for full blocks) gives its bytes. Found by a fixed search."""
    midpoints = (NF4_CODE[1:] + NF4_CODE[:-1]) / 2
    g = torch.Generator().manual_seed(0)
    while True:
        a = torch.rand((), generator=g) * 2 + 0.01
        for m in midpoints:
            for x in (m * a, torch.nextafter(m * a, a), torch.nextafter(m * a, -a)):
                if torch.bucketize(x * (1 / a), midpoints) != torch.bucketize(x / a, midpoints):
                    block = torch.randn(BLOCK, generator=g) * 0.1 * a
                    block[0], block[1] = a, x  # a is the block's absmax (|0.1 a · N(0,1)| < a here)
                    block[2:] = block[2:].clamp(-0.9 * a, 0.9 * a)
                    return block


def _cases() -> dict[str, tuple[torch.Tensor, int]]:
    """Seeded inputs (weights, blocksize): one block, many blocks, the awkward cases of bitsandbytes."""
    g = torch.Generator().manual_seed(5)
    order = torch.zeros(BLOCK)
    order[0], order[1] = 2.0, -2.0  # element 0 → index 15 (+absmax), element 1 → index 0 (-absmax)
    scales = torch.tensor([0.01, 1.0, 30.0, 0.2]).repeat_interleave(BLOCK)
    return {
        "one Gaussian block": (torch.randn(BLOCK, generator=g) * 0.02, BLOCK),
        "the nibble-order block [2, -2, 0, …]": (order, BLOCK),
        "four blocks of very different scales": (torch.randn(4 * BLOCK, generator=g) * scales, BLOCK),
        "a heavy-tailed tensor with a partial last block (3 × 64 + 20)": (
            torch.randn(3 * BLOCK + 20, generator=g) ** 3, BLOCK),
        "an odd count (2 × 64 + 7)": (torch.rand(2 * BLOCK + 7, generator=g) * 2 - 1, BLOCK),
        "blocksize 32 (200 weights)": (torch.randn(200, generator=g), 32),
        "a block that sits on a rounding edge": (_rounding_block(), BLOCK),
    }


def _indices(packed: torch.Tensor) -> torch.Tensor:
    """The 4-bit indices of packed bytes, in order: [2 × bytes]."""
    return torch.stack([packed >> 4, packed & 15], -1).reshape(-1)


def _as_bytes(packed: object) -> torch.Tensor | None:
    """The student's packed output as a flat uint8 tensor, or None if it is not one."""
    if not isinstance(packed, torch.Tensor) or packed.dtype != torch.uint8:
        return None
    return packed.reshape(-1)


def _diagnose(got: torch.Tensor, ref: torch.Tensor, weights: torch.Tensor, blocksize: int) -> str:
    """A hint for wrong bytes: which common mistake gives exactly these bytes?"""
    if torch.equal((got << 4) | (got >> 4), ref):
        return "the nibbles are swapped: element 2i goes in the HIGH nibble: (q[0::2] << 4) | q[1::2]"
    n = weights.numel()
    idx, ref_idx = _indices(got)[:n], _indices(ref)[:n]
    bad = torch.where(idx != ref_idx)[0]  # positions of the wrong indices
    first = int(bad[0]) // blocksize
    blocks = math.ceil(n / blocksize)
    block = weights[first * blocksize:(first + 1) * blocksize]
    scaled = block / block.abs().max().clamp(min=1e-38)
    mine = idx[first * blocksize:(first + 1) * blocksize].long()
    for grid in (torch.arange(-8, 8) / 7, torch.linspace(-1, 1, 16)):  # evenly spaced levels
        if torch.equal(mine, (scaled.unsqueeze(-1) - grid).abs().argmin(-1)):
            return "these are the indices of an evenly spaced grid: use the 16 NF4 values in NF4_CODE instead"
    if blocks > 1 and first > 0 and len(bad) > 1:
        return (f"{len(bad)} of {n} indices differ, from block {first}: scale EACH block of {blocksize} by its "
                "own absmax (e.g. weights[:full].view(-1, blocksize)), not by one absmax of the whole tensor")
    if len(bad) <= 2 and n % blocksize == 0:
        return (f"{len(bad)} index differs by one level: bitsandbytes scales a full block as "
                "clamp(w * (1 / absmax), -1, 1) — a multiply by the reciprocal, which rounds differently "
                "from w / absmax in the last bit (lesson 05, 'What it takes to be bit-exact')")
    if first == blocks - 1 and n % blocksize:
        return (f"the partial last block ({n % blocksize} weights) is wrong: it gets its own absmax, and "
                "bitsandbytes scales it as w / absmax (a division)")
    return (f"{len(bad)} of {n} indices differ (first in block {first}): for each scaled value take the index "
            "of the NEAREST of the 16 NF4 values (torch.bucketize on their midpoints)")


def _check_case(c: Checks, fn: Callable, name: str, weights: torch.Tensor, blocksize: int) -> None:
    out = c.call(fn, weights.clone(), blocksize)
    ref_packed, ref_absmax = reference_nf4_quantize(weights, blocksize)
    if not (isinstance(out, tuple) and len(out) == 2 and isinstance(out[1], torch.Tensor)):
        c.expect(False, f"returns (packed, absmax) on {name}", "return a tuple (packed, absmax) of two tensors")
        return
    got = _as_bytes(out[0])
    absmax = out[1].reshape(-1).float()
    if absmax.shape != ref_absmax.shape:
        hint = (f"one absmax per block: ceil({weights.numel()} / {blocksize}) = {ref_absmax.numel()} values, "
                f"got {absmax.numel()} (the last block may be partial)")
    elif not torch.allclose(absmax, ref_absmax, rtol=1e-7, atol=0):
        hint = "absmax[b] is the largest |weight| of block b (an all-zero block keeps absmax 0)"
    elif got is None:
        hint = "packed must be a torch.uint8 tensor (idx.to(torch.uint8) before shifting)"
    elif got.shape != ref_packed.shape:
        hint = (f"expected {ref_packed.numel()} bytes for {weights.numel()} weights (two per byte; an odd count "
                f"is padded with one 0.0, index 7), got {got.numel()}")
    elif not torch.equal(got, ref_packed):
        hint = _diagnose(got, ref_packed, weights, blocksize)
    else:
        hint = ""
    c.expect(not hint, f"bytes and absmax equal bitsandbytes' on {name}", hint)


def check_nf4_quantize(fn: Callable) -> None:
    """Test ``fn(weights [n], blocksize) -> (packed [ceil(n/2)] uint8, absmax [ceil(n/blocksize)])``."""
    with Checks("nf4_quantize") as c:
        for name, (weights, blocksize) in _cases().items():
            _check_case(c, fn, name, weights, blocksize)
        zeros = torch.cat([torch.zeros(BLOCK), torch.randn(BLOCK, generator=torch.Generator().manual_seed(1))])
        out = c.call(fn, zeros.clone(), BLOCK)
        got = _as_bytes(out[0]) if isinstance(out, tuple) and len(out) == 2 else None
        nan = got is None or bool(torch.isnan(out[1].float()).any()) or not bool((got[: BLOCK // 2] == 0x77).all())
        c.expect(
            not nan and float(out[1].reshape(-1)[0]) == 0.0,
            "an all-zero block gives absmax 0 and bytes 0x77 (index 7 is the code value 0.0)",
            "0 / 0 is NaN: when a block's absmax is 0 its scaled values must be 0 (divide by absmax.clamp(min=1e-38))"
            if nan else "the first block is all zeros, so its own absmax is 0: one absmax per block",
        )
