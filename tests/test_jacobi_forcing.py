"""Jacobi Forcing's packing and mask: one forward over [prompt, noisy blocks, clean blocks] gives exactly
what two separate forwards give (shown failing for a mask that lets clean rows see noisy tokens); the
progressive schedule, the choice of states and the loss."""

from __future__ import annotations

import pytest
import torch

from specdec_core import jacobi_forcing as jf
from specdec_core.toy import tiny_llama

PROMPT = torch.tensor([3, 1, 4, 1, 5])
CLEAN = [torch.tensor([9, 2, 6, 5]), torch.tensor([3, 5, 8, 9]), torch.tensor([7, 9])]
NOISY = [torch.tensor([9, 2, 0, 0]), torch.tensor([1, 1, 1, 1]), torch.tensor([7, 3])]


def packed_logits(model, mask) -> torch.Tensor:
    ids, positions, _ = jf.pack(PROMPT, NOISY, CLEAN)
    return model(input_ids=ids, position_ids=positions, attention_mask=jf.additive(mask, model.dtype)[None, None]).logits[0]


@pytest.mark.parametrize("attention", ["eager", "sdpa"])
def test_one_packed_forward_equals_the_noisy_and_the_clean_forward(attention):
    model = tiny_llama(16, seed=0)
    model.set_attn_implementation(attention)
    _, _, mask = jf.pack(PROMPT, NOISY, CLEAN)
    logits = packed_logits(model, mask[0, 0])
    noisy = model(input_ids=torch.cat([PROMPT, *NOISY])[None]).logits[0]
    clean = model(input_ids=torch.cat([PROMPT, *CLEAN])[None]).logits[0]
    P, L = len(PROMPT), sum(map(len, CLEAN))
    assert torch.allclose(logits[: P + L], noisy, atol=1e-5)
    assert torch.allclose(torch.cat([logits[:P], logits[P + L :]]), clean, atol=1e-5)


def test_a_mask_that_lets_clean_rows_see_noisy_tokens_is_caught():
    model = tiny_llama(16, seed=0)
    _, positions, mask = jf.pack(PROMPT, NOISY, CLEAN)
    leaky = positions[0][None, :] <= positions[0][:, None]  # causal by position, copies not separated
    clean = model(input_ids=torch.cat([PROMPT, *CLEAN])[None]).logits[0]
    P, L = len(PROMPT), sum(map(len, CLEAN))
    logits = packed_logits(model, leaky)
    assert not torch.allclose(torch.cat([logits[:P], logits[P + L :]]), clean, atol=1e-3)


def test_mask_and_positions_by_hand():
    mask = jf.noise_aware_mask(1, [2])  # [prompt, n0, n1, c0, c1]
    expected = torch.tensor([[1, 0, 0, 0, 0],
                             [1, 1, 0, 0, 0],
                             [1, 1, 1, 0, 0],
                             [1, 0, 0, 1, 0],
                             [1, 0, 0, 1, 1]], dtype=torch.bool)
    assert torch.equal(mask, expected)
    assert jf.packed_positions(1, [2]).tolist() == [0, 1, 2, 1, 2]
    with pytest.raises(ValueError, match="length"):
        jf.pack(PROMPT, [torch.tensor([1])], [torch.tensor([1, 2])])


def test_progressive_levels_and_the_state_closest_to_a_level():
    assert jf.progressive_levels(5, 2) == [0.5, 1.0, 0.5, 1.0, 0.5]
    assert jf.progressive_levels(3, 3) == pytest.approx([1 / 3, 2 / 3, 1.0])
    with pytest.raises(ValueError):
        jf.progressive_levels(3, 0)
    truth = torch.tensor([1, 2, 3, 4])
    states = torch.tensor([[9, 9, 9, 9], [1, 9, 9, 9], [1, 2, 9, 3], [1, 2, 3, 4]])  # levels 1, .75, .5, 0
    assert jf.noise_level(states[2], truth) == 0.5
    assert jf.pick_state(states, truth, 0.5).tolist() == [1, 2, 9, 3]
    assert jf.pick_state(states, truth, 0.1).tolist() == [1, 2, 3, 4]
    assert jf.pick_state(states, truth[:2], 1.0).tolist() == [9, 9]  # cut to the fixed point's length


def test_the_loss_teaches_only_the_noisy_rows_and_vanishes_without_noise():
    model = tiny_llama(16, seed=1)
    loss, parts = jf.jacobi_forcing_loss(model, PROMPT, CLEAN, CLEAN, ar_weight=0.0)  # no noise at all
    assert parts["consistency"] == pytest.approx(0.0, abs=1e-6)
    loss, parts = jf.jacobi_forcing_loss(model, PROMPT, NOISY, CLEAN, ar_weight=0.5)
    assert parts["consistency"] > 1e-4 and parts["ar"] > 0 and 0 <= parts["student_right"] <= 1
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and any(float(g.abs().sum()) > 0 for g in grads)


@pytest.mark.offline
def test_the_packed_forward_on_the_offline_target():
    from specdec_core.models import PRESETS, load_model

    model = load_model(PRESETS["offline"].target, "cpu")
    prompt, clean, noisy = torch.tensor([1, 9690, 198, 2683, 314, 30]), [torch.arange(17, 21), torch.arange(21, 25)], \
        [torch.full((4,), 17), torch.arange(5, 9)]
    ids, positions, mask = jf.pack(prompt, noisy, clean)
    with torch.no_grad():
        logits = model(input_ids=ids, position_ids=positions, attention_mask=jf.additive(mask, model.dtype)).logits[0]
        alone = {name: model(input_ids=torch.cat([prompt, *blocks])[None]).logits[0]
                 for name, blocks in (("noisy", noisy), ("clean", clean))}
    P, L = len(prompt), 8
    for name, rows in (("noisy", logits[: P + L]), ("clean", torch.cat([logits[:P], logits[P + L :]]))):
        assert torch.allclose(rows, alone[name], atol=1e-3), name  # summation order only
        assert torch.equal(rows.argmax(-1), alone[name].argmax(-1)), name
