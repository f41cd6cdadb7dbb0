"""Precision rungs: the same model with its weights stored smaller, because a decode step mostly reads them.

    f32   the reference: 4 bytes a weight
    bf16  2 bytes: f32's exponent, 8 bits of mantissa (resolution 2⁻⁸ relative)
    f16   2 bytes: 5 exponent bits, 11 of mantissa (2⁻¹¹ relative, a smaller range)
    int8  weight-only int8: 1 byte a weight plus one f32 scale per output channel; activations stay in f32
          (or bf16), and torch's ``_weight_int8pack_mm`` kernel dequantizes inside the product:

          scale[o] = max_i |W[o, i]| / 127        W_q[o, i] = round(W[o, i] / scale[o])  ∈ [-127, 127]
          y[..., o] = (x · W_q[o, :]) · scale[o]

    int8-bf16  the same int8 weights with everything else (embeddings, norms, activations) in bf16: torch's
          int8 kernel is many times faster on bf16 rows than on f32 rows on a CPU with native bf16
          (``python -m specdec_core.bench.kernels`` measures both)

A rung pays where the step is bound by reading weights and the kernel for that type is fast here; it costs
where rounding flips a token: :func:`quality` measures both (perplexity and greedy agreement with f32).
"""

from __future__ import annotations

import copy
import math

import torch
from torch import nn

RUNGS = ("f32", "bf16", "f16", "int8", "int8-bf16")
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
RESOLUTION = {"f32": 2.0**-23, "bf16": 2.0**-8, "f16": 2.0**-11}  # the relative spacing of representable numbers


class Int8Linear(nn.Module):
    """``nn.Linear`` with an int8 weight [out, in] and a scale per output channel [out]; x [..., in] → [..., out]
    in x's dtype."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        w = linear.weight.detach().float()
        scale = w.abs().amax(dim=1).clamp(min=1e-12) / 127  # the row's largest |w| maps to ±127
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.register_buffer("weight_q", torch.round(w / scale[:, None]).to(torch.int8))
        self.register_buffer("scale", scale)
        self.bias = None if linear.bias is None else nn.Parameter(linear.bias.detach().clone(), requires_grad=False)

    KERNEL_DEVICES = ("cpu", "mps")  # where torch ships _weight_int8pack_mm; elsewhere (CUDA) the plain product

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, self.in_features)
        if x.device.type in self.KERNEL_DEVICES:
            y = torch._weight_int8pack_mm(flat, self.weight_q, self.scale.to(x.dtype))
        else:  # the same product, written out: the int8 weight converted on the fly (no fused kernel: slower)
            y = (flat @ self.weight_q.to(x.dtype).T) * self.scale.to(x.dtype)
        if self.bias is not None:
            y = y + self.bias.to(x.dtype)
        return y.reshape(*x.shape[:-1], self.out_features)

    def dequantized(self) -> torch.Tensor:
        """W ≈ W_q · scale [out, in] (f32): what the layer multiplies by."""
        return self.weight_q.float() * self.scale[:, None]

    def rows(self, ids: torch.Tensor) -> Int8Linear:
        """The layer cut to the output rows ``ids`` [S]: those rows' int8 weights and scales, so each kept output is
        the same product as before (FR-Spec's reduced head on an int8 engine)."""
        out = Int8Linear.__new__(Int8Linear)
        nn.Module.__init__(out)
        out.in_features, out.out_features = self.in_features, ids.numel()
        out.register_buffer("weight_q", self.weight_q[ids])
        out.register_buffer("scale", self.scale[ids])
        out.bias = None if self.bias is None else nn.Parameter(self.bias[ids].clone(), requires_grad=False)
        return out


def output_rows(model: nn.Module) -> torch.Tensor:
    """The output layer's weight [V, d] as the model multiplies by it: an int8 layer's rows dequantized (f32), any
    other layer's own weight. Drafters that reuse the target's output rows (the feature head, Medusa) read them here."""
    out = model.get_output_embeddings()
    return out.dequantized() if isinstance(out, Int8Linear) else out.weight


def at_precision(model: nn.Module, rung: str) -> nn.Module:
    """A copy of ``model`` at ``rung`` (:data:`RUNGS`); the model itself is unchanged. int8 replaces every
    ``nn.Linear`` (the output layer included: on a small model it is the largest matrix) and keeps the rest
    in f32; int8-bf16 keeps the rest in bf16 (the int8 weights are quantized from the f32 ones either way)."""
    if rung not in RUNGS:
        raise ValueError(f"precision must be one of {RUNGS}, got {rung!r}")
    out = copy.deepcopy(model)
    if rung in DTYPES:
        return out.to(DTYPES[rung]).eval()
    for parent in list(out.modules()):
        for name, child in parent.named_children():
            if type(child) is nn.Linear:
                setattr(parent, name, Int8Linear(child))
    if rung == "int8-bf16":  # the int8 weights stay int8, their scales f32; everything else becomes bf16
        for module in out.modules():
            for name, p in list(module.named_parameters(recurse=False)):
                setattr(module, name, nn.Parameter(p.detach().to(torch.bfloat16), requires_grad=False))
    return out.eval()


def weight_bytes_per_param(rung: str) -> float:
    """Bytes a weight costs at ``rung`` (int8's scales add 4 bytes per row: negligible on a wide matrix)."""
    return {"f32": 4.0, "bf16": 2.0, "f16": 2.0, "int8": 1.0, "int8-bf16": 1.0}[rung]


@torch.inference_mode()
def quality(reference: nn.Module, model: nn.Module, ids: torch.Tensor) -> dict[str, float]:
    """What a rung costs on text ids [1, T] (teacher-forced): the perplexity of both models and the share of the
    T − 1 positions where their argmaxes agree."""
    ref = reference(input_ids=ids.to(reference.device)).logits[0, :-1].float()
    got = model(input_ids=ids.to(model.device)).logits[0, :-1].float().to(ref.device)
    target = ids[0, 1:].to(ref.device)

    def ppl(logits: torch.Tensor) -> float:
        return math.exp(torch.nn.functional.cross_entropy(logits, target).item())

    agree = ref.argmax(-1) == got.argmax(-1)
    return {"ppl_reference": ppl(ref), "ppl": ppl(got), "agreement": agree.float().mean().item(),
            "positions": float(agree.numel())}


def top2_margin(logits: torch.Tensor) -> torch.Tensor:
    """logits [..., V] → the gap between the largest two [...]: a rounding smaller than it cannot flip the argmax."""
    top = logits.float().topk(2, dim=-1).values
    return top[..., 0] - top[..., 1]
