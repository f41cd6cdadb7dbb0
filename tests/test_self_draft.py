"""self_draft: a subset of the target's own layers as its drafter — a view that shares every weight, computes the
early exit exactly, keeps speculation exact (greedy equality, χ² against the target's law, a broken verify caught),
and a search that ranks subsets by the cost model's S."""

from __future__ import annotations

import pytest
import torch

from specdec_core import ar, self_draft
from specdec_core import speculative as spec
from specdec_core.drafters import ModelDrafter
from specdec_core.exactness import chi_square_pvalue, empirical_law, exact_law
from specdec_core.lm import on_static_engine
from specdec_core.sampling import sample
from specdec_core.speculative import speculative_generate
from specdec_core.toy import tiny_llama

PROMPT = torch.tensor([[2, 5, 3]])


@pytest.fixture(scope="module")
def target():
    return tiny_llama(vocab_size=8, num_layers=4, seed=0, logit_scale=20.0)


def test_a_subset_shares_every_weight_and_leaves_the_target_alone(target) -> None:
    draft = self_draft.layer_subset(target, [0, 2])
    ids = {id(p) for p in target.parameters()}
    assert all(id(p) in ids for p in draft.parameters()) and len(draft.model.layers) == 2
    assert [layer.self_attn.layer_idx for layer in draft.model.layers] == [0, 1]  # its own cache slots
    assert [layer.self_attn.layer_idx for layer in target.model.layers] == [0, 1, 2, 3]
    assert target.config.num_hidden_layers == 4 and draft.config.num_hidden_layers == 2
    with pytest.raises(ValueError, match="0 … 3"):
        self_draft.layer_subset(target, [4])


@torch.inference_mode()
def test_the_early_exit_is_the_targets_own_state_through_its_norm_and_output(target) -> None:
    out = target(PROMPT, output_hidden_states=True)
    for depth in (1, 3):
        exit_logits = target.lm_head(target.model.norm(out.hidden_states[depth]))
        torch.testing.assert_close(self_draft.prefix(target, depth)(PROMPT).logits, exit_logits, atol=1e-5, rtol=1e-5)


def test_greedy_self_speculation_gives_ars_tokens_on_both_caches() -> None:
    model = tiny_llama(vocab_size=64, hidden_size=64, num_layers=4, seed=3, logit_scale=3.0)
    prompt = torch.tensor([[1, 9, 4, 7, 7]])
    for t, subsets in ((model, ([0, 2, 3],)), (on_static_engine(model), ([0], [0, 1]))):
        reference = ar.generate(t, prompt, 16).new_tokens
        for keep in subsets:
            out = speculative_generate(t, ModelDrafter(self_draft.layer_subset(t, keep)), prompt, 16, gamma=3)
            assert out.new_tokens == reference


def _counts(target, n: int, seed: int):
    gen = torch.Generator().manual_seed(seed)
    drafter = ModelDrafter(self_draft.prefix(target, 1))
    return empirical_law(lambda: speculative_generate(target, drafter, PROMPT, 2, gamma=2, temperature=1.0,
                                                      generator=gen).new_tokens, (8, 8), n)


def test_sampled_self_speculation_keeps_the_targets_law_and_a_broken_verify_is_caught(target, monkeypatch) -> None:
    law = exact_law(target, PROMPT, n_tokens=2)
    assert chi_square_pvalue(_counts(target, 1000, 7), law) > 1e-3
    exact = spec.verify

    def resample_from_p(drafted, q, p, generator=None):  # BROKEN: a rejection draws from p, not (p − q)⁺
        n, token, kind = exact(drafted, q, p, generator)
        return (n, int(sample(p[n], generator)), kind) if kind == "resampled" else (n, token, kind)

    monkeypatch.setattr(spec, "verify", resample_from_p)
    assert chi_square_pvalue(_counts(target, 600, 7), law) < 1e-3


def test_the_search_ranks_by_predicted_speedup_with_c_from_the_bytes() -> None:
    model = tiny_llama(vocab_size=64, hidden_size=64, num_layers=8, seed=0)
    alphas = {1: 0.2, 2: 0.5, 4: 0.6}  # by layers kept: a made-up α, as a short run would measure it
    rows = self_draft.search(model, [[0], [0, 1], [0, 1, 2, 3]], lambda d: alphas[len(d.model.layers)])
    assert [r["speedup"] for r in rows] == sorted((r["speedup"] for r in rows), reverse=True) and len(rows) == 3
    for r in rows:
        draft = self_draft.layer_subset(model, r["keep"])
        assert r["c"] == pytest.approx(self_draft.byte_ratio(draft, model)) and 0 < r["c"] < 1
        assert r["speedup"] == pytest.approx(self_draft.score(r["alpha"], r["c"], lambda n: 1.0)[0])
    assert rows[0]["layers"] != 1  # α 0.2 at c ≈ ⅓ of the bytes never pays as well as α 0.5–0.6
    cands = self_draft.candidates(30)
    assert [0, 1, 2, 3, 4, 5, 6, 7] in cands and all(c == sorted(set(c)) and c[0] == 0 for c in cands)
