"""The autoregressive baseline (specdec_core.ar.generate) against transformers' own generate."""

from __future__ import annotations

import pytest
import torch

from specdec_core import ar
from specdec_core.generation import eos_set
from specdec_core.toy import tiny_llama

PROMPT = torch.tensor([[0, 5, 9, 12, 3]])


def hf_greedy(model, ids, n, eos=None):
    """transformers' greedy generate, new tokens only. eos=None disables stopping."""
    out = model.generate(
        ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, do_sample=False, eos_token_id=eos, pad_token_id=1
    )
    return out[0, ids.shape[1] :].tolist()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_greedy_equals_transformers_generate(seed):
    model = tiny_llama(vocab_size=64, seed=seed)
    ours = ar.generate(model, PROMPT, 30)
    assert ours.new_tokens == hf_greedy(model, PROMPT, 30)
    assert len(ours) == 30


def test_exactly_max_new_tokens_and_stats():
    model = tiny_llama(seed=3)
    for n in (0, 1, 7):
        gen = ar.generate(model, PROMPT, n)
        assert len(gen.new_tokens) == n
        assert len(gen.stats.token_times) == n
        # target_calls: forwards that emit a token — the prefill emits the first, each step one more
        assert gen.stats.target_calls == n and (n == 0 or gen.tokens_per_call == 1.0)
        assert gen.stats.wall_time > 0
        assert gen.stats.ttft <= gen.stats.wall_time and sum(gen.stats.token_times) <= gen.stats.wall_time


def test_eos_stops_and_is_kept_like_transformers():
    model = tiny_llama(vocab_size=64, seed=1)
    free = ar.generate(model, PROMPT, 30).new_tokens
    eos = free[3]
    first = free.index(eos)  # its first occurrence: generation must stop right there
    gen = ar.generate(model, PROMPT, 30, eos_token_id=eos)
    assert gen.new_tokens == free[: first + 1]
    assert gen.new_tokens[-1] == eos
    assert gen.new_tokens == hf_greedy(model, PROMPT, 30, eos=eos)
    # several EOS ids: the earliest one met stops — whichever of the two it is
    other = next(t for t in free[first + 1 :] if t not in free[: first + 1])  # first met after eos
    assert ar.generate(model, PROMPT, 30, eos_token_id=[other, eos]).new_tokens == free[: first + 1]
    assert ar.generate(model, PROMPT, 30, eos_token_id=[eos, other]).new_tokens == free[: first + 1]
    cut = free.index(other)
    assert ar.generate(model, PROMPT, 30, eos_token_id=[other, 999]).new_tokens == free[: cut + 1]  # an id never met


def test_no_cache_gives_the_same_greedy_tokens():
    model = tiny_llama(vocab_size=64, seed=4)
    with_cache = ar.generate(model, PROMPT, 20)
    without = ar.generate(model, PROMPT, 20, use_cache=False)
    assert without.new_tokens == with_cache.new_tokens


def test_sampling_reproducible_with_generator_seed():
    model = tiny_llama(vocab_size=64, seed=5)

    def run(seed, **kw):
        g = torch.Generator().manual_seed(seed)
        return ar.generate(model, PROMPT, 25, temperature=1.0, generator=g, **kw).new_tokens

    assert run(0) == run(0)
    assert run(0) != run(1)  # 25 draws from near-uniform distributions over 64 ids
    assert run(7, top_k=3) == run(7, top_k=3)
    # top_k=1 leaves one token: sampling becomes greedy
    assert run(3, top_k=1) == ar.generate(model, PROMPT, 25).new_tokens


def test_tokenizer_text():
    class Tok:
        def decode(self, ids):
            return " ".join(map(str, ids))

    model = tiny_llama(seed=6)
    gen = ar.generate(model, PROMPT, 4, tokenizer=Tok())
    assert gen.text == " ".join(map(str, gen.new_tokens))
    assert ar.generate(model, PROMPT, 4).text is None


@pytest.mark.parametrize(
    "ids, n, match",
    [
        (torch.empty(1, 0, dtype=torch.long), 5, "empty"),
        (torch.zeros(2, 4, dtype=torch.long), 5, "batch size 2"),
        (torch.zeros(4, dtype=torch.long), 5, r"shape \[1, T\]"),
        (torch.zeros(1, 250, dtype=torch.long), 10, "longer than the model's context of 256"),
        (torch.zeros(1, 4, dtype=torch.long), -1, "max_new_tokens"),
    ],
)
def test_bad_input_errors(ids, n, match):
    model = tiny_llama(max_position_embeddings=256)
    with pytest.raises(ValueError, match=match):
        ar.generate(model, ids, n)


def test_eos_set():
    assert eos_set(None) == set()
    assert eos_set(2) == {2}
    assert eos_set([2, 3]) == {2, 3}


@pytest.fixture(scope="module")
def offline_pair():
    from specdec_core.models import load_pair

    return load_pair("offline", device="cpu")


@pytest.mark.offline
def test_offline_target_greedy_equals_transformers_generate(offline_pair):
    from specdec_core.models import chat_ids
    from specdec_core.prompts import CHAT, TUTORIAL

    target, tok = offline_pair.target, offline_pair.tokenizer
    for ids in (chat_ids(tok, CHAT[0]), tok(TUTORIAL[0], return_tensors="pt").input_ids):
        ours = ar.generate(target, ids, 16, eos_token_id=tok.eos_token_id)
        out = target.generate(
            ids, attention_mask=torch.ones_like(ids), max_new_tokens=16, do_sample=False, eos_token_id=tok.eos_token_id
        )
        assert ours.new_tokens == out[0, ids.shape[1] :].tolist()
