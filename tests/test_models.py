"""Presets, local-directory loading of every preset's architecture, vocabulary checks, devices."""

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    PreTrainedTokenizerFast,
)

from specdec_core import models as M
from specdec_core.toy import tiny_llama

SMALL = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4)
ARCHS = {  # preset → (model_type, extra config) of its Hub models
    "smollm2": ("llama", dict(num_key_value_heads=2)),
    "qwen2.5": ("qwen2", dict(num_key_value_heads=2)),
    "pythia": ("gpt_neox", {}),
    "gemma2": ("gemma2", dict(num_key_value_heads=2, head_dim=8, sliding_window=8)),
}


def tiny_tokenizer(vocab_size: int) -> PreTrainedTokenizerFast:
    words = ["<unk>", "<eos>"] + [f"w{i}" for i in range(vocab_size - 2)]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", eos_token="<eos>")


def save_tiny(root, model_id: str, model_type: str, extra: dict, vocab_size: int = 64, seed: int = 0):
    config = AutoConfig.for_model(model_type, vocab_size=vocab_size, max_position_embeddings=128, **SMALL, **extra)
    torch.manual_seed(seed)
    folder = root / model_id.replace("/", "--")
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    tiny_tokenizer(vocab_size).save_pretrained(folder)
    return folder


@pytest.mark.parametrize("preset", sorted(ARCHS))
def test_hub_presets_load_through_the_real_code(preset, tmp_path, monkeypatch):
    model_type, extra = ARCHS[preset]
    spec = M.PRESETS[preset]
    save_tiny(tmp_path, spec.target, model_type, extra, seed=0)
    save_tiny(tmp_path, spec.draft, model_type, extra, seed=1)
    monkeypatch.setenv("SPECDEC_LOCAL_MODELS", str(tmp_path))
    pair = M.load_pair(preset, device="cpu")
    assert pair.target.config.model_type == model_type and pair.device.type == "cpu"
    assert pair.target.dtype == torch.float32 and not pair.target.training
    ids = torch.tensor([[3, 4, 5]])
    assert pair.target(ids).logits.shape == pair.draft(ids).logits.shape


def test_mismatched_vocabularies_raise(tmp_path, monkeypatch):
    spec = M.PRESETS["smollm2"]
    save_tiny(tmp_path, spec.target, "llama", dict(num_key_value_heads=2), vocab_size=64)
    save_tiny(tmp_path, spec.draft, "llama", dict(num_key_value_heads=2), vocab_size=72)
    monkeypatch.setenv("SPECDEC_LOCAL_MODELS", str(tmp_path))
    with pytest.raises(ValueError, match="vocabular|tokenizer"):
        M.load_pair("smollm2", device="cpu")


def test_check_vocabularies():
    M.check_vocabularies(tiny_llama(32), tiny_llama(32, seed=1))
    with pytest.raises(ValueError, match="151,936"):
        M.check_vocabularies(tiny_llama(32), tiny_llama(40))
    with pytest.raises(ValueError, match="tokenizer differs"):
        M.check_vocabularies(tiny_llama(32), tiny_llama(32), tiny_tokenizer(32), tiny_tokenizer(33))


def test_every_preset_is_described():
    assert M.PRESETS["offline"] and set(ARCHS) <= set(M.PRESETS)
    for name, spec in M.PRESETS.items():
        assert spec.target and spec.draft and spec.about, name
    assert M.PRESETS["gemma2"].gated
    with pytest.raises(KeyError, match="choose one of"):
        M.load_pair("gpt5")


def test_device_selection(monkeypatch):
    monkeypatch.delenv("SPECDEC_DEVICE", raising=False)
    assert M.pick_device("cpu").type == "cpu"
    monkeypatch.setenv("SPECDEC_DEVICE", "cpu")
    assert M.pick_device().type == "cpu"
    assert M.pick_dtype(torch.device("cpu")) == torch.float32
    assert M.pick_dtype(torch.device("cuda")) == torch.bfloat16


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_asked_for_but_absent(monkeypatch):
    monkeypatch.setenv("SPECDEC_DEVICE", "cuda")
    with pytest.raises(M.DeviceError, match="CUDA was asked for .*SPECDEC_DEVICE"):
        M.pick_device()
    with pytest.raises(M.DeviceError, match="device='cpu'"):
        M.load_model("offline:smollm2-135m-instruct", device="cuda")


def test_chat_ids_rejects_an_empty_prompt():
    with pytest.raises(ValueError, match="empty"):
        M.chat_ids(tiny_tokenizer(8), "")


@pytest.mark.offline
def test_offline_pair():
    pair = M.load_pair("offline", device="cpu")
    assert pair.target.config.num_hidden_layers == 30 and pair.target.config.vocab_size == 49152
    assert pair.draft.config.num_hidden_layers == 4
    ids = M.chat_ids(pair.tokenizer, "What is the capital of France?")
    out = pair.target.generate(ids, max_new_tokens=8, do_sample=False)
    assert "Paris" in pair.tokenizer.decode(out[0, ids.shape[1]:])


def test_shipped_drafts_are_small_and_complete():
    from specdec_core.assets import FEATURE_FILE, STANDALONE_DIR

    standalone = sum(p.stat().st_size for p in STANDALONE_DIR.iterdir())
    assert (STANDALONE_DIR / "config.json").exists() and standalone <= 20e6
    assert FEATURE_FILE.stat().st_size <= 20e6


def test_shipped_training_requests_stay_clear_of_every_evaluation_prompt():
    """The drafts' self-written requests (plain, steered, follow-ups): as many as the recipe says,
    distinct, and none a near-copy of a prompt the course evaluates on (lesson 08's held-out code
    requests included)."""
    import json

    from specdec_core.assets import MAGPIE_FILE, MORE_REQUESTS_FILE
    from specdec_core.train.corpus import RECIPE
    from specdec_core.train.requests import reserved, too_close

    magpie, more = json.loads(MAGPIE_FILE.read_text()), json.loads(MORE_REQUESTS_FILE.read_text())
    written = magpie + [r for style in RECIPE["styles"] for r in more[style]]
    written += [conversation[-1]["content"] for conversation in more["follow_ups"]]
    assert len(magpie) == RECIPE["magpie"] and all(len(more[s]) == n for s, n in RECIPE["styles"].items())
    assert 0.5 * RECIPE["follow_ups"] <= len(more["follow_ups"]) <= RECIPE["follow_ups"]
    assert len(set(" ".join(r.lower().split()) for r in written)) == len(written)
    assert not [r for r in written if too_close(r, reserved())]


def test_copy_heavy_prompts_carry_their_material_and_never_ask_to_repeat_it():
    from specdec_core import prompts

    assert len(prompts.COPY_HEAVY) >= 10 and len(set(prompts.COPY_HEAVY)) == len(prompts.COPY_HEAVY)
    assert prompts.get("copy") == prompts.COPY_HEAVY
    for p in prompts.COPY_HEAVY:
        assert len(p.split()) >= 25, p  # the text or code to work on is in the prompt
        assert not any(w in p.lower() for w in ("repeat", "verbatim", "word for word", "copy the")), p


def test_missing_draft_weights_say_how_to_restore_them(tmp_path, monkeypatch):
    from specdec_core import assets

    monkeypatch.setattr(assets, "STANDALONE_DIR", tmp_path / "nothing")
    with pytest.raises(assets.AssetMissingError, match="git checkout -- specdec_core/drafts"):
        M.resolve(M.OFFLINE_DRAFT)


@pytest.mark.offline
def test_load_drafter_kinds():
    from specdec_core.drafters import LookupFirst, ModelDrafter, NGramDrafter
    from specdec_core.feature_drafter import FeatureDrafter

    pair = M.load_pair("offline", device="cpu")
    assert isinstance(M.load_drafter(pair, "model"), ModelDrafter)
    assert isinstance(M.load_drafter(pair, "ngram"), NGramDrafter)
    assert isinstance(M.load_drafter(pair, "feature"), FeatureDrafter)
    best = M.load_drafter(pair, "best")  # the course's recommendation: lookup first, then the feature drafter
    assert isinstance(best, LookupFirst) and isinstance(best.fallback, FeatureDrafter) and best.wants_hidden
    with pytest.raises(ValueError, match="choose one of"):
        M.load_drafter(pair, "medusa")
    hub_like = M.Pair(pair.target, pair.draft, pair.tokenizer, "smollm2", pair.device)
    assert isinstance(M.load_drafter(hub_like, "best").fallback, ModelDrafter)
    with pytest.raises(ValueError, match="offline target only"):
        M.load_drafter(hub_like, "feature")
