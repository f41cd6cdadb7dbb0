"""Distillation on a toy target: the memory-mapped corpus, the reduced vocabulary, both recipes of the
feature head (two passes; the training-time test, checked against real drafting), training that
learns, checkpoints and resumes to the same weights, and the corpus build with every source."""

from __future__ import annotations

import json

import pytest
import torch

from specdec_core.feature_drafter import FeatureHead, KVCache
from specdec_core.toy import tiny_llama
from specdec_core.train import corpus as distill_data
from specdec_core.train import distill, eagle, features, requests

VOCAB = 48


@pytest.fixture(scope="module")
def target():
    model = tiny_llama(vocab_size=VOCAB, hidden_size=32, num_layers=4, seed=0, logit_scale=8.0)
    for p in model.parameters():
        p.requires_grad_(False)
    return model


@pytest.fixture()
def corpus(target, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))
    gen = torch.Generator().manual_seed(0)
    seqs = [torch.randint(2, VOCAB, (int(n),), generator=gen) for n in torch.randint(12, 40, (40,), generator=gen)]
    source = ["chat"] * 14 + ["follow_ups"] * 6 + ["text"] * 20
    train_from = [0] * 14 + [5] * 6 + [0] * 20
    return features.build_features(target, seqs, source, train_from, tmp_path / "store", chunk=16)


def test_target_work_matches_the_target(target, corpus):
    seq = corpus.tokens[0].long()
    out = target(seq.view(1, -1), output_hidden_states=True)
    logits = out.logits[0]
    assert corpus.last[0].shape == (seq.numel(), 32) and corpus.top_ids[0].shape == (seq.numel(), features.TOP_K)
    assert corpus.fused[0].shape == (seq.numel(), 3 * 32) and corpus.layers == features.fused_layers(4)
    assert torch.equal(corpus.top_ids[0][:, 0].long(), logits.argmax(-1))
    # the last features are what the output layer reads: lm_head(feature) = logits
    assert torch.allclose(target.lm_head(corpus.last[0].float()), logits, atol=0.05)
    low = corpus.layers[0]
    assert torch.allclose(corpus.fused[0][:, :32].float(), out.hidden_states[low][0], atol=2e-3)


def test_a_store_of_other_sequences_is_refused(target, corpus, tmp_path):
    with pytest.raises(RuntimeError, match="delete it to rebuild"):
        features.build_features(target, [torch.arange(5)], ["chat"], [0], tmp_path / "store")


def test_split_holds_out_chat_sequences(corpus):
    train, valid = distill_data.split(corpus, valid_chat=3)
    assert len(valid) == 6 and sorted(set(valid.source)) == ["chat", "follow_ups"] and len(train) == len(corpus) - 6
    assert not set(train.rows) & set(valid.rows)


def test_reduced_vocab_keeps_frequent_tokens_and_forced_ones(corpus):
    ids = distill.reduced_vocab(corpus, VOCAB, 10, always=[1])
    assert ids.numel() == 10 and 1 in ids.tolist() and torch.equal(ids, ids.sort().values)
    greedy = torch.cat([t[:, 0] for t in corpus.top_ids]).long()
    most = torch.bincount(greedy, minlength=VOCAB).argmax().item()
    assert most in ids.tolist()


def test_batch_pads_masks_and_keeps_a_follow_ups_second_turn(corpus):
    b = features.batch(corpus, [0, 1, 14], seq_len=64, fields=("top_logp",))
    lengths = [corpus.tokens[i].numel() for i in (0, 1, 14)]
    assert b["tokens"].shape == (3, max(lengths)) and b["mask"].sum(1).tolist() == [lengths[0], lengths[1], lengths[2] - 5]
    short = features.batch(corpus, [14], seq_len=8, fields=())  # too long: the window keeps the end
    assert torch.equal(short["tokens"][0], corpus.tokens[14][-8:].long()) and short["mask"].all()


def _head(layers=(-1,)) -> FeatureHead:
    torch.manual_seed(1)
    return FeatureHead(d=32, n_heads=4, ffn=64, layers=layers).eval()


def test_the_training_time_test_is_what_drafting_computes():
    """Unrolled step j at chain t must equal running the drafter: the real pairs 0..t in the cache,
    then its own predictions fed back (with the next real tokens). A causal mask over every unrolled
    position (the two-pass recipe's view) does not."""
    head, embed = _head(), torch.randn(VOCAB, 32)
    tokens = torch.randint(0, VOCAB, (1, 12))
    b = {"tokens": tokens, "inputs": torch.randn(1, 12, 32)}
    preds = eagle.unrolled(head, embed, b, k=3)

    def drafting(t: int) -> list[torch.Tensor]:
        cache, out = KVCache(), []
        f = head(embed[tokens[:, 1 : t + 2]], b["inputs"][:, : t + 1], start=0, cache=cache)[:, -1:]
        out.append(f[0, 0])
        for j in (1, 2):
            f = head(embed[tokens[:, t + j + 1 : t + j + 2]], f, start=t + j, cache=cache)
            out.append(f[0, 0])
        return out

    with torch.no_grad():
        for t in range(0, 8):
            for j, ref in enumerate(drafting(t)):
                assert torch.allclose(preds[j][0, t], ref, atol=1e-5), (t, j)
        causal = lambda T, steps: torch.ones(T, (steps + 1) * T, dtype=torch.bool).tril(steps * T)  # noqa: E731
        real, eagle.chain_mask = eagle.chain_mask, causal
        try:
            broken = eagle.unrolled(head, embed, b, k=3)
        finally:
            eagle.chain_mask = real
        assert not torch.allclose(broken[2][0, 4], drafting(4)[2], atol=1e-3)


def test_fused_inputs_are_projected_and_own_predictions_are_not():
    head = _head(layers=(1, 2, 3))
    assert head.fuse(torch.randn(5, 96)).shape == (5, 32) and head.config()["layers"] == [1, 2, 3]
    assert _head().fuse(x := torch.randn(5, 32)) is x


@pytest.mark.parametrize("inputs,unroll,steps,lr", [("last", 0, 60, 3e-3), ("fused", 3, 120, 1e-2)])
def test_feature_training_learns(target, corpus, inputs, unroll, steps, lr):
    head, vocab_ids, log = distill.train_feature(target, corpus, inputs=inputs, unroll=unroll, steps=steps,
                                                 batch_size=8, lr=lr, vocab=VOCAB, eval_every=steps // 2, save_every=1000)
    assert log["loss"][-1] < log["loss"][0] and len(log["valid_agree_steps"][-1]) == 3
    assert log["valid_agree"][-1] > log["valid_agree"][0] or log["valid_agree"][-1] > 0.5
    assert head.layers == (features.fused_layers(4) if inputs == "fused" else (-1,))


def test_standalone_training_learns(target, corpus):
    model, log = distill.train_standalone(target, corpus, steps=40, batch_size=8, lr=5e-3, hidden=16, layers=1,
                                          eval_every=20, save_every=1000)
    assert model.config.vocab_size == VOCAB and log["loss"][-1] < log["loss"][0]


def test_a_data_fraction_trains_on_fewer_tokens(target, corpus):
    kw = dict(steps=2, batch_size=4, vocab=VOCAB, eval_every=2, save_every=1000)
    full = distill.train_feature(target, corpus, **kw)[2]
    part = distill.train_feature(target, corpus, fraction=0.25, **kw)[2]
    assert 0.1 * full["train_tokens"] < part["train_tokens"] < 0.45 * full["train_tokens"]


def test_an_interrupted_run_resumes_to_the_same_weights(target, corpus, monkeypatch, capsys):
    kw = dict(steps=6, batch_size=4, vocab=VOCAB, eval_every=3, save_every=2)
    ref, _, ref_log = distill.train_feature(target, corpus, **kw)

    real = eagle.ttt_losses
    calls = {"n": 0}

    def crash(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 4:  # the 4th training step: the checkpoint is at step 2
            raise KeyboardInterrupt
        return real(*args, **kwargs)
    monkeypatch.setattr(eagle, "ttt_losses", crash)
    with pytest.raises(KeyboardInterrupt):
        distill.train_feature(target, corpus, **kw)
    monkeypatch.setattr(eagle, "ttt_losses", real)
    assert (distill_data.data_dir() / "feature-checkpoint.pt").exists()
    capsys.readouterr()
    resumed, _, log = distill.train_feature(target, corpus, **kw)
    assert "distilling the feature draft: resuming from step 2" in capsys.readouterr().out
    assert log["loss"] == ref_log["loss"]
    for a, b in zip(ref.state_dict().values(), resumed.state_dict().values()):
        assert torch.allclose(a, b, atol=1e-6)
    assert not (distill_data.data_dir() / "feature-checkpoint.pt").exists()  # removed when done


def test_too_close_flags_near_copies_of_evaluation_prompts():
    from specdec_core import code_prompts, prompts

    assert requests.too_close("Why do cats purr?", prompts.HELDOUT)
    assert requests.too_close("why do the cats purr", prompts.HELDOUT)
    assert not requests.too_close("How do I bake sourdough bread at home?", prompts.HELDOUT)
    assert requests.too_close(code_prompts.heldout()[0], requests.reserved())  # lesson 08's held-out requests too


def _toy_chat(tok):
    tok.chat_template = ("{% for m in messages %}w0 w1 {{ m['content'] }}<eos>{% endfor %}"
                         "{% if add_generation_prompt %}w2 {% endif %}")
    return tok


def test_magpie_requests_are_the_targets_own_user_turns(monkeypatch):
    """Sampled after the template's opening; kept only when finished, 4-60 words, new, and not an
    evaluation prompt — a request made reserved by the monkeypatch disappears from the next run."""
    from test_benchmark import toy_pair

    from specdec_core import prompts

    pair = toy_pair()
    tok = _toy_chat(pair.tokenizer)
    got = requests.magpie_requests(pair.target, tok, 12, seed=0, batch_size=8)
    assert len(got) == 12 and len(set(got)) == 12
    assert all(4 <= len(r.split()) <= 60 and "<eos>" not in r for r in got)
    monkeypatch.setattr(prompts, "HELDOUT", [got[0]])
    again = requests.magpie_requests(pair.target, tok, 12, seed=0, batch_size=8)
    assert got[0] not in again and again[0] == got[1]


def test_build_keeps_every_source_and_reads_its_cache(tmp_path, monkeypatch):
    """Templated, plain and steered self-written requests, follow-ups and text; the requests are
    written once to the recipe's files and the whole corpus is read back from the cache."""
    from test_benchmark import toy_pair

    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))
    pair = toy_pair()
    tok = _toy_chat(pair.tokenizer)
    files = {"magpie": tmp_path / "magpie.json", "more": tmp_path / "more.json"}
    recipe = dict(distill_data.RECIPE, templated=3, magpie=8, styles={"code": 2}, follow_ups=8, text_tokens=64,
                  seq_len=16, max_new_tokens=8, files=files)
    corpus = distill_data.build(pair.target, tok, recipe, name="toy")
    counts = {s: corpus.source.count(s) for s in set(corpus.source)}
    assert counts["templated"] == 3 and counts["magpie"] == 8 and counts["code"] == 2 and counts["text"] >= 1
    assert 1 <= counts.get("follow_ups", 0) <= 8
    more = json.loads(files["more"].read_text())
    assert len(more["code"]) == 2 and [m["role"] for m in more["follow_ups"][0]] == ["user", "assistant", "user"]
    i = corpus.source.index("follow_ups")
    assert 0 < corpus.train_from[i] < corpus.tokens[i].numel()
    monkeypatch.setattr(features, "target_work", lambda *a: pytest.fail("the cached corpus was recomputed"))
    monkeypatch.setattr(requests, "sample_user_turns", lambda *a, **k: pytest.fail("the requests were rewritten"))
    again = distill_data.build(pair.target, tok, recipe, name="toy")
    assert all(torch.equal(a, b) for a, b in zip(corpus.tokens, again.tokens))


def test_the_ablation_logs_every_variant_with_its_heldout_acceptance(target, corpus, tmp_path, monkeypatch):
    from test_benchmark import toy_pair

    from specdec_core import prompts

    tok = toy_pair().tokenizer
    tok.chat_template = "{% for m in messages %}{{ m['content'] }} {% endfor %}"
    monkeypatch.setattr(prompts, "HELDOUT", ["w3 w4 w5 w6", "w9 w2 w7"])
    monkeypatch.setitem(distill.FEATURE_RECIPE, "vocab", VOCAB)
    monkeypatch.setitem(distill.FEATURE_RECIPE, "batch_size", 4)
    variants = {"last, two passes": ("last", 0, 1.0), "fused, unrolled ×3, ½ data": ("fused", 3, 0.5)}
    log = tmp_path / "ablation.json"
    distill.run_ablation(target, tok, corpus, steps=2, log=log, variants=variants)
    got = json.loads(log.read_text())
    assert list(got) == list(variants)
    assert got["fused, unrolled ×3, ½ data"]["train_tokens"] < got["last, two passes"]["train_tokens"]
    for run in got.values():
        assert 0 <= run["heldout"]["alpha"] <= 1 and run["heldout"]["prompts"] == 2 and len(run["valid_agree_steps"][-1]) == 3


def test_the_reference_row_measures_the_shipped_head_like_the_variants(target, tmp_path, monkeypatch):
    from test_benchmark import toy_pair

    from specdec_core import prompts
    from specdec_core.bench import drafters
    from specdec_core.feature_drafter import save_head

    tok = toy_pair().tokenizer
    tok.chat_template = "{% for m in messages %}{{ m['content'] }} {% endfor %}"
    monkeypatch.setattr(prompts, "HELDOUT", ["w3 w4 w5 w6", "w9 w2 w7"])
    save_head(tmp_path / "head.safetensors", _head(), torch.arange(VOCAB))
    (tmp_path / "training-log.json").write_text(json.dumps(
        {"feature": {"corpus_tokens": 1234, "seconds": 60.0, "step": [0, 1, 2], "threads": 1}}))
    calls = []
    real = drafters.acceptance
    monkeypatch.setattr(drafters, "acceptance", lambda *a, **k: calls.append(k) or real(*a, **k))
    log = tmp_path / "ablation.json"
    log.write_text(json.dumps({"a variant": {"inputs": "fused"}}))
    row = distill.reference_row(target, tok, tmp_path / "head.safetensors", tmp_path / "training-log.json", log)
    assert calls == [{"gamma": 3}]  # the variants' measurement: HELDOUT, greedy, γ = 3
    got = json.loads(log.read_text())
    assert list(got) == ["a variant", distill.REFERENCE] and got[distill.REFERENCE] == row
    assert row["inputs"] == "last" and row["unroll"] == 0 and row["steps"] == 3 and row["train_tokens"] == 1234
    assert "valid_agree_steps" not in row and row["heldout"]["prompts"] == 2
    # a head trained elsewhere (`draft --kind feature --out FILE`): its log beside it, its own name and recipe
    weights = tmp_path / "run" / "feature-head.safetensors"
    weights.parent.mkdir()
    save_head(weights, _head(), torch.arange(VOCAB))
    distill.run_log_path(weights).write_text(json.dumps({"feature": {
        "corpus_tokens": 1234, "train_tokens": 1200, "unroll": 3, "seconds": 9.0, "step": [0, 1], "threads": 2}}))
    other = distill.reference_row(target, tok, weights, distill.run_log_path(weights), log, name="full recipe")
    assert list(json.loads(log.read_text())) == ["a variant", distill.REFERENCE, "full recipe"]
    assert other["train_tokens"] == 1200 and other["unroll"] == 3 and other["steps"] == 2
