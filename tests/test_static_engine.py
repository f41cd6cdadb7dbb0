"""The static engine (``Decoder(static=True)``): a preallocated KV cache indexed by position, the engine's own
mask over the whole buffer. Every call must give the logits the dynamic cache gives, through prefill, step,
rollback, a masked (tree) step, keep, and a buffer that grows past its bucket."""

from __future__ import annotations

import pytest
import torch

from specdec_core.ar import generate
from specdec_core.kv_static import BUCKET
from specdec_core.lm import Decoder
from specdec_core.toy import tiny_llama


def _same(x: torch.Tensor, y: torch.Tensor) -> None:
    assert torch.allclose(x, y, atol=1e-5), (x - y).abs().max()


def _script(dec: Decoder, ids: torch.Tensor) -> list[torch.Tensor]:
    """Every Decoder call in the order a speculative or tree step makes them; the logits of each."""
    out = [dec.prefill(ids, 0), dec.step(ids[:, :3])]
    dec.rollback(10)
    out.append(dec.step(ids[:, 4:5]))
    mask = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 0, 1, 1]], dtype=torch.bool)
    out.append(dec.step_masked(torch.tensor([[5, 6, 7, 8]]), torch.tensor([11, 12, 12, 13]), mask))
    dec.keep([0, 2, 3])  # not a prefix: the kept keys move within the buffer
    out.append(dec.step(ids[:, :2]))
    out.append(dec.step(torch.randint(2, 40, (1, BUCKET), generator=torch.Generator().manual_seed(1))))  # grows
    out.append(dec.step(ids[:, :1]))
    return out


def test_static_engine_gives_the_dynamic_caches_logits() -> None:
    model = tiny_llama(vocab_size=40, hidden_size=32, num_layers=2, seed=3, max_position_embeddings=1024)
    ids = torch.randint(2, 40, (1, 9), generator=torch.Generator().manual_seed(0))
    dynamic, static = Decoder(model), Decoder(model, static=True)
    for a, b in zip(_script(dynamic, ids), _script(static, ids)):
        _same(a, b)
    assert static.length == dynamic.length == 16 + BUCKET + 1 and static.capacity == 2 * BUCKET
    assert torch.equal(static.tokens, dynamic.tokens)


def test_keep_without_the_copy_is_caught() -> None:
    """A keep that only moves the length (no index copy) must change the next logits: the test above can fail."""
    model = tiny_llama(vocab_size=40, hidden_size=32, num_layers=2, seed=3)
    ids = torch.tensor([[3, 4, 5, 6]])
    good, bad = Decoder(model, static=True), Decoder(model, static=True)
    for dec in (good, bad):
        dec.prefill(ids)
        dec.step_masked(torch.tensor([[7, 8, 9]]), torch.tensor([4, 4, 5]), torch.tensor([[1, 0, 0], [0, 1, 0], [0, 1, 1]]).bool())
    good.keep([1, 2])
    bad.rollback(bad.length - 1)  # the length of keep([1, 2]), but slots 0 and 1 of the call: the wrong keys
    assert not torch.allclose(good.step(torch.tensor([[10]])), bad.step(torch.tensor([[10]])), atol=1e-4)


def test_greedy_ar_is_the_same_on_the_static_engine() -> None:
    model = tiny_llama(vocab_size=40, hidden_size=32, num_layers=2, seed=5, max_position_embeddings=1024)
    prompt = torch.tensor([[2, 9, 4, 4, 7]])
    plain = generate(model, prompt, 40).new_tokens
    model.static_engine = True
    try:
        assert generate(model, prompt, 40).new_tokens == plain
    finally:
        del model.static_engine


def test_a_sliding_window_bounds_the_static_engine() -> None:
    model = tiny_llama(vocab_size=40, hidden_size=32, num_layers=2, seed=3)
    model.config.sliding_window = 16
    dec = Decoder(model, static=True)
    dec.prefill(torch.tensor([[2, 3, 4]]), capacity=16)
    assert dec.capacity == 16
    with pytest.raises(ValueError, match="sliding window"):
        dec.prefill(torch.tensor([[2, 3, 4]]), capacity=17)


def test_each_cache_kind_is_its_own_class_behind_one_decoder() -> None:
    """The Decoder picks a cache kind (``kv_dynamic`` / ``kv_static``) and shows its cache, capacity and kind."""
    from transformers import DynamicCache, StaticCache

    from specdec_core.kv_dynamic import DynamicKV
    from specdec_core.kv_static import StaticKV

    model = tiny_llama(vocab_size=40, hidden_size=32, num_layers=2, seed=3)
    dynamic, static = Decoder(model), Decoder(model, static=True)
    assert isinstance(dynamic.kv, DynamicKV) and isinstance(dynamic.cache, DynamicCache)
    assert not dynamic.static and dynamic.capacity is None
    assert isinstance(static.kv, StaticKV) and isinstance(static.cache, StaticCache)
    assert static.static and static.capacity == BUCKET
    static.prefill(torch.tensor([[2, 3, 4]]), capacity=BUCKET + 1)
    assert static.capacity == 2 * BUCKET and static.cache.layers[0].keys.shape[-2] == 2 * BUCKET
