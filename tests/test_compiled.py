"""The compiled step (compiled.py): padded to the menu, it gives the static engine's logits and tokens, leaves no pad
in the cache, compiles one graph per width (not per call), and is a candidate engine only once warm. Toy models:
a compile takes seconds, not minutes."""

from __future__ import annotations

import pytest
import torch

from specdec_core import compiled
from specdec_core.ar import generate
from specdec_core.drafters import ModelDrafter
from specdec_core.lm import Decoder, on_static_engine
from specdec_core.speculative import speculative_generate
from specdec_core.toy import tiny_llama
from specdec_core.tree import tree_generate
from specdec_core.widths import menu_width

PROMPT = torch.tensor([[1, 5, 9, 2, 7, 3]])


@pytest.fixture(scope="module")
def models():
    target = tiny_llama(64, hidden_size=64, seed=0, logit_scale=3.0)
    draft = tiny_llama(64, seed=1, num_layers=1, logit_scale=3.0)
    return on_static_engine(target), compiled.on_compiled_engine(target), compiled.on_compiled_engine(draft), draft


def test_a_padded_compiled_forward_gives_the_static_engines_logits_and_leaves_no_pad(models) -> None:
    static, fast, _, _ = models
    ref, dec = Decoder(static), Decoder(fast)
    ref.prefill(PROMPT, capacity=64)
    dec.prefill(PROMPT, capacity=64)
    calls = []
    real = fast.compiled_forward
    fast.compiled_forward = lambda **kw: calls.append(kw["input_ids"].shape[1]) or real(**kw)
    try:
        for n in (1, 3, 5):  # 3 runs 4 wide, 5 runs 8 wide
            new = torch.arange(n).view(1, n) + 10
            torch.testing.assert_close(dec.step(new), ref.step(new), atol=1e-4, rtol=1e-4)
            assert dec.length == ref.length and dec.cache.layers[0].cumulative_length.item() == dec.length
    finally:
        fast.compiled_forward = real
    assert calls == [menu_width(n) for n in (1, 3, 5)] == [1, 4, 8]
    dec.rollback(PROMPT.shape[1] + 1)
    ref.rollback(PROMPT.shape[1] + 1)
    torch.testing.assert_close(dec.step(torch.tensor([[4, 4]])), ref.step(torch.tensor([[4, 4]])), atol=1e-4, rtol=1e-4)


def test_every_method_gives_the_static_engines_tokens_on_the_compiled_step(models) -> None:
    static, fast, fast_draft, draft = models
    assert generate(fast, PROMPT, 12).new_tokens == generate(static, PROMPT, 12).new_tokens
    ref = speculative_generate(static, ModelDrafter(on_static_engine(draft)), PROMPT, 12, gamma=3)
    got = speculative_generate(fast, ModelDrafter(fast_draft), PROMPT, 12, gamma=3)
    assert got.new_tokens == ref.new_tokens and got.stats.accepted_lengths == ref.stats.accepted_lengths
    tree_ref = tree_generate(static, ModelDrafter(on_static_engine(draft)), PROMPT, 10, shape=(2, 2))
    assert tree_generate(fast, ModelDrafter(fast_draft), PROMPT, 10, shape=(2, 2)).new_tokens == tree_ref.new_tokens


def test_a_broken_pad_would_be_caught(models, monkeypatch) -> None:
    """The equality above is not vacuous: pads that real tokens could see change their logits."""
    static, fast, _, _ = models
    seen = Decoder._padded

    def leaky(self, ids, positions, mask, width):
        n = ids.shape[1]
        ids, positions, mask = seen(self, ids, positions, mask, width)
        mask[:n] |= mask[-1]  # every real row sees the last pad
        return ids, positions, mask

    monkeypatch.setattr(Decoder, "_padded", leaky)
    ref, dec = Decoder(static), Decoder(fast)
    ref.prefill(PROMPT, capacity=64)
    dec.prefill(PROMPT, capacity=64)
    new = torch.tensor([[11, 12, 13]])
    assert not torch.allclose(dec.step(new), ref.step(new), atol=1e-4)


def test_the_compiled_engine_is_warm_only_after_warm(monkeypatch, tmp_path, models) -> None:
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))
    monkeypatch.setattr(compiled, "WIDTHS", (1, 2))
    monkeypatch.setattr(compiled, "_marker", lambda name: {"model": name, "widths": [1, 2]})
    assert not compiled.is_warm("toy")
    seconds = compiled.warm({"toy": models[1]}, context=8, log=lambda _: None)
    assert set(seconds["toy"]) == {1, 2} and compiled.is_warm("toy")
    with pytest.raises(ValueError, match="compiled engine"):
        compiled.warm({"plain": models[3]})
