"""Checkers for lesson 10's exercise: speculation's gain at batch B from a table of measured costs, the γ to run
at each B (0 = off), and the crossover B, on plain dicts.

    table = {"t": {B: {n: s}}, "d": {B: s}, "step": {B: s}}    # seconds: a forward of B rows × n tokens, a
                                                                # batched draft step, batched AR's loop step
    check_batch_gain(batch_gain)       # batch_gain(table, B, gamma, alpha) -> τ·step(B) / (γ·d(B) + t(B, γ+1) + o(B))
    check_choose_gamma(choose_gamma)   # choose_gamma(table, B, alpha) -> the γ of the largest gain, 0 when none > 1
    check_crossover(crossover)         # crossover(table, alpha) -> the first B where choose_gamma is 0, else None

Each is compared with ``load_costs.LoadCosts`` (gain, best, crossover) on a hand-made table and on seeded random
ones (an answer typed in from the lesson's report fails them), the library blocked while the answer runs (an
answer that calls it scores nothing); a wrong answer that equals a common mistake gets that mistake's hint.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from ..load_costs import LoadCosts
from ..theory import expected_tokens
from .checks import Checks
from .grading import blocked

RANDOM_CASES = 25
LIBRARY = ("specdec_core.load_costs.LoadCosts.gain", "specdec_core.load_costs.LoadCosts.best",
           "specdec_core.load_costs.LoadCosts.crossover", "specdec_core.theory.expected_tokens",
           "specdec_core.theory.predicted_speedup", "specdec_core.theory.speedup")
# A made-up machine (seconds): reading the weights costs 0.1 s a forward, each token 0.01 s of compute beyond
# it; the roofline turns at 10 tokens. At B = 1 a γ = 2 verify is nearly free, at B = 16 it costs triple.
EXAMPLE = {"t": {1: {1: 0.100, 2: 0.101, 3: 0.102, 5: 0.105}, 4: {1: 0.104, 2: 0.110, 3: 0.125, 5: 0.205},
                 16: {1: 0.170, 2: 0.330, 3: 0.490, 5: 0.810}},
           "d": {1: 0.010, 4: 0.011, 16: 0.016}, "step": {1: 0.102, 4: 0.107, 16: 0.175}}


def costs_of(table: dict) -> LoadCosts:
    """The table as the library's LoadCosts (the roofline's inputs are not used here)."""
    return LoadCosts(t=table["t"], d=table["d"], bandwidth=1.0, weight_bytes=1, params=1, flops_per_s=1.0,
                     step_s=table["step"])


def table_from_report(report: dict) -> dict:
    """The exercise's table from a serving report (``results/serving-cpu.json``'s ``costs``; keys back to ints)."""
    costs = LoadCosts.from_json(report["costs"])
    if not costs.step_s:
        raise ValueError("the report's cost table has no AR step per B: run `make serving` again")
    return {"t": costs.t, "d": costs.d, "step": costs.step_s}


def random_table(gen: torch.Generator) -> dict:
    """A roofline-shaped table over a random set of B: a forward of B × n tokens costs max(memory, B·n·flop)
    plus a little per token; the draft grows slowly with B; the loop adds a random overhead."""
    batches = sorted({1, *(2 ** int(k) for k in torch.randint(1, 7, (3,), generator=gen))})
    memory, flop, per_token, draft = (float(x) for x in torch.rand(4, generator=gen) * torch.tensor([0.1, 0.01, 0.002, 0.02]))
    memory, draft = memory + 0.02, draft + 0.002
    widths = sorted({1, *(int(n) for n in torch.randint(2, 7, (2,), generator=gen))})
    t = {b: {n: max(memory, b * n * flop) + b * n * per_token for n in widths} for b in batches}
    over = float(torch.rand(1, generator=gen)) * 0.2 * memory
    return {"t": t, "d": {b: draft * (1 + 0.05 * b) for b in batches}, "step": {b: t[b][1] + over for b in batches}}


def reference_gain(table: dict, batch: int, gamma: int, alpha: float) -> float:
    return costs_of(table).gain(batch, gamma, alpha)


def _float(x) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return math.nan


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9)


def gain_hint(table: dict, batch: int, gamma: int, alpha: float, got: float) -> str:
    """The hint for a wrong gain: the mistake it equals, else the formula."""
    t, d, step = table["t"], table["d"][batch], table["step"][batch]
    tau = expected_tokens(alpha, gamma)
    loop = step - t[batch][1]
    if _close(got, tau * step / (gamma * d + t[1][gamma + 1] + loop)):
        return "that prices the verify at batch 1: at batch B it is ONE forward of B rows × (γ + 1) tokens, t(B, γ + 1)"
    if _close(got, tau * step / (gamma * d + t[batch][gamma + 1])):
        return "the loop's own cost o(B) = step(B) − t(B, 1) is paid by speculation's loop too: add it to the cost"
    if _close(got, (gamma + 1) * step / (gamma * d + t[batch][gamma + 1] + loop)):
        return "not every guess is accepted: τ = E(α, γ) = (1 − α^(γ+1)) / (1 − α), not γ + 1"
    if _close(got, tau * t[batch][1] / (gamma * d + t[batch][gamma + 1] + loop)):
        return "batched AR's step at B is step(B) (its loop included), not its forward t(B, 1)"
    return "τ · step(B) ÷ (γ · d(B) + t(B, γ + 1) + step(B) − t(B, 1)), τ = (1 − α^(γ+1)) / (1 − α)"


def check_batch_gain(fn: Callable) -> None:
    """Test ``fn(table, B, gamma, alpha) -> gain`` against ``LoadCosts.gain`` (the module docstring)."""

    def run(*args) -> float:
        with blocked(*LIBRARY):
            return _float(c.call(fn, *args))

    with Checks("batch_gain") as c:
        for batch, gamma, alpha, what in ((1, 2, 0.7, "B = 1, γ = 2: the verify nearly free, speculation gains"),
                                          (16, 2, 0.7, "B = 16, γ = 2: past the roofline's turn the verify costs")):
            want = reference_gain(EXAMPLE, batch, gamma, alpha)
            got = run(EXAMPLE, batch, gamma, alpha)
            c.expect(_close(got, want), f"{what} ({want:.3f}×)", gain_hint(EXAMPLE, batch, gamma, alpha, got))
        c.expect(_close(run(EXAMPLE, 4, 0, 0.7), 1.0), "γ = 0 is batched AR itself: 1.0",
                 "no guesses: return 1.0 (the step IS batched AR's step)")
        c.expect(_close(run(EXAMPLE, 4, 4, 1.0), reference_gain(EXAMPLE, 4, 4, 1.0)), "α = 1: every guess accepted",
                 "at α = 1, E(α, γ) = γ + 1 (the formula's 0 / 0 has that limit)")
        gen, ok = torch.Generator().manual_seed(1010), True
        for _ in range(RANDOM_CASES):
            table = random_table(gen)
            batch = list(table["t"])[int(torch.randint(0, len(table["t"]), (1,), generator=gen))]
            gammas = [n - 1 for n in table["t"][batch] if n > 1]
            gamma = gammas[int(torch.randint(0, len(gammas), (1,), generator=gen))]
            alpha = float(torch.rand(1, generator=gen))
            ok &= _close(run(table, batch, gamma, alpha), reference_gain(table, batch, gamma, alpha))
        c.expect(ok, f"matches the library on {RANDOM_CASES} random tables", "read every cost from the table at B")


def check_choose_gamma(fn: Callable) -> None:
    """Test ``fn(table, B, alpha) -> γ`` against ``LoadCosts.best`` (γ of the largest gain, 0 when none > 1)."""

    def run(*args) -> int | None:
        with blocked(*LIBRARY):
            out = c.call(fn, *args)
        return int(out) if isinstance(out, int | float) and float(out).is_integer() else None

    def hint(table: dict, batch: int, alpha: float, got) -> str:
        costs = costs_of(table)
        gains = {g: costs.gain(batch, g, alpha) for g in costs.gammas()}
        if got == max(gains, key=gains.get):
            return "even the best γ loses to batched AR here: return 0 (off) when no gain is above 1"
        if got == max(gains):
            return "the longest γ is not the best: compare each γ's gain, priced at this B"
        return "try every γ whose verify width γ + 1 the table measured at B, keep the largest gain, 0 if none > 1"

    with Checks("choose_gamma") as c:
        costs = costs_of(EXAMPLE)
        for batch, alpha, what in ((1, 0.7, "B = 1, α = 0.7"), (4, 0.7, "B = 4, α = 0.7"), (16, 0.7, "B = 16, α = 0.7"),
                                   (1, 0.05, "B = 1, α = 0.05: the draft is nearly always wrong")):
            want = costs.best(batch, alpha)[0]
            got = run(EXAMPLE, batch, alpha)
            c.expect(got == want, f"{what}: {'off (0)' if want == 0 else f'γ = {want}'}", hint(EXAMPLE, batch, alpha, got))
        gen, ok = torch.Generator().manual_seed(1011), True
        for _ in range(RANDOM_CASES):
            table = random_table(gen)
            alpha = float(torch.rand(1, generator=gen))
            ok &= all(run(table, b, alpha) == costs_of(table).best(b, alpha)[0] for b in table["t"])
        c.expect(ok, f"matches the library at every B of {RANDOM_CASES} random tables",
                 "the γ are those whose t(B, γ + 1) the table holds; gains from batch_gain's formula")


def check_crossover(fn: Callable) -> None:
    """Test ``fn(table, alpha) -> B or None`` against ``LoadCosts.crossover``."""

    def run(*args):
        with blocked(*LIBRARY):
            return c.call(fn, *args)

    with Checks("crossover") as c:
        want = costs_of(EXAMPLE).crossover(0.7)
        got = run(EXAMPLE, 0.7)
        c.expect(got == want, f"the example's crossover at α = 0.7: B = {want}",
                 "the first measured B (smallest first) where choose_gamma returns 0")
        small = {key: {b: v for b, v in part.items() if b < 16} for key, part in EXAMPLE.items()}
        got = run(small, 0.7)
        c.expect(got is None and costs_of(small).crossover(0.7) is None,
                 "the example without B = 16: speculation pays at every B, no crossover (None)",
                 "return None when speculation pays at every measured B")
        gen, ok = torch.Generator().manual_seed(1012), True
        for _ in range(RANDOM_CASES):
            table, alpha = random_table(gen), float(torch.rand(1, generator=gen))
            ok &= run(table, alpha) == costs_of(table).crossover(alpha)
        c.expect(ok, f"matches the library on {RANDOM_CASES} random tables",
                 "the FIRST B, walking the table's B in increasing order, where choose_gamma is 0 (None if none)")


__all__ = ["EXAMPLE", "check_batch_gain", "check_choose_gamma", "check_crossover", "random_table", "table_from_report"]
