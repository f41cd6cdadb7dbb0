"""The machine's cost model: what it times, when it is cached (and when never), and v(n) between
the measured n. Never asserts a wall-clock time."""

from __future__ import annotations

import json

import pytest
import torch

from specdec_core import costmodel
from specdec_core.drafters import ModelDrafter
from specdec_core.records import SpecStats, SpecStep
from specdec_core.toy import tiny_llama

PROMPT = torch.tensor([[1, 2, 3, 4, 5]])


@pytest.fixture
def quiet_machine(monkeypatch, tmp_path):
    """A cache of our own, and the environment of a student's quiet machine (caching allowed)."""
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))
    for var in ("SPECDEC_QUICK", "CI", "PYTEST_XDIST_WORKER", "SPECDEC_TESTING"):
        monkeypatch.delenv(var, raising=False)
    return tmp_path


def _record(model, seen):
    def hook(m, args, kw):
        cache = kw.get("cache", kw.get("past_key_values"))
        mask, pos = kw.get("attention_mask"), kw.get("position_ids")
        seen.append({"n": kw["input_ids"].shape[1], "past": cache.get_seq_length(),
                     "mask": None if mask is None else mask.clone(), "pos": None if pos is None else pos.clone()})
    return model.register_forward_pre_hook(hook, with_kwargs=True)


def test_forward_times_runs_what_it_claims_causal_and_tree_on_each_context():
    model, seen = tiny_llama(), []
    hook = _record(model, seen)
    try:
        times = costmodel.forward_times(model, ns=(1, 3, 8), contexts=(16, 40), repeats=2)
    finally:
        hook.remove()
    assert sorted(times) == sorted((k, c, n) for k in ("causal", "tree") for c in (16, 40) for n in (1, 3, 8))
    assert all(len(t) == 2 and min(t) > 0 for t in times.values())
    prefills = [i for i, s in enumerate(seen) if s["past"] == 0]
    assert [seen[i]["n"] for i in prefills] == [16, 40]  # one prefill per context
    for block, context in ((seen[1:prefills[1]], 16), (seen[prefills[1] + 1:], 40)):
        assert len(block) == 3 * 6  # warm-up + 2 rounds, each every (kind, n) once
        for r in range(3):
            rnd = block[6 * r: 6 * r + 6]
            assert rnd[0]["past"] == context  # each round starts again from the context …
            assert [s["past"] for s in rnd] == list(range(context, context + 6))  # … and grows by one per forward
            assert sorted((s["mask"] is not None, s["n"]) for s in rnd) == sorted(
                (t, n) for t in (False, True) for n in (1, 3, 8))
            for s in rnd:
                if s["mask"] is None:
                    assert s["pos"] is None
                    continue
                depth, tree = costmodel.tree_shape(s["n"])
                assert s["pos"].tolist() == [(s["past"] + depth).tolist()]  # prefix length + depth
                allowed = s["mask"][0, 0] == 0  # additive mask: 0 = may attend
                assert allowed.shape == (s["n"], s["past"] + s["n"])
                assert allowed[:, : s["past"]].all() and torch.equal(allowed[:, s["past"]:], tree)


def test_a_draft_forward_runs_before_each_timed_forward():
    model, draft, seen = tiny_llama(), tiny_llama(seed=1, hidden_size=16, num_layers=1), []
    hook = _record(draft, seen)
    try:
        costmodel.forward_times(model, ns=(1, 2), contexts=(8,), repeats=1, draft=draft)
    finally:
        hook.remove()
    assert seen[0]["past"] == 0 and len(seen) == 1 + 2 * 4  # its prefill, then one forward per timed one


def test_tree_shape_is_ancestor_closed():
    depth, mask = costmodel.tree_shape(7)
    assert depth.tolist() == [0, 1, 1, 2, 2, 2, 2]
    assert mask[6].nonzero().flatten().tolist() == [0, 2, 6] and mask.diagonal().all()


def test_v_interpolates_between_measured_n_and_refuses_to_extrapolate():
    cm = costmodel.CostModel({}, 0.01, {1: 1.0, 4: 1.6, 8: 2.0}, (0.009, 0.011), 1e10, 10**8,
                             v_tree_by_n={1: 1.1, 8: 2.5}, overhead_s=0.002)
    assert cm.v(4) == 1.6 and cm.v(6) == pytest.approx(1.8) and cm.v(2) == pytest.approx(1.2)
    assert cm.v(8, tree=True) == 2.5 and cm.overhead == pytest.approx(0.2)
    with pytest.raises(ValueError, match="never"):
        cm.v(9)
    with pytest.raises(ValueError, match="never"):
        cm.v(64, tree=True)
    assert cm.floor_s == pytest.approx(0.01)
    assert costmodel.CostModel.from_json(json.loads(json.dumps(cm.as_json()))) == cm


def test_ratios_divide_by_the_one_token_forward_of_the_same_round_and_context():
    times = {("causal", 8, 1): [1.0, 2.0], ("causal", 8, 4): [3.0, 4.0], ("tree", 8, 4): [4.0, 6.0],
             ("causal", 16, 1): [2.0, 2.0], ("causal", 16, 4): [2.0, 2.0], ("tree", 16, 4): [2.0, 2.0]}
    assert costmodel.ratios(times, "causal", 8) == {1: 1.0, 4: 2.5}
    assert costmodel.ratios(times, "tree", 8) == {4: 3.5}
    assert costmodel.ratios(times, "causal") == {1: 1.0, 4: pytest.approx(1.5)}  # median of 3, 2, 1, 1


def test_loop_overhead_runs_the_verify_only_loop():
    model, seen = tiny_llama(), []
    hook = _record(model, seen)
    try:
        o = costmodel.loop_overhead(model, gamma=3, context=8, steps=2)
    finally:
        hook.remove()
    assert o >= 0 and [s["n"] for s in seen] == [8] + [4] * 6  # prefill, then bare + loop forwards of γ + 1
    assert [s["past"] for s in seen[1:]] == [8, 8, 9, 9, 10, 10]  # the loop keeps one token per step


def test_the_prediction_uses_the_runs_own_numbers():
    cm = costmodel.CostModel({}, 0.01, {1: 1.0, 3: 1.2, 4: 1.4}, (0.009, 0.011), 1e10, 10**8, overhead_s=0.001)
    steps = [SpecStep([5, 6], 2, 1, "bonus", gamma=2, draft_s=0.006), SpecStep([7, 8, 9], 0, 1, "resampled", gamma=3,
                                                                              draft_s=0.006)]  # widths 3 and 4
    stats = SpecStats(target_calls=2, new_tokens=4, steps=steps)  # τ = 2, 0.012 s drafting
    p = costmodel.predict(stats, cm)
    assert p.draft == pytest.approx(0.6) and p.v == pytest.approx(1.3) and p.overhead == pytest.approx(0.1)
    assert p.speedup == pytest.approx(2.0 / 2.0)
    assert p.verdict(1.05, 0.1) == "within the noise band" and p.verdict(0.8, 0.1).endswith("over-predicted")
    assert "measured 1.05×" in p.line(1.05, 0.1)


def test_a_rows_prediction_is_the_median_of_each_term_over_its_calls():
    calls = [costmodel.Prediction(1.5, 0.2, 1.1, 0.01, 1.1), costmodel.Prediction(2.5, 0.4, 1.3, 0.03, 1.5),
             costmodel.Prediction(2.0, 0.3, 1.9, 0.02, 0.9)]
    m = costmodel.Prediction.median(calls)
    assert (m.tokens_per_call, m.draft, m.v, m.overhead, m.speedup) == (2.0, 0.3, 1.3, 0.02, 1.1)


def test_a_steep_v_collapses_the_best_gamma_and_a_flat_one_lets_it_grow():
    from specdec_core import theory
    assert theory.best_gamma(0.7, 0.05, lambda n: float(n)) == 1  # every extra row costs a full step
    assert theory.best_gamma(0.9, 0.01, lambda n: 1.0) >= 8
    assert theory.predicted_speedup(3.0, 0.5, 1.0, 0.5) == pytest.approx(1.5)


def test_the_key_changes_with_the_engine_and_the_measured_set(monkeypatch):
    model = tiny_llama()
    base = costmodel.machine_key(model, "toy")
    assert costmodel.machine_key(model, "toy", engine="other") != base
    monkeypatch.setattr(costmodel, "NS", (1, 2))
    assert costmodel.machine_key(model, "toy") != base


def test_measured_once_then_read_back_and_remeasured_when_the_key_changes(quiet_machine, monkeypatch):
    target, draft = tiny_llama(), tiny_llama(seed=1, hidden_size=16, num_layers=1)
    first = costmodel.load_or_measure(target, "toy", {"model": ModelDrafter(draft)}, PROMPT)
    assert first.v(1) == 1.0 and first.c["model"] > 0 and first.bandwidth > 0 and first.overhead_s >= 0
    assert sorted(first.v_by_n) == sorted(first.v_tree_by_n) == list(costmodel.NS)
    assert sorted(first.v_by_context) == list(costmodel.CONTEXTS)
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


def test_the_step_is_the_ar_loops_time_per_token(monkeypatch):
    """Issue 46 item 5: every cost is a ratio of the step the AR loop runs, not of a bare forward timed apart."""
    from specdec_core import ar
    from specdec_core.records import ARStats

    real = ar.generate

    def timed(model, ids, n, **kw):  # the real loop, with its token times replaced by known ones
        out = real(model, ids, n, **kw)
        out.stats = ARStats(target_calls=n, ttft=9.0, token_times=[9.0] + [0.5, 0.25, 0.75] * (n // 3))
        return out

    monkeypatch.setattr(ar, "generate", timed)
    cm = costmodel.measure(tiny_llama(), "toy", repeats=1, contexts=(8,), ns=(1, 2), overhead_steps=1)
    assert cm.step_s == 0.5 and cm.step_spread == (0.25, 0.75)  # the prefill (9 s) is not a step


def test_the_engine_names_the_cache_and_the_precision():
    from specdec_core import lm, precision

    model = tiny_llama()
    assert costmodel.engine_of(model) == "eager torch.float32, dynamic cache"
    assert costmodel.engine_of(lm.on_static_engine(model)) == "eager torch.float32, static cache"
    assert costmodel.engine_of(precision.at_precision(model, "int8")).startswith("eager int8")
    assert costmodel.machine_key(model, "toy") != costmodel.machine_key(lm.on_static_engine(model), "toy")


def test_every_menu_width_is_measured():
    """A padded forward (widths.WIDTHS: an auto tree's, a compiled step's) is priced at a measured n, never
    interpolated."""
    from specdec_core.widths import WIDTHS, menu_width

    assert set(WIDTHS) <= set(costmodel.NS)
    assert [menu_width(n) for n in (1, 2, 3, 5, 8, 9, 33, 64)] == [1, 2, 4, 8, 8, 16, 64, 64]
    for bad in (0, 65):
        with pytest.raises(ValueError, match="menu"):
            menu_width(bad)
