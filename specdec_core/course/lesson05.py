"""Checker for lesson 05's exercise: NF4 quantize-and-pack of one block.

    check_nf4_pack_block(nf4_pack_block)   # nf4_pack_block(block [64] float32) -> (packed [32] uint8, absmax)

The student's function scales one block by its absmax, picks the nearest of the 16 NF4 values for
each weight and packs two 4-bit indices per byte, the even element in the high nibble. The checker
compares the bytes with :func:`specdec_core.nf4.quantize_4bit` (itself bit-exact with bitsandbytes)
on a few seeded blocks and prints ✓ / ✗ lines through :class:`Checks`.
"""

from __future__ import annotations

import torch

from ..nf4 import NF4_CODE, quantize_4bit
from .checks import Checks

BLOCK = 64


def reference_nf4_pack_block(block: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The answer: block [64] float32 → (packed [32] uint8, absmax 0-d float32)."""
    q = quantize_4bit(block, "nf4", blocksize=block.numel())
    return q.packed.reshape(-1), q.absmax[0]


def _blocks() -> dict[str, torch.Tensor]:
    """Seeded test blocks: Gaussian, uniform, heavy-tailed, one that pins the nibble order, zeros."""
    g = torch.Generator().manual_seed(5)
    order = torch.zeros(BLOCK)
    order[0], order[1] = 2.0, -2.0  # element 0 → index 15 (+absmax), element 1 → index 0 (-absmax)
    return {
        "a Gaussian block": torch.randn(BLOCK, generator=g) * 0.02,
        "a uniform block": torch.rand(BLOCK, generator=g) * 2 - 1,
        "a heavy-tailed block": torch.randn(BLOCK, generator=g) ** 3,
        "the nibble-order block [2, -2, 0, …]": order,
        "an all-zero block": torch.zeros(BLOCK),
    }


def _as_bytes(packed) -> torch.Tensor | None:
    """The student's packed output as a flat uint8 tensor, or None if it is not one."""
    if not isinstance(packed, torch.Tensor) or packed.dtype != torch.uint8:
        return None
    return packed.reshape(-1)


def _swap(packed: torch.Tensor) -> torch.Tensor:
    return (packed << 4) | (packed >> 4)


def _diagnose(got: torch.Tensor, ref: torch.Tensor, block: torch.Tensor) -> str:
    """A hint for wrong bytes: which common mistake produces exactly these bytes?"""
    if torch.equal(_swap(got), ref):
        return "the nibbles are swapped: element 2i goes in the HIGH nibble: (q[0::2] << 4) | q[1::2]"
    idx = torch.stack([got >> 4, got & 15], -1).reshape(-1)
    ref_idx = torch.stack([ref >> 4, ref & 15], -1).reshape(-1)
    wrong = int((idx != ref_idx).sum())
    scaled = block / block.abs().max().clamp(min=1e-38)
    for grid in (torch.arange(-8, 8) / 7, torch.linspace(-1, 1, 16)):  # evenly spaced levels
        if torch.equal(idx.long(), (scaled.unsqueeze(-1) - grid).abs().argmin(-1)):
            return "these are the indices of an evenly spaced grid: use the 16 NF4 values in NF4_CODE instead"
    top = int(block.abs().argmax())
    if int(idx[top]) != int(ref_idx[top]) or int(((idx == 0) | (idx == 15)).sum()) != int(
        ((ref_idx == 0) | (ref_idx == 15)).sum()
    ):
        return (
            f"{wrong} of {BLOCK} indices differ: scale by the block's absmax (block / block.abs().max()), so the "
            "largest |weight| becomes exactly ±1 (index 15 or 0) and every other value lies inside [-1, 1]"
        )
    return (
        f"{wrong} of {BLOCK} indices differ: for each scaled value take the index of the NEAREST of the 16 NF4 "
        "values in NF4_CODE (torch.bucketize on their midpoints, or argmin of the distance)"
    )


def _compare(got: torch.Tensor | None, ref: torch.Tensor, block: torch.Tensor) -> str:
    """'' when the bytes are right, else the hint to print."""
    if got is None:
        return "packed must be a torch.uint8 tensor (idx.to(torch.uint8) before shifting)"
    if got.shape != ref.shape:
        return f"expected {ref.numel()} bytes (two 4-bit indices per byte), got {got.numel()}"
    return "" if torch.equal(got, ref) else _diagnose(got, ref, block)


def check_nf4_pack_block(fn) -> None:
    """Test ``fn(block [64]) -> (packed [32] uint8, absmax)`` against the reference."""
    blocks = _blocks()
    with Checks("nf4_pack_block") as c:
        block = blocks["a Gaussian block"]
        out = c.call(fn, block.clone())
        ok = isinstance(out, tuple) and len(out) == 2 and _as_bytes(out[0]) is not None
        c.expect(
            ok and _as_bytes(out[0]).numel() == BLOCK // 2,
            "returns (packed, absmax) with 32 uint8 bytes for 64 weights",
            "return a tuple (packed, absmax); packed holds two 4-bit indices per byte, dtype torch.uint8 "
            "(idx.to(torch.uint8) before shifting)",
        )
        if not ok:
            return
        ref_packed, ref_absmax = reference_nf4_pack_block(block)
        c.expect(
            abs(float(out[1]) - float(ref_absmax)) <= 1e-7 * float(ref_absmax),
            "absmax is the largest |weight| of the block",
            f"absmax = block.abs().max() (expected {float(ref_absmax):.6g}, got {float(out[1]):.6g})",
        )
        got = _as_bytes(out[0])
        if got.shape == ref_packed.shape:
            back = NF4_CODE[torch.stack([got >> 4, got & 15], -1).reshape(-1).long()] * ref_absmax
            err = float((back - block).abs().max() / ref_absmax)
            c.expect(
                err < 0.2,
                "decoding the bytes, NF4_CODE[index] * absmax, gives back the block (error < 20% of absmax)",
                f"the decoded block is off by up to {err:.0%} of absmax: check the scaling and the nibble order",
            )
        for name in (
            "a Gaussian block",
            "a uniform block",
            "a heavy-tailed block",
            "the nibble-order block [2, -2, 0, …]",
        ):
            block = blocks[name]
            out = c.call(fn, block.clone())
            ref, _ = reference_nf4_pack_block(block)
            hint = _compare(_as_bytes(out[0]), ref, block)
            c.expect(not hint, f"bytes equal bitsandbytes' on {name}", hint)
        out = c.call(fn, blocks["an all-zero block"].clone())
        got = _as_bytes(out[0])
        c.expect(
            got is not None and bool((got == 0x77).all()) and float(out[1]) == 0.0,
            "an all-zero block gives absmax 0 and bytes 0x77 (index 7 is the code value 0.0)",
            "0 / 0 is NaN: when absmax is 0 the scaled values must be 0 (e.g. divide by absmax.clamp(min=1e-38))",
        )
