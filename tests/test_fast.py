"""fast.twin: prepacked linears compute the same products, share the weights and never touch the original."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from specdec_core import ar, fast
from specdec_core.drafters import ModelDrafter
from specdec_core.memory import weight_bytes
from specdec_core.models import Pair
from specdec_core.speculative import speculative_generate
from specdec_core.toy import tiny_llama

pytestmark = pytest.mark.skipif(not fast.available(), reason="this PyTorch has no oneDNN (mkldnn) CPU kernels")
PROMPT = torch.tensor([[1, 5, 9, 2, 7]])


def test_packed_linear_matches_linear_on_any_leading_shape():
    torch.manual_seed(0)
    linear = nn.Linear(24, 40)
    packed = fast.PackedLinear(linear)
    for shape in [(24,), (3, 24), (1, 5, 24), (2, 3, 4, 24)]:
        x = torch.randn(shape)
        torch.testing.assert_close(packed(x), linear(x), atol=1e-5, rtol=1e-5)
    assert packed.weight is linear.weight and packed.bias is linear.bias  # shared, not copied


def test_twin_shares_weights_and_leaves_the_model_alone():
    model = tiny_llama(seed=0)
    twin = fast.twin(model)
    assert twin is not model and fast.is_twin(twin) and not fast.is_twin(model)
    assert all(type(m) is not fast.PackedLinear for m in model.modules())  # the original keeps nn.Linear
    assert {id(p) for p in twin.parameters()} <= {id(p) for p in model.parameters()}  # no weight copied
    tied = lambda m: m.lm_head.weight is m.get_input_embeddings().weight  # noqa: E731
    assert tied(twin) == tied(model)  # tied weights stay tied (and untied ones untied)
    assert weight_bytes(twin) == weight_bytes(model)


def test_twin_gives_the_same_logits_and_greedy_tokens():
    model = tiny_llama(seed=0, logit_scale=3.0)
    twin = fast.twin(model)
    with torch.inference_mode():
        torch.testing.assert_close(twin(PROMPT).logits, model(PROMPT).logits, atol=1e-4, rtol=1e-4)
    assert ar.generate(twin, PROMPT, 16).new_tokens == ar.generate(model, PROMPT, 16).new_tokens
    draft = tiny_llama(seed=1, num_layers=1, logit_scale=3.0)
    plain = speculative_generate(model, ModelDrafter(draft), PROMPT, 16, gamma=3)
    quick = speculative_generate(twin, ModelDrafter(fast.twin(draft)), PROMPT, 16, gamma=3)
    assert quick.new_tokens == plain.new_tokens and quick.stats.accepted_lengths == plain.stats.accepted_lengths


def test_a_twin_of_other_weights_would_be_caught():
    """The equality above is not vacuous: a twin built on different weights gives other logits."""
    model, other = tiny_llama(seed=0, logit_scale=3.0), tiny_llama(seed=3, logit_scale=3.0)
    with torch.inference_mode():
        assert not torch.allclose(fast.twin(other)(PROMPT).logits, model(PROMPT).logits, atol=1e-4)


def test_pair_fast_is_made_once_and_knows_its_plain_pair():
    pair = Pair(tiny_llama(seed=0), tiny_llama(seed=1), None, "toy", torch.device("cpu"))
    quick = pair.fast()
    assert quick is pair.fast() and quick.fast() is quick and quick.is_fast and not pair.is_fast
    assert quick.plain() is pair and pair.plain() is pair
    assert fast.is_twin(quick.target) and fast.is_twin(quick.draft) and not fast.is_twin(pair.target)


def test_another_model_goes_on_the_pairs_own_engine():
    """How the bench puts a CLLM copy (an adapter merged into a copy of the plain target) on the engine the
    pair was chosen on: the plain pair leaves it alone, the fast pair prepacks it, an engine pair also
    sets its precision and cache."""
    pair = Pair(tiny_llama(seed=0), tiny_llama(seed=1), None, "toy", torch.device("cpu"))
    other = tiny_llama(seed=2)
    assert pair.on_its_engine(other) is other
    assert fast.is_twin(pair.fast().on_its_engine(other))
    f32, bf16 = pair.engine("f32").on_its_engine(other), pair.engine("bf16").on_its_engine(other)
    assert fast.is_twin(f32) and f32.static_engine and bf16.static_engine  # (oneDNN prepacks f32 weights only)
    assert next(bf16.parameters()).dtype == torch.bfloat16 and next(other.parameters()).dtype == torch.float32
    assert not getattr(pair.engine("f32", static=False).on_its_engine(other), "static_engine", False)


@pytest.mark.skipif(not fast.packs(torch.bfloat16), reason="this CPU's oneDNN does not prepack bf16 weights")
def test_bf16_twin_is_prepacked_and_computes_the_bf16_product():
    torch.manual_seed(0)
    linear = nn.Linear(64, 96).to(torch.bfloat16)
    packed = fast.PackedLinear(linear)
    x = torch.randn(5, 64, dtype=torch.bfloat16)
    ref = x.float() @ linear.weight.float().T + linear.bias.float()
    assert packed(x).dtype == torch.bfloat16
    torch.testing.assert_close(packed(x).float(), ref, atol=0.05, rtol=0.02)  # bf16's resolution: 2^-8
    bf16 = tiny_llama(seed=0).to(torch.bfloat16)
    assert fast.is_twin(fast.twin(bf16))  # a bf16 model is prepacked where oneDNN takes bf16


def test_f16_is_left_to_f_linear_where_onednn_cannot_pack_it():
    if fast.packs(torch.float16):
        pytest.skip("this CPU packs f16 weights")
    f16 = tiny_llama(seed=0).to(torch.float16)
    assert not fast.is_twin(fast.twin(f16))
    assert not fast.packs(torch.int8)
