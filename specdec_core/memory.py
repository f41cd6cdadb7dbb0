"""What a model holds in memory: its weights, and the KV cache that grows with the context.

    weights   Σ over parameters and buffers of numel × bytes per element (shared tensors once)
    KV cache  2 (K and V) × layers × KV heads × head dim × tokens × batch × bytes per element

Sizes are bytes; the course prints them in MB = 10⁶ bytes (docs/reference.md#units).
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import DynamicCache, PretrainedConfig, PreTrainedModel

from .lm import cache_kwarg

MB = 10**6  # the course's megabyte: 10⁶ bytes, everywhere (docs/reference.md#units)


def _bnb_state_tensors(module: nn.Module) -> list[torch.Tensor]:
    """The scales bitsandbytes keeps outside the parameters, in the weight's ``quant_state``
    (absmax, and with double quantization its 8-bit state and offset). Its 16-value code is left out."""
    state = getattr(getattr(module, "weight", None), "quant_state", None)
    if state is None:
        return []
    tensors = [state.absmax]
    if getattr(state, "nested", False) and getattr(state, "state2", None) is not None:
        tensors += [state.state2.absmax, state.offset]
    return [t for t in tensors if isinstance(t, torch.Tensor)]


def weight_bytes(*models: nn.Module) -> int:
    """Bytes of the weights of ``models`` together: parameters, buffers and bitsandbytes' absmax scales. A tensor
    shared by two modules or models (tied embeddings, a draft cut from its target) counts once; a module's
    ``lookup_tables`` buffers (NF4Linear's code books) are left out, as bitsandbytes' code is."""
    seen: dict[tuple[int, int], int] = {}
    for model in models:
        tensors = list(model.parameters())
        for module in model.modules():
            tables = getattr(module, "lookup_tables", ())
            tensors += [b for name, b in module.named_buffers(recurse=False) if name not in tables]
            tensors += _bnb_state_tensors(module)
        for t in tensors:
            seen[(t.data_ptr(), t.numel())] = t.numel() * t.element_size()
    return sum(seen.values())


def step_bytes(model: nn.Module) -> int:
    """Bytes of weights one decode step reads: all of them but the input embedding table, of which a step
    reads one row — unless the output layer is that same table (tied), which a step reads whole."""
    table = model.get_input_embeddings().weight
    head = getattr(model.get_output_embeddings(), "weight", None)
    tied = head is not None and head.data_ptr() == table.data_ptr()
    return weight_bytes(model) - (0 if tied else table.numel() * table.element_size())


def kv_cache_bytes(config: PretrainedConfig, num_tokens: int, dtype: torch.dtype = torch.float32, batch: int = 1) -> int:
    """The KV-cache formula (module docstring); grouped-query attention (fewer KV heads) keeps it small."""
    config = config.get_text_config() if hasattr(config, "get_text_config") else config
    heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    bytes_per = torch.empty((), dtype=dtype, device="meta").element_size()
    return 2 * config.num_hidden_layers * heads * head_dim * num_tokens * batch * bytes_per


def cache_tensor_bytes(cache: DynamicCache) -> int:
    """Measured size of a filled cache: the bytes of every key and value tensor it holds."""
    tensors = [getattr(layer, name, None) for layer in cache.layers for name in ("keys", "values")]
    return sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))


@torch.inference_mode()
def filled_cache(model: PreTrainedModel, num_tokens: int, seed: int = 0) -> DynamicCache:
    """A KV cache after prefilling ``num_tokens`` random token ids (to measure its size)."""
    gen = torch.Generator().manual_seed(seed)  # host: one seed, the same ids on every device
    ids = torch.randint(0, model.config.vocab_size, (1, num_tokens), generator=gen)  # host: drawn from gen, then moved
    cache = DynamicCache(config=model.config)
    model(input_ids=ids.to(model.device), use_cache=True, logits_to_keep=1, **{cache_kwarg(model): cache})
    return cache
