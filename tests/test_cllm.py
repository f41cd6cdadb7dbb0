"""CLLM: trajectories, the two losses (their alignment is checked against direct forwards), the
LoRA fine-tune (it fast-forwards a toy model; a broken loss does not), checkpoints, saving."""

from __future__ import annotations

import pytest
import torch

from specdec_core import cllm
from specdec_core.cllm import (
    Sample,
    Trajectory,
    ar_and_teacher,
    consistency_loss,
    has_repeated_ngram,
    jacobi_trajectory,
    samples_of,
)
from specdec_core.generation import common_prefix as correct_prefix
from specdec_core.jacobi import jacobi_generate
from specdec_core.models import load_cllm
from specdec_core.toy import tiny_llama
from specdec_core.train import cllm_finetune as cllm_train
from specdec_core.train.cllm_finetune import Recipe

PAD = 1


@pytest.fixture(scope="module")
def toy():
    return tiny_llama(vocab_size=48, hidden_size=32, num_layers=2, seed=3, logit_scale=3.0)


def _trajs(model, n: int = 6, new: int = 16, block: int = 8) -> list[Trajectory]:
    g = torch.Generator().manual_seed(0)
    return [jacobi_trajectory(model, torch.randint(2, 48, (1, int(torch.randint(3, 9, (1,), generator=g))), generator=g),
                              new, block) for _ in range(n)]


def test_trajectory_keeps_every_state_and_ends_at_greedy(toy):
    t = _trajs(toy, 1)[0]
    gen = jacobi_generate(toy, t.prompt.view(1, -1).long(), 16, block_size=8)
    assert t.answer.tolist() == gen.new_tokens
    for b, states in enumerate(t.states):
        offset, truth = t.block(b)
        assert states.shape[1] == 8 and states[-1].tolist() == truth.tolist()  # the last state is y*
        assert states.shape[0] - 1 <= 8  # at most n iterations per block


def test_repeated_ngrams_and_correct_prefix():
    assert has_repeated_ngram(list(range(10)) * 2) and not has_repeated_ngram(list(range(30)))
    assert has_repeated_ngram([1, 2, 1, 2, 1], n=2) and not has_repeated_ngram([1, 2, 3], n=2)
    assert correct_prefix(torch.tensor([1, 2, 3]), torch.tensor([1, 2, 4])) == 2
    assert correct_prefix(torch.tensor([1, 2]), torch.tensor([1, 2])) == 2


def test_samples_skip_states_that_teach_nothing(toy):
    for t in _trajs(toy, 3):
        for s in samples_of(t):
            _, truth, state = s.parts()
            assert correct_prefix(state, truth) < len(truth) - 1
        fixed_points = [(b, t.states[b].shape[0] - 1) for b in range(len(t.states))]
        assert not {(s.block, s.state) for s in samples_of(t)} & set(fixed_points)


@torch.no_grad()
def test_teacher_rows_equal_a_direct_forward_on_the_fixed_point(toy):
    """The teacher comes out of the padded AR batch: it must be exactly q(· | x, y*_<i)."""
    trajs = _trajs(toy, 4)
    batch = [s for t in trajs for s in samples_of(t)[:1]]
    _, teachers, acc = ar_and_teacher(toy, batch, PAD)
    assert acc == 1.0  # the untouched model's argmax is its own greedy output
    for s, teacher in zip(batch, teachers):
        offset, truth, _ = s.parts()
        ids = torch.cat([s.traj.prompt, s.traj.answer[: offset + len(truth) - 1]]).long().view(1, -1)
        direct = toy(input_ids=ids, logits_to_keep=len(truth)).logits[0].float().log_softmax(-1)
        torch.testing.assert_close(teacher, direct, atol=1e-4, rtol=1e-4)


@torch.no_grad()
def test_consistency_loss_is_zero_on_the_fixed_point_and_positive_off_it(toy):
    trajs = _trajs(toy, 4)
    batch = [s for t in trajs for s in samples_of(t)[:1]]
    _, teachers, _ = ar_and_teacher(toy, batch, PAD)
    loss, _ = consistency_loss(toy, batch, teachers, PAD)
    assert loss > 0.01
    # a "state" equal to the fixed point except its last token: nothing after a wrong token → 0
    at_fixed = [Sample(s.traj, s.block, s.traj.states[s.block].shape[0] - 1) for s in batch]
    zero, _ = consistency_loss(toy, at_fixed, teachers, PAD)
    assert zero.item() == 0.0


def test_masked_positions_have_zero_kl(toy):
    """Positions whose prefix is right see the same input as the teacher: their KL is ~0, which
    checks that student and teacher rows line up (a shift by one would make them differ)."""
    trajs = _trajs(toy, 4)
    batch = [s for t in trajs for s in samples_of(t)[:1]]
    with torch.no_grad():
        _, teachers, _ = ar_and_teacher(toy, batch, PAD)
        for s, teacher in zip(batch, teachers):
            offset, truth, state = s.parts()
            ids = torch.cat([s.traj.prompt, s.traj.answer[:offset], state[: len(truth) - 1]]).long().view(1, -1)
            student = toy(input_ids=ids, logits_to_keep=len(truth)).logits[0].float().log_softmax(-1)
            first = correct_prefix(state, truth) + 1
            kl = (teacher.exp() * (teacher - student)).sum(-1)
            assert kl[:first].abs().max() < 1e-4 and kl[first:].max() > 1e-3


@torch.no_grad()
def _after_error_accuracy(model, trajs) -> float:
    pool = [s for t in trajs for s in samples_of(t)]
    _, teachers, _ = ar_and_teacher(model, pool, PAD)
    return consistency_loss(model, pool, teachers, PAD)[1]


@pytest.mark.parametrize("broken", [False, True])
def test_fine_tune_teaches_tokens_after_an_error_and_a_broken_loss_does_not(broken, monkeypatch):
    """On its own trajectories a toy model learns to predict the fixed point's tokens behind a wrong
    one (0.11 → 0.32 here); with the consistency loss turned into a no-op it does not (0.12)."""
    model = tiny_llama(vocab_size=48, hidden_size=32, num_layers=2, seed=3, logit_scale=3.0)
    trajs = _trajs(model, 8)
    before = _after_error_accuracy(model, trajs)
    if broken:
        real = cllm.consistency_loss
        monkeypatch.setattr(cllm_train, "consistency_loss", lambda m, b, t, p: (real(m, b, t, p)[0] * 0.0, 0.0))
    peft_model, log = cllm_train.train(model, trajs, Recipe(steps=150, batch_size=4, lr=1e-2, r=16, alpha=32, ar_weight=1),
                                 PAD, progress=False)
    monkeypatch.undo()
    after = _after_error_accuracy(peft_model, trajs)
    assert len(log["loss"]) == 150
    if broken:
        assert after < before + 0.05, (before, after)
    else:
        assert after > before + 0.12, (before, after)


def test_training_resumes_from_its_checkpoint_to_the_same_adapter(tmp_path):
    """Stop after 6 of 10 steps (the checkpoint stays), restart: the adapter equals a straight run's."""
    from peft import get_peft_model_state_dict

    recipe = Recipe(steps=10, batch_size=2, lr=1e-2, r=4, alpha=8)
    trajs = _trajs(tiny_llama(vocab_size=48, hidden_size=32, num_layers=2, seed=3, logit_scale=3.0), 4)

    def run(steps_first: int | None, ckpt):
        fresh = lambda: tiny_llama(vocab_size=48, hidden_size=32, num_layers=2, seed=3, logit_scale=3.0)  # noqa: E731
        if steps_first is not None:  # an "interrupted" run: killed after steps_first steps
            cllm_train.train(fresh(), trajs, recipe, PAD, ckpt, save_every=4, progress=False, stop_after=steps_first)
            assert ckpt.exists()
        peft_model, log = cllm_train.train(fresh(), trajs, recipe, PAD, ckpt, save_every=4, progress=False)
        return get_peft_model_state_dict(peft_model), log

    straight, log1 = run(None, tmp_path / "a.pt")
    resumed, log2 = run(6, tmp_path / "b.pt")
    assert log1["step"] == log2["step"] == list(range(10))
    for k in straight:
        torch.testing.assert_close(straight[k], resumed[k])
    assert not (tmp_path / "b.pt").exists()  # removed once the run finished


def test_full_fine_tune_trains_every_weight_and_saves_a_whole_model(tmp_path):
    model = tiny_llama(vocab_size=48, hidden_size=32, num_layers=2, seed=3, logit_scale=3.0)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    trained, log = cllm_train.train(model, _trajs(model, 3), Recipe(steps=3, batch_size=2, lr=1e-2, lora=False),
                                    PAD, progress=False)
    assert not hasattr(trained, "peft_config") and len(log["step"]) == 3
    changed = [k for k, v in trained.state_dict().items() if not torch.equal(v, before[k])]
    assert "model.layers.0.self_attn.q_proj.weight" in changed and "lm_head.weight" in changed
    cllm_train.save_adapter(trained, tmp_path / "full", log, {"trajectories": 3})
    loaded = load_cllm(folder=tmp_path / "full")
    ids = torch.tensor([[3, 4, 5]])
    torch.testing.assert_close(loaded(input_ids=ids).logits, trained(input_ids=ids).logits)


def test_lora_adapter_round_trips_through_the_float16_file(tmp_path):
    model = tiny_llama(vocab_size=48, hidden_size=32, num_layers=2, seed=3, logit_scale=3.0)
    peft_model, log = cllm_train.train(model, _trajs(model, 3), Recipe(steps=3, batch_size=2, lr=1e-2, r=4, alpha=8),
                                       PAD, progress=False)
    cllm_train.save_adapter(peft_model, tmp_path / "lora", log, {"trajectories": 3})
    assert (tmp_path / "lora" / "adapter_model.safetensors").exists()
    merged = load_cllm(tiny_llama(vocab_size=48, hidden_size=32, num_layers=2, seed=3, logit_scale=3.0),
                                  tmp_path / "lora")
    ids = torch.tensor([[3, 4, 5]])
    torch.testing.assert_close(merged(input_ids=ids).logits, peft_model(input_ids=ids).logits, atol=2e-3, rtol=1e-3)


def test_a_missing_adapter_says_how_to_get_it(tmp_path):
    from specdec_core.assets import AssetMissingError

    with pytest.raises(AssetMissingError, match="python -m specdec_core.train cllm train"):
        load_cllm(folder=tmp_path / "nothing")


def test_anchor_loss_matches_a_direct_cross_entropy_and_joins_training(toy):
    import torch.nn.functional as F

    g = torch.Generator().manual_seed(1)
    seqs = [torch.randint(2, 48, (n,), generator=g) for n in (5, 9)]
    with torch.no_grad():
        labels = [toy(input_ids=x.view(1, -1)).logits[0].argmax(-1) for x in seqs]  # the model's greedy choices
        loss, acc = cllm.anchor_loss(toy, seqs, labels, PAD, smoothing=0.0)
        direct = [F.cross_entropy(toy(input_ids=x.view(1, -1)).logits[0], y, reduction="sum") for x, y in zip(seqs, labels)]
    assert acc == 1.0
    torch.testing.assert_close(loss, sum(direct) / 14)
    model = tiny_llama(vocab_size=48, hidden_size=32, num_layers=2, seed=3, logit_scale=3.0)
    _, log = cllm_train.train(model, _trajs(model, 2), Recipe(steps=2, batch_size=2, anchors=2), PAD,
                              progress=False, anchors=list(zip(seqs, labels)))
    assert len(log["step"]) == 2


def test_the_kl_anchor_is_zero_for_the_base_model_and_holds_its_distribution():
    from specdec_core.models import with_lora

    g = torch.Generator().manual_seed(1)
    seqs = [torch.randint(2, 48, (n,), generator=g) for n in (5, 9)]
    model = with_lora(tiny_llama(vocab_size=48, hidden_size=32, num_layers=2, seed=3, logit_scale=3.0), r=4, alpha=8)
    loss, agree = cllm.anchor_kl(model, seqs, PAD)
    assert loss.item() == pytest.approx(0.0, abs=1e-6) and agree == 1.0  # LoRA starts as the identity
    with torch.no_grad():  # move the adapters: the fine-tuned model now differs from its base
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5, generator=g)
    loss, _ = cllm.anchor_kl(model, seqs, PAD)
    start = loss.item()
    assert start > 1e-3
    loss.backward()  # the gradient reaches the adapters only
    assert all(p.grad is None for n, p in model.named_parameters() if "lora" not in n)
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for n, p in model.named_parameters() if "lora_A" in n)
    model.zero_grad()
    for _ in range(30):  # and minimising it brings the distribution back
        loss, _ = cllm.anchor_kl(model, seqs, PAD)
        loss.backward()
        with torch.no_grad():
            for p in model.parameters():
                if p.grad is not None:
                    p -= 0.5 * p.grad
        model.zero_grad()
    assert cllm.anchor_kl(model, seqs, PAD)[0].item() < 0.5 * start


def test_a_kl_anchor_needs_lora():
    model = tiny_llama(vocab_size=48, hidden_size=32, num_layers=2, seed=3, logit_scale=3.0)
    with pytest.raises(ValueError, match="kl needs LoRA"):
        cllm_train.train(model, _trajs(model, 2), Recipe(steps=1, lora=False, anchor_kind="kl"), PAD, progress=False)


@pytest.mark.parametrize("broken", [False, True])
def test_jacobi_forcing_fine_tune_teaches_tokens_after_an_error_and_a_broken_loss_does_not(broken, monkeypatch):
    """The same toy learns from Jacobi Forcing's packed loss (noisy context, every block at once); with
    its KL term zeroed it does not. Accuracy is measured as for the CLLM (clean prefix, one block)."""
    from specdec_core import jacobi_forcing

    model = tiny_llama(vocab_size=48, hidden_size=32, num_layers=2, seed=3, logit_scale=3.0)
    trajs = _trajs(model, 8)
    before = _after_error_accuracy(model, trajs)
    if broken:
        real = jacobi_forcing.jacobi_forcing_loss

        def no_kl(m, prompt, noisy, clean, ar_weight=1.0, smoothing=0.0):
            return real(m, prompt, clean, clean, ar_weight, smoothing)[0], real(m, prompt, noisy, clean, ar_weight, smoothing)[1]

        monkeypatch.setattr(cllm_train, "jacobi_forcing_loss", no_kl)
    recipe = Recipe(steps=150, batch_size=4, lr=1e-2, r=16, alpha=32, ar_weight=1, objective="jf", window=2)
    peft_model, log = cllm_train.train(model, trajs, recipe, PAD, progress=False)
    monkeypatch.undo()
    after = _after_error_accuracy(peft_model, trajs)
    assert len(log["loss"]) == 150 and set(log) >= {"consistency", "ar", "after_error_acc", "ar_acc"}
    if broken:
        assert after < before + 0.05, (before, after)
    else:
        assert after > before + 0.12, (before, after)


def test_jacobi_forcing_loss_on_one_block_is_the_cllm_consistency_loss(toy):
    """With one block and a clean prefix the noise-aware packed loss reduces to CLLM's: same KL over the
    same positions (those after the state's first wrong token)."""
    from specdec_core.jacobi_forcing import jacobi_forcing_loss

    traj = _trajs(toy, 1, new=8, block=8)[0]
    sample = next(s for s in samples_of(traj) if s.block == 0)
    _, truth, state = sample.parts()
    with torch.no_grad():
        _, teachers, _ = ar_and_teacher(toy, [sample], PAD, smoothing=0.0)
        cllm_kl, cllm_acc = consistency_loss(toy, [sample], teachers, PAD)
        _, parts = jacobi_forcing_loss(toy, traj.prompt, [state], [truth], ar_weight=0.0)
    assert parts["positions"] == len(truth) - 1 - correct_prefix(state, truth)
    assert parts["consistency"] == pytest.approx(float(cllm_kl), rel=1e-4, abs=1e-6)
    assert parts["student_right"] == pytest.approx(cllm_acc)


def test_text_anchors_label_each_position_with_the_greedy_token(toy):
    from specdec_core.train.cllm_finetune import text_anchors

    class Tok:  # any text → bytes mod the toy's vocabulary
        def __call__(self, text, add_special_tokens=False):
            return type("E", (), {"input_ids": [2 + b % 46 for b in text.encode()[:400]]})()

    anchors = text_anchors(toy, Tok(), budget=600, seq_len=32, batch=4)
    held_out = text_anchors(toy, Tok(), budget=600, seq_len=32, batch=4, part=1)
    assert anchors and all(len(x) == len(y) == 32 for x, y in anchors)
    assert not {tuple(x.tolist()) for x, _ in anchors} & {tuple(x.tolist()) for x, _ in held_out}
    x, y = anchors[0]
    with torch.no_grad():
        assert torch.equal(toy(input_ids=x.long()[None]).logits[0].argmax(-1), y)
    for objective in ("cllm", "jf"):  # they join training's autograd graph
        model = tiny_llama(vocab_size=48, hidden_size=32, num_layers=2, seed=3, logit_scale=3.0)
        _, log = cllm_train.train(model, _trajs(model, 2), Recipe(steps=2, batch_size=2, objective=objective, r=4, alpha=8),
                                  PAD, progress=False, anchors=anchors)
        assert len(log["loss"]) == 2
