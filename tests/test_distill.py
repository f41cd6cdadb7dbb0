"""Distillation on a toy target: the cached corpus, the reduced vocabulary, and training that learns,
checkpoints and resumes to the same weights."""

from __future__ import annotations

import pytest
import torch

from specdec_core.toy import tiny_llama
from specdec_core.train import corpus as distill_data
from specdec_core.train import distill

VOCAB = 48


@pytest.fixture(scope="module")
def target():
    model = tiny_llama(vocab_size=VOCAB, hidden_size=32, seed=0, logit_scale=8.0)
    for p in model.parameters():
        p.requires_grad_(False)
    return model


@pytest.fixture()
def corpus(target, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))
    gen = torch.Generator().manual_seed(0)
    seqs = [torch.randint(2, VOCAB, (int(n),), generator=gen) for n in torch.randint(12, 40, (40,), generator=gen)]
    feats, ids, logps = distill_data.target_work(target, seqs, "toy")
    return distill_data.Corpus(seqs, feats, ids, logps, ["chat"] * 20 + ["text"] * 20)


def test_target_work_matches_the_target(target, corpus):
    seq = corpus.tokens[0]
    logits = target(seq.view(1, -1)).logits[0]
    assert corpus.features[0].shape == (seq.numel(), 32) and corpus.top_ids[0].shape == (seq.numel(), distill_data.TOP_K)
    assert torch.equal(corpus.top_ids[0][:, 0].long(), logits.argmax(-1))
    # the features are what the head reads: lm_head(feature) = logits
    assert torch.allclose(target.lm_head(corpus.features[0].float()), logits, atol=0.05)


def test_split_holds_out_chat_sequences(corpus):
    train, valid = distill_data.split(corpus, valid_chat=5)
    assert len(valid) == 5 and set(valid.source) == {"chat"} and len(train) == len(corpus) - 5
    assert not any(any(v is t for t in train.tokens) for v in valid.tokens)


def test_reduced_vocab_keeps_frequent_tokens_and_forced_ones(corpus):
    ids = distill.reduced_vocab(corpus, VOCAB, 10, always=[1])
    assert ids.numel() == 10 and 1 in ids.tolist() and torch.equal(ids, ids.sort().values)
    greedy = torch.cat([t[:, 0] for t in corpus.top_ids]).long()
    most = torch.bincount(greedy, minlength=VOCAB).argmax().item()
    assert most in ids.tolist()


def test_batch_pads_and_masks(corpus):
    b = distill.batch(corpus, [0, 1, 2], seq_len=64)
    lengths = [corpus.tokens[i].numel() for i in (0, 1, 2)]
    assert b["tokens"].shape == (3, max(lengths)) and b["mask"].sum(1).tolist() == lengths
    assert torch.allclose(b["top_p"][b["mask"]].sum(-1), torch.ones(sum(lengths)))


def test_feature_training_learns(target, corpus):
    head, vocab_ids, log = distill.train_feature(target, corpus, steps=60, batch_size=8, lr=3e-3, vocab=VOCAB,
                                                 eval_every=30, save_every=1000)
    assert log["loss"][-1] < log["loss"][0]
    assert log["valid_agree"][-1] > log["valid_agree"][0] or log["valid_agree"][-1] > 0.5


def test_standalone_training_learns(target, corpus):
    model, log = distill.train_standalone(target, corpus, steps=40, batch_size=8, lr=5e-3, hidden=16, layers=1,
                                          eval_every=20, save_every=1000)
    assert model.config.vocab_size == VOCAB and log["loss"][-1] < log["loss"][0]


def test_an_interrupted_run_resumes_to_the_same_weights(target, corpus, monkeypatch, capsys):
    kw = dict(steps=6, batch_size=4, vocab=VOCAB, eval_every=3, save_every=2)
    ref, _, ref_log = distill.train_feature(target, corpus, **kw)

    real = distill.feature_losses
    calls = {"n": 0}

    def crash(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 5:  # 3 training steps, then the evaluation at step 3: the checkpoint is at step 2
            raise KeyboardInterrupt
        return real(*args, **kwargs)
    monkeypatch.setattr(distill, "feature_losses", crash)
    with pytest.raises(KeyboardInterrupt):
        distill.train_feature(target, corpus, **kw)
    monkeypatch.setattr(distill, "feature_losses", real)
    assert (distill_data.data_dir() / "feature-checkpoint.pt").exists()
    capsys.readouterr()
    resumed, _, log = distill.train_feature(target, corpus, **kw)
    assert "distilling the feature draft: resuming from step 2" in capsys.readouterr().out
    assert log["loss"] == ref_log["loss"]
    for a, b in zip(ref.state_dict().values(), resumed.state_dict().values()):
        assert torch.allclose(a, b, atol=1e-6)
    assert not (distill_data.data_dir() / "feature-checkpoint.pt").exists()  # removed when done


def test_build_caches_the_target_work_once(tmp_path, monkeypatch):
    """The corpus is built once (answers first, then features) and read back from the cache."""
    from test_benchmark import toy_pair

    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))
    tok = toy_pair().tokenizer
    tok.chat_template = "{% for m in messages %}{{ m['content'] }} {% endfor %}"
    big = tiny_llama(vocab_size=32, hidden_size=32, seed=0)
    corpus = distill_data.build(big, tok, n_chat=3, text_tokens=64, seq_len=16, name="toy")
    assert corpus.source.count("chat") == 3 and corpus.source.count("text") >= 1 and len(corpus) == len(corpus.features)
    assert sorted(p.name.split("-")[0] for p in distill_data.data_dir().iterdir()) == ["answers", "toy"]
    monkeypatch.setattr(distill_data, "target_work", lambda *a: pytest.fail("the cached corpus was recomputed"))
    again = distill_data.build(big, tok, n_chat=3, text_tokens=64, seq_len=16, name="toy")
    assert all(torch.equal(a, b) for a, b in zip(corpus.tokens, again.tokens))


def test_too_close_flags_near_copies_of_evaluation_prompts():
    from specdec_core import prompts

    assert distill_data.too_close("Why do cats purr?", prompts.HELDOUT)
    assert distill_data.too_close("why do the cats purr", prompts.HELDOUT)
    assert not distill_data.too_close("How do I bake sourdough bread at home?", prompts.HELDOUT)


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
    requests = distill_data.magpie_requests(pair.target, tok, 12, seed=0, batch_size=8, max_new_tokens=24)
    assert len(requests) == 12 and len(set(requests)) == 12
    assert all(4 <= len(r.split()) <= 60 and "<eos>" not in r for r in requests)
    monkeypatch.setattr(prompts, "HELDOUT", [requests[0]])
    again = distill_data.magpie_requests(pair.target, tok, 12, seed=0, batch_size=8, max_new_tokens=24)
    assert requests[0] not in again and again[0] == requests[1]


def test_build_with_magpie_keeps_and_validates_each_source(tmp_path, monkeypatch):
    from test_benchmark import toy_pair

    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))
    pair = toy_pair()
    tok = _toy_chat(pair.tokenizer)
    corpus = distill_data.build(pair.target, tok, n_chat=3, text_tokens=64, seq_len=16, name="toy", n_magpie=4)
    assert corpus.source.count("chat") == 3 and corpus.source.count("magpie") == 4
    assert (distill_data.data_dir() / "magpie-4.json").exists()
    train, valid = distill_data.split(corpus, valid_chat=1)
    assert sorted(valid.source) == ["chat", "magpie"] and len(train) == len(corpus) - 2
