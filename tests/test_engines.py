"""engines: our AR and the speculation engine chosen from measured rows (no wall-clock value is asserted), pinned
where nothing may be timed, cached per machine, and every candidate buildable and measurable on a toy pair."""

from __future__ import annotations

import json

import pytest
import torch

from specdec_core import engines, fast, machine
from specdec_core.engines import CANDIDATES, Choice, EngineRow, decide
from specdec_core.models import Pair
from specdec_core.toy import tiny_llama


def _row(name: str, step_ms: float, v: dict[int, float] | float, c: float = 0.1, ppl: float = 0.0) -> EngineRow:
    """A made-up row: an AR step, v(n) (a table or one slope per extra token), the draft's c."""
    vn = {n: (v[n] if isinstance(v, dict) else 1 + v * (n - 1)) for n in range(1, engines.MAX_WIDTH + 1)}
    one = step_ms / 1e3
    return EngineRow(name, one, {n: one * x for n, x in vn.items()}, c * one, ppl, 1.0, (one, one))


def test_our_ar_is_the_fastest_step_and_speculation_the_flattest_verify_when_that_predicts_faster() -> None:
    rows = [_row("eager f32", 40, 0.05), _row("static f16", 20, 0.4), _row("static bf16", 25, 0.01)]
    choice = decide(rows, alpha=0.7)
    assert choice.ar == "static f16"  # one row fastest
    assert choice.spec == "static bf16"  # v(γ + 1) ≈ 1: γ guesses cost almost nothing to verify
    t16, _ = rows[1].speculation(0.7)
    tbf, gamma = rows[2].speculation(0.7)
    assert tbf < t16 and choice.gamma == gamma and "static bf16" in choice.line()


def test_the_same_engine_wins_both_when_it_is_fastest_and_flat() -> None:
    rows = [_row("eager f32", 40, 0.05), _row("static bf16", 20, 0.01)]
    assert (decide(rows, 0.6).ar, decide(rows, 0.6).spec) == ("static bf16", "static bf16")


def test_an_engine_outside_the_quality_line_is_never_chosen_however_fast() -> None:
    rows = [_row("eager f32", 40, 0.05), _row("static int8", 5, 0.0, ppl=0.02), _row("static f32", 30, 0.02)]
    choice = decide(rows, 0.8)
    assert "static int8" not in (choice.ar, choice.spec) and "static int8" in choice.why
    # the line is the rule, not a coincidence: the same row inside the line wins
    rows[1] = _row("static int8", 5, 0.0, ppl=0.005)
    assert decide(rows, 0.8).ar == "static int8"


def test_speculation_prices_gamma_with_the_engines_own_v_and_c() -> None:
    row = _row("static f16", 20, {n: float(n) for n in range(1, 10)}, c=0.05)  # v(n) = n: a verify of n rows costs n
    seconds, gamma = row.speculation(0.9)
    assert gamma == 1 and seconds == pytest.approx(0.02 * (0.05 + 2) / (1 + 0.9))
    flat = _row("static bf16", 20, 0.0, c=0.05)
    assert flat.speculation(0.9)[1] == engines.MAX_WIDTH - 1  # free verifies: the longest γ measured


def test_choice_survives_json(tmp_path) -> None:
    choice = decide([_row("eager f32", 40, 0.05), _row("static bf16", 20, 0.01)], 0.5)
    back = Choice.from_json(json.loads(json.dumps(choice.as_json())))
    assert back == choice


def test_quick_runs_and_tests_pin_the_engine_and_time_nothing(monkeypatch) -> None:
    monkeypatch.setenv("SPECDEC_QUICK", "1")
    monkeypatch.delenv("SPECDEC_ENGINE", raising=False)
    monkeypatch.setattr(engines, "measure", lambda *a, **k: pytest.fail("a pinned choice must not measure"))
    pair = Pair(tiny_llama(32, seed=0), tiny_llama(32, seed=1, num_layers=1), None, "toy", torch.device("cpu"))
    choice = engines.choose(pair)
    assert (choice.ar, choice.spec) == (engines.PINNED, engines.PINNED) and "pinned" in choice.why
    assert engines.ours(pair) is pair.engine("f32")
    monkeypatch.setenv("SPECDEC_ENGINE", "static bf16")
    assert engines.for_speculation(pair) is pair.engine("bf16")
    monkeypatch.setenv("SPECDEC_ENGINE", "turbo")
    with pytest.raises(ValueError, match="SPECDEC_ENGINE"):
        engines.choose(pair)


def test_every_candidate_is_measured_on_a_toy_pair_and_the_choice_is_cached(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))
    monkeypatch.setattr(machine, "may_cache", lambda: True)  # the caching path, as on a student's machine
    monkeypatch.delenv("SPECDEC_ENGINE", raising=False)
    pair = Pair(tiny_llama(64, hidden_size=64, seed=11, logit_scale=3.0), tiny_llama(64, seed=1, num_layers=1),
                None, "toy", torch.device("cpu"))
    text, prompt = torch.randint(0, 64, (1, 40), generator=torch.Generator().manual_seed(0)), torch.tensor([[2, 5, 9]])
    choice = engines.choose(pair, text_ids=text, prompt_ids=prompt, rounds=1, progress=False)
    assert [r.engine for r in choice.rows] == list(CANDIDATES)
    by = {r.engine: r for r in choice.rows}
    for name in ("eager f32", "prepacked f32", "static f32"):  # f32 engines: the reference's own argmax
        assert by[name].agreement == 1.0 and abs(by[name].ppl_change) < 1e-4
    assert all(r.v(1) == 1.0 and r.c > 0 for r in choice.rows) and choice.ar in CANDIDATES
    stored = list((tmp_path / "engines").glob("*.json"))
    assert len(stored) == 1 and json.loads(stored[0].read_text())["ar"] == choice.ar
    monkeypatch.setattr(engines, "measure", lambda *a, **k: pytest.fail("a cached choice must not measure again"))
    assert engines.choose(pair) == choice


def test_a_wrong_engine_name_says_which_exist() -> None:
    pair = Pair(tiny_llama(32, seed=0), tiny_llama(32, seed=1, num_layers=1), None, "toy", torch.device("cpu"))
    with pytest.raises(ValueError, match="static bf16"):
        engines.on_engine(pair, "static f8")


def test_the_bandwidth_is_one_figure_per_machine_and_read_only(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))
    monkeypatch.setattr(machine, "may_cache", lambda: True)
    machine.bandwidth.cache_clear()
    calls = []
    monkeypatch.setattr(machine, "stream_read", lambda **k: calls.append(k) or 3.0e10)
    assert machine.bandwidth() == 3.0e10 and machine.bandwidth() == 3.0e10
    machine.bandwidth.cache_clear()
    assert machine.bandwidth() == 3.0e10 and len(calls) == 1  # the second process reads the cached figure
    machine.bandwidth.cache_clear()
    assert machine.last_level_cache_bytes() > 0 and machine.key()["torch"] == torch.__version__


def test_the_stream_reads_a_buffer_larger_than_the_cache(monkeypatch) -> None:
    sizes = []
    real = torch.ones
    monkeypatch.setattr(torch, "ones", lambda n, **k: sizes.append(n) or real(8, **k))
    machine.stream_read(repeats=1)
    assert sizes[0] * 4 >= 4 * machine.last_level_cache_bytes()


def test_a_compiled_engine_is_a_candidate_only_once_make_compile_warmed_it(monkeypatch, tmp_path) -> None:
    from specdec_core import compiled
    from specdec_core.bench.compile import precisions_to_compile

    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))
    pair = Pair(tiny_llama(32, seed=0), tiny_llama(32, seed=1, num_layers=1), None, "toy", torch.device("cpu"))
    assert engines.candidates(pair) == CANDIDATES
    warm = {engines.warm_name(pair, "compiled bf16", "target")}
    monkeypatch.setattr(compiled, "is_warm", lambda name: name in warm)
    assert engines.candidates(pair) == CANDIDATES  # the draft is not warm yet
    warm.add(engines.warm_name(pair, "compiled bf16", "draft"))
    assert engines.candidates(pair) == (*CANDIDATES, "compiled bf16")
    on = engines.on_engine(pair, "compiled bf16")
    assert compiled.is_compiled(on.target) and compiled.is_compiled(on.draft) and on is pair.engine("bf16", compiled=True)
    assert not compiled.is_compiled(engines.on_engine(pair, "static bf16").target)
    assert precisions_to_compile(Choice("static f16", "static bf16", "")) == ["bf16", "f16"]
    assert precisions_to_compile(Choice("prepacked f32", "eager f32", "")) == (["bf16"] if fast.packs(torch.bfloat16) else ["f32"])
    assert precisions_to_compile(Choice("static int8-bf16", "static f16", "")) == ["f16"]  # int8 does not compile
