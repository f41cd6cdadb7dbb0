"""Checkers for lesson 06's exercise: how many bytes a model's weights take in fp32, bf16 and NF4.

    check_stored_bytes(stored_bytes)
        # stored_bytes(n_weights, fmt, blocksize=64, dq_blocksize=256) -> int
    check_model_weight_bytes(model_weight_bytes)
        # model_weight_bytes(model, fmt, skip=("lm_head",)) -> int

``fmt`` is one of ``fp32``, ``bf16``, ``nf4``, ``nf4+dq``. The first function counts the storage of
n weights; the second predicts a whole model's footprint from its parameter count. The checkers
compare with what :mod:`specdec_core.nf4` actually stores (``Quantized4bit.nbytes``, and
``memory.weight_bytes`` after ``quantize_model``) on seeded toy models, printing ✓ / ✗ lines.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence

import torch
from torch import nn
from transformers import LlamaConfig, LlamaForCausalLM

from ..memory import weight_bytes
from ..nf4 import quantize_4bit, quantize_model
from ..toy import tiny_llama
from .checks import Checks

FORMATS = ("fp32", "bf16", "nf4", "nf4+dq")


def reference_stored_bytes(n_weights: int, fmt: str, blocksize: int = 64, dq_blocksize: int = 256) -> int:
    """Bytes to store ``n_weights`` weights in ``fmt`` (the answer)."""
    if fmt == "fp32":
        return 4 * n_weights
    if fmt == "bf16":
        return 2 * n_weights
    blocks = math.ceil(n_weights / blocksize)  # a partial last block has its own absmax
    packed = math.ceil(n_weights / 2)  # two 4-bit codes per byte, an odd count padded
    if fmt == "nf4":
        return packed + 4 * blocks  # + one float32 absmax per block
    if fmt == "nf4+dq":  # + one byte per absmax, a float32 scale per dq block, a float32 offset
        return packed + blocks + 4 * math.ceil(blocks / dq_blocksize) + 4
    raise ValueError(f"unknown format {fmt!r}: choose one of {FORMATS}")


def reference_model_weight_bytes(model: nn.Module, fmt: str, skip: Sequence[str] = ("lm_head",)) -> int:
    """Bytes of ``model``'s parameters and buffers if stored in ``fmt`` (the answer).

    fp32 / bf16: every parameter and buffer at 4 / 2 bytes per value. nf4 / nf4+dq: each
    ``nn.Linear`` weight outside ``skip`` as :func:`reference_stored_bytes`; everything else stays
    float32. ``model.parameters()`` yields a tied tensor once.
    """
    if fmt in ("fp32", "bf16"):
        values = sum(p.numel() for p in model.parameters()) + sum(b.numel() for b in model.buffers())
        return reference_stored_bytes(values, fmt)
    quantized = {}
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear) and not any(part in skip for part in name.split(".")):
            quantized[id(module.weight)] = reference_stored_bytes(module.weight.numel(), fmt)
    total = sum(quantized.get(id(p), 4 * p.numel()) for p in model.parameters())
    return total + sum(4 * b.numel() for b in model.buffers())


# ---------------------------------------------------------------------------------------------
# stored_bytes
# ---------------------------------------------------------------------------------------------

# (n, blocksize): a full-block count, a partial last block, an odd count, a real layer, block 128
CASES = [(64 * 1000, 64), (1000, 64), (4097, 64), (576 * 1536, 64), (1000, 128), (70_000, 32)]


def _measured(n: int, fmt: str, blocksize: int) -> int:
    """What nf4.quantize_4bit actually stores for n Gaussian weights."""
    if fmt in ("fp32", "bf16"):
        return reference_stored_bytes(n, fmt)
    x = torch.randn(n, generator=torch.Generator().manual_seed(n))
    return quantize_4bit(x, "nf4", blocksize, double_quant=fmt == "nf4+dq").nbytes


def _stored_hint(got, n: int, fmt: str, blocksize: int) -> str:
    """Which common mistake gives exactly ``got``?"""
    if not isinstance(got, int):
        return f"return a whole number of bytes as an int (got {type(got).__name__} {got!r}): use math.ceil"
    blocks, packed = math.ceil(n / blocksize), math.ceil(n / 2)
    if fmt in ("fp32", "bf16"):
        return "fp32 stores 4 bytes per weight, bf16 2"
    if got in (n // 2 + 4 * (n // blocksize), n // 2 + (n // blocksize) + 4 * (n // blocksize // 256) + 4):
        return "round UP: a partial last block still stores its absmax, and an odd count pads one nibble"
    if got == packed:
        return "the 4-bit codes are not all: each block of `blocksize` weights also stores its absmax"
    if fmt == "nf4" and got == packed + 2 * blocks:
        return "the absmax values are float32: 4 bytes each"
    extras = 4 * math.ceil(blocks / 256) + 4
    if fmt == "nf4+dq" and got in (packed + 4 * blocks, packed + 4 * blocks + extras):
        return "with double quantization each absmax takes 1 byte (8 bits), not 4"
    if fmt == "nf4+dq" and got == packed + blocks:
        return ("double quantization also stores one float32 scale per `dq_blocksize` absmax values and one "
                "float32 offset (their mean)")
    return f"expected {_measured(n, fmt, blocksize):,} bytes, got {got:,}: 4 bits per weight + the scales"


def check_stored_bytes(fn) -> None:
    """Test ``fn(n_weights, fmt, blocksize=64, dq_blocksize=256) -> int`` against what nf4 stores."""
    with Checks("stored_bytes") as c:
        for fmt in ("fp32", "bf16"):
            got = c.call(fn, 1000, fmt)
            c.expect(got == reference_stored_bytes(1000, fmt), f"{fmt}: 1,000 weights take {reference_stored_bytes(1000, fmt):,} bytes",
                     _stored_hint(got, 1000, fmt, 64))
        for fmt, what in (("nf4", "packed codes + a float32 absmax per block"),
                          ("nf4+dq", "packed codes + 8-bit absmax + their scales and offset")):
            wrong = []
            for n, blocksize in CASES:
                got = c.call(fn, n, fmt, blocksize=blocksize)
                if got != _measured(n, fmt, blocksize):
                    wrong.append((n, blocksize, got))
            hint = ""
            if wrong:
                n, blocksize, got = wrong[0]
                hint = f"for {n:,} weights in blocks of {blocksize}: " + _stored_hint(got, n, fmt, blocksize)
            c.expect(not wrong, f"{fmt}: equals nf4.quantize_4bit(...).nbytes for {len(CASES)} sizes ({what})", hint)
        bits = 8 * c.call(fn, 64 * 256 * 100, "nf4+dq") / (64 * 256 * 100)
        c.expect(abs(bits - 4.127) < 0.001, f"nf4+dq costs {bits:.4f} bits per weight (QLoRA: ≈ 4.127)",
                 "4 + 8/64 + 32/(64·256) bits per weight: check the double-quantization terms")


# ---------------------------------------------------------------------------------------------
# model_weight_bytes
# ---------------------------------------------------------------------------------------------


def _tied_llama() -> LlamaForCausalLM:
    """A toy whose output layer IS its input embedding (as SmolLM2's)."""
    config = LlamaConfig(vocab_size=48, hidden_size=64, intermediate_size=96, num_hidden_layers=1,
                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)
    torch.manual_seed(0)
    return LlamaForCausalLM(config).eval()


def _actual(model: nn.Module, fmt: str) -> int:
    """weight_bytes of a copy stored in ``fmt``."""
    twin = copy.deepcopy(model)
    if fmt == "bf16":
        return weight_bytes(twin.to(torch.bfloat16))
    if fmt != "fp32":
        quantize_model(twin, "nf4", double_quant=fmt == "nf4+dq")
    return weight_bytes(twin)


def _model_hint(got, model: nn.Module, fmt: str) -> str:
    if not isinstance(got, int):
        return f"return an int number of bytes (got {type(got).__name__})"
    diff = got - _actual(model, fmt)
    buffers = sum(b.numel() for b in model.buffers())
    tied = model.get_output_embeddings().weight is model.get_input_embeddings().weight
    head = model.get_output_embeddings().weight.numel()
    if diff in (-4 * buffers, -2 * buffers):
        return "add the buffers (model.buffers(): the rotary inv_freq tables), stored like the float parameters"
    if tied and diff == (2 if fmt == "bf16" else 4) * head:
        return "the output layer shares its weight with the embedding (tied): count that tensor once — model.parameters() does"
    if fmt.startswith("nf4") and diff == reference_stored_bytes(head, fmt) - 4 * head:
        return "the output layer (lm_head) stays in float: quantize only the nn.Linear layers outside `skip`"
    if fmt.startswith("nf4") and diff > 0:
        return f"{diff:,} bytes too many: quantized Linear weights take stored_bytes(n, fmt), not 4 bytes per weight"
    return f"off by {diff:+,} bytes: Linear weights outside `skip` in {fmt}, every other tensor in float32"


def check_model_weight_bytes(fn) -> None:
    """Test ``fn(model, fmt) -> int`` against ``memory.weight_bytes`` of the model stored that way."""
    models = {"a 2-layer toy": tiny_llama(vocab_size=40, hidden_size=64, num_layers=2, seed=1),
              "a toy with tied embeddings": _tied_llama()}
    with Checks("model_weight_bytes") as c:
        for label, model in models.items():
            for fmt in FORMATS:
                got = c.call(fn, model, fmt)
                want = _actual(model, fmt)
                c.expect(got == want, f"{label}, {fmt}: {want:,} bytes, as memory.weight_bytes measures",
                         _model_hint(got, model, fmt))
