"""The machine's cost model: what it times, when it is cached (and when never), and v(n) between
the measured n. Never asserts a wall-clock time."""

from __future__ import annotations

import json

import pytest
import torch

from specdec_core import costmodel
from specdec_core.speculative import ModelDrafter
from specdec_core.toy import tiny_llama

PROMPT = torch.tensor([[1, 2, 3, 4, 5]])


@pytest.fixture
def quiet_machine(monkeypatch, tmp_path):
    """A cache of our own, and the environment of a student's quiet machine (caching allowed)."""
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))
    for var in ("SPECDEC_QUICK", "CI", "PYTEST_XDIST_WORKER", "SPECDEC_TESTING"):
        monkeypatch.delenv(var, raising=False)
    return tmp_path


def test_forward_times_runs_n_new_tokens_on_the_same_context():
    model = tiny_llama()
    seen = []
    hook = model.register_forward_pre_hook(
        lambda m, a, kw: seen.append((kw["input_ids"].shape[1], kw.get("cache", kw.get("past_key_values")).get_seq_length())),
        with_kwargs=True)
    try:
        times = costmodel.forward_times(model, ns=(1, 3, 8), context=16, repeats=2)
    finally:
        hook.remove()
    assert sorted(times) == [1, 3, 8] and all(len(t) == 2 and min(t) > 0 for t in times.values())
    assert seen[0] == (16, 0)  # the prefill
    assert seen[1:] == [(1, 16), (3, 16), (8, 16)] * 3  # warm-up round + 2 rounds, interleaved, rolled back


def test_v_interpolates_between_measured_n():
    cm = costmodel.CostModel({}, 0.01, {1: 1.0, 4: 1.6, 8: 2.0}, (0.009, 0.011), 1e10, 10**8)
    assert cm.v(4) == 1.6 and cm.v(6) == pytest.approx(1.8) and cm.v(16) == 2.0 and cm.v(2) == pytest.approx(1.2)
    assert cm.floor_s == pytest.approx(0.01)
    assert costmodel.CostModel.from_json(json.loads(json.dumps(cm.as_json()))) == cm


def test_measured_once_then_read_back_and_remeasured_when_the_key_changes(quiet_machine, monkeypatch):
    target, draft = tiny_llama(), tiny_llama(seed=1, hidden_size=16, num_layers=1)
    first = costmodel.load_or_measure(target, "toy", {"model": ModelDrafter(draft)}, PROMPT)
    assert first.v(1) == 1.0 and first.c["model"] > 0 and first.bandwidth > 0
    assert first.weight_bytes > 0 and first.key["threads"] == torch.get_num_threads()
    files = list((quiet_machine / "costmodel").glob("*.json"))
    assert len(files) == 1
    real, calls = costmodel.measure, []
    monkeypatch.setattr(costmodel, "measure", lambda *a, **k: calls.append(1) or real(*a, **k))
    assert costmodel.load_or_measure(target, "toy", {"model": ModelDrafter(draft)}, PROMPT) == first
    assert calls == []  # read back, not measured again
    monkeypatch.setattr(torch, "__version__", "0.0-other")  # another torch: another key, a new measurement
    costmodel.load_or_measure(target, "toy")
    assert calls == [1] and len(list((quiet_machine / "costmodel").glob("*.json"))) == 2


@pytest.mark.parametrize("var, value", [("SPECDEC_QUICK", "1"), ("CI", "true"), ("PYTEST_XDIST_WORKER", "gw0"),
                                        ("SPECDEC_TESTING", "1")])
def test_never_cached_in_a_quick_run_in_ci_or_beside_other_tests(quiet_machine, monkeypatch, var, value):
    monkeypatch.setenv(var, value)
    costmodel.load_or_measure(tiny_llama(), "toy")
    assert not list((quiet_machine / "costmodel").glob("*.json"))


def test_a_drafter_needs_a_prompt():
    with pytest.raises(ValueError, match="input_ids"):
        costmodel.measure(tiny_llama(), "toy", {"model": ModelDrafter(tiny_llama(seed=1))})
