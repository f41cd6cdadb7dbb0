"""Capstone 3's test of the drafter contract, with stated power (issue 57): every guess against the q row
the drafter reports for it.

    p_value = guesses_pvalue(make_drafter(8), 8, draws=600, seed=1, warp=Warp(1.0, None, None), k=3)

The drafter proposes ``k`` guesses after :data:`.grading.TOY_PROMPT`, ``draws`` times (``begin`` before
each call, one generator throughout). The contract: guess i is drawn from row i of q, and row i depends
only on the context and the guesses before it (the notebook states the rule; for the first row it is the
rule the first-guess test already enforced). So the guesses are grouped by what came before them (the
prefix), and each group's counts are compared with its row: Pearson's χ² summed over the groups (cells of
expected count < 5 pooled within a group), its degrees of freedom summed too. A guess its row gives no
mass fails the test (0.0); rows of one prefix that differ between calls break the rule (an
``AssertionError`` that says so); a drafter with one-hot rows has no χ² (zero degrees of freedom) and
passes by its support (1.0).

:func:`power` computes, from a drafter's exact proposal law (``[(guesses, probability, rows)]``, as
:mod:`.drafter_mutants` enumerates them), the probability that the test fails it: a guess outside its
row's support, the first row changing between calls, or the noncentral χ² of the groups' deviations,
whichever is larger (each alone fails the test).
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import torch

from .grading import P_MIN, TOY_PROMPT

Proposal = tuple[tuple[int, ...], np.ndarray]  # (guesses, q rows [k', V])
ProposalLaw = list[tuple[tuple[int, ...], float, np.ndarray]]  # (guesses, probability, the rows reported)
RULE = ("✗ row i of q changed between calls with the same context and the same guesses before it: it must "
        "depend only on them (a rule of the assignment)")


def proposals(drafter, vocab_size: int, draws: int, seed: int, warp, k: int) -> list[Proposal]:
    """``draws`` calls of ``drafter.propose(TOY_PROMPT, k)``, each after ``begin(warp, generator)``."""
    context = torch.tensor([TOY_PROMPT])
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(draws):
        drafter.begin(warp, gen)
        tokens, q = drafter.propose(context, k)
        if tokens.numel() == 0:
            raise AssertionError("✗ the drafter proposed nothing after grading.TOY_PROMPT, a context that repeats "
                                 "itself: propose something there (a rule of the assignment)")
        out.append((tuple(int(t) for t in tokens), q.detach().double().cpu().numpy().reshape(len(tokens), vocab_size)))
    return out


def groups(found: list[Proposal]) -> dict[tuple[int, ...], tuple[np.ndarray, np.ndarray]]:
    """{prefix: (its row, the counts of the guesses that followed it)}; an AssertionError when one prefix's
    rows differ between calls."""
    out: dict[tuple[int, ...], tuple[np.ndarray, np.ndarray]] = {}
    for tokens, rows in found:
        for i, guess in enumerate(tokens):
            prefix = tokens[:i]
            if prefix not in out:
                out[prefix] = (rows[i], np.zeros(rows.shape[1]))
            elif not np.allclose(out[prefix][0], rows[i], atol=1e-6):
                raise AssertionError(RULE)
            out[prefix][1][guess] += 1
    return out


def pvalue_of(found: list[Proposal]) -> float:
    """The test's p-value of these proposals (see the module's docstring)."""
    return pvalue_of_groups(groups(found).values())


def pvalue_of_groups(rows_and_counts) -> float:
    """The p-value from each prefix's (row, counts): 0.0 for a guess outside its row, else the summed χ²."""
    stat, df = 0.0, 0
    for row, counts in rows_and_counts:
        if counts[row <= 0].sum() > 0:
            return 0.0
        expected = row * counts.sum()
        small = expected < 5
        exp = np.append(expected[~small], expected[small].sum())
        obs = np.append(counts[~small], counts[small].sum())
        keep = exp > 0
        stat += float(((obs[keep] - exp[keep]) ** 2 / exp[keep]).sum())
        df += int(keep.sum()) - 1
    if df < 1:
        return 1.0
    half = torch.tensor([df / 2, stat / 2], dtype=torch.float64)
    return float(torch.special.gammaincc(half[0], half[1]))


def guesses_pvalue(drafter, vocab_size: int, draws: int, seed: int, warp, k: int = 3) -> float:
    """p-value of ``draws`` proposals of ``k`` guesses after TOY_PROMPT against the rows reported for them."""
    return pvalue_of(proposals(drafter, vocab_size, draws, seed, warp, k))


def power(law: ProposalLaw, draws: int, p_min: float = P_MIN) -> float:
    """P(the test fails a drafter whose proposals follow ``law``) with ``draws`` proposals: the largest of
    P(a guess outside its row's support), P(the first row differs between two calls) and the noncentral χ²
    of the prefixes whose rows are consistent (each alone fails the test, so this is a lower bound)."""
    from scipy import stats

    outside = sum(chance for g, chance, rows in law if any(rows[i][x] <= 0 for i, x in enumerate(g)))
    firsts: dict[bytes, float] = defaultdict(float)
    for _, chance, rows in law:
        firsts[np.round(rows[0], 9).tobytes()] += chance
    same = sum(v**draws for v in firsts.values())
    mass: dict[tuple[int, ...], float] = defaultdict(float)  # P(a proposal starts with this prefix and goes on)
    draw: dict[tuple[int, ...], np.ndarray] = {}  # the law of the next guess after the prefix, unnormalised
    reported: dict[tuple[int, ...], np.ndarray | None] = {}
    for g, chance, rows in law:
        for i, x in enumerate(g):
            prefix = g[:i]
            mass[prefix] += chance
            draw.setdefault(prefix, np.zeros(rows.shape[1]))[x] += chance
            seen = reported.setdefault(prefix, rows[i])
            if seen is not None and not np.allclose(seen, rows[i], atol=1e-9):
                reported[prefix] = None  # inconsistent: the rule's check catches it (not counted here)
    lam, df = 0.0, 0
    for prefix, q in reported.items():
        if q is None or mass[prefix] <= 0:
            continue
        r = draw[prefix] / mass[prefix]
        n = draws * mass[prefix]
        small = n * q < 5
        qq, rr = np.append(q[~small], q[small].sum()), np.append(r[~small], r[small].sum())
        keep = qq > 0
        lam += n * float(((rr[keep] - qq[keep]) ** 2 / qq[keep]).sum())
        df += int(keep.sum()) - 1
    chi2 = float(stats.ncx2.sf(stats.chi2.isf(p_min, df), df, lam)) if df >= 1 else 0.0
    return max(1 - (1 - outside) ** draws, 1 - same, chi2)


def simulated_pass_rate(law: ProposalLaw, draws: int, runs: int, seed: int = 0) -> float:
    """Share of ``runs`` tests a drafter of exactly ``law`` (its rows consistent) passes: the proposals' counts
    drawn from the law's multinomial, gathered per prefix as :func:`groups` gathers them."""
    rng = np.random.default_rng(seed)
    chances = np.array([c for _, c, _ in law])
    keys = sorted({g[:i] for g, _, _ in law for i in range(len(g))})
    row_of = {g[:i]: rows[i] for g, _, rows in law for i in range(len(g))}
    vocab = law[0][2].shape[1]
    gather = np.zeros((len(keys), vocab, len(law)))  # [prefix, token, proposal]: where each proposal counts
    for j, (g, _, _) in enumerate(law):
        for i, x in enumerate(g):
            gather[keys.index(g[:i]), x, j] += 1
    passed = 0
    for _ in range(runs):
        counts = gather @ rng.multinomial(draws, chances / chances.sum())
        passed += pvalue_of_groups((row_of[key], counts[i]) for i, key in enumerate(keys) if counts[i].sum()) > P_MIN
    return passed / runs
