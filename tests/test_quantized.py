"""Quantized speculative decoding (specdec_core.bench.quantized) on tiny toy models: loading in NF4 both
ways, weight accounting, greedy agreement as α, the comparison table and the widget's prediction."""

from __future__ import annotations

import logging
import math

import pytest
import torch
from bitsandbytes.nn import Linear4bit

from specdec_core import ar, nf4
from specdec_core.bench import quantized as Q
from specdec_core.drafters import ModelDrafter
from specdec_core.generation import common_prefix
from specdec_core.models import PRESETS, truncated_model
from specdec_core.speculative import speculative_generate
from specdec_core.toy import tiny_llama

logging.getLogger("bitsandbytes").setLevel(logging.ERROR)
PROMPT = torch.tensor([[0, 5, 9, 12, 3]])


def toy(seed: int = 0, layers: int = 2):
    # hidden 64: every Linear has a multiple of 32 outputs, as bitsandbytes' CPU repacking needs
    return tiny_llama(vocab_size=32, hidden_size=64, num_layers=layers, seed=seed, logit_scale=4.0)


def ours_variant(model, name=Q.OURS, layers=1):
    report = nf4.quantize_model(model)
    return Q.Variant(name, model, truncated_model(model, layers), report)


@pytest.fixture
def hub_toys(tmp_path, monkeypatch):
    """The smollm2 preset's two Hub ids served from tiny local Llamas (the real loading code runs)."""
    spec = PRESETS["smollm2"]
    for model_id, seed in ((spec.target, 0), (spec.draft, 1)):
        toy(seed).save_pretrained(tmp_path / model_id.replace("/", "--"))
    monkeypatch.setenv("SPECDEC_LOCAL_MODELS", str(tmp_path))
    return "smollm2"


def test_the_config_is_the_tutorials_with_nf4_explicit():
    config = Q.nf4_config()
    assert config.load_in_4bit and config.bnb_4bit_quant_type == "nf4"
    assert config.bnb_4bit_compute_dtype == torch.bfloat16 and not config.bnb_4bit_use_double_quant
    assert Q.nf4_config(torch.float32, double_quant=True).bnb_4bit_compute_dtype == torch.float32


def test_bitsandbytes_variant_quantizes_target_and_draft(hub_toys):
    v = Q.load_bnb_variant(hub_toys, device="cpu")
    for model in (v.target, v.draft):
        assert isinstance(model.model.layers[0].mlp.up_proj, Linear4bit)
        assert isinstance(model.lm_head, torch.nn.Linear) and not isinstance(model.lm_head, Linear4bit)
        assert model.model.layers[0].mlp.up_proj.weight.quant_state.quant_type == "nf4"
    assert v.target.model.layers[0].mlp.up_proj.compute_dtype == torch.float32  # CPU: float32, not bf16


def test_our_variant_has_the_same_bytes_as_bitsandbytes(hub_toys):
    ours, theirs = Q.load_ours_variant(hub_toys, device="cpu"), Q.load_bnb_variant(hub_toys, device="cpu")
    assert isinstance(ours.target.model.layers[1].self_attn.q_proj, nf4.NF4Linear)
    assert ours.report.skipped == ["lm_head"] and len(ours.report.replaced) == 14  # 2 layers × 7 matrices
    assert isinstance(ours.draft.model.layers[0].mlp.down_proj, nf4.NF4Linear)  # a separate draft, quantized too
    parity = Q.bnb_parity(ours.target, theirs.target)
    assert parity == {"layers": 14, "packed_equal": 14, "absmax_equal": 14}


def test_the_draft_is_loaded_by_the_variant_loader():
    """Each variant loads the preset's draft with its own loader, so the draft gets the same precision."""
    asked = []
    draft = Q._draft_for("offline", load=lambda model_id: asked.append(model_id) or toy(layers=1))
    assert asked == [PRESETS["offline"].draft] and draft.config.num_hidden_layers == 1


def test_weight_bytes_counts_bitsandbytes_scales_and_shared_tensors_once(hub_toys):
    plain = toy()
    buffers = sum(b.numel() * b.element_size() for b in plain.buffers())  # rotary inv_freq
    assert Q.weight_bytes(plain) == 4 * sum(p.numel() for p in plain.parameters()) + buffers
    assert Q.weight_bytes(plain, toy(seed=1)) == 2 * Q.weight_bytes(plain)  # two models, nothing shared
    bnb = Q.load_bnb_variant(hub_toys, device="cpu").target
    expected = sum(b.numel() * b.element_size() for b in bnb.buffers())
    for module in bnb.modules():
        if isinstance(module, Linear4bit):
            n = module.in_features * module.out_features
            expected += math.ceil(n / 2) + 4 * math.ceil(n / 64)  # packed nibbles + float32 absmax per 64
        elif not list(module.children()):
            expected += sum(4 * p.numel() for p in module.parameters(recurse=False))
    assert Q.weight_bytes(bnb) == expected


def test_greedy_choices_reproduce_the_models_own_greedy_answer():
    model = toy()
    new = ar.generate(model, PROMPT, 12).new_tokens
    seq = torch.cat([PROMPT, torch.tensor([new])], dim=1)
    assert Q.greedy_choices(model, seq, PROMPT.shape[1]).tolist() == new
    with pytest.raises(ValueError, match="start"):
        Q.greedy_choices(model, seq, 0)


def test_agreement_on_the_targets_path_is_greedy_speculative_alpha():
    """Every draft token the target examines lies on the target's greedy path: α recomputed from
    the teacher-forced argmaxes at the examined positions equals the α of a real run."""
    target = toy(seed=0, layers=2)
    draft = truncated_model(target, 1)
    out = speculative_generate(target, ModelDrafter(draft), PROMPT, 24, gamma=3)
    seq = torch.cat([PROMPT, torch.tensor([out.new_tokens])], dim=1)
    t, d = (Q.greedy_choices(m, seq, PROMPT.shape[1]) for m in (target, draft))
    assert t.tolist() == out.new_tokens
    agree, examined, pos = 0, 0, 0
    for step in out.stats.steps:
        for i in range(min(step.accepted + 1, len(step.drafted))):
            agree += int(d[pos + i] == t[pos + i])
            examined += 1
        pos += step.accepted + 1
    assert 0 < out.stats.alpha < 1 and agree / examined == pytest.approx(out.stats.alpha)
    assert Q.agreement(t, t) == 1.0 and 0 < Q.agreement(t, d) < 1


def test_agreement_and_first_difference_edges():
    with pytest.raises(ValueError, match="same length"):
        Q.agreement(torch.tensor([1, 2]), torch.tensor([1]))
    assert Q.agreement(torch.tensor([1, 2, 3, 4]), torch.tensor([1, 0, 3, 0])) == 0.5
    assert common_prefix([1, 2, 3], [1, 2, 4]) == 2
    assert common_prefix([1, 2], [1, 2, 3]) == 2


def test_compare_measures_each_variant_and_speculation_stays_exact():
    variants = {"plain (fp32)": Q.Variant("plain (fp32)", (m := toy()), truncated_model(m, 1)),
                Q.OURS: ours_variant(toy())}
    rows = Q.compare(variants, PROMPT, 8, gamma=3, repeats=1, warmup_tokens=2)
    assert [r.name for r in rows] == list(variants)
    for r in rows:
        assert r.exact and len(r.ar.result) == 8 and r.ar.memory_kind == "CPU peak RSS"
        assert 0.0 <= r.alpha <= 1.0 and r.speedup > 0
    assert rows[1].weight_bytes < rows[0].weight_bytes
    table = Q.format_rows(rows)
    assert "plain (fp32)" in table and Q.OURS in table and "True" in table
    assert math.isnan(Q.noise_band_of(rows))  # one round: no noise band


def test_compare_interleaves_every_variant_round_by_round(monkeypatch):
    variants = {"plain (fp32)": Q.Variant("plain (fp32)", (m := toy()), truncated_model(m, 1)),
                Q.OURS: ours_variant(toy())}
    order, real = [], Q.ar.generate
    monkeypatch.setattr(Q.ar, "generate", lambda model, *a, **k: order.append(model) or real(model, *a, **k))
    rows = Q.compare(variants, PROMPT, 6, gamma=2, repeats=3, warmup_tokens=2)
    targets = [v.target for v in variants.values()]
    assert order == targets * 4  # the warm-up round, then 3 timed rounds: plain, ours, plain, ours, …
    assert all(len(r.ar.latencies) == len(r.speculative.latencies) == 3 for r in rows)
    assert Q.noise_band_of(rows) >= 0


def make_table(**over) -> Q.PrecisionTable:
    names = ["fp32", "nf4"]
    base = dict(
        names=names, gamma=2,
        target_step={"fp32": 0.4, "nf4": 1.0}, verify={"fp32": 0.5, "nf4": 1.2},
        draft_step={"fp32": 0.1, "nf4": 0.3},
        alpha={("fp32", "fp32"): 0.5, ("fp32", "nf4"): 0.25, ("nf4", "fp32"): 0.0, ("nf4", "nf4"): 1.0},
        bytes={("fp32", "fp32"): 500_000_000, ("fp32", "nf4"): 600_000_000, ("nf4", "fp32"): 700_000_000,
               ("nf4", "nf4"): 150_000_000},
        measured={("fp32", "fp32"): 2.4},
    )
    base.update(over)
    return Q.PrecisionTable(**base)


def test_predict_applies_leviathans_formula():
    p = Q.predict(make_table(), "fp32", "fp32")
    # E(0.5, 2) = 1 + 0.5 + 0.25 = 1.75 tokens per step; a step costs 2 × 0.1 + 0.5 = 0.7 s
    assert p["tokens_per_step"] == pytest.approx(1.75)
    assert p["spec_tokens_per_s"] == pytest.approx(2.5) and p["ar_tokens_per_s"] == pytest.approx(2.5)
    assert p["speedup"] == pytest.approx(1.0) and p["memory_mb"] == 500 and p["measured_spec_tokens_per_s"] == 2.4
    q = Q.predict(make_table(), "nf4", "nf4")  # α = 1: γ + 1 = 3 tokens per 2 × 0.3 + 1.2 = 1.8 s
    assert q["spec_tokens_per_s"] == pytest.approx(3 / 1.8) and q["memory_mb"] == 150
    assert math.isnan(q["measured_spec_tokens_per_s"])
    assert Q.predict(make_table(), "nf4", "fp32")["tokens_per_step"] == 1.0  # α = 0: only the target's token


def test_predict_rejects_an_unknown_precision():
    with pytest.raises(KeyError, match="draft precision 'int4'"):
        Q.predict(make_table(), "fp32", "int4")


def test_precision_table_measures_every_combination():
    variants = {"plain (fp32)": Q.Variant("plain (fp32)", (m := toy()), truncated_model(m, 1)),
                Q.OURS: ours_variant(toy())}
    seqs = Q.reference_sequences(variants["plain (fp32)"].target, [PROMPT, PROMPT[:, :3]], 6)
    assert [(ids.shape[1], start) for ids, start in seqs] == [(11, 5), (9, 3)]
    table = Q.precision_table(variants, seqs, gamma=2, repeats=1)
    combos = {(t, d) for t in variants for d in variants}
    assert set(table.alpha) == combos == set(table.bytes)
    assert all(0.0 <= a <= 1.0 for a in table.alpha.values())
    assert table.bytes[("plain (fp32)", "plain (fp32)")] == Q.weight_bytes(variants["plain (fp32)"].target)
    assert table.bytes[(Q.OURS, "plain (fp32)")] > table.bytes[(Q.OURS, Q.OURS)]
    assert all(table.verify[n] > 0 and table.draft_step[n] > 0 for n in variants)
    same = Q.target_agreement(variants, seqs, "plain (fp32)")
    assert same["plain (fp32)"] == 1.0 and 0.0 <= same[Q.OURS] <= 1.0
