"""The exact output law of a speculative loop whose accept/reject step follows a :class:`Rule`: the
right rule (min(1, p/q), else max(0, p − q) renormalised, a bonus from p after every guess kept) or
one of the classic errors of capstone 1's catalogue (:mod:`.sampled_mutants`).

    tables = Tables.of(target, draft, prompt=(2, 0, 3), depth=3, warp=Warp(0.7, 4, 0.9))
    law = output_law(tables, Rule(), tokens=3, gamma=2)         # {(t1, t2, t3): probability}
    total_variation(law, output_law(tables, Rule(residual="p"), 3, 2))       # how far one error moves the law

Everything is enumerated, nothing sampled: every draft (x1 … xk drawn one after another from the
draft's warped law, as ``ModelDrafter`` draws them), every number of accepted guesses (its probability
from the accept rule and the way the uniforms are drawn), the token drawn after them (residual or
bonus), and, while fewer than ``tokens`` tokens came out, the loop's next step from the longer context
(asking ``min(gamma, tokens − emitted)`` guesses, as the capstone's loop does). A toy with V tokens
and depth d needs the models' logits at Σ V^i contexts, read once (batched per depth).
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from ..sampling import Warp

Law = dict[tuple[int, ...], float]


@dataclass(frozen=True)
class Rule:
    """One way to write the accept/reject step. The defaults are the right rule."""

    accept: str = "min(1, p/q)"  # also "p" (q ignored), "q/p" (upside down), "u > p/q", "p >= q" (no uniform)
    uniforms: str = "one per guess"  # also "one per step" (the same u for every guess of a step)
    prefix: bool = True  # False: n = how many guesses passed, not where the first one failed
    residual: str = "max(0, p - q)"  # also "p", "p, the guess zeroed", "|p - q|", "softmax", "max(0, q - p)"
    bonus_row: int = 0  # the bonus from p[k + bonus_row] (−1: the last guess's row)
    bonus_warp: bool = True  # False: the bonus from the unwarped softmax (temperature 1, no top-k/top-p)
    target: str = "warp"  # the target's p: "warp", "softmax" (unwarped), "temperature" (no top-k/top-p)
    q_row: str = "n"  # "0": every guess's ratio divides by q[0]
    p_row: int = 0  # the ratio reads p[n + p_row] (1: the row after the guess)


@dataclass
class Tables:
    """The target's logits and the draft's law (warped, as the drafter draws) at every context of the
    prompt followed by up to ``depth`` tokens."""

    logits: dict[tuple[int, ...], torch.Tensor]
    draft: dict[tuple[int, ...], np.ndarray]
    warp: Warp
    vocab: int

    @classmethod
    @torch.inference_mode()
    def of(cls, target: torch.nn.Module, draft: torch.nn.Module | Callable[[tuple[int, ...], np.ndarray], np.ndarray],
           prompt: tuple[int, ...], depth: int, warp: Warp) -> Tables:
        """``draft``: a model (its law warped, as ``ModelDrafter`` draws), or (context, p) → q, p the warped target's."""
        vocab = int(target.get_output_embeddings().weight.shape[0])
        logits, law = {}, {}
        contexts = [tuple(prompt)]
        for _ in range(depth + 1):
            ids = torch.tensor(contexts)
            t = target(ids).logits[:, -1].double()
            if isinstance(draft, torch.nn.Module):
                d = warp(draft(ids).logits[:, -1]).double().numpy()
            else:
                p = warp(t).double().numpy()
                d = np.stack([draft(c, p[i]) for i, c in enumerate(contexts)])
            for i, c in enumerate(contexts):
                logits[c], law[c] = t[i], d[i]
            contexts = [c + (x,) for c in contexts for x in range(vocab)]
        return cls(logits, law, warp, vocab)

    def p(self, context: tuple[int, ...], how: str = "warp") -> np.ndarray:
        row = self.logits[context]
        if how == "softmax":
            return torch.softmax(row, -1).numpy()
        if how == "temperature":
            return torch.softmax(row / self.warp.temperature, -1).numpy()
        return self.warp(row).double().numpy()

    def q(self, context: tuple[int, ...]) -> np.ndarray:
        return self.draft[context]


def _normalised(w: np.ndarray) -> np.ndarray:
    return w / w.sum()


def _residual(rule: Rule, p: np.ndarray, q: np.ndarray, guess: int) -> np.ndarray:
    if rule.residual == "max(0, p - q)":
        return _normalised(np.clip(p - q, 0, None))
    if rule.residual == "p":
        return p
    if rule.residual == "p, the guess zeroed":
        w = p.copy()
        w[guess] = 0
        return _normalised(w)
    if rule.residual == "|p - q|":
        return _normalised(np.abs(p - q))
    if rule.residual == "softmax":
        return _normalised(np.exp(np.clip(p - q, 0, None)))
    if rule.residual == "max(0, q - p)":
        return _normalised(np.clip(q - p, 0, None))
    raise ValueError(rule.residual)


def _passes(rule: Rule, ratio: float, p: float, q: float) -> float:
    """P(one guess passes its test) for independent uniforms."""
    if rule.accept == "min(1, p/q)":
        return min(1.0, ratio)
    if rule.accept == "p":
        return min(1.0, p)
    if rule.accept == "q/p":
        return min(1.0, q / p) if p > 0 else 1.0
    if rule.accept == "u > p/q":
        return 1.0 - min(1.0, ratio)
    if rule.accept == "p >= q":
        return float(p >= q)
    raise ValueError(rule.accept)


def _accepted(rule: Rule, ratios: list[float], passes: list[float]) -> np.ndarray:
    """P(n guesses kept), n = 0 … k."""
    k = len(passes)
    if rule.uniforms == "one per step":  # u < r_i for every i < n  ⇔  u < min(r_0 … r_{n-1})
        at_least = [1.0] + [min(1.0, max(0.0, min(ratios[:n]))) for n in range(1, k + 1)]
        return np.array([at_least[n] - (at_least[n + 1] if n < k else 0.0) for n in range(k + 1)])
    if not rule.prefix:  # how many passed, in any order: a Poisson-binomial count
        law = np.array([1.0])
        for a in passes:
            law = np.append(law * (1 - a), 0.0) + np.append(0.0, law * a)
        return law
    out, alive = np.zeros(k + 1), 1.0
    for n, a in enumerate(passes):
        out[n] = alive * (1 - a)
        alive *= a
    out[k] = alive
    return out


def step_law(t: Tables, rule: Rule, context: tuple[int, ...], k: int) -> Law:
    """{tokens one step emits (the kept guesses, then one token): probability}, with k guesses."""
    out: Law = defaultdict(float)
    for guesses in itertools.product(range(t.vocab), repeat=k):
        qs = [t.q(context + guesses[:i]) for i in range(k)]
        weight = float(np.prod([qs[i][x] for i, x in enumerate(guesses)]))
        if weight == 0:
            continue
        ps = [t.p(context + guesses[:i], rule.target) for i in range(k + 1)]
        ratios, passes = [], []
        for i, x in enumerate(guesses):
            p, q = ps[i + rule.p_row][x], (qs[0] if rule.q_row == "0" else qs[i])[x]
            ratios.append(p / q)
            passes.append(_passes(rule, p / q, p, q))
        for n, chance in enumerate(_accepted(rule, ratios, passes)):
            if chance <= 0:
                continue
            if n < k:
                nxt = _residual(rule, ps[n], qs[n], guesses[n])
            else:
                row = context + guesses[: k + rule.bonus_row]
                nxt = t.p(row, rule.target if rule.bonus_warp else "softmax")
            for token in np.flatnonzero(nxt):
                out[guesses[:n] + (int(token),)] += weight * chance * float(nxt[token])
    return dict(out)


def output_law(t: Tables, rule: Rule, tokens: int, gamma: int, context: tuple[int, ...] | None = None) -> Law:
    """{the loop's first ``tokens`` tokens: probability} after the tables' prompt (or ``context``)."""
    memo: dict[tuple[tuple[int, ...], int], Law] = {}

    def law(ctx: tuple[int, ...], m: int) -> Law:
        if (ctx, m) not in memo:
            out: Law = defaultdict(float)
            for emitted, chance in step_law(t, rule, ctx, min(gamma, m)).items():
                if len(emitted) >= m:
                    out[emitted[:m]] += chance
                else:
                    for rest, more in law(ctx + emitted, m - len(emitted)).items():
                        out[emitted + rest] += chance * more
            memo[ctx, m] = dict(out)
        return memo[ctx, m]

    return law(context if context is not None else min(t.logits, key=len), tokens)


def as_array(law: Law, vocab: int, tokens: int) -> np.ndarray:
    """The law as an array [V] * tokens."""
    out = np.zeros([vocab] * tokens)
    for seq, chance in law.items():
        out[seq] += chance
    return out
