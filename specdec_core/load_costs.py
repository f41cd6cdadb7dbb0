"""The cost model under load: what one step costs when B sequences share it, and whether speculation still pays.

At batch 1 a decode step reads every weight to emit one token, so verifying γ guesses in the same forward is nearly
free. A server runs B rows per step: the forward already carries B tokens, a verify carries B · (γ + 1), and once
that many tokens make the step compute-bound every guess costs real time. Measured here (``bench/batch_forwards``):

    t(B, n)     seconds of ONE batched forward of B rows × n new tokens (BatchDecoder, caches of a real context)
    d(B)        seconds of one batched draft step (B rows × 1 token on the draft model)
    step(B)     the batched AR loop's seconds per step (its forward t(B, 1) plus its own bookkeeping o(B))

and speculation's gain over batched AR at batch B (``theory.predicted_speedup``, the course's one formula, with
every term in units of the AR step at that B):

    gain(B, γ) = τ · step(B) / (γ · d(B) + t(B, γ + 1) + o(B) + o_v)       τ = E(α, γ) unless a run measured it

A batch runs until its slowest row has its tokens (a finished row rides along), so a batch whose rows accept at
different rates advances at the slowest row's pace: τ_B = min over rows of E(α_b, γ) (:func:`batch_tau`).

o(B) = step(B) − t(B, 1) is the loop's own cost, paid by AR and speculation alike; o_v the verify loop's extra
(``costmodel.loop_overhead``). The **crossover** is the first B where the best γ's gain falls below 1. The
**roofline's turn** is the B where a step stops being bound by reading weights: B tokens × 2 · params FLOPs at the
measured compute rate take as long as reading the weight bytes at the machine's bandwidth,

    B* = (weight bytes ÷ bandwidth) ÷ (2 · params ÷ FLOP/s).

:class:`AdaptiveGamma` chooses γ per step from the live batch size and the running α (0 = off: a plain AR step),
as SmartSpec (Liu et al., 2024) and TurboSpec choose the speculation length from the load; where the table's
answer is a close call, the loop's own clock decides (TurboSpec's feedback).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from .theory import alpha_for_theory, expected_tokens, predicted_speedup


def batch_tau(alphas: Sequence[float], gamma: int) -> float:
    """Tokens per row per step of a batch whose rows accept guesses at rates ``alphas`` [B]: its slowest row's
    E(α_b, γ) — the loop steps until that row is done, every row paying each step (module docstring)."""
    if not alphas or gamma < 1:
        raise ValueError(f"batch_tau needs one α per row and γ >= 1, got {len(alphas)} rows and γ = {gamma}")
    return min(expected_tokens(alpha_for_theory(a), gamma) for a in alphas)


@dataclass
class LoadCosts:
    """Measured costs of one target (and its draft) at several batch sizes, on one engine (seconds).

    t: B → n → one forward of B rows × n new tokens; d: B → one draft step of B rows; step_s: B → the batched AR
    loop's step (empty: t(B, 1), no loop overhead); verify_overhead_s: o_v; the roofline's inputs: ``bandwidth``
    (bytes/s), ``weight_bytes``, ``params`` and ``flops_per_s`` (a large product's measured rate)."""

    t: dict[int, dict[int, float]]
    d: dict[int, float]
    bandwidth: float
    weight_bytes: int
    params: int
    flops_per_s: float
    step_s: dict[int, float] = field(default_factory=dict)
    verify_overhead_s: float = 0.0
    context: int = 0  # tokens in each row's cache under the timed forwards
    engine: str = ""

    def __post_init__(self) -> None:
        if not self.t or any(not row for row in self.t.values()):
            raise ValueError("LoadCosts needs t(B, n) for at least one B, each with n = 1 (measure them: "
                             "bench.batch_forwards.measure)")
        missing = [b for b, row in self.t.items() if 1 not in row]
        if missing or set(self.d) != set(self.t):
            raise ValueError(f"every measured B needs t(B, 1) and d(B) (measure n = 1 and the draft at each B): "
                             f"t(B, 1) missing at {missing}, d measured at {sorted(self.d)}, t at {sorted(self.t)}")

    @property
    def batches(self) -> list[int]:
        return sorted(self.t)

    @property
    def widths(self) -> list[int]:
        """The n measured at every B (the n a prediction may use)."""
        return sorted(set.intersection(*(set(row) for row in self.t.values())))

    def _at(self, table: dict[int, float], batch: float, what: str) -> float:
        """table[B] where measured, linear between the nearest measured B; outside them: a clear error."""
        bs = sorted(table)
        if not bs[0] <= batch <= bs[-1]:
            raise ValueError(f"{what} at B = {batch}: measured for B in {bs[0]}..{bs[-1]} only — measure the costs "
                             f"up to that batch (bench.batch_forwards.measure(..., batches=...))")
        return float(np.interp(batch, bs, [table[b] for b in bs]))

    def forward(self, batch: float, n: int) -> float:
        """t(B, n) in seconds (n measured at every B; B between measured ones: linear)."""
        if n not in self.widths:
            raise ValueError(f"t(B, {n}): forwards of n in {self.widths} were measured — measure n = {n} "
                             "(bench.batch_forwards.measure(..., widths=...))")
        return self._at({b: row[n] for b, row in self.t.items()}, batch, f"t(B, {n})")

    def draft(self, batch: float) -> float:
        return self._at(self.d, batch, "d(B)")

    def step(self, batch: float) -> float:
        """The AR loop's step at B: measured where ``step_s`` has it (never below the forward), else t(B, 1)."""
        t1 = self.forward(batch, 1)
        return max(self._at(self.step_s, batch, "step(B)"), t1) if self.step_s else t1

    def v(self, batch: float, n: int) -> float:
        """v_B(n) = t(B, n) ÷ t(B, 1): what n tokens a row cost beside one, at batch B."""
        return self.forward(batch, n) / self.forward(batch, 1)

    def gain(self, batch: float, gamma: int, alpha: float, tau: float | None = None) -> float:
        """Speculation's predicted gain over batched AR at B (module docstring): γ = 0 is AR itself (1.0).
        ``tau``: tokens per row per step measured in a run (default E(α, γ))."""
        if gamma == 0:
            return 1.0
        step = self.step(batch)
        loop = step - self.forward(batch, 1)  # o(B): the loop's own bookkeeping, paid by both loops
        tau = expected_tokens(alpha_for_theory(alpha), gamma) if tau is None else tau
        return predicted_speedup(tau, gamma * self.draft(batch) / step, self.forward(batch, gamma + 1) / step,
                                 (loop + self.verify_overhead_s) / step)

    def gammas(self) -> list[int]:
        """The γ ≥ 1 whose verify width γ + 1 was measured at every B."""
        return [n - 1 for n in self.widths if n > 1]

    def best(self, batch: float, alpha: float, max_gamma: int | None = None) -> tuple[int, float]:
        """(γ, gain) of the best choice at B: the γ with the largest gain, or (0, 1.0) — off — when none beats AR."""
        options = [g for g in self.gammas() if max_gamma is None or g <= max_gamma]
        best = max(((g, self.gain(batch, g, alpha)) for g in options), key=lambda x: x[1], default=(0, 1.0))
        return best if best[1] > 1.0 else (0, 1.0)

    def crossover(self, alpha: float) -> int | None:
        """The first measured B where even the best γ's gain is below 1 (speculation loses from there on);
        None when it pays at every measured B."""
        return next((b for b in self.batches if self.best(b, alpha)[0] == 0), None)

    @property
    def flops_per_token(self) -> float:
        return 2.0 * self.params  # a multiply and an add per weight

    def roofline_turn(self) -> float:
        """B*: tokens per forward at which computing them takes as long as reading the weights (module docstring).
        Below it a step is bound by memory (more rows nearly free), above by compute (each row costs its share)."""
        if min(self.bandwidth, self.flops_per_s, self.flops_per_token) <= 0:
            raise ValueError("the roofline needs a bandwidth, a compute rate and a parameter count above 0")
        memory_s = self.weight_bytes / self.bandwidth
        return memory_s / (self.flops_per_token / self.flops_per_s)

    def as_json(self) -> dict:
        out = asdict(self)
        out["t"] = {str(b): {str(n): s for n, s in row.items()} for b, row in self.t.items()}
        out["d"] = {str(b): s for b, s in self.d.items()}
        out["step_s"] = {str(b): s for b, s in self.step_s.items()}
        return out

    @classmethod
    def from_json(cls, data: dict) -> LoadCosts:
        data = dict(data)
        data["t"] = {int(b): {int(n): s for n, s in row.items()} for b, row in data["t"].items()}
        data["d"] = {int(b): s for b, s in data["d"].items()}
        data["step_s"] = {int(b): s for b, s in data.get("step_s", {}).items()}
        return cls(**data)


class AdaptiveGamma:
    """γ for the next step from the live batch size and the α measured so far (SmartSpec / TurboSpec style):

        policy = AdaptiveGamma(costs, alpha0=0.5)
        gamma = policy(batch)                        # 0: off, the step is a plain AR step
        policy.observe(drafted, accepted, seconds=s) # after the step: counts summed over the rows, its time

    The choice is :meth:`LoadCosts.best` at the running α: the γ with the largest predicted gain at B, 0 when none
    beats AR. α is accepted ÷ examined guesses with a prior worth ``prior`` guesses at ``alpha0``.

    A close call — "on" (that γ, or one guess) predicted within ``margin`` of AR — is decided by the loop's own
    clock (TurboSpec closes the loop the same way): a table measured apart from the run can be a few percent off,
    which is enough to choose wrong there. Each of the two is tried for ``explore`` timed steps at that B; from then
    on, close call or not, the one with more tokens per second wins: E(α, γ) ÷ its median measured step (1 ÷ the
    step for AR; the median, as the first step after a switch pays the draft's catch-up on the tokens it missed). A step with γ = 0
    drafts nothing, so while speculation is off α would never move again — a pessimistic prior would keep it off
    for good; so at a close call every ``probe_every``-th off step drafts one guess to measure α again. Far from
    break-even (a full batch) neither happens. Choosing γ from the past never changes a row's law: each step's
    accept rule is exact for whatever γ it was given."""

    def __init__(self, costs: LoadCosts, alpha0: float = 0.5, prior: int = 8, max_gamma: int | None = None,
                 probe_every: int = 8, margin: float = 0.1, explore: int = 3) -> None:
        if not 0.0 <= alpha0 <= 1.0 or prior < 1 or probe_every < 1 or margin < 0 or explore < 0:
            raise ValueError(f"alpha0 must be in [0, 1], prior >= 1 (guesses the prior is worth), probe_every >= 1, "
                             f"margin >= 0 and explore >= 0, got {alpha0}, {prior}, {probe_every}, {margin}, {explore}")
        self.costs, self.max_gamma, self.probe_every, self.margin = costs, max_gamma, probe_every, margin
        self.explore = explore
        self.examined, self.accepted = float(prior), alpha0 * prior
        self.last, self.off, self.batch = 0, 0, 0  # the last γ and B; off steps in a row
        self.timed: dict[tuple[int, int], list[float]] = {}  # (B, γ) → the seconds of each step the loop timed
        self.chosen: list[tuple[int, int]] = []  # (B, γ) of every step asked

    @property
    def alpha(self) -> float:
        return self.accepted / self.examined

    def __call__(self, batch: int) -> int:
        if batch < 1:
            raise ValueError(f"batch must be >= 1 (the rows this step runs), got {batch}")
        self.last = self.costs.best(batch, self.alpha, self.max_gamma)[0]
        on = self.last or 1
        close = abs(self.costs.gain(batch, on, self.alpha) - 1) <= self.margin
        tried = min(len(self.timed.get((batch, g), [])) for g in (0, on))
        if self.timed and (close or tried >= self.explore):  # the loop times its steps: its clock decides
            self.last = self.clocked_choice(batch, on)
        self.off = self.off + 1 if self.last == 0 else 0
        if self.off >= self.probe_every and close:
            self.last, self.off = 1, 0  # a probe: one guess a row, to see whether α has moved
        self.batch = batch
        self.chosen.append((batch, self.last))
        return self.last

    def clocked_choice(self, batch: int, on: int) -> int:
        """Off (0) or ``on`` at B: the one tried fewer than ``explore`` timed steps at B, else the one with more tokens
        per second measured (E(α, γ) tokens a row per step ÷ the median step)."""
        steps = {g: self.timed.get((batch, g), []) for g in (0, on)}
        untried = [g for g in (0, on) if len(steps[g]) < self.explore]
        if untried:
            return untried[0]
        rate = {g: (expected_tokens(alpha_for_theory(self.alpha), g) if g else 1.0) / float(np.median(secs))
                for g, secs in steps.items()}
        return max(rate, key=rate.get)

    def observe(self, drafted: int, accepted: int, examined: int | None = None, seconds: float | None = None) -> None:
        """After a step: ``drafted`` and ``accepted`` guesses summed over its rows; ``seconds`` the step's time on
        the loop's clock, when the loop times it; ``examined`` the guesses the accept test looked at (a row keeping
        n of k looked at min(n + 1, k): SpecStats' α), when the caller has it. Without it, examined = accepted + the rows' expected rejections: rows = drafted ÷ γ (this policy's
        last γ), each stopping at a rejection with probability 1 − α^γ (at the current α: the fixed point is
        the true α)."""
        if drafted < 0 or not 0 <= accepted <= drafted:
            raise ValueError(f"observe needs 0 <= accepted <= drafted, got drafted={drafted}, accepted={accepted}")
        if seconds is not None:
            self.timed.setdefault((self.batch, self.last), []).append(seconds)
        if drafted == 0:
            return  # an AR step: nothing learned about α
        if examined is None:
            rows = math.ceil(drafted / max(self.last, 1))
            examined = min(drafted, accepted + rows * (1.0 - self.alpha ** max(self.last, 1)))
        self.examined += examined
        self.accepted += accepted
