"""Every method on the static engine (issue 46, item 3): AR, the naive method, speculative decoding with each
drafter, token trees, lookahead and Jacobi run on a target (and draft, and feature head) marked by
``lm.on_static_engine`` and give exactly what they give on the eager (dynamic-cache) models — the same steps
(every draft and every verify), so the same tokens as ``ar.generate``. A spy on ``Decoder._forward`` checks
that every forward really ran on a ``StaticCache`` (and, on the eager run, on a ``DynamicCache``: the check can
tell them apart). Sampled speculative decoding keeps the target's law on the static engine (χ²), and the same
test fails for a static rollback that leaves a rejected guess's slot in the cache."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from test_speculative import PROMPT as TOY_PROMPT
from test_speculative import exact_two_token_law, sampled_counts, toy_pair  # noqa: F401  (toy_pair: a fixture)
from transformers import DynamicCache, StaticCache
from transformers.cache_utils import StaticLayer

from specdec_core import ar, lm
from specdec_core.cllm import jacobi_trajectory
from specdec_core.drafters import Drafter, ModelDrafter, NGramDrafter
from specdec_core.exactness import chi_square_pvalue
from specdec_core.feature_drafter import FeatureDrafter, FeatureHead, KVCache
from specdec_core.generation import Generation
from specdec_core.jacobi import jacobi_generate
from specdec_core.kv_static import BUCKET
from specdec_core.lm import Decoder
from specdec_core.lookahead import lookahead_generate
from specdec_core.naive import naive_generate
from specdec_core.speculative import speculative_generate
from specdec_core.toy import tiny_llama, toy_tokenizer
from specdec_core.tree import tree_generate

V, D, N = 32, 32, 40
PROMPT = torch.tensor([[2, 5, 3, 7, 2, 5]])  # repeats itself: prompt lookup finds something


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Toy forwards are microseconds of work: on a shared machine, a second OpenMP thread only waits."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def toys() -> dict[str, torch.nn.Module]:
    """The eager target, draft and feature head, and the target and draft on the static engine."""
    target, draft = tiny_llama(V, D, seed=0, logit_scale=3.0), tiny_llama(V, D, seed=1, logit_scale=3.0)
    torch.manual_seed(100)
    head = FeatureHead(d=D, n_heads=4, ffn=64).eval()
    return {"target": target, "draft": draft, "head": head, "static_target": lm.on_static_engine(target),
            "static_draft": lm.on_static_engine(draft)}


@pytest.fixture
def forwards(monkeypatch) -> list[tuple[int, type]]:
    """(id of the model, type of its cache) of every Decoder forward from now on."""
    seen, real = [], Decoder._forward

    def spy(self: Decoder, ids: torch.Tensor, logits_to_keep: int, **extra: torch.Tensor) -> torch.Tensor:
        seen.append((id(self.model), type(self.cache)))
        return real(self, ids, logits_to_keep, **extra)

    monkeypatch.setattr(Decoder, "_forward", spy)
    return seen


# name → (run(target, draft, head) → (generation, drafter or None), decoders: 1 target only, 2 target and draft)
Run = Callable[[torch.nn.Module, torch.nn.Module, FeatureHead], tuple[Generation, Drafter | None]]


def _spec(make: Callable[[torch.nn.Module, torch.nn.Module, FeatureHead], Drafter]) -> Run:
    def run(t, d, h):
        drafter = make(t, d, h)
        return speculative_generate(t, drafter, PROMPT, N, gamma=3), drafter
    return run


def _tree(make: Callable[[torch.nn.Module, torch.nn.Module, FeatureHead], Drafter]) -> Run:
    def run(t, d, h):
        drafter = make(t, d, h)
        return tree_generate(t, drafter, PROMPT, N, shape=(2, 2, 1)), drafter
    return run


def _model(t, d, h) -> Drafter:
    return ModelDrafter(d)


def _frspec(t, d, h) -> Drafter:  # the draft's reduced output layer is a copy of the draft: it keeps the engine
    return ModelDrafter(d, vocab_ids=torch.arange(0, V, 2))


def _ngram(t, d, h) -> Drafter:
    return NGramDrafter(V)


def _feature(t, d, h) -> Drafter:
    return FeatureDrafter(t, h, torch.arange(V), top_k=2)


METHODS: dict[str, tuple[Run, int]] = {
    "ar": (lambda t, d, h: (ar.generate(t, PROMPT, N), None), 1),
    "spec-model": (_spec(_model), 2),
    "spec-model-frspec": (_spec(_frspec), 2),
    "spec-ngram": (_spec(_ngram), 1),
    "spec-feature": (_spec(_feature), 1),
    "tree-model": (_tree(_model), 2),
    "tree-ngram": (_tree(_ngram), 1),
    "tree-feature": (_tree(_feature), 1),
    "lookahead": (lambda t, d, h: (lookahead_generate(t, PROMPT, N, shape=(3, 3, 3)), None), 1),
    "lookahead-prompt-ngrams": (lambda t, d, h: (lookahead_generate(t, PROMPT, N, shape=(2, 3, 2),
                                                                    prompt_ngrams=True), None), 1),
    "jacobi": (lambda t, d, h: (jacobi_generate(t, PROMPT, N, block_size=4), None), 1),
    "jacobi-2-blocks": (lambda t, d, h: (jacobi_generate(t, PROMPT, N, block_size=4, blocks=2), None), 1),
    "jacobi-recycling": (lambda t, d, h: (jacobi_generate(t, PROMPT, N, block_size=4, blocks=2, recycle=2), None), 1),
}


def trace(gen: Generation) -> list:
    """What every step drafted and kept (a chain, a tree, a lookahead trie) or iterated (Jacobi)."""
    steps = getattr(gen.stats, "steps", [])
    return [(s.drafted, getattr(s, "path", None), getattr(s, "accepted", None)) if hasattr(s, "drafted")
            else (s.window, s.new) for s in steps]


@pytest.mark.parametrize("name", list(METHODS))
def test_every_method_takes_the_same_steps_on_the_static_engine(toys, forwards, name):
    run, decoders = METHODS[name]
    greedy = ar.generate(toys["target"], PROMPT, N).new_tokens
    eager, _ = run(toys["target"], toys["draft"], toys["head"])
    assert {cache for _, cache in forwards} == {DynamicCache}, "the eager run must show as dynamic"
    forwards.clear()
    static, drafter = run(toys["static_target"], toys["static_draft"], toys["head"])
    assert static.new_tokens == eager.new_tokens == greedy
    assert trace(static) == trace(eager)
    assert forwards and {cache for _, cache in forwards} == {StaticCache}, f"{name} ran off the static engine"
    assert len({model for model, _ in forwards}) == decoders  # the draft's decoder too, where there is one
    if isinstance(drafter, FeatureDrafter):  # the head's own cache: a preallocated buffer
        assert drafter.cache.static and drafter.cache.k.shape[2] % BUCKET == 0


def test_the_cllm_trajectory_is_the_same_on_the_static_engine(toys, forwards):
    """What CLLM and Jacobi Forcing train on (their adapters merge into a plain model, which runs as any)."""
    eager = jacobi_trajectory(toys["target"], PROMPT, 24, block=8)
    forwards.clear()
    static = jacobi_trajectory(toys["static_target"], PROMPT, 24, block=8)
    assert {cache for _, cache in forwards} == {StaticCache}
    assert torch.equal(static.answer, eager.answer)
    assert all(torch.equal(a, b) for a, b in zip(static.states, eager.states, strict=True))


def test_the_naive_method_drafts_with_a_static_cache(toys, monkeypatch):
    """Its greedy contract: the output is the draft's own greedy text (nothing corrected); the target only scores
    it, in one forward without a cache. On the engine the draft's Hugging Face ``generate`` preallocates too."""
    tok, draft = toy_tokenizer(V), toys["static_draft"]
    calls, real = [], draft.generate

    def spy(**kwargs):
        calls.append(kwargs.get("cache_implementation"))
        return real(**kwargs)

    monkeypatch.setattr(draft, "generate", spy)
    text = "w0 w3 w1 w5 w0 w3"
    eager = naive_generate(toys["draft"], toys["target"], text, 20, tokenizer=tok)
    static = naive_generate(draft, toys["static_target"], text, 20, tokenizer=tok)
    assert calls == ["static"]
    ids = tok(text, return_tensors="pt").input_ids
    assert static.new_tokens == eager.new_tokens == ar.generate(toys["draft"], ids, 20).new_tokens
    assert static.stats.score == pytest.approx(eager.stats.score, abs=1e-5)


def test_the_check_tells_the_engines_apart(toys, forwards):
    """A model NOT on the engine runs dynamic: the assertions above cannot pass on the dynamic path."""
    ar.generate(toys["target"], PROMPT, 3)
    assert {cache for _, cache in forwards} == {DynamicCache}
    assert not Decoder(toys["target"]).static and Decoder(toys["static_target"]).static


# ---- sampled: the target's law on the static engine -----------------------------------------------------------


def _stale_slot_crop(monkeypatch) -> None:
    """BROKEN static rollback: the buffer's fill moves one slot less than asked (a rollback of 1 does nothing), so
    a rejected guess's keys stay in the slot the next token should take, visible to it, and the next token is
    written one slot further on, where its own row cannot see it."""
    real = StaticLayer.crop
    monkeypatch.setattr(StaticLayer, "crop", lambda self, n: real(self, min(n + 1, 0)))


@pytest.mark.parametrize("broken", [False, True], ids=["exact", "stale-slot-rollback"])
def test_sampled_speculative_decoding_keeps_the_targets_law_on_the_static_engine(toy_pair, monkeypatch, broken):  # noqa: F811
    target, draft = toy_pair
    law = exact_two_token_law(target, TOY_PROMPT)  # enumerated on the eager target
    if broken:
        _stale_slot_crop(monkeypatch)
    counts = sampled_counts(lm.on_static_engine(target), lm.on_static_engine(draft), n=1500 if not broken else 800,
                            gamma=2, seed=4321)
    p = chi_square_pvalue(counts, law)
    assert (p < 0.001) if broken else (p > 0.001), p


def test_the_stale_slot_rollback_breaks_greedy_decoding_too(toys, monkeypatch):
    _stale_slot_crop(monkeypatch)
    got = speculative_generate(toys["static_target"], ModelDrafter(toys["static_draft"]), PROMPT, N, gamma=3)
    assert got.new_tokens != ar.generate(toys["target"], PROMPT, N).new_tokens


# ---- the feature head's own static cache -------------------------------------------------------------------------


def _head_script(head: FeatureHead, cache: KVCache) -> list[torch.Tensor]:
    """The head's calls in the order a drafter makes them: a prefill, chained guesses, a crop, a tree depth (shared
    position, ancestors-only mask), another crop, then enough rows to outgrow one bucket."""
    g = torch.Generator().manual_seed(0)
    emb, feat = torch.randn(1, BUCKET + 20, D, generator=g), torch.randn(1, BUCKET + 20, D, generator=g)
    out = [head(emb[:, :5], feat[:, :5], 0, cache)]
    out += [head(emb[:, i : i + 1], feat[:, i : i + 1], i, cache) for i in (5, 6, 7)]
    cache.crop(6)
    mask = torch.tensor([[1, 0, 0], [1, 1, 0], [1, 0, 1]], dtype=torch.bool)
    visible = torch.cat([torch.ones(3, cache.length, dtype=torch.bool), mask], dim=1)
    out.append(head(emb[:, 6:9], feat[:, 6:9], cache=cache, mask=visible, positions=torch.tensor([6, 7, 7])))
    cache.crop(7)
    out.append(head(emb[:, 7:], feat[:, 7:], 7, cache))  # past the first bucket: the static buffer grows
    return out


@torch.inference_mode()
def test_the_static_head_cache_gives_the_dynamic_ones_features():
    torch.manual_seed(1)
    head = FeatureHead(d=D, n_heads=4, ffn=64).eval()
    dynamic, static = KVCache(), KVCache(static=True)
    for a, b in zip(_head_script(head, dynamic), _head_script(head, static), strict=True):
        assert torch.allclose(a, b, atol=1e-5), (a - b).abs().max()
    assert static.length == dynamic.length == BUCKET + 20 and static.k.shape[2] == 2 * BUCKET


@torch.inference_mode()
def test_a_static_head_crop_that_keeps_a_stale_row_is_caught(monkeypatch):
    """BROKEN: a static crop that keeps one row more than asked — the test above must see it."""
    torch.manual_seed(1)
    head = FeatureHead(d=D, n_heads=4, ffn=64).eval()
    good = _head_script(head, KVCache(static=True))
    real = KVCache.crop
    monkeypatch.setattr(KVCache, "crop", lambda self, length: real(self, length + 1 if self.static else length))
    bad = _head_script(head, KVCache(static=True))
    assert not all(a.shape == b.shape and torch.allclose(a, b, atol=1e-4) for a, b in zip(good, bad))
