"""The cost model under load (load_costs.py) on hand-made cost tables: speculation's gain at batch B, the crossover,
the roofline's turn and the per-step γ policy. Each check is also run on a broken variant it must catch. Nothing
here is timed."""

from __future__ import annotations

import random

import pytest

from specdec_core.load_costs import AdaptiveGamma, LoadCosts, batch_tau
from specdec_core.theory import expected_tokens

MS = 1e-3
# B = 1 is memory-bound (a verify of 4 guesses costs 1.2 steps); at B = 32 every extra token costs its share.
T = {1: {1: 10 * MS, 2: 10.5 * MS, 3: 11 * MS, 5: 12 * MS},
     8: {1: 12 * MS, 2: 14 * MS, 3: 16 * MS, 5: 20 * MS},
     32: {1: 20 * MS, 2: 38 * MS, 3: 56 * MS, 5: 92 * MS}}
D = {1: 1 * MS, 8: 1.5 * MS, 32: 3 * MS}


def table(**kw) -> LoadCosts:
    base = {"bandwidth": 50e9, "weight_bytes": 500_000_000, "params": 125_000_000, "flops_per_s": 200e9,
            "t": {b: dict(r) for b, r in T.items()}, "d": dict(D)}
    return LoadCosts(**(base | kw))


def assert_gain_formula(costs: LoadCosts) -> None:
    """gain(B, γ) = E(α, γ) · step(B) / (γ d(B) + t(B, γ + 1) + o(B) + o_v), by hand."""
    assert costs.gain(1, 2, 0.8) == pytest.approx((1 + 0.8 + 0.64) * 10 / (2 * 1 + 11))
    assert costs.gain(32, 1, 0.8) == pytest.approx(1.8 * 20 / (1 * 3 + 38))
    assert costs.gain(8, 4, 0.5) == pytest.approx(expected_tokens(0.5, 4) * 12 / (4 * 1.5 + 20))
    assert costs.gain(32, 0, 0.8) == 1.0  # γ = 0 is AR itself


def test_the_gain_is_the_formula_by_hand():
    assert_gain_formula(table())


def test_the_gain_check_catches_a_verify_priced_at_batch_one(monkeypatch):
    """The broken variant: v(n) of batch 1 at every B (the cost model without load) — speculation looks free."""
    right = LoadCosts.forward
    monkeypatch.setattr(LoadCosts, "forward", lambda self, b, n: right(self, 1, n) / right(self, 1, 1) * right(self, b, 1))
    with pytest.raises(AssertionError):
        assert_gain_formula(table())


def test_the_loop_overhead_counts_for_both_loops():
    """step(B) = 12 ms where t(B, 1) = 10 ms: o(B) = 2 ms a step, paid by AR and speculation; o_v by speculation."""
    costs = table(step_s={1: 12 * MS, 8: 12 * MS, 32: 25 * MS}, verify_overhead_s=0.5 * MS)
    assert costs.gain(1, 2, 0.8) == pytest.approx(2.44 * 12 / (2 * 1 + 11 + 2 + 0.5))
    assert costs.step(8) == pytest.approx(12 * MS)  # never below the forward (t(8, 1) = 12 ms)
    assert costs.gain(1, 2, 0.8, tau=2.0) == pytest.approx(2.0 * 12 / 15.5)  # a run's own τ


def test_between_measured_batches_linear_outside_a_clear_error():
    costs = table()
    assert costs.forward(4, 2) == pytest.approx(10.5 * MS + (14 - 10.5) * MS * 3 / 7)
    assert costs.v(32, 5) == pytest.approx(92 / 20)
    with pytest.raises(ValueError, match="measure the costs up to that batch"):
        costs.forward(64, 1)
    with pytest.raises(ValueError, match="measure n = 4"):
        costs.forward(8, 4)


def assert_crossover(crossover) -> None:
    # α = 0.8: at B = 8 γ = 1 still gains 1.8 · 12 / 15.5 = 1.39; at B = 32 the best γ (1) gains 0.88
    assert crossover(table(), 0.8) == 32
    assert crossover(table(), 0.0) == 1  # nothing accepted: off at every B
    assert crossover(table(), 1.0) is None or crossover(table(), 1.0) > 8


def test_the_crossover():
    assert_crossover(LoadCosts.crossover)
    costs = table()
    assert costs.best(1, 0.8)[0] >= 1 and costs.best(32, 0.8) == (0, 1.0)


def test_the_crossover_check_catches_a_batch_one_cost_model(monkeypatch):
    right = LoadCosts.best
    monkeypatch.setattr(LoadCosts, "best", lambda self, b, alpha, max_gamma=None: right(self, 1, alpha, max_gamma))
    with pytest.raises(AssertionError):
        assert_crossover(LoadCosts.crossover)


def assert_roofline_turn() -> None:
    """Reading 500 MB at 50 GB/s takes 10 ms; a token's 2 × 125 M FLOPs at 200 GFLOP/s 1.25 ms: B* = 8."""
    assert table().roofline_turn() == pytest.approx(8.0)
    assert table(bandwidth=100e9).roofline_turn() == pytest.approx(4.0)  # faster memory: compute binds sooner


def test_the_roofline_turn():
    assert_roofline_turn()
    with pytest.raises(ValueError, match="above 0"):
        table(flops_per_s=0.0).roofline_turn()


def test_the_roofline_check_catches_a_token_priced_at_one_flop_a_weight(monkeypatch):
    monkeypatch.setattr(LoadCosts, "flops_per_token", property(lambda self: float(self.params)))
    with pytest.raises(AssertionError):
        assert_roofline_turn()


def test_the_policy_is_on_at_batch_one_and_off_under_load():
    policy = AdaptiveGamma(table(), alpha0=0.8)
    assert policy(1) >= 1 and policy(8) >= 1
    assert policy(32) == 0
    assert policy.chosen == [(1, policy.chosen[0][1]), (8, policy.chosen[1][1]), (32, 0)]
    policy.observe(drafted=200, accepted=0, examined=200)  # the draft never agrees: off even at B = 1
    assert policy.alpha < 0.05 and policy(1) == 0
    policy.observe(0, 0)  # an AR step teaches nothing
    assert policy.alpha < 0.05


def test_the_policy_check_catches_a_policy_blind_to_the_batch(monkeypatch):
    right = LoadCosts.best
    monkeypatch.setattr(LoadCosts, "best", lambda self, b, alpha, max_gamma=None: right(self, 1, alpha, max_gamma))
    with pytest.raises(AssertionError):
        test_the_policy_is_on_at_batch_one_and_off_under_load()


def run_policy(policy: AdaptiveGamma, alpha: float, batch: int, steps: int, seed: int = 0) -> list[int]:
    """The γ a policy picks over ``steps`` steps of ``batch`` rows whose guesses are accepted with probability α."""
    rng, picked = random.Random(seed), []
    for _ in range(steps):
        g = policy(batch)
        picked.append(g)
        accepted = examined = 0
        for _ in range(batch):
            n = 0
            while n < g and rng.random() < alpha:
                n += 1
            accepted, examined = accepted + n, examined + min(n + 1, g)
        policy.observe(batch * g, accepted, examined)
    return picked


def test_a_policy_off_by_a_pessimistic_prior_probes_and_turns_on():
    """α0 = 0.05 puts it off at B = 1; the draft really agrees 80 % of the time: probes find out and it turns on.
    Under a full batch (B = 32, far from break-even) it never probes."""
    picked = run_policy(AdaptiveGamma(table(), alpha0=0.05), alpha=0.8, batch=1, steps=60)
    assert picked[0] == 0 and sum(g > 0 for g in picked[-20:]) == 20
    assert set(run_policy(AdaptiveGamma(table(), alpha0=0.05), alpha=0.8, batch=32, steps=60)) == {0}


def test_the_probe_check_catches_a_policy_that_never_probes():
    with pytest.raises(AssertionError):
        picked = run_policy(AdaptiveGamma(table(), alpha0=0.05, probe_every=10**9), alpha=0.8, batch=1, steps=60)
        assert sum(g > 0 for g in picked[-20:]) == 20


def run_timed(policy: AdaptiveGamma, alpha: float, on_s: float, off_s: float = 10 * MS, steps: int = 60,
              seed: int = 0) -> list[int]:
    """The γ a policy picks at B = 1 over ``steps`` steps, each told its time: ``off_s`` for AR, ``on_s`` per γ ≥ 1
    step (the loop's clock, which the policy's table may misprice)."""
    rng, picked = random.Random(seed), []
    for _ in range(steps):
        g = policy(1)
        picked.append(g)
        n = 0
        while n < g and rng.random() < alpha:
            n += 1
        policy.observe(g, n, min(n + 1, g), seconds=on_s if g else off_s)
    return picked


def test_a_close_call_is_decided_by_the_loops_clock():
    """A table that prices γ = 1 at B = 1 at 13 ms + a 1 ms draft predicts 0.96× AR at α = 0.35: a close call, off.
    When the loop's clock says such a step takes 11 ms (1.23× AR's tokens per second) the policy turns on; at 15 ms
    (0.9×) it stays off — after trying each a few steps."""
    costs = table(t={1: {1: 10 * MS, 2: 13 * MS}}, d={1: 1 * MS})
    assert 0.9 < costs.gain(1, 1, 0.35) < 1 and costs.best(1, 0.35)[0] == 0
    turned_on = run_timed(AdaptiveGamma(costs, alpha0=0.35), alpha=0.35, on_s=11 * MS)
    assert all(g == 1 for g in turned_on[-40:])
    stays_off = run_timed(AdaptiveGamma(costs, alpha0=0.35), alpha=0.35, on_s=15 * MS)
    assert sum(g > 0 for g in stays_off[-40:]) <= 40 // 8 + 1  # off, but for a probe every 8th step


def test_the_clock_check_catches_a_policy_that_trusts_only_its_table(monkeypatch):
    monkeypatch.setattr(AdaptiveGamma, "clocked_choice", lambda self, batch, on: self.costs.best(batch, self.alpha)[0])
    with pytest.raises(AssertionError):
        test_a_close_call_is_decided_by_the_loops_clock()


def simulated_steps(alpha: float, gamma: int, rows: int, steps: int, seed: int = 0) -> list[tuple[int, int]]:
    """(drafted, accepted) summed over ``rows`` per step, each guess accepted with probability α until one fails."""
    rng, out = random.Random(seed), []
    for _ in range(steps):
        accepted = 0
        for _ in range(rows):
            n = 0
            while n < gamma and rng.random() < alpha:
                n += 1
            accepted += n
        out.append((rows * gamma, accepted))
    return out


def test_alpha_from_summed_counts_finds_the_true_alpha():
    """observe(drafted, accepted), summed over rows, without the examined count: the estimate still converges to
    α (each row's rejection expected at the running α); the naive accepted ÷ drafted does not (the check catches it)."""
    policy = AdaptiveGamma(table(), alpha0=0.5)
    policy(1)  # γ chosen: 4 at α0 = 0.5 on this table
    gamma = policy.last
    steps = simulated_steps(0.6, gamma, rows=8, steps=300)
    for drafted, accepted in steps:
        policy.observe(drafted, accepted)
    assert policy.alpha == pytest.approx(0.6, abs=0.04)
    naive = sum(a for _, a in steps) / sum(d for d, _ in steps)
    assert abs(naive - 0.6) > 0.04  # the broken estimator misses by more than the test allows


def simulated_batch_tau(alphas: list[float], gamma: int, tokens: int = 400, seed: int = 0) -> float:
    """Tokens per row per step of a simulated batched loop: each step every unfinished row accepts each guess with
    its own α until the first rejection and makes accepted + 1 tokens; the batch steps until every row has ``tokens``."""
    rng, made, steps = random.Random(seed), [0] * len(alphas), 0
    while min(made) < tokens:
        steps += 1
        for b, a in enumerate(alphas):
            accepted = next((i for i in range(gamma) if rng.random() >= a), gamma)
            made[b] += accepted + 1
    return tokens / steps


@pytest.mark.parametrize("alphas", [[0.8, 0.2], [0.3, 0.6, 0.9, 0.5]])
def test_a_batch_advances_at_its_slowest_rows_pace(alphas):
    simulated = simulated_batch_tau(alphas, gamma=2)
    assert batch_tau(alphas, 2) == pytest.approx(simulated, rel=0.05)
    mean = sum(alphas) / len(alphas)  # the broken variant: the rows' mean α, as if every row were average
    assert abs(expected_tokens(mean, 2) / simulated - 1) > 0.2


def test_bad_input_says_what_to_do():
    with pytest.raises(ValueError, match="one α per row"):
        batch_tau([], 2)
    with pytest.raises(ValueError, match="n = 1"):
        LoadCosts(t={1: {2: MS}}, d={1: MS}, bandwidth=1.0, weight_bytes=1, params=1, flops_per_s=1.0)
    with pytest.raises(ValueError, match="d measured at"):
        LoadCosts(t={1: {1: MS}, 2: {1: MS}}, d={1: MS}, bandwidth=1.0, weight_bytes=1, params=1, flops_per_s=1.0)
    with pytest.raises(ValueError, match="batch must be >= 1"):
        AdaptiveGamma(table())(0)
    with pytest.raises(ValueError, match="accepted <= drafted"):
        AdaptiveGamma(table()).observe(2, 3)
    with pytest.raises(ValueError, match="alpha0"):
        AdaptiveGamma(table(), alpha0=1.5)


def test_json_round_trip():
    costs = table(step_s={1: 11 * MS, 8: 13 * MS, 32: 21 * MS}, context=80, engine="static f32")
    assert LoadCosts.from_json(costs.as_json()) == costs
