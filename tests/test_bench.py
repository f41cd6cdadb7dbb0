"""Measurement (specdec_core.bench: the harness, memory probes, memory.py). Never asserts a wall-clock time, only structure."""

from __future__ import annotations

import math
import os
import statistics
import sys

import pytest
import torch

from specdec_core import ar, memory
from specdec_core.bench import harness, probes
from specdec_core.generation import Generation
from specdec_core.records import ARStats, TreeStats
from specdec_core.toy import tiny_llama

PROMPT = torch.tensor([[0, 5, 9, 12, 3]])


def test_measure_returns_medians_and_counts_runs():
    model = tiny_llama(seed=0)
    calls = []

    def fn():
        calls.append(1)
        return ar.generate(model, PROMPT, 6)

    m = harness.measure_latency_and_memory(fn, warmup=2, repeats=3)
    assert len(calls) == 5  # 2 warm-up + 3 timed
    assert len(m.latencies) == 3
    assert m.latency == statistics.median(m.latencies)
    assert m.new_tokens == 6 and len(m.result) == 6
    assert m.tokens_per_s > 0 and m.ttft is not None and m.ttft > 0
    assert m.peak_memory_bytes > 0 and m.memory_before_bytes > 0
    assert m.memory_kind == "CPU peak RSS"
    assert "tokens/s" in str(m)


def test_tokens_per_s_is_the_median_of_the_runs():
    fake_times = iter([0.0, 1.0, 0.0, 2.0, 0.0, 4.0])  # three runs lasting 1, 2 and 4 "seconds"

    class FakeTimer:
        def __init__(self, device=None):
            self.seconds = 0.0

        def __enter__(self):
            self._start = next(fake_times)
            return self

        def __exit__(self, *exc):
            self.seconds = next(fake_times) - self._start

    gens = iter([Generation([1] * 8, stats=ARStats(ttft=0.3)), Generation([1] * 8, stats=ARStats(ttft=0.1)),
                 Generation([1] * 8, stats=ARStats(ttft=0.2))])
    original = harness.Timer
    harness.Timer = FakeTimer
    try:
        m = harness.measure_latency_and_memory(lambda: next(gens), warmup=0, repeats=3)
    finally:
        harness.Timer = original
    assert m.latencies == [1.0, 2.0, 4.0]
    assert m.latency == 2.0
    assert m.tokens_per_s == 4.0  # median of 8, 4, 2
    assert m.ttft == pytest.approx(0.2)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="peak-RSS reset needs Linux /proc")
def test_cpu_peak_memory_sees_an_allocation():
    size = 200 * memory.MB

    def fn():
        block = torch.ones(size // 4)  # 200 MB of float32, touched
        del block
        return Generation([1])

    m = harness.measure_latency_and_memory(fn, warmup=0, repeats=1)
    assert m.peak_memory_bytes - m.memory_before_bytes > 0.75 * size
    assert m.added_memory_mb > 150


def test_ttft_absent_and_bad_arguments():
    m = harness.measure_latency_and_memory(lambda: Generation([1, 2]), warmup=0, repeats=1)
    assert m.ttft is None
    with pytest.raises(ValueError, match="repeats"):
        harness.measure_latency_and_memory(lambda: Generation([]), repeats=0)
    with pytest.raises(TypeError, match="Generation"):
        harness.measure_latency_and_memory(lambda: [1, 2], warmup=0)


def test_kv_cache_formula_matches_the_measured_cache():
    model = tiny_llama(hidden_size=32, num_layers=2)  # 4 heads of 8, 2 KV heads
    for n in (1, 17):
        measured = memory.cache_tensor_bytes(memory.filled_cache(model, n))
        assert measured == memory.kv_cache_bytes(model.config, n) == 2 * 2 * 2 * 8 * n * 4
    assert memory.kv_cache_bytes(model.config, 10, torch.bfloat16) == 2 * 2 * 2 * 8 * 10 * 2


def test_weight_bytes_counts_tied_weights_once():
    model = tiny_llama(vocab_size=32, hidden_size=32)
    total = sum(p.numel() for p in model.parameters()) * 4 + sum(b.numel() * b.element_size() for b in model.buffers())
    assert memory.weight_bytes(model) == total
    model.lm_head.weight = model.model.embed_tokens.weight  # tie them
    assert memory.weight_bytes(model) == total - 32 * 32 * 4


def test_step_latency_times_one_new_token_on_the_right_context():
    """With the cache every timed forward runs ONE token on a cache of exactly the context (so the
    cache was rolled back after each repeat); without it, the whole context + 1 tokens."""
    model = tiny_llama()
    seen = []

    def spy(module, args, kwargs):
        cache = kwargs.get("cache", kwargs.get("past_key_values"))
        seen.append((kwargs["input_ids"].shape[1], cache.get_seq_length() if cache is not None else 0))

    hook = model.register_forward_pre_hook(spy, with_kwargs=True)
    try:
        for use_cache in (True, False):
            seen.clear()
            times = probes.step_latency(model, [4, 16], use_cache=use_cache, repeats=3)
            assert len(times) == 2 and all(t > 0 for t in times)
            timed = [s for s in seen if s != (4, 0) and s != (16, 0)] if use_cache else seen  # drop the prefills
            expected = [(1, 4)] * 3 + [(1, 16)] * 3 if use_cache else [(5, 0)] * 3 + [(17, 0)] * 3
            assert timed == expected, (use_cache, seen)
    finally:
        hook.remove()


def test_cuda_path_resets_and_reads_the_peak(monkeypatch):
    """No GPU here: fake torch.cuda's memory counters and check the calls and their order."""
    calls = []
    monkeypatch.setattr(probes, "_is_cuda", lambda device: True)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: calls.append("sync"))
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device=None: calls.append("reset"))
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: 100)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: calls.append("peak") or 5000)

    def fn():
        calls.append("run")
        return Generation([1, 2, 3])

    m = harness.measure_latency_and_memory(fn, warmup=1, repeats=2, device="cuda")
    assert calls.index("reset") > calls.index("run")  # the warm-up run is not in the peak
    assert calls.count("run") == 3 and calls[-1] == "peak"
    assert (m.peak_memory_bytes, m.memory_before_bytes, m.memory_kind) == (5000, 100, "CUDA max_memory_allocated")


def test_noise_band_and_the_verdict_it_gives():
    # three methods × two prompts, repeated: relative spreads 0.1, 0.2, 0.0, 0.4 → median 0.15
    groups = [[9.5, 10.5, 10.0], [9.0, 11.0], [5.0, 5.0], [8.0, 12.0, 10.0], [7.0]]
    assert harness.noise_band(groups) == pytest.approx(0.15)
    assert math.isnan(harness.noise_band([[3.0], [4.0]]))  # single runs: no band
    assert harness.classify(1.2, 0.15) == "faster" and harness.classify(0.8, 0.15) == "slower"
    assert harness.classify(1.1, 0.15) == harness.classify(0.9, 0.15) == "a tie"
    assert harness.classify(1.5, float("nan")) == "single run"  # no measured band, no verdict
    spread = harness.Spread.of([3.0, float("nan"), 1.0, 2.0])
    assert (spread.median, spread.lo, spread.hi, spread.n) == (2.0, 1.0, 3.0, 3)


def test_interleaved_warms_up_then_alternates_the_calls():
    order = []

    def call(name):
        return lambda: order.append(name) or Generation([1])

    runs = harness.interleaved({"a": call("a"), "b": call("b")}, repeats=3, warmup=1)
    assert order == ["a", "b"] * 4  # one warm-up round, then three interleaved rounds
    assert [len(runs[k]) for k in "ab"] == [3, 3] and all(r.seconds > 0 for r in runs["a"])


def test_categories_table_puts_each_method_in_each_category():
    from specdec_core.bench.report import categories

    def report(rows):
        return {"methods": [{"name": n, "label": f"label {n}", "ratio_to_ar": r, "verdict": v} for n, r, v in rows]}

    table = categories({"chat": report([("ar", 1.0, "baseline"), ("spec", 1.21, "faster")]),
                        "copy": report([("ar", 1.0, "baseline"), ("lookup", 2.5, "faster")])}).splitlines()
    table = table[table.index("| method | chat | copy |"):]
    assert len(table) == 2 + 3  # header, rule; ar, spec, lookup
    assert "| label spec | 1.21× (faster) | – |" in table and "| label lookup | – | 2.50× (faster) |" in table


def test_step_breakdown_adds_up_and_names_the_matrix_products(capfd):
    from specdec_core.bench.probes import step_breakdown

    os.write(2, b"before\n")
    parts = step_breakdown(tiny_llama(), n=3, context=8, repeats=2)
    os.write(2, b"after\n")
    assert capfd.readouterr().err == "before\nafter\n"  # the profiler's native start/stop lines stay out
    assert set(parts) == {"matrix products", "attention", "everything else", "total"}
    assert parts["matrix products"] > 0 and parts["total"] == pytest.approx(sum(v for k, v in parts.items() if k != "total"))


def test_before_after_profiles_both_models_at_each_width(monkeypatch):
    from specdec_core.bench import probes

    seen = []
    monkeypatch.setattr(probes, "step_breakdown", lambda m, n, repeats: seen.append((m, n, repeats)) or {"total": n})
    got = probes.before_after("P", "F", [1, 4], repeats=3, name="draft")
    assert list(got) == ["draft plain, n = 1", "draft fast, n = 1", "draft plain, n = 4", "draft fast, n = 4"]
    assert seen == [("P", 1, 3), ("F", 1, 3), ("P", 4, 3), ("F", 4, 3)]


def test_the_feature_tree_rows_grow_eagle2s_tree_and_the_greedy_one_matches_ar(monkeypatch):
    """The registry's tree_feature rows on a toy pair, its feature drafter a random head (the shipped
    head is the offline preset's): greedy = our AR with EOS, the sampled row runs, both are tree runs."""
    from specdec_core.bench import methods
    from specdec_core.feature_drafter import FeatureDrafter, FeatureHead
    from specdec_core.models import Pair
    from specdec_core.toy import toy_tokenizer

    target = tiny_llama(32, seed=0, logit_scale=4.0)
    torch.manual_seed(3)
    drafter = FeatureDrafter(target, FeatureHead(d=32, n_heads=4, ffn=64).eval(), torch.arange(32))
    monkeypatch.setattr(methods, "load_drafter", lambda pair, kind: drafter if kind == "feature" else None)
    pair = Pair(target, tiny_llama(32, seed=1), toy_tokenizer(32), "toy", torch.device("cpu"))
    registry = methods.build_methods(2)
    greedy, sampled = registry["tree_feature"], registry["tree_feature_sampled"]
    assert greedy.greedy and not sampled.greedy and greedy.prepare(pair) is drafter
    out = greedy.fn(pair, PROMPT, 12)
    assert out.new_tokens == ar.generate(target, PROMPT, 12, eos_token_id=pair.tokenizer.eos_token_id).new_tokens
    assert out.stats.draft_calls > 0 and max(out.stats.tree_sizes) > 3
    assert isinstance(sampled.fn(pair, PROMPT, 12).stats, TreeStats)
    assert [m.__class__.__name__ for m in greedy.models(pair)] == ["LlamaForCausalLM", "FeatureHead"]
