"""Tiny random-initialised causal LMs: the test models of the course (and of its exercises).

They load in milliseconds and run any algorithm exactly as a real model would, so the unit tests
and exercise checkers exercise the real code paths.
"""

from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaForCausalLM


def tiny_llama(
    vocab_size: int = 32,
    hidden_size: int = 32,
    num_layers: int = 2,
    seed: int = 0,
    logit_scale: float = 1.0,
    max_position_embeddings: int = 256,
) -> LlamaForCausalLM:
    """A random ``LlamaForCausalLM`` in eval mode, fp32, on the CPU.

    ``logit_scale`` multiplies the output layer: > 1 makes its distributions peakier, so two toys
    with different seeds disagree a lot (a statistical test of speculative sampling needs that).
    """
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=False,
        bos_token_id=0,
        eos_token_id=1,
        pad_token_id=1,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        model.lm_head.weight.mul_(logit_scale)
    return model.eval()


def toy_tokenizer(vocab_size: int = 32):
    """A word-level tokenizer for the toys: ids 0 = ``<unk>``, 1 = ``<eos>``, then the words ``w0``, ``w1``, …
    (so ``"w0 w1"`` → [2, 3]). Built in memory by the ``tokenizers`` library: no file, no download."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = ["<unk>", "<eos>"] + [f"w{i}" for i in range(vocab_size - 2)]
    backend = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", eos_token="<eos>")



def perturbed(model: LlamaForCausalLM, scale: float = 0.3, seed: int = 3) -> LlamaForCausalLM:
    """``model`` with every weight nudged by ``scale`` × its tensor's mean |w| × N(0, 1) noise (in place, returned):
    a draft that agrees with the original often, not always, so a batch's rows accept different numbers of guesses."""
    gen = torch.Generator(model.device).manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(scale * torch.randn(p.shape, generator=gen, device=p.device) * p.abs().mean())
    return model
