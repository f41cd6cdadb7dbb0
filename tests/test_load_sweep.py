"""The load sweep of make serving (bench/load_sweep.py) on toy models with a priced clock: every (rate, mode) row,
the rates as fractions of the capacity, each row what the scheduler's own run reports, the same arrivals for every
mode of a rate, and the batch sweep's results turned into its settings. Nothing here asserts a measured time."""

from __future__ import annotations

import pytest
import torch

from specdec_core.bench import load_sweep
from specdec_core.lm import on_static_engine
from specdec_core.load_costs import LoadCosts
from specdec_core.scheduler import run_load
from specdec_core.toy import tiny_llama

PROMPTS = [torch.tensor([[2, 5, 3, 7, 2, 5]]), torch.tensor([[4, 9]]), torch.tensor([[6, 6, 8]])]
COSTS = LoadCosts(t={b: {1: 0.1, 2: 0.1 + 0.01 * b, 3: 0.1 + 0.02 * b} for b in (1, 2, 4)}, d={1: 0.01, 2: 0.01, 4: 0.01},
                  bandwidth=1.0, weight_bytes=1, params=1, flops_per_s=1.0)


def priced(shape) -> float:
    return 0.1 + 0.01 * shape.rows * shape.width  # a step's seconds from its shape: repeatable


@pytest.fixture(scope="module")
def toys():
    return (on_static_engine(tiny_llama(vocab_size=32, seed=0)),
            on_static_engine(tiny_llama(vocab_size=32, hidden_size=16, seed=1)))


@pytest.fixture(scope="module")
def load(toys):
    return load_sweep.sweep(*toys, PROMPTS, COSTS, 0.6, capacity=40.0, slots=2, requests=4, max_new_tokens=4,
                            fractions=(0.5, 2.0), step_time=priced, progress=False)


def test_every_rate_runs_every_mode_at_its_fraction_of_the_capacity(load):
    assert [(r["rate"], r["mode"]) for r in load["rows"]] == [(rate, m) for rate in (5.0, 20.0) for m in ("off", "on", "adaptive")]
    assert load["slots"] == 2 and load["capacity"] == 40.0


def test_each_row_is_the_schedulers_own_run(toys, load):
    """The 'on' row at the high rate, rerun alone on the same seed, gives the same numbers (a row from another
    rate or mode would not: caught below)."""
    queue = [PROMPTS[i % 3] for i in range(4)]
    run = run_load(toys, queue, 20.0, 2, "on", 2, 0, max_new_tokens=4, step_time=priced)
    row = next(r for r in load["rows"] if r["rate"] == 20.0 and r["mode"] == "on")
    same = lambda r: (r["median_ttft"], r["median_tpot"], r["throughput"]) == (run.median_ttft, run.median_tpot, run.throughput)  # noqa: E731
    assert same(row)
    low = next(r for r in load["rows"] if r["rate"] == 5.0 and r["mode"] == "on")
    assert not same(low)  # the check tells the rates apart
    assert load["rows"][0]["median_ttft"] <= next(r for r in load["rows"] if r["rate"] == 20.0 and r["mode"] == "off")["median_ttft"]


def test_the_batch_sweeps_results_set_the_load_sweep(toys, monkeypatch):
    seen = {}
    monkeypatch.setattr(load_sweep, "sweep", lambda *a, **kw: seen.update(args=a, kw=kw) or {})
    results = {"ar": [{"batch": b, "tokens_per_s": {"median": 10.0 * b}} for b in (1, 2, 4)],
               "costs": COSTS.as_json(), "settings": {"alpha0": 0.4}}
    load_sweep.from_batch_sweep(results, *toys, PROMPTS, quick=True, progress=False)
    assert seen["kw"]["slots"] == 2 and seen["args"][5] == 20.0 and seen["args"][4] == 0.4  # capacity at B = slots
    load_sweep.from_batch_sweep(results, *toys, PROMPTS, progress=False)
    assert seen["kw"]["slots"] == 4 and seen["args"][5] == 40.0  # 8 slots asked, the table stops at 4


def test_bad_input_says_what_to_do(toys):
    with pytest.raises(ValueError, match="cost table stops"):
        load_sweep.sweep(*toys, PROMPTS, COSTS, 0.6, 40.0, slots=8, progress=False)
    with pytest.raises(ValueError, match="capacity"):
        load_sweep.rates(0.0, 4)
