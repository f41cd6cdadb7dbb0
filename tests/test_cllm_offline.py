"""The shipped CLLM adapter on the offline target: small, loads, and Jacobi-decodes held-out requests
in fewer iterations than the original target (what the reference run measured, on two prompts)."""

from __future__ import annotations

import pytest

from specdec_core import code_prompts
from specdec_core.ar import generate
from specdec_core.assets import CLLM_DIR as ADAPTER_DIR
from specdec_core.jacobi import jacobi_generate
from specdec_core.models import PRESETS, chat_ids, load_cllm, load_model

pytestmark = pytest.mark.offline


def test_the_adapter_is_small():
    assert (ADAPTER_DIR / "adapter_model.safetensors").stat().st_size <= 10_000_000


@pytest.fixture(scope="module")
def models():
    from transformers import AutoTokenizer

    from specdec_core.assets import ensure_target_dir

    base = load_model(PRESETS["offline"].target, "cpu")
    return base, load_cllm(), AutoTokenizer.from_pretrained(ensure_target_dir())


def _tokens_per_iteration(model, tok, prompts) -> float:
    """Σ tokens ÷ Σ iterations of one-block Jacobi decoding (32 new tokens, block 16) over ``prompts``."""
    tokens = iterations = 0
    for prompt in prompts:
        gen = jacobi_generate(model, chat_ids(tok, prompt), 32, block_size=16, eos_token_id=tok.eos_token_id)
        tokens, iterations = tokens + len(gen.new_tokens), iterations + gen.stats.iterations
    return tokens / iterations


def test_cllm_fixes_more_tokens_per_iteration_on_held_out_requests(models):
    base, cllm, tok = models
    held = code_prompts.heldout()[:2]
    for prompt in held:  # Jacobi stays exact for the model it runs: the CLLM's own greedy output
        ids = chat_ids(tok, prompt)
        assert (jacobi_generate(cllm, ids, 32, block_size=16, eos_token_id=tok.eos_token_id).new_tokens
                == generate(cllm, ids, 32, eos_token_id=tok.eos_token_id).new_tokens)
    base_tpi, cllm_tpi = _tokens_per_iteration(base, tok, held), _tokens_per_iteration(cllm, tok, held)
    assert cllm_tpi > base_tpi + 0.15, (base_tpi, cllm_tpi)


def test_the_jacobi_forcing_adapter_is_small_and_keeps_multi_block_decoding_exact(models):
    """The reference Jacobi Forcing adapter (KL anchor, lesson 08b): its two-block decoding with recycling
    equals its own greedy output, in fewer iterations than the original target takes."""
    from specdec_core.assets import JF_ADAPTER

    assert (JF_ADAPTER / "adapter_model.safetensors").stat().st_size <= 10_000_000
    base, _, tok = models
    jf = load_cllm(folder=JF_ADAPTER)
    held = code_prompts.heldout()[:2]
    for prompt in held:
        ids = chat_ids(tok, prompt)
        two = jacobi_generate(jf, ids, 32, block_size=16, blocks=2, recycle=3, eos_token_id=tok.eos_token_id)
        assert two.new_tokens == generate(jf, ids, 32, eos_token_id=tok.eos_token_id).new_tokens
    base_tpi, jf_tpi = _tokens_per_iteration(base, tok, held), _tokens_per_iteration(jf, tok, held)
    assert jf_tpi > base_tpi, (base_tpi, jf_tpi)
