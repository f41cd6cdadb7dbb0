"""Medusa heads: exact through the course's verify (greedy chain and tree = AR; the sampled chain keeps the
target's law, and one that pairs a guess with the wrong q does not), Medusa's tree, the file format, the trainer's loss."""

from __future__ import annotations

import pytest
import torch

from specdec_core import ar
from specdec_core.assets import AssetMissingError
from specdec_core.exactness import chi_square_pvalue, empirical_law, exact_law
from specdec_core.lm import on_static_engine
from specdec_core.medusa import TRAIN_COMMAND, MedusaDrafter, MedusaHeads, load_heads, read_heads, save_heads
from specdec_core.speculative import speculative_generate
from specdec_core.toy import tiny_llama
from specdec_core.tree import Tree, tree_generate
from specdec_core.tree_shapes import from_branching

VOCAB, D, K = 8, 32, 3
PROMPT = torch.tensor([[2, 5, 3]])
KEPT = [0, 2, 3, 5, 6]  # FR-Spec's reduced set on the toy


def toy(seed: int = 0, vocab_ids=None, k: int = K):
    """A tiny target and random heads (zero-initialised heads would all copy the target's next token)."""
    target = tiny_llama(vocab_size=VOCAB, hidden_size=D, seed=seed, logit_scale=20.0)
    torch.manual_seed(seed + 100)
    heads = MedusaHeads(D, k)
    torch.nn.init.normal_(heads.proj.weight, std=0.5)
    ids = torch.arange(VOCAB) if vocab_ids is None else torch.tensor(vocab_ids)
    return target, MedusaDrafter(target, heads.eval(), ids)


def test_heads_shapes_and_a_zero_block_is_the_identity():
    heads = MedusaHeads(D, 4)
    h = torch.randn(2, 5, D)
    assert heads(h).shape == (2, 5, 4, D) and heads(h[0, 0]).shape == (4, D)
    assert torch.equal(heads(h), h.unsqueeze(-2).expand(2, 5, 4, D))  # initialised: W = 0, b = 0
    with pytest.raises(ValueError, match="k >= 1"):
        MedusaHeads(D, 0)


@pytest.mark.parametrize("gamma", [1, 3, 5])  # 5 > k: the chain stops at k guesses
@pytest.mark.parametrize("seed", [0, 1])
def test_greedy_chain_equals_ar(gamma, seed):
    target, drafter = toy(seed, vocab_ids=KEPT)
    prompt = torch.randint(0, VOCAB, (1, 5), generator=torch.Generator().manual_seed(seed))
    out = speculative_generate(target, drafter, prompt, 20, gamma=gamma)
    assert out.new_tokens == ar.generate(target, prompt, 20).new_tokens
    assert out.stats.draft_calls > 0 and max(len(s.drafted) for s in out.stats.steps) == min(gamma, K)


@pytest.mark.parametrize("shape", [(3, 2, 1), (2, 2, 2, 2)])  # depth 4 > k: the 4th depth is left out
@pytest.mark.parametrize("seed", [0, 1])
def test_greedy_tree_equals_ar(shape, seed):
    target, drafter = toy(seed, vocab_ids=KEPT)
    prompt = torch.randint(0, VOCAB, (1, 5), generator=torch.Generator().manual_seed(seed))
    out = tree_generate(target, drafter, prompt, 20, shape=shape)
    assert out.new_tokens == ar.generate(target, prompt, 20).new_tokens
    assert max(out.stats.tree_sizes) > 3


def test_the_tree_holds_each_heads_ranked_tokens():
    """Node (parent, rank r) at depth d: head d's r-th likeliest token over S; nodes deeper than k dropped."""
    target, drafter = toy(vocab_ids=KEPT)
    drafter.begin(lambda logits: logits.softmax(-1), None)
    drafter.observe(torch.randn(4, D))
    context = torch.tensor([[1, 2, 3, 4, 5]])
    topo = from_branching((2, 2, 1, 1))  # 2 + 4 + 4 + 4 nodes; the last 4 sit at depth 4 > k
    tree = drafter.propose_tree(context, topo)
    ranked = drafter.vocab_ids[drafter.logits(context).topk(2, dim=-1).indices]  # [k, 2]
    assert len(tree) == 10 and max(tree.depths) == K and tree.parents == [p for p, _ in topo[:10]]
    assert tree.siblings == "topk" and tree.q is None
    want = [int(ranked[d - 1, r]) for d, (_, r) in zip(tree.depths, topo)]
    assert tree.tokens.tolist() == want


def _law_of(target, drafter, gen):
    def draw():
        return speculative_generate(target, drafter, PROMPT, 2, gamma=2, temperature=1.0, generator=gen).new_tokens
    return empirical_law(draw, (VOCAB, VOCAB), 1000)


def test_sampled_chain_keeps_the_target_law():
    """Guesses drawn from each head's q over the reduced set, q returned: the output is exactly p."""
    target, drafter = toy(vocab_ids=KEPT)
    counts = _law_of(target, drafter, torch.Generator().manual_seed(7))
    assert chi_square_pvalue(counts, exact_law(target, PROMPT, n_tokens=2)) > 0.001


def test_a_drafter_that_pairs_a_guess_with_another_heads_q_fails_the_same_test(monkeypatch):
    """The broken variant: each guess returned with the q of the wrong head (an off-by-one between heads),
    so the rule's min(1, p(x)/q(x)) and residual use a q the guess was not drawn from — the law then
    differs from p. (Returning a one-hot q would NOT be a bug: the one-hot rule is exact for any choice.)"""
    target, drafter = toy(vocab_ids=KEPT)
    real = MedusaDrafter.propose

    def broken(self, context, k):
        tokens, q = real(self, context, k)
        return tokens, q.roll(1, dims=0)
    monkeypatch.setattr(MedusaDrafter, "propose", broken)
    counts = _law_of(target, drafter, torch.Generator().manual_seed(7))
    assert chi_square_pvalue(counts, exact_law(target, PROMPT, n_tokens=2)) < 1e-4


def _tree_law(target, drafter, gen):
    def draw():
        return tree_generate(target, drafter, PROMPT, 2, shape=(2, 2), temperature=1.0, generator=gen).new_tokens
    return empirical_law(draw, (VOCAB, VOCAB), 1000)


def test_sampled_tree_keeps_the_target_law(monkeypatch):
    """Medusa's tree verified by the one-hot ("topk") rule keeps p; the same tree passed off as independent
    draws from a uniform q ("iid" siblings) does not."""
    target, drafter = toy(vocab_ids=KEPT)
    law = exact_law(target, PROMPT, n_tokens=2)
    assert chi_square_pvalue(_tree_law(target, drafter, torch.Generator().manual_seed(7)), law) > 0.001
    real = MedusaDrafter.propose_tree

    def broken(self, context, topology):
        tree = real(self, context, topology)
        return Tree(tree.tokens, tree.parents, torch.full((len(tree), VOCAB), 1.0 / VOCAB), "iid")
    monkeypatch.setattr(MedusaDrafter, "propose_tree", broken)
    assert chi_square_pvalue(_tree_law(target, drafter, torch.Generator().manual_seed(7)), law) < 1e-4


def test_a_one_token_prompt_drafts_nothing_at_first_and_still_works():
    target, drafter = toy()
    prompt = torch.tensor([[3]])
    for out in (speculative_generate(target, drafter, prompt, 9, gamma=3), tree_generate(target, drafter, prompt, 9, shape=(2, 1))):
        assert out.new_tokens == ar.generate(target, prompt, 9).new_tokens


def test_context_out_of_step_with_the_hidden_states_raises():
    target, drafter = toy()
    drafter.begin(lambda logits: logits.softmax(-1), None)
    drafter.observe(torch.zeros(2, D))
    with pytest.raises(RuntimeError, match="observe"):
        drafter.propose(torch.tensor([[1, 2, 3, 4, 5]]), 2)


def test_save_and_read_round_trip(tmp_path):
    _, drafter = toy()
    ids = torch.tensor([0, 3, 5])
    save_heads(tmp_path / "m.safetensors", drafter.heads, ids, {"note": "x"})
    heads, ids2, info = read_heads(tmp_path / "m.safetensors")
    assert torch.equal(ids2, ids) and info["note"] == "x" and info["config"] == {"d": D, "k": K}
    h = torch.randn(3, D)
    assert torch.allclose(heads(h), drafter.heads(h), atol=1e-2)  # fp16 on disk


def test_load_heads_says_how_to_train_them(tmp_path):
    class Pair:
        preset, target = "offline", None

    with pytest.raises(AssetMissingError, match=TRAIN_COMMAND):
        load_heads(Pair(), tmp_path / "missing.safetensors")
    Pair.preset = "smollm2"
    with pytest.raises(ValueError, match="offline target only"):
        load_heads(Pair(), tmp_path / "missing.safetensors")


def test_the_training_loss_scores_head_i_against_the_target_at_t_plus_i(monkeypatch):
    """medusa_losses: head i at t vs softmax(h_{t+i} W) — heads that copy h_{t+i} exactly agree 100 %, and
    a loss that compares head i with position t + i − 1 (off by one) does not."""
    from specdec_core.train import medusa as train_medusa

    torch.manual_seed(0)
    w_out = torch.randn(6, D)
    h = torch.randn(1, 9, D)

    class Oracle(MedusaHeads):  # head i returns the future state h_{t+i} itself (zeros past the end)
        def forward(self, x):
            return torch.stack([torch.nn.functional.pad(x[:, i:], (0, 0, 0, i)) for i in range(1, self.k + 1)], -2)

    b = {"last": h, "mask": torch.ones(1, 9, dtype=torch.bool)}
    loss, agree = train_medusa.medusa_losses(Oracle(D, K), w_out, b)
    assert agree == [1.0] * K and loss.item() > 0  # CE against a soft target: its entropy remains

    class OffByOne(MedusaHeads):
        def forward(self, x):
            return torch.stack([torch.nn.functional.pad(x[:, i - 1 :], (0, 0, 0, i - 1)) for i in range(1, self.k + 1)], -2)

    assert max(train_medusa.medusa_losses(OffByOne(D, K), w_out, b)[1]) < 0.7


def test_the_bench_rows_run_medusa_exactly(monkeypatch):
    """The registry's Medusa rows on a toy pair (its heads random; the shipped ones are the offline preset's):
    the greedy chain and tree equal our AR with EOS, the sampled twins run, the heads' weights are counted."""
    from specdec_core.bench import methods
    from specdec_core.models import Pair
    from specdec_core.records import SpecStats, TreeStats
    from specdec_core.toy import toy_tokenizer

    target, drafter = toy(vocab_ids=KEPT)
    monkeypatch.setattr(methods.medusa, "load_heads", lambda pair: drafter)
    pair = Pair(target, tiny_llama(VOCAB, hidden_size=D, seed=1), toy_tokenizer(VOCAB), "toy", torch.device("cpu"))
    registry = methods.build_methods(2)
    ref = ar.generate(target, PROMPT, 12, eos_token_id=pair.tokenizer.eos_token_id).new_tokens
    for name, stats in [("spec_medusa", SpecStats), ("tree_medusa", TreeStats)]:
        row, sampled = registry[name], registry[f"{name}_sampled"]
        assert row.greedy and not sampled.greedy and row.prepare(pair) is drafter
        assert row.fn(pair, PROMPT, 12).new_tokens == ref
        assert isinstance(sampled.fn(pair, PROMPT, 12).stats, stats)
        assert [m.__class__.__name__ for m in row.models(pair)] == ["LlamaForCausalLM", "MedusaHeads"]


def test_training_learns_and_is_logged_per_head(tmp_path, monkeypatch):
    """A few steps on a toy corpus (the target's own greedy continuations): the loss falls by 10 % and head 1
    agrees with the target on held-out sequences more than untrained heads (which copy the target's next
    token); a run that does not train (lr 0) fails the same check."""
    from specdec_core.train import features
    from specdec_core.train import medusa as train_medusa
    from specdec_core.train.corpus import split

    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))
    vocab = 64  # the feature store keeps the target's top 32
    target = tiny_llama(vocab_size=vocab, hidden_size=D, num_layers=4, seed=0, logit_scale=20.0)
    for p in target.parameters():
        p.requires_grad_(False)
    gen = torch.Generator().manual_seed(0)
    prompts = torch.randint(2, vocab, (40, 4), generator=gen)
    seqs = [torch.cat([x, torch.tensor(ar.generate(target, x[None], 24).new_tokens)]) for x in prompts]
    corpus = features.build_features(target, seqs, ["chat"] * 20 + ["text"] * 20, [0] * 40, tmp_path / "store")
    w_out = target.get_output_embeddings().weight.detach().float()
    before = train_medusa.evaluate(MedusaHeads(D, K), w_out, split(corpus)[1], 256)

    def learned(lr: float) -> bool:
        _, log = train_medusa.train_medusa(target, corpus, torch.arange(vocab), k=K, steps=150, batch_size=8, lr=lr,
                                           progress=False)
        after = log["valid_agree_heads"][-1]
        assert len(after) == K and log["seconds"] > 0 and log["eval_step"][-1] == 150
        return sum(log["loss"][-20:]) < 0.9 * sum(log["loss"][:20]) and after[0] > before[0] + 0.03

    assert learned(1e-2)
    assert not learned(0.0)
    text = corpus.select(list(range(20, 40)))  # a text-only corpus has no held-out chats: every 10th sequence
    assert split(text)[1].rows == [] and train_medusa.held_out(text)[1].rows == [29, 39]


@pytest.mark.parametrize("rung", ["int8", "int8-bf16"])
def test_heads_on_an_int8_target_read_its_dequantized_rows_and_stay_exact(rung):
    """On the int8 engines the output layer holds int8 rows and a scale, no ``weight``: the heads read the rows
    the layer multiplies by (precision.output_rows), and greedy drafting still equals that engine's AR."""
    from specdec_core.precision import at_precision, output_rows

    target, plain = toy(0, vocab_ids=KEPT)
    quantized = on_static_engine(at_precision(target, rung))
    drafter = MedusaDrafter(quantized, plain.heads, torch.tensor(KEPT))
    assert torch.equal(drafter.w_out, output_rows(quantized)[torch.tensor(KEPT)].float())
    assert not torch.equal(drafter.w_out, target.get_output_embeddings().weight[torch.tensor(KEPT)].float())
    prompt = torch.randint(0, VOCAB, (1, 5), generator=torch.Generator().manual_seed(0))
    out = speculative_generate(quantized, drafter, prompt, 16, gamma=3)
    assert out.new_tokens == ar.generate(quantized, prompt, 16).new_tokens
