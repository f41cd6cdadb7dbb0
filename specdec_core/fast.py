"""Cheaper forwards on a CPU: an inference-only twin of a model whose linear layers read prepacked weights.

    fast_target = fast.twin(pair.target)      # new modules around the same weights; pair.target is untouched
    pair.fast()                               # the same for target and draft, made once per pair

A decode step of a small model is a chain of matrix-vector products, and on a CPU most of its time
goes to reading weights. PyTorch's default ``F.linear`` hands each product to a BLAS routine that reads
the weight in its stored row-major layout and, for a few rows of input (γ + 1 tokens to verify), often
picks a kernel made for one row and calls it row by row. oneDNN (the CPU library behind
``torch.backends.mkldnn``) can first **reorder** a weight once into the blocked layout its kernels read
fastest, then serve 1 to 16 rows in one pass over it. The tied 49,152 × 576 output layer of the offline
target is where this shows most: lesson 01 measures both paths on this machine.

The twin computes the same products (each f32 product agrees to rounding, about 1e-6, the logits to about
1e-4), so greedy tokens are the same. A bf16 model's linears are prepacked too where this CPU's oneDNN takes
2-byte weights (avx512_bf16 or AMX): its kernel reads the blocked bf16 weight once for 1 to 17 rows, so a
γ + 1 verify costs about what one row costs, where PyTorch's plain bf16 and f16 products grow with the rows
(lesson 01b measures v(n) per engine). An f16 weight is left to ``F.linear``: oneDNN packs f16 only on CPUs
with avx512_fp16 or avx_ne_convert, and an engine never mixes two formats of one weight. It is for inference only: training, LoRA, NF4 quantization and anything that
reads ``layer.weight`` as a live parameter (the feature drafter's output rows) use the plain model, which
the twin never changes. The reordered copies are extra memory: about the size of the linear weights.
On a GPU there is nothing to pack (cuBLAS reads weights as they are): ``twin`` returns the model itself.
"""

from __future__ import annotations

import copy
import functools
import itertools

import torch
from torch import nn

from . import machine

PACKABLE = (torch.float32, torch.bfloat16)  # the weight dtypes a twin prepacks (where oneDNN takes them)


def available(device: torch.device | str = "cpu") -> bool:
    """Whether prepacked linears can run here: a CPU and a PyTorch built with oneDNN."""
    return (torch.device(device).type == "cpu" and torch.backends.mkldnn.is_available()
            and hasattr(torch.ops.mkldnn, "_linear_pointwise"))


@functools.cache
def packs(dtype: torch.dtype) -> bool:
    """Whether oneDNN on this CPU prepacks and multiplies ``dtype`` weights (f32 always; bf16 needs
    avx512_bf16 or AMX, else oneDNN refuses the reorder or would emulate it slowly)."""
    if not available() or dtype not in PACKABLE:
        return False
    try:
        w = torch.ones(8, 8, dtype=dtype)  # host: oneDNN's CPU kernels
        y = torch.ops.mkldnn._linear_pointwise(torch.ones(2, 8, dtype=dtype),  # host: oneDNN's CPU kernels
                                               torch.ops.mkldnn._reorder_linear_weight(w), None, "none", [], "")
        return bool((y == 8).all()) and (dtype != torch.bfloat16 or _has_bf16_isa())
    except RuntimeError:  # "... path needs the cpu support ...": not on this CPU
        return False


def _has_bf16_isa() -> bool:
    """Whether the CPU multiplies bf16 natively (oneDNN emulates it otherwise: correct, several times slower)."""
    flags = machine.cpuinfo("flags")
    if flags is None:  # not Linux: trust the reorder above
        return True
    return bool({"avx512_bf16", "amx_bf16"} & set(flags.split()))


class PackedLinear(nn.Module):
    """y = x Wᵀ + b, as the ``nn.Linear`` it replaces, with W reordered once for oneDNN.

    x [..., in_features] → y [..., out_features], in the weight's dtype (f32 or bf16). ``weight`` is the original parameter (shared, never
    copied), so code that reads it and memory accounting see the plain model; ``packed`` is the
    reordered copy the forward reads (a plain attribute: not saved, not moved, not trained).
    """

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight = linear.weight
        self.bias = linear.bias
        self.packed = torch.ops.mkldnn._reorder_linear_weight(linear.weight.detach())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        bias = None if self.bias is None else self.bias.detach()
        y = torch.ops.mkldnn._linear_pointwise(x.reshape(-1, self.in_features), self.packed, bias, "none", [], "")
        return y.reshape(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, prepacked for oneDNN"


def twin(model: nn.Module) -> nn.Module:
    """A copy of ``model``'s modules that shares its weights, with every ``nn.Linear`` whose dtype oneDNN packs
    here (:func:`packs`: f32, and bf16 on a CPU with native bf16) replaced by a :class:`PackedLinear`. The model
    itself is unchanged; where nothing can be packed (a GPU, a build without oneDNN) it is returned as it is."""
    first = next(model.parameters())
    if not available(first.device):
        return model
    shared = {id(t): t for t in itertools.chain(model.parameters(), model.buffers())}
    out = copy.deepcopy(model, shared)  # new modules, the same tensors (tied weights stay tied)
    for parent in list(out.modules()):
        for name, child in parent.named_children():
            if type(child) is nn.Linear and packs(child.weight.dtype):
                setattr(parent, name, PackedLinear(child))
    return out.eval()


def is_twin(model: nn.Module) -> bool:
    """Whether ``model`` reads prepacked weights (made by :func:`twin`)."""
    return any(isinstance(m, PackedLinear) for m in model.modules())
