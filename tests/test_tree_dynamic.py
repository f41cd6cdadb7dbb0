"""EAGLE-2's dynamic tree from the feature head: ancestor-closed within the budget, the top-N of a brute
force, one head forward per depth, each node's probability that of its path run causally, greedy = AR
(with and without EOS) and the target's law at T = 1 and T = 0.7 + top-k + top-p by chi-square."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from specdec_core import tree as T
from specdec_core.ar import generate
from specdec_core.exactness import chi_square_pvalue, exact_law
from specdec_core.feature_drafter import FeatureDrafter, FeatureHead
from specdec_core.lm import Decoder
from specdec_core.sampling import Warp
from specdec_core.toy import tiny_llama
from specdec_core.tree_drafters import dynamic_tree
from specdec_core.tree_shapes import budget_shape, depth_of, from_branching

D = 32


def toy(vocab: int = 8, seed: int = 0, vocab_ids=None, top_k=None, logit_scale: float = 20.0):
    target = tiny_llama(vocab_size=vocab, hidden_size=D, seed=seed, logit_scale=logit_scale)
    torch.manual_seed(seed + 100)
    head = FeatureHead(d=D, n_heads=4, ffn=64).eval()
    ids = torch.arange(vocab) if vocab_ids is None else torch.tensor(vocab_ids)
    return target, FeatureDrafter(target, head, ids, top_k=top_k)


def _ready(target, drafter, prompt):
    """The drafter as tree_generate leaves it after the prefill."""
    drafter.begin(Warp(0.0), None)
    dec = Decoder(target, keep_hidden=True, layers=drafter.hidden_layers)
    dec.prefill(prompt[:, :-1])
    drafter.observe(dec.hidden[0])


# ---- the selection, against a brute force on made-up draft tables -------------------------------


def _table(path: tuple, S: int) -> torch.Tensor:
    """A made-up draft: log-probabilities [S] after a path, a fixed function of it."""
    g = torch.Generator().manual_seed(hash(path) % (2**31))
    return (torch.randn(S, generator=g) * 2).log_softmax(-1)


def _brute_force(S: int, depth: int, k: int, budget: int) -> set[tuple]:
    """EAGLE-2 by hand: paths of tokens, the k best of the newest depth expanded, the budget best kept."""
    scores = {}
    level = {}
    for t in _table((), S).topk(k).indices.tolist():
        level[(t,)] = float(_table((), S)[t])
    scores.update(level)
    for _ in range(1, depth):
        frontier = sorted(level, key=lambda p: -level[p])[:k]
        level = {}
        for p in frontier:
            lp = _table(p, S)
            for t in lp.topk(k).indices.tolist():
                level[p + (t,)] = level.get(p + (t,), scores[p] + float(lp[t]))
        scores.update(level)
    return set(sorted(scores, key=lambda p: -scores[p])[:budget])


def _grow(S: int, depth: int, k: int, budget: int):
    runs = []
    paths: list[list[tuple]] = [[]]  # rows of the previous call → their paths

    def step(d, tokens, parent_rows, mask):
        rows = [(paths[-1][r] if d > 1 else ()) + (t,) for t, r in zip(tokens.tolist(), parent_rows.tolist())]
        runs.append((d, rows, mask.clone()))
        paths.append(rows)
        return torch.stack([_table(p, S) for p in rows])

    return dynamic_tree(_table((), S), step, depth, k, budget), runs


@pytest.mark.parametrize("S, depth, k, budget", [(6, 3, 2, 5), (6, 4, 3, 12), (5, 2, 4, 20), (7, 5, 2, 8), (4, 3, 1, 3)])
def test_the_dynamic_tree_keeps_eagle2s_top_n_ancestor_closed(S, depth, k, budget):
    grown, runs = _grow(S, depth, k, budget)
    tree = grown.tree
    paths = {tuple(tree.tokens[tree.path(i)].tolist()) for i in range(len(tree))}
    assert paths == _brute_force(S, depth, k, budget)
    assert len(tree) <= budget and max(tree.depths) <= depth and len(runs) == depth - 1
    assert all(-1 <= p < i for i, p in enumerate(tree.parents))  # Tree checks it too: ancestor-closed
    assert tree.depths == sorted(tree.depths)  # depth by depth
    for i in range(len(tree)):  # each node's score is the sum of its path's log-probabilities
        assert float(grown.scores[i]) == pytest.approx(sum(math.log(float(grown.probs[j])) for j in tree.path(i)), abs=1e-4)
    for d, rows, mask in runs:  # each run node sees exactly its ancestors among the nodes run before, and itself
        assert mask.shape[0] == len(rows) <= k
        run_before = list(itertools.chain.from_iterable(r for _, r, _ in runs[: d - 1]))
        for i, path in enumerate(rows):
            seen = {run_before[j] for j in mask[i, : len(run_before)].nonzero().flatten().tolist()}
            assert seen == {path[:j] for j in range(1, len(path))} and mask[i, len(run_before) + i]
            assert mask[i, len(run_before):].sum() == 1


# ---- the feature drafter's tree ------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(3, 2, 1), (2, 2, 2, 2), (4,)])
def test_one_head_forward_per_depth_and_each_node_has_its_paths_probability(shape):
    target, drafter = toy(vocab_ids=[0, 1, 2, 4, 6])
    prompt = torch.tensor([[2, 5, 3, 1, 4]])
    _ready(target, drafter, prompt)
    topo = from_branching(shape)
    tree = drafter.propose_tree(prompt, topo)
    assert drafter.calls == len(shape) and len(tree) <= len(topo) and max(tree.depths) <= len(shape)
    assert drafter.cache.length == prompt.shape[1] - 1  # the nodes are forgotten
    head, probs = drafter.head, drafter._probs
    with torch.inference_mode():
        for i in range(len(tree)):  # the node's q: a causal run of [real pairs, its ancestors' pairs]
            path = tree.path(i)
            toks = torch.cat([prompt[0, 1:], tree.tokens[path[:-1]]])
            feats = drafter.features
            for j in range(len(path)):  # the head's own predictions feed back along the path
                out = head(drafter.embed(toks[: feats.shape[0]].view(1, -1)).float(), feats[None])[0]
                feats = torch.cat([drafter.features, out[drafter.features.shape[0] - 1 :]]) if j < len(path) - 1 else feats
            q = drafter.out(out[-1]).softmax(-1)
            index = (drafter.vocab_ids == tree.tokens[i]).nonzero().item()
            assert float(probs[i]) == pytest.approx(float(q[index]), abs=1e-4)


PROMPTS = [torch.tensor([[2, 5, 3]]), torch.tensor([[1, 1, 6, 2, 7, 0, 3]]), torch.tensor([[4, 4]])]


@pytest.mark.parametrize("shape", [(3, 2, 1), (2, 2, 2, 2), (1, 1, 1), (4,), [(-1, 0), (-1, 1), (0, 0), (1, 0)]])
@pytest.mark.parametrize("seed", [0, 1])
def test_greedy_dynamic_trees_give_the_targets_own_tokens(shape, seed):
    target, drafter = toy(seed=seed, vocab_ids=[0, 1, 2, 4, 6, 7])
    for prompt in PROMPTS:
        for eos in (None, 3):
            ref = generate(target, prompt, 20, eos_token_id=eos).new_tokens
            out = T.tree_generate(target, drafter, prompt, 20, shape=shape, eos_token_id=eos)
            assert out.new_tokens == ref, (shape, prompt.tolist(), eos)
            assert all(n <= len(from_branching(shape)) if isinstance(shape, tuple) else n <= len(shape)
                       for n in out.stats.tree_sizes)


def test_the_dynamic_tree_grows_where_the_head_is_sure_and_records_calibration():
    target = tiny_llama(vocab_size=8, hidden_size=D, logit_scale=20.0)
    _, drafter = toy(top_k=3)
    drafter = FeatureDrafter(target, drafter.head, torch.arange(8), top_k=3)
    drafter.calibration = []
    out = T.tree_generate(target, drafter, PROMPTS[1], 16, shape=(3, 3, 3))
    trials = sum(len(s.path) + 1 for s in out.stats.steps)  # tested depths per step (at most)
    assert drafter.calibration and len(drafter.calibration) >= trials - len(out.stats.steps)
    assert sum(a for _, a in drafter.calibration) == sum(out.stats.accepted_lengths)
    assert all(0.0 <= p <= 1.0 for p, _ in drafter.calibration)


# ---- the sampled law ---------------------------------------------------------------------------


WARPS = {"T=1": {"temperature": 1.0}, "T=0.7, top-k, top-p": {"temperature": 0.7, "top_k": 3, "top_p": 0.9}}
V = 4


@pytest.mark.parametrize("shape", ["2 x 2", "4 nodes, depth 3"])
@pytest.mark.parametrize("warp", list(WARPS))
def test_sampled_dynamic_trees_follow_the_targets_law(warp, shape):
    """Three tokens: from a tree of depth 2 (+ the bonus), or a depth-3 tree whose reranked budget
    leaves childless nodes and can be accepted to its leaf."""
    target, drafter = toy(vocab=V, vocab_ids=[0, 2, 3], top_k=2, logit_scale=2.0)
    topo = from_branching((2, 2)) if shape == "2 x 2" else budget_shape(4, 3, 2)
    prompt, gen, counts = torch.tensor([[2, 3]]), torch.Generator().manual_seed(1), np.zeros((V, V, V))
    for _ in range(1200):
        out = T.tree_generate(target, drafter, prompt, 3, shape=topo, generator=gen, **WARPS[warp]).new_tokens
        counts[tuple(out)] += 1
    assert chi_square_pvalue(counts, exact_law(target, prompt, 3, **WARPS[warp])) > 1e-3


@pytest.mark.parametrize("top_k", [1, 2, 3])
@pytest.mark.parametrize("depth", [1, 2, 4])
def test_a_budget_shape_has_exactly_its_budget_depth_and_width(top_k, depth):
    from collections import Counter
    for budget in range(depth, sum(top_k ** d for d in range(1, depth + 1)) + 1):
        topo = budget_shape(budget, depth, top_k)
        kids = Counter(p for p, _ in topo)
        assert len(topo) == budget and depth_of(topo) == depth and kids[-1] == min(top_k, budget - depth + 1)
        assert all(p < i for i, (p, _) in enumerate(topo))
        assert all(sorted(r for q, r in topo if q == p) == list(range(n)) for p, n in kids.items())  # ranks 0..n-1
    with pytest.raises(ValueError, match="no tree"):
        budget_shape(depth - 1, depth, top_k)


@pytest.mark.parametrize("budget, depth, top_k", [(6, 3, 2), (16, 4, 4), (9, 2, 8)])
def test_the_feature_drafter_fills_a_budget_shape_greedily_exact(budget, depth, top_k):
    target, drafter = toy(vocab_ids=[0, 1, 2, 4, 6, 7])
    topo = budget_shape(budget, depth, top_k)
    for prompt in PROMPTS[:2]:
        out = T.tree_generate(target, drafter, prompt, 16, shape=topo)
        assert out.new_tokens == generate(target, prompt, 16).new_tokens
        assert max(out.stats.tree_sizes) <= budget
        assert out.stats.draft_calls == depth * out.stats.target_calls  # one head forward per depth


def test_the_drafter_reads_the_accepted_paths_features_not_the_first_rows():
    """After a run, the features the drafter holds are the target's hidden states of the text itself
    (a fresh causal forward): the verify handed over the root's and the accepted path's rows."""
    target, drafter = toy(vocab_ids=[0, 1, 2, 4, 6, 7])
    prompt = PROMPTS[1]
    out = T.tree_generate(target, drafter, prompt, 24, shape=(3, 2, 2))
    assert any(s.path != list(range(len(s.path))) for s in out.stats.steps)  # a path that is not rows 1..n
    text = torch.cat([prompt, torch.tensor([out.new_tokens])], 1)
    n = min(drafter.features.shape[0], text.shape[1])
    with torch.inference_mode():
        hidden = target(text, output_hidden_states=True).hidden_states[-1][0, :n]
    torch.testing.assert_close(drafter.features[:n], drafter.head.fuse(hidden), atol=1e-4, rtol=0)


@pytest.mark.offline
def test_the_shipped_head_grows_trees_that_give_the_offline_targets_tokens():
    from specdec_core.models import chat_ids, load_drafter, load_pair
    from specdec_core.prompts import HELDOUT

    pair = load_pair("offline", device="cpu")
    ids, eos = chat_ids(pair.tokenizer, HELDOUT[0]), pair.tokenizer.eos_token_id
    out = T.tree_generate(pair.target, load_drafter(pair, "feature"), ids, 16, shape=(3, 2, 1), eos_token_id=eos)
    assert out.new_tokens == generate(pair.target, ids, 16, eos_token_id=eos).new_tokens
