"""Token trees: the structure, the mask, the one forward, ``Decoder.keep``, greedy equality with AR and
the sampled law by chi-square for every way siblings are drawn — and a bug zoo each test catches."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from specdec_core import tree as T
from specdec_core.ar import generate
from specdec_core.drafters import Drafter, ModelDrafter, NGramDrafter
from specdec_core.exactness import chi_square_pvalue, exact_law
from specdec_core.lm import Decoder
from specdec_core.sampling import Warp
from specdec_core.toy import tiny_llama
from specdec_core.tree_shapes import from_branching

PROMPT = torch.tensor([[2, 3, 4, 5, 6, 2, 3, 4]])


def test_a_tree_must_be_ancestor_closed():
    with pytest.raises(ValueError, match="parent"):
        T.Tree(torch.tensor([5, 6]), [1, -1])
    tree = T.Tree(torch.tensor([5, 6, 7, 8]), [-1, -1, 0, 2])
    assert tree.depths == [1, 1, 2, 3] and tree.children(-1) == [0, 1] and tree.path(3) == [0, 2, 3]


def test_the_mask_shows_each_node_its_ancestors_only():
    depths, mask = T.tree_mask(T.Tree(torch.tensor([5, 6, 7, 8]), [-1, -1, 0, 2]))
    assert depths.tolist() == [0, 1, 1, 2, 3]
    assert [row.nonzero().flatten().tolist() for row in mask] == [[0], [0, 1], [0, 2], [0, 1, 3], [0, 1, 3, 4]]


def _paths_match(model=None, dec=None) -> bool:
    """Whether ONE tree forward (T.tree_mask's mask and positions) gives, on every root-to-leaf path, the
    logits of a plain causal forward of that path (1e-4)."""
    model = model or tiny_llama()
    dec = dec or Decoder(model)
    dec.prefill(PROMPT[:, :-1])
    depths, mask = T.tree_mask(TREE)
    ids = torch.cat([PROMPT[:, -1:], TREE.tokens.view(1, -1)], 1)
    logits = dec.step_masked(ids, PROMPT.shape[1] - 1 + depths, mask)[0]
    for leaf in (1, 2, 4):
        rows = [0] + [1 + i for i in TREE.path(leaf)]
        seq = torch.cat([PROMPT, TREE.tokens[TREE.path(leaf)].view(1, -1)], 1)
        if not torch.allclose(logits[rows], model(seq).logits[0, PROMPT.shape[1] - 1:], atol=1e-4, rtol=0):
            return False
    return True


TREE = T.Tree(torch.tensor([7, 8, 9, 10, 11]), [-1, -1, 0, 0, 3])


def test_the_tree_forward_equals_a_causal_forward_of_each_path_and_keep_leaves_a_clean_prefix():
    model = tiny_llama()
    dec = Decoder(model)
    assert _paths_match(model, dec)
    dec.keep([0, 1, 4, 5])  # root, nodes 0, 3, 4
    nxt = dec.step(torch.tensor([[12]]))[0, -1]
    seq = torch.cat([PROMPT, torch.tensor([[7, 10, 11, 12]])], 1)
    torch.testing.assert_close(nxt, model(seq).logits[0, -1], atol=1e-4, rtol=0)
    with pytest.raises(ValueError, match="increase"):
        dec.keep([2, 1])


@pytest.mark.parametrize("shape", [(1, 1, 1), (2, 2, 1), (3, 1, 1, 1), (4,), [(-1, 0), (-1, 1), (0, 0), (1, 0)]])
def test_greedy_trees_give_the_targets_own_tokens(shape):
    target, draft = tiny_llama(logit_scale=3.0), tiny_llama(seed=1, logit_scale=3.0)
    padded = 0  # forwards where prompt lookup's tree was smaller than the shape: pad nodes ran too
    for ids, eos in ((PROMPT, None), (PROMPT, 7)):
        ref = generate(target, ids, 30, eos_token_id=eos).new_tokens
        for drafter in (ModelDrafter(draft), NGramDrafter(32), ModelDrafter(target)):
            out = T.tree_generate(target, drafter, ids, 30, shape=shape, eos_token_id=eos)
            assert out.new_tokens == ref, (shape, type(drafter).__name__)
            assert len(set(out.stats.verify_widths)) == 1  # one fixed width for the whole run
            padded += sum(s.used < s.width for s in out.stats.steps)
    assert padded > 0
    assert T.tree_generate(target, ModelDrafter(target), PROMPT, 30, shape=shape).stats.tokens_per_call > 1.5


class SecondChoice(Drafter):
    """Puts the target's SECOND choice first and its argmax second, at every node: a chain never lands."""

    def __init__(self, target) -> None:
        self.target = target

    def propose_tree(self, context, topology):
        tokens, parents = [], []
        for parent, rank in topology:
            path = [] if parent < 0 else [tokens[i] for i in T.Tree(torch.tensor(tokens), parents).path(parent)]
            seq = torch.cat([context, torch.tensor([path], dtype=torch.long)], 1) if path else context
            top2 = self.target(seq).logits[0, -1].topk(2).indices.tolist()
            tokens.append([top2[1], top2[0]][rank] if rank < 2 else top2[1])
            parents.append(parent)
        return T.Tree(torch.tensor(tokens), parents)


def test_a_tree_accepts_where_a_chain_cannot():
    target = tiny_llama(logit_scale=3.0)
    chain = T.tree_generate(target, SecondChoice(target), PROMPT, 12, shape=(1, 1))
    tree = T.tree_generate(target, SecondChoice(target), PROMPT, 12, shape=(2, 2))
    assert chain.stats.tokens_per_call == 1.0 and tree.stats.tokens_per_call == 3.0
    assert set(tree.stats.accepted_ranks) == {1} and chain.new_tokens == tree.new_tokens


def test_a_width_one_tree_takes_the_chain_loops_steps():
    from specdec_core.speculative import speculative_generate
    target, draft = tiny_llama(logit_scale=3.0), tiny_llama(seed=1, logit_scale=3.0)
    chain = speculative_generate(target, ModelDrafter(draft), PROMPT, 30, gamma=3)
    tree = T.tree_generate(target, ModelDrafter(draft), PROMPT, 30, shape=(1, 1, 1))
    assert tree.new_tokens == chain.new_tokens
    assert tree.stats.accepted_lengths == chain.stats.accepted_lengths


# ---- the sampled law ---------------------------------------------------------------------------


WARPS = {"T=1": {"temperature": 1.0}, "T=0.7, top-k, top-p": {"temperature": 0.7, "top_k": 3, "top_p": 0.9}}
SHAPE = [(-1, 0), (-1, 1), (0, 0), (0, 1), (2, 0), (1, 0)]  # depth 3, childless nodes, siblings everywhere
V = 4


class Tables:
    """The warped p of a V = 4 target and q of a V = 4 draft after the prompt + any continuation,
    computed once per context (so a law test of 10⁴ draws costs seconds, not minutes)."""

    def __init__(self, warp: dict) -> None:
        self.target, self.draft = tiny_llama(vocab_size=V, logit_scale=2.0), tiny_llama(vocab_size=V, seed=3, logit_scale=2.0)
        self.prompt, self.warp, self.cache = [2, 3], Warp(**warp), {}

    def __call__(self, who: str, ctx: tuple) -> torch.Tensor:
        if (who, ctx) not in self.cache:
            model = self.target if who == "p" else self.draft
            with torch.inference_mode():
                logits = model(torch.tensor([self.prompt + list(ctx)])).logits[0, -1]
            self.cache[who, ctx] = self.warp(logits)
        return self.cache[who, ctx]


def draw_tree(tables: Tables, ctx: tuple, siblings: str, gen: torch.Generator) -> T.Tree:
    """A static tree (SHAPE) drawn from the draft's q: siblings i.i.d., without replacement, or its top-k."""
    tokens, parents, qs, drawn = [], [], [], {}
    for parent, rank in SHAPE:
        path = () if parent < 0 else tuple(tokens[i] for i in T.Tree(torch.tensor(tokens), parents).path(parent))
        q = tables("q", ctx + path)
        if siblings == "topk":
            token = int(q.argsort(descending=True)[rank])
        else:
            left = q.clone()
            if siblings == "distinct":
                left[drawn.get(parent, [])] = 0
            token = int(torch.multinomial(left / left.sum(), 1, generator=gen))
        drawn.setdefault(parent, []).append(token)
        tokens.append(token)
        parents.append(parent)
        qs.append(q)
    return T.Tree(torch.tensor(tokens), parents, torch.stack(qs), siblings)


def _law_pvalue(siblings: str, warp: dict, n: int = 4000, seed: int = 0) -> float:
    """χ² p-value of the joint law of the first THREE tokens, trees verified by ``T.verify_tree``."""
    tables, gen = Tables(warp), torch.Generator().manual_seed(seed)
    law = exact_law(tables.target, torch.tensor([tables.prompt]), 3, **warp)
    counts = np.zeros((V, V, V))
    for _ in range(n):
        out: tuple = ()
        while len(out) < 3:
            tree = draw_tree(tables, out, siblings, gen)
            rows = [tables("p", out)] + [tables("p", out + tuple(tree.tokens[tree.path(i)].tolist())) for i in range(len(tree))]
            path, nxt = T.verify_tree(tree, torch.stack(rows), gen)
            out += tuple(tree.tokens[path].tolist()) + (nxt,)
        counts[out[:3]] += 1
    return chi_square_pvalue(counts, law)


@pytest.mark.parametrize("siblings", T.SIBLINGS)
@pytest.mark.parametrize("warp", list(WARPS))
def test_sampled_trees_follow_the_targets_law(siblings, warp):
    assert _law_pvalue(siblings, WARPS[warp]) > 1e-3


@pytest.mark.parametrize("warp", list(WARPS))
def test_tree_generate_samples_the_targets_law_with_a_draft_models_tree(warp):
    target, draft = tiny_llama(vocab_size=V, logit_scale=2.0), tiny_llama(vocab_size=V, seed=3, logit_scale=2.0)
    prompt, gen, counts = torch.tensor([[2, 3]]), torch.Generator().manual_seed(1), np.zeros((V, V))
    drafter = ModelDrafter(draft)
    for _ in range(1000):
        out = T.tree_generate(target, drafter, prompt, 2, shape=(2, 2), generator=gen, **WARPS[warp]).new_tokens
        counts[tuple(out)] += 1
    assert chi_square_pvalue(counts, exact_law(target, prompt, 2, **WARPS[warp])) > 1e-3


def _stale_bonus(tree, p, generator=None, tokens=None):
    """BUG: after an accepted childless node, the bonus comes from the residual left at its parent."""
    path, node, p_here = [], -1, p[0].clone()
    tokens = tree.tokens.tolist()
    while True:
        kids = tree.children(node)
        hit = None
        for c in kids:
            x = tokens[c]
            q = tree.q[c] / tree.q[c].sum()
            if torch.rand((), generator=generator) * q[x] < p_here[x]:
                hit = c
                break
            p_here = (p_here - q).clamp(min=0)
            p_here = p_here / p_here.sum()
        if hit is None:
            return path, int(torch.multinomial(p_here, 1, generator=generator))
        path.append(hit)
        node = hit
        if tree.children(node):
            p_here = p[node + 1].clone()


def _zeroing_residual(tree, p, generator=None, tokens=None):
    """BUG: on a rejected sibling, p(x) ← 0 and renormalise instead of p ← norm((p − q)⁺)."""
    path, node, tokens = [], -1, tree.tokens.tolist()
    while True:
        p_here, hit = p[node + 1].clone(), None
        for c in tree.children(node):
            x, q = tokens[c], tree.q[c]
            if torch.rand((), generator=generator) * q[x] < p_here[x]:
                hit = c
                break
            p_here[x] = 0
            p_here = p_here / p_here.sum()
        if hit is None:
            return path, int(torch.multinomial(p_here, 1, generator=generator))
        path.append(hit)
        node = hit


_REAL_VERIFY = T.verify_tree


@pytest.mark.parametrize("bug", ["stale bonus", "zeroing residual", "positions by index", "siblings see each other"])
def test_the_bug_zoo_is_caught(bug, monkeypatch):
    if bug == "stale bonus":
        monkeypatch.setattr(T, "verify_tree", _stale_bonus)
    elif bug == "zeroing residual":
        monkeypatch.setattr(T, "verify_tree", _zeroing_residual)
    elif bug == "positions by index":
        real = T.tree_mask
        monkeypatch.setattr(T, "tree_mask", lambda tree: (torch.arange(len(tree) + 1), real(tree)[1]))
    else:
        real = T.tree_mask
        monkeypatch.setattr(T, "tree_mask", lambda tree: (real(tree)[0], torch.ones(len(tree) + 1, len(tree) + 1).tril().bool()))
    if bug in ("positions by index", "siblings see each other"):
        assert not _paths_match()
    else:
        assert _law_pvalue("iid", WARPS["T=1"]) < 1e-3


def test_keep_off_by_one_is_caught(monkeypatch):
    real = Decoder.keep  # BUG: the last accepted node's K/V is dropped (one slot short)
    monkeypatch.setattr(Decoder, "keep", lambda self, idx, start=None: real(self, idx[:-1] if len(idx) > 1 else idx, start))
    target = tiny_llama(logit_scale=3.0)
    ref = generate(target, PROMPT, 30).new_tokens
    try:
        assert T.tree_generate(target, ModelDrafter(target), PROMPT, 30, shape=(2, 2, 2)).new_tokens != ref
    except ValueError:  # or the loop notices the cache is one token short
        pass


def test_auto_needs_the_cost_model():
    with pytest.raises(ValueError, match="cost model"):
        T.tree_generate(tiny_llama(), NGramDrafter(32), PROMPT, 4, shape="auto")
    assert len(from_branching((2, 3))) == 8
    assert Warp(0.0).greedy


def _all_topologies(n: int, ranks: int):
    """Every topology of exactly n nodes whose sibling ranks are 0..k−1 in order (brute force)."""
    if n == 0:
        yield []
        return
    for smaller in _all_topologies(n - 1, ranks):
        for parent in range(-1, n - 1):
            rank = sum(1 for p, _ in smaller if p == parent)
            if rank < ranks:
                yield smaller + [(parent, rank)]


@pytest.mark.parametrize("n", range(1, 7))
def test_sequoias_programme_finds_the_best_tree(n):
    from specdec_core import tree_shapes as S
    accept = [0.55, 0.2, 0.1]
    best = max(S.expected_accepted(t, accept) for m in range(1, n + 1) for t in _all_topologies(m, 3))
    value, topo = S.best_tree(n, accept)
    assert value == pytest.approx(best) and S.expected_accepted(topo, accept) == pytest.approx(best) and len(topo) <= n
    assert all(p < i for i, (p, _) in enumerate(topo))


def test_a_steep_v_collapses_the_tree_and_a_flat_one_grows_it():
    from specdec_core import tree_shapes as S
    accept = [0.6, 0.25, 0.1, 0.05]
    _, steep = S.best_shape(accept, 0.05, lambda n: float(n))  # every row costs a full step
    _, flat = S.best_shape(accept, 0.05, lambda n: 1.0)
    assert len(steep) <= 1 and len(flat) >= 16 and S.depth_of(flat) >= 3


def test_an_auto_tree_pays_its_menu_width_not_the_largest_budget():
    """Issue 56.5: a chosen tree of n nodes runs (and is priced) at the next menu width of n + 1 — a 7-node
    tree's forward is 8 wide, a 5-node one's 8, a 9-node one's 16 — never at the largest budget's 64."""
    from specdec_core import tree_shapes as S
    from specdec_core.widths import WIDTHS

    chain = lambda n: [(i - 1, 0) for i in range(n)]  # noqa: E731  (n nodes, one per depth)
    assert [S.forward_width(chain(n)) for n in (0, 1, 5, 7, 8, 9, 31, 32, 63)] == [1, 2, 8, 8, 16, 16, 32, 64, 64]
    auto, fixed = S.ShapeChooser(None, costs=object()), S.ShapeChooser(from_branching((2, 2)))
    assert auto.width_of(chain(7)) == 8 and auto.width_of(chain(5)) == 8 and auto.width_of(chain(9)) == 16
    assert fixed.width_of(from_branching((2, 2))) == 7  # a fixed shape runs exactly its n + 1
    asked = []  # the cost model prices the padded width: v(8) for 5 nodes, not v(6) (nor v(64))
    S.tree_speedup(chain(5), [0.6, 0.3], 0.1, lambda n: asked.append(n) or 1.0)
    assert asked == [8]
    S.best_shape([0.6, 0.25, 0.1], 0.1, lambda n: asked.append(n) or 1.0 + 0.05 * n)
    assert set(asked) <= set(WIDTHS) and max(S.BUDGETS) + 1 == WIDTHS[-1]
    assert {w - 1 for w in WIDTHS[1:]} <= set(S.BUDGETS)  # every menu width's fullest tree is a candidate


def test_an_auto_run_pads_each_forward_to_its_trees_menu_width():
    from specdec_core import costmodel
    from specdec_core.widths import menu_width

    target = tiny_llama(logit_scale=3.0)
    v = {n: 1.0 + 0.1 * (n - 1) for n in costmodel.NS}  # rows dear enough that 32+ nodes never pay
    costs = costmodel.CostModel({}, 1.0, v, (1.0, 1.0), 1e10, 1, v_tree_by_n=v)
    ref = generate(target, PROMPT, 30).new_tokens
    out = T.tree_generate(target, ModelDrafter(target), PROMPT, 30, shape="auto", costs=costs)
    assert out.new_tokens == ref
    widths = out.stats.verify_widths
    assert all(s.width == menu_width(s.shape + 1) and s.used <= s.width for s in out.stats.steps), \
        [(s.shape, s.used, s.width) for s in out.stats.steps]
    assert max(widths) < 64  # the old rule: every auto forward 64 wide
    pred = costmodel.predict(out.stats, costs, tree=True)  # priced at what was paid: the menu widths
    assert pred.v == pytest.approx(sum(v[w] for w in widths) / len(widths))
