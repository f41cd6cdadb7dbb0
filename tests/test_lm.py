"""Decoder: prefill, step and rollback agree with a fresh forward pass (Llama and Gemma 2)."""

import pytest
import torch
from transformers import Gemma2Config, Gemma2ForCausalLM

from specdec_core.lm import Decoder, check_inputs
from specdec_core.toy import tiny_llama


def tiny_gemma2(sliding_window: int = 4) -> Gemma2ForCausalLM:
    config = Gemma2Config(
        vocab_size=32, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, sliding_window=sliding_window, max_position_embeddings=128,
    )
    torch.manual_seed(0)
    return Gemma2ForCausalLM(config).eval()


@torch.inference_mode()
def fresh_logits(model, ids: torch.Tensor) -> torch.Tensor:
    return model(input_ids=ids, use_cache=False).logits[0]


@pytest.mark.parametrize("make", [tiny_llama, tiny_gemma2], ids=["llama", "gemma2"])
def test_step_and_rollback_match_a_fresh_forward(make):
    model = make()
    seq = torch.randint(2, 32, (1, 14), generator=torch.Generator().manual_seed(1))
    dec = Decoder(model)
    dec.prefill(seq[:, :5])
    dec.step(seq[:, 5:9])
    dec.step(torch.tensor([[7, 7, 7]]))  # a wrong guess, rolled back below
    assert dec.length == 12
    dec.rollback(9)
    assert dec.length == 9 and torch.equal(dec.tokens, seq[:, :9])
    logits = dec.step(seq[:, 9:14])[0]
    # the gemma2 window (4) is full here: rollback had to reach behind it
    assert torch.allclose(logits, fresh_logits(model, seq)[9:14], atol=1e-4)


def test_prefill_returns_last_logits_and_restarts():
    model = tiny_llama()
    dec = Decoder(model)
    dec.prefill(torch.tensor([[5, 6, 7, 8]]))
    last = dec.prefill(torch.tensor([[3, 4]]))
    assert last.shape == (1, 1, 32) and dec.length == 2
    assert torch.allclose(last[0, -1], fresh_logits(model, torch.tensor([[3, 4]]))[-1], atol=1e-5)


def test_rollback_bounds():
    dec = Decoder(tiny_llama())
    dec.prefill(torch.tensor([[1, 2, 3]]))
    with pytest.raises(ValueError, match="rollback"):
        dec.rollback(4)
    dec.rollback(0)
    assert dec.length == 0


def test_hidden_states_kept_on_request():
    """``hidden`` is the last layer AFTER the final norm — what the output layer reads (and what the
    shipped feature head was trained on): lm_head(hidden) gives exactly the step's logits."""
    model = tiny_llama()
    dec = Decoder(model, keep_hidden=True)
    dec.prefill(torch.tensor([[1, 2, 3]]))
    assert dec.hidden.shape == (1, 1, 32) or dec.hidden.shape == (1, 3, 32)
    logits = dec.step(torch.tensor([[4, 5]]))
    assert logits.shape[1] == 2 and dec.hidden.shape == (1, 2, 32)
    with torch.no_grad():
        torch.testing.assert_close(model.lm_head(dec.hidden), logits)
        pre_norm = model(torch.tensor([[1, 2, 3, 4, 5]]), output_hidden_states=True).hidden_states[-1][:, -2:]
    assert not torch.allclose(model.lm_head(pre_norm), logits)  # a pre-norm state would not do


def test_check_inputs_errors_say_what_to_do():
    model = tiny_llama(max_position_embeddings=16)
    with pytest.raises(ValueError, match="empty"):
        check_inputs(model, torch.empty(1, 0, dtype=torch.long), 4)
    with pytest.raises(ValueError, match="batch size 2"):
        check_inputs(model, torch.ones(2, 3, dtype=torch.long), 4)
    with pytest.raises(ValueError, match="context of 16"):
        check_inputs(model, torch.ones(1, 10, dtype=torch.long), 10)
    check_inputs(model, torch.ones(1, 10, dtype=torch.long), 6)
