"""The EAGLE-style feature drafter: exact through speculative decoding (greedy and sampled, with a
reduced output set), its cache in step with the target's features, and its file format."""

from __future__ import annotations

import pytest
import torch

from specdec_core import ar
from specdec_core.exactness import chi_square_pvalue, empirical_law, exact_law
from specdec_core.feature_drafter import FeatureDrafter, FeatureHead, KVCache, load_head, save_head
from specdec_core.speculative import speculative_generate
from specdec_core.toy import tiny_llama

VOCAB, D = 8, 32
PROMPT = torch.tensor([[2, 5, 3]])


FUSED = (1, 2, -1)  # the toy has two blocks: hidden states after the embeddings' block 1, block 2, the last


def toy(seed: int = 0, vocab_ids=None, layers=(-1,)):
    target = tiny_llama(vocab_size=VOCAB, hidden_size=D, seed=seed, logit_scale=20.0)
    torch.manual_seed(seed + 100)
    head = FeatureHead(d=D, n_heads=4, ffn=64, layers=layers).eval()
    ids = torch.arange(VOCAB) if vocab_ids is None else torch.tensor(vocab_ids)
    return target, FeatureDrafter(target, head, ids)


@pytest.mark.parametrize("gamma", [1, 3, 5])
@pytest.mark.parametrize("seed", [0, 1])
def test_greedy_equals_ar(gamma, seed):
    target, drafter = toy(seed, vocab_ids=[0, 1, 2, 4, 6])
    prompt = torch.randint(0, VOCAB, (1, 5), generator=torch.Generator().manual_seed(seed))
    ref = ar.generate(target, prompt, 20)
    out = speculative_generate(target, drafter, prompt, 20, gamma=gamma)
    assert out.new_tokens == ref.new_tokens
    assert out.stats.draft_calls > 0


@pytest.mark.parametrize("seed", [0, 1])
def test_a_fused_head_greedy_equals_ar_and_reads_the_layers_it_names(seed):
    target, drafter = toy(seed, vocab_ids=[0, 1, 2, 4, 6], layers=FUSED)
    prompt = torch.randint(0, VOCAB, (1, 6), generator=torch.Generator().manual_seed(seed))
    assert speculative_generate(target, drafter, prompt, 16, gamma=3).new_tokens == ar.generate(target, prompt, 16).new_tokens
    # what the loop handed to observe() after the prefill: the fused hidden states of those positions
    drafter.begin(lambda logits: logits.softmax(-1), None)
    from specdec_core.lm import Decoder

    dec = Decoder(target, keep_hidden=True, layers=drafter.hidden_layers)
    dec.prefill(prompt[:, :-1])
    drafter.observe(dec.hidden[0])
    with torch.no_grad():
        states = target(prompt[:, :-1], output_hidden_states=True).hidden_states
        ref = drafter.head.fuse(torch.cat([states[i][0] for i in FUSED], -1))
    assert dec.hidden.shape[-1] == 3 * D and torch.allclose(drafter.features, ref, atol=1e-5)


def test_sampling_with_a_fused_head_matches_the_target_law():
    target, drafter = toy(vocab_ids=[0, 2, 3, 5], layers=FUSED)
    gen = torch.Generator().manual_seed(7)

    def draw():
        return speculative_generate(target, drafter, PROMPT, 2, gamma=2, temperature=1.0, generator=gen).new_tokens

    counts = empirical_law(draw, (VOCAB, VOCAB), 1500)
    assert chi_square_pvalue(counts, exact_law(target, PROMPT, n_tokens=2)) > 0.001


def test_a_one_token_prompt_drafts_nothing_at_first_and_still_works():
    target, drafter = toy()
    prompt = torch.tensor([[3]])
    assert speculative_generate(target, drafter, prompt, 9, gamma=3).new_tokens == ar.generate(target, prompt, 9).new_tokens


def test_sampling_with_a_reduced_output_set_matches_the_target_law():
    """q = 0 outside the reduced set; rejection sampling must still give exactly p."""
    target, drafter = toy(vocab_ids=[0, 2, 3, 5])
    gen = torch.Generator().manual_seed(7)

    def draw():
        return speculative_generate(target, drafter, PROMPT, 2, gamma=2, temperature=1.0, generator=gen).new_tokens

    counts = empirical_law(draw, (VOCAB, VOCAB), 1500)
    assert chi_square_pvalue(counts, exact_law(target, PROMPT, n_tokens=2)) > 0.001


def test_a_drafter_that_ignores_the_reduced_set_fails_the_same_test(monkeypatch):
    """The broken variant: q claims mass on tokens it never proposes (normalised over the full
    vocabulary while guessing only in the set) — the sampled law must then differ from p."""
    target, drafter = toy(vocab_ids=[0, 2, 3, 5])
    real = FeatureDrafter.propose

    def broken(self, context, k):
        tokens, q = real(self, context, k)
        return tokens, torch.full_like(q, 1.0 / VOCAB)
    monkeypatch.setattr(FeatureDrafter, "propose", broken)
    gen = torch.Generator().manual_seed(7)

    def draw():
        return speculative_generate(target, drafter, PROMPT, 2, gamma=2, temperature=1.0, generator=gen).new_tokens

    counts = empirical_law(draw, (VOCAB, VOCAB), 1500)
    assert chi_square_pvalue(counts, exact_law(target, PROMPT, n_tokens=2)) < 1e-4


@torch.inference_mode()
def test_cached_drafting_equals_a_full_forward():
    """Running pairs one at a time through the KV cache gives what one causal forward gives."""
    torch.manual_seed(0)
    head = FeatureHead(d=D, n_heads=4, ffn=64).eval()
    emb, feat = torch.randn(1, 7, D), torch.randn(1, 7, D)
    full = head(emb, feat)
    cache = KVCache()
    parts = [head(emb[:, :3], feat[:, :3], 0, cache)] + [head(emb[:, i : i + 1], feat[:, i : i + 1], i, cache)
                                                       for i in range(3, 7)]
    assert torch.allclose(torch.cat(parts, 1), full, atol=1e-5)
    cache.crop(4)
    assert cache.length == 4
    again = head(emb[:, 4:], feat[:, 4:], 4, cache)
    assert torch.allclose(again, full[:, 4:], atol=1e-5)


def test_context_out_of_step_with_the_features_raises():
    target, drafter = toy()
    drafter.begin(lambda logits: logits.softmax(-1), None)
    drafter.observe(torch.zeros(2, D))
    with pytest.raises(RuntimeError, match="observe"):
        drafter.propose(torch.tensor([[1, 2, 3, 4, 5]]), 2)


@pytest.mark.parametrize("layers", [(-1,), FUSED])
def test_save_and_load_round_trip(tmp_path, layers):
    torch.manual_seed(0)
    head = FeatureHead(d=D, n_heads=4, ffn=64, layers=layers)
    ids = torch.tensor([0, 3, 5])
    save_head(tmp_path / "h.safetensors", head, ids, {"note": "x"})
    loaded, ids2, info = load_head(tmp_path / "h.safetensors")
    assert torch.equal(ids2, ids) and info["note"] == "x" and info["config"]["d"] == D and loaded.layers == layers
    x, h = torch.randn(1, 4, D), torch.randn(1, 4, len(layers) * D)
    assert torch.allclose(loaded(x, loaded.fuse(h)), head.eval()(x, head.fuse(h)), atol=1e-2)  # stored in fp16


# ---- the head over a token tree: one forward per depth, explicit positions and a tree mask --------


PARENTS = [-1, -1, 0, 0, 1, 3, 3]  # depth 3, siblings at every level, childless nodes


def _tree_vs_paths(positions_by_index: bool = False, siblings_see_each_other: bool = False) -> float:
    """The largest gap between the head's rows over a token tree (real pairs in the cache, then every node
    in ONE forward with the tree mask at prefix + depth) and a plain causal forward of each root-to-node path."""
    target, drafter = toy()
    head = drafter.head
    torch.manual_seed(5)
    L, n = 5, len(PARENTS)
    emb, feat = torch.randn(1, L + n, D), torch.randn(1, L + n, D)  # rows L + i: node i's (token, parent feature)
    depth = []
    for p in PARENTS:
        depth.append(1 if p < 0 else depth[p] + 1)
    mask = torch.zeros(n, L + n, dtype=torch.bool)
    mask[:, :L] = True
    for i, p in enumerate(PARENTS):
        mask[i, L + i] = True
        if p >= 0:
            mask[i] |= mask[p]
    if siblings_see_each_other:
        mask[:, L:] = torch.ones(n, n, dtype=torch.bool).tril()
    positions = torch.arange(L, L + n) if positions_by_index else torch.tensor([L - 1 + d for d in depth])
    with torch.inference_mode():
        cache = KVCache()
        head(emb[:, :L], feat[:, :L], 0, cache)
        tree = head(emb[:, L:], feat[:, L:], cache=cache, mask=mask, positions=positions)[0]
        gap = 0.0
        for i in range(n):
            path, a = [], i
            while a >= 0:
                path.append(L + a)
                a = PARENTS[a]
            rows = list(range(L)) + path[::-1]
            causal = head(emb[:, rows], feat[:, rows])[0, -1]  # positions 0 … L - 1 + depth(i)
            gap = max(gap, float((tree[i] - causal).abs().max()))
    return gap


def test_the_tree_masked_head_forward_equals_the_causal_forward_of_each_path():
    assert _tree_vs_paths() < 1e-4


@pytest.mark.parametrize("bug", ["positions by index", "siblings see each other"])
def test_the_path_test_catches_a_broken_tree_forward(bug):
    assert _tree_vs_paths(positions_by_index=bug == "positions by index",
                          siblings_see_each_other=bug == "siblings see each other") > 1e-3


def test_the_head_refuses_a_mask_or_positions_of_the_wrong_shape():
    head = FeatureHead(d=D, n_heads=4, ffn=64).eval()
    x = torch.randn(1, 3, D)
    with pytest.raises(ValueError, match="positions"):
        head(x, x, positions=torch.arange(2))
    with pytest.raises(ValueError, match="mask"):
        head(x, x, mask=torch.ones(3, 4, dtype=torch.bool))
