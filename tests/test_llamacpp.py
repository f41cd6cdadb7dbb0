"""llama.cpp, the optional peer (bench/llamacpp.py, peers.llama_cpp_generate).

Without the extra (the default install) the rows are not available and say how to get them, and the GGUF
step fails with a message naming `make llama-cpp`. With it (`make llama-cpp`), greedy llama.cpp on the f32
GGUF gives our AR's token ids on the offline target. No test here reads a clock.
"""

from __future__ import annotations

import io
import re
import tarfile
from pathlib import Path

import pytest

from specdec_core.assets import AssetMissingError
from specdec_core.bench import llamacpp, methods
from specdec_core.bench.runner import select_methods

ROOT = Path(__file__).resolve().parents[1]
HAS_LLAMA_CPP = llamacpp.installed()


def test_without_the_extra_the_rows_say_how_to_get_them():
    reasons = llamacpp.not_available(is_installed=False)
    assert set(reasons) == set(llamacpp.ROWS) == {"llamacpp_ar", "llamacpp_ar_f16", "llamacpp_lookup",
                                                   "llamacpp_lookup_f16"}
    for reason in reasons.values():
        assert "`make llama-cpp`" in reason and "\n" not in reason
    assert llamacpp.not_available(is_installed=True) == {}


def test_the_registry_has_the_rows_exactly_when_the_extra_is_installed():
    registry = methods.build_methods(gamma=2)
    for name in llamacpp.ROWS:
        assert (name in registry) == HAS_LLAMA_CPP
        assert (name in methods.NOT_AVAILABLE) != HAS_LLAMA_CPP
    if not HAS_LLAMA_CPP:
        with pytest.raises(ValueError, match="make llama-cpp"):
            select_methods(registry, ["ar", "llamacpp_ar"])


def test_the_gguf_step_without_the_extra_names_the_command(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))  # an empty cache: no source distribution, no converter
    with pytest.raises(AssetMissingError, match=re.escape("make llama-cpp")):
        llamacpp.ensure_gguf("f32")
    with pytest.raises(ValueError, match="outtype"):
        llamacpp.ensure_gguf("q4")


def test_the_converter_comes_out_of_the_source_distribution(tmp_path, monkeypatch):
    """Only the converter's files, under the folder's own names, and nothing outside it."""
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))
    files = {llamacpp.VENDOR + "convert_hf_to_gguf.py": b"print('convert')\n",
             llamacpp.VENDOR + "conversion/__init__.py": b"",
             llamacpp.VENDOR + "gguf-py/gguf/__init__.py": b"",
             llamacpp.VENDOR + "ggml/src/ggml.c": b"int x;\n",
             f"llama_cpp_python-{llamacpp.VERSION}/llama_cpp/llama.py": b""}
    sdist = tmp_path / "wheels" / llamacpp.SDIST
    sdist.parent.mkdir()
    with tarfile.open(sdist, "w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    folder = llamacpp.converter_dir()
    got = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
    assert got == ["conversion/__init__.py", "convert_hf_to_gguf.py", "gguf-py/gguf/__init__.py"]
    assert llamacpp.converter_dir() == folder  # found, not extracted again


def test_one_pin_everywhere():
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert f'"llama-cpp-python=={llamacpp.VERSION}"' in pyproject
    assert re.search(rf"^LLAMA_CPP_VERSION\s*:=\s*{re.escape(llamacpp.VERSION)}$", (ROOT / "Makefile").read_text(), re.M)
    assert "llama" not in (ROOT / "requirements.txt").read_text()  # the default install never needs it


def test_the_gguf_weights_stand_in_counts_bytes_and_holds_none():
    from specdec_core.memory import weight_bytes

    w = llamacpp.GgufWeights(123_456)
    assert weight_bytes(w) == 123_456
    assert w.tensors.device.type == "meta"


@pytest.mark.offline
@pytest.mark.slow
@pytest.mark.skipif(not HAS_LLAMA_CPP, reason="llama.cpp is an optional extra: run `make llama-cpp`")
def test_greedy_llama_cpp_f32_gives_our_ar_tokens():
    """Same chat-template ids, greedy: f32 llama.cpp = our AR, token for token. f16 and llama.cpp's prompt lookup
    are reported (printed), not asserted: f16 rounds the weights, and a batched verify may round differently."""
    from specdec_core.ar import generate
    from specdec_core.generation import common_prefix
    from specdec_core.models import chat_ids, load_pair

    pair = load_pair("offline", device="cpu")
    ids = chat_ids(pair.tokenizer, "Give me three tips for staying focused while studying.")
    eos = pair.tokenizer.eos_token_id
    n = 32
    ours = generate(pair.target, ids, n, eos_token_id=eos).new_tokens
    registry = methods.build_methods(gamma=2)
    got = {}
    for name in llamacpp.ROWS:
        registry[name].prepare(pair)
        got[name] = registry[name].fn(pair, ids, n)
        again = registry[name].fn(pair, ids, n)  # the context is reset: the same run again
        assert again.new_tokens == got[name].new_tokens, name
        print(f"{name}: {common_prefix(got[name].new_tokens, ours)}/{len(ours)} tokens equal to our AR's, "
              f"{got[name].stats.target_calls} target calls")
    assert got["llamacpp_ar"].new_tokens == ours
    assert got["llamacpp_ar"].stats.target_calls == len(ours)
    assert len(got["llamacpp_ar_f16"]) == len(ours) or got["llamacpp_ar_f16"].new_tokens[-1] == eos
