"""Drafters inside the model, side by side (lesson 04c): the course's draft model, the feature head in its
DeepSeek name (an MTP module), Medusa's heads as a chain and as a tree, and self-speculation — on ONE engine
and the same prompts, per prompt category.

    rows = compare(pair, {"chat": CHAT[:2], "copy": COPY_HEAVY[:2]}, costs=costs)   # pair on our AR's engine
    rows[0].alpha_per_position, rows[0].tau, rows[0].c, rows[0].vs_ar, rows[0].vs_reference, rows[0].prediction

Each drafter is the benchmark's own method (:func:`specdec_core.bench.methods.build_methods`: ``spec``,
``spec_feature``, ``spec_medusa``, ``tree_medusa``, ``spec_self``), so the lesson measures what ``make bench``
runs. Per prompt, our AR and every drafter run interleaved (:func:`~specdec_core.bench.harness.interleaved`,
one untimed warm-up each, ``repeats`` rounds): a ratio is taken round by round, its median over rounds, then
over prompts; the run's noise band (:func:`~specdec_core.bench.harness.noise_band`) turns each ratio into a
verdict. A method the registry lacks (Medusa before its heads are trained) gives a row that says so.

    α per position   accepted ÷ examined guesses at draft position (chain) or tree depth (tree), pooled over the
                     category's prompts: a tree's depth d counts as accepted when ANY child there was
    τ                new tokens ÷ target calls (median over prompts)
    c                drafting seconds per step ÷ one target step (our AR's median token on the same prompt)
                     ÷ the guesses on one path (γ for a chain, the tree's depth): the cost of one position
    prediction       the cost model's S = τ / (d·c + v(n) + o) from the run's own τ and drafting time
"""

from __future__ import annotations

import json
import math
import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from .. import assets, costmodel, theory
from ..models import Pair, chat_ids
from ..progress import tqdm
from ..records import RunStats, SpecStats, TreeStats
from .harness import classify, interleaved, noise_band
from .methods import Method

# bench method → (what the lesson calls it, its key in the drafts' training log; None: nothing trained)
DRAFTERS: dict[str, tuple[str, str | None]] = {
    "spec": ("draft model (a second LM)", "model"),
    "spec_feature": ("feature head = MTP module", "feature"),
    "spec_medusa": ("Medusa heads, chain", "medusa"),
    "tree_medusa": ("Medusa heads, tree", "medusa"),
    "spec_self": ("self-speculation (own layers)", None),
}
REFERENCE = "spec_feature"  # every row's speed is also given against the shipped feature head's
NOT_TRAINED = "not trained yet"


@dataclass
class InModelRow:
    """One drafter on one prompt category; every number a median over its prompts (NaN: not measured)."""

    category: str
    name: str  # the bench method
    label: str
    available: bool = True
    reason: str = ""  # why a row is not measured (e.g. "not trained yet: …")
    alpha_per_position: list[float] = field(default_factory=list)
    tau: float = math.nan
    c: float = math.nan
    tokens_per_s: float = math.nan
    ar_tokens_per_s: float = math.nan
    vs_ar: float = math.nan  # tokens/s ÷ our AR's, round by round
    vs_reference: float = math.nan  # tokens/s ÷ the feature head's (1 on its own row)
    band: float = math.nan  # the category's noise band (NaN: one round, no verdict)
    same_as_ar: int = 0  # prompts whose greedy tokens equal our AR's
    prompts: int = 0
    prediction: costmodel.Prediction | None = None

    @property
    def verdict(self) -> str:
        """"faster", "slower", "a tie" with our AR (inside the noise band) or "single run"."""
        return classify(self.vs_ar, self.band) if self.available else self.reason

    @property
    def verdict_reference(self) -> str:
        """The same against the feature head."""
        return classify(self.vs_reference, self.band) if self.available else self.reason

    def prediction_line(self) -> str:
        if self.prediction is None:
            return self.reason or "no cost model given: no prediction"
        return self.prediction.line(self.vs_ar, self.band)


def alpha_per_position(runs: Sequence[RunStats]) -> list[float]:
    """Acceptance per draft position pooled over ``runs``: a chain's (:attr:`SpecStats.alpha_per_position` of all
    the steps together) or a tree's per depth — of the steps whose verify reached depth d and found children
    there (``TreeStep.trials``), the share where one child was accepted. NaN where nothing was examined."""
    if all(isinstance(r, SpecStats) for r in runs):
        return SpecStats(steps=[s for r in runs for s in r.steps]).alpha_per_position
    if not all(isinstance(r, TreeStats) for r in runs):
        raise TypeError("alpha_per_position reads speculative (SpecStats) or tree (TreeStats) runs, not a mix or "
                        f"another method's: got {sorted({type(r).__name__ for r in runs})}")
    examined, accepted = [], []
    for run in runs:
        for step in run.steps:
            for depth, (_, rank) in enumerate(step.trials):
                if depth == len(examined):
                    examined.append(0), accepted.append(0)
                examined[depth] += 1
                accepted[depth] += rank >= 0
    return [a / e if e else math.nan for a, e in zip(accepted, examined)]


def path_depth(stats: RunStats) -> float:
    """Guesses on one drafted path, averaged over the steps: γ asked for a chain, the tree's depth for a tree."""
    if isinstance(stats, SpecStats):
        return statistics.fmean(s.gamma for s in stats.steps) if stats.steps else math.nan
    depths = []
    for s in stats.steps:
        depth = [0] * len(s.parents)
        for i, p in enumerate(s.parents):  # parents come first: one pass gives every node's depth
            depth[i] = 1 + (depth[p] if p >= 0 else 0)
        depths.append(max(depth, default=0))
    return statistics.fmean(depths) if depths else math.nan


def cost_per_position(stats: RunStats, step_s: float) -> float:
    """c: drafting seconds per step ÷ one target step ``step_s`` ÷ :func:`path_depth`."""
    steps, depth = len(stats.steps), path_depth(stats)
    return stats.draft_time / steps / step_s / depth if steps and depth else math.nan


def training_log(name: str, log: dict | None = None) -> dict | None:
    """The shipped training log's entry of bench method ``name``'s drafter (``assets.DRAFTS_LOG``, or the Medusa
    heads' own log beside their weights); None when no log records it."""
    key = DRAFTERS.get(name, (None, None))[1]
    if key is None:
        return None
    if log is None:
        log = json.loads(assets.DRAFTS_LOG.read_text()) if assets.DRAFTS_LOG.exists() else {}
        for path in sorted(assets.DRAFTS.glob(f"{key}*training-log.json")):  # e.g. medusa-heads.training-log.json
            log.setdefault(key, json.loads(path.read_text()))
    return log.get(key)


def training_cost(name: str, log: dict | None = None) -> float | None:
    """Seconds the drafter of bench method ``name`` took to train (:func:`training_log`): 0 for self-speculation,
    None when no log records it."""
    if name == "spec_self":
        return 0.0
    seconds = (training_log(name, log) or {}).get("seconds")
    return float(seconds) if seconds is not None else None


def parameters_added(models: Sequence[torch.nn.Module], target: torch.nn.Module) -> int:
    """Parameters of ``models`` beyond ``target``'s own tensors (a shared tensor counts once, the target's none):
    what a drafter adds to the model it serves."""
    own = {(p.data_ptr(), p.numel()) for p in target.parameters()}
    added = {(p.data_ptr(), p.numel()): p.numel() for m in models for p in m.parameters()}
    return sum(n for key, n in added.items() if key not in own)


def costs_to_train(pair: Pair, registry: dict[str, Method], names: Sequence[str] = tuple(DRAFTERS)) -> list[dict]:
    """Per drafter: its label, seconds to train (:func:`training_cost`), parameters added (:func:`parameters_added`
    over the method's models; None where the registry lacks the method), and the tokens of text it was trained on
    with the log's name for that text (None: nothing trained)."""
    out = []
    for name in names:
        method = registry.get(name)
        ready = method is not None and not _prepare(pair, method)  # loads the shipped weights once (untimed)
        models = method.models(pair) if ready and method.models is not None else None
        entry = training_log(name) or {}
        out.append({"name": name, "label": DRAFTERS.get(name, (name,))[0], "seconds": training_cost(name),
                    "parameters": parameters_added(models, pair.target) if models is not None else None,
                    "tokens": entry.get("corpus_tokens"), "corpus": entry.get("corpus", "the target's answers") if entry else None})
    return out


def compare(pair: Pair, categories: dict[str, Sequence[str]], registry: dict[str, Method],
            names: Sequence[str] = tuple(DRAFTERS), max_new_tokens: int = 48, repeats: int = 2,
            costs: costmodel.CostModel | None = None, progress: bool = True) -> list[InModelRow]:
    """Every drafter of ``names`` (bench methods of ``registry``) against our AR (``registry["ar"]``) on each
    category's prompts, interleaved per prompt; ``repeats`` ≥ 2 rounds give a noise band and verdicts. With the
    machine's ``costs`` each row carries the cost model's prediction. Rows in category order, then ``names``."""
    if "ar" not in registry:
        raise ValueError("the registry has no 'ar' method: every speed here is relative to our AR")
    if repeats < 1 or max_new_tokens < 1:
        raise ValueError(f"repeats and max_new_tokens must be >= 1, got {repeats} and {max_new_tokens}")
    if not categories or not all(categories.values()):
        raise ValueError("give each category at least one prompt, e.g. {'chat': prompts.CHAT[:2]}")
    missing = {n: f"{NOT_TRAINED}: the registry has no {n!r} method" for n in names if n not in registry}
    for name in ["ar", *names]:
        if name not in missing and (why := _prepare(pair, registry[name])):
            missing[name] = why
    if "ar" in missing:
        raise RuntimeError(f"our AR cannot run: {missing['ar']}")
    ready = ["ar", *[n for n in names if n not in missing]]
    rows: list[InModelRow] = []
    total = sum(len(p) for p in categories.values())
    bar = tqdm(total=total, desc="drafters inside the model", unit="prompt", disable=not progress)
    def calls(ids: torch.Tensor, n: int) -> dict:
        return {name: (lambda m=registry[name]: m.fn(pair, ids, n)) for name in ready}

    first = next(iter(categories.values()))[0]
    interleaved(calls(chat_ids(pair.tokenizer, first, pair.device), 8), repeats=1, warmup=0)  # warm-up, untimed
    for category, texts in categories.items():
        timed = []
        for text in texts:
            timed.append(interleaved(calls(chat_ids(pair.tokenizer, text, pair.device), max_new_tokens),
                                     repeats=repeats, warmup=0))
            bar.update(1)
        tps = {n: [[len(r.result) / r.result.stats.wall_time for r in t[n]] for t in timed] for n in ready}
        band = noise_band([rounds for per_prompt in tps.values() for rounds in per_prompt])
        rows += [_row(category, n, timed, tps, band, costs) for n in ready[1:]]
        rows += [InModelRow(category, n, DRAFTERS.get(n, (n,))[0], available=False, reason=why)
                 for n, why in missing.items()]
    bar.close()
    return sorted(rows, key=lambda r: (list(categories).index(r.category), list(names).index(r.name)))


def _prepare(pair: Pair, method: Method) -> str:
    """Run ``method``'s one-off set-up, untimed (loading a head, self-speculation's search); "" when it is ready,
    else why not: shipped weights that are missing mean a drafter not trained yet (the message says how)."""
    try:
        if method.prepare is not None:
            method.prepare(pair)
    except FileNotFoundError as err:  # assets.AssetMissingError: its message names the command that makes it
        return f"{NOT_TRAINED}: " + re.sub(r"/\S*/([^/\s)]+)", r"\1", str(err))  # a file by its name, not its path
    return ""


def _ratio(tps: dict, name: str, base: str) -> float:
    """Median over prompts of the per-prompt median over rounds of ``name``'s tokens/s ÷ ``base``'s, round by round."""
    if base not in tps:
        return math.nan
    return statistics.median(statistics.median(a / b for a, b in zip(ours, theirs))
                             for ours, theirs in zip(tps[name], tps[base]))


def _row(category: str, name: str, timed: list[dict], tps: dict, band: float,
         costs: costmodel.CostModel | None) -> InModelRow:
    med = statistics.median
    runs = [t[name][0].result for t in timed]  # the first round's outputs and records
    ars = [t["ar"][0].result for t in timed]
    step_s = [med(a.stats.token_times[1:] or a.stats.token_times) for a in ars]  # our AR's token, per prompt
    cs = [cost_per_position(r.stats, s) for r, s in zip(runs, step_s)]
    preds = [costmodel.predict(r.stats, costs, tree=isinstance(r.stats, TreeStats)) for r in runs] if costs else []
    return InModelRow(
        category, name, DRAFTERS.get(name, (name,))[0], alpha_per_position=alpha_per_position([r.stats for r in runs]),
        tau=med(r.stats.tokens_per_call for r in runs), c=med(cs), tokens_per_s=med(map(med, tps[name])),
        ar_tokens_per_s=med(map(med, tps["ar"])), vs_ar=_ratio(tps, name, "ar"), vs_reference=_ratio(tps, name, REFERENCE),
        band=band, same_as_ar=sum(r.new_tokens == a.new_tokens for r, a in zip(runs, ars)), prompts=len(runs),
        prediction=costmodel.Prediction.median(preds) if preds else None)


IN_MODEL = ("spec_medusa", "tree_medusa", "spec_self")  # the drafters that live inside the target


def limiting_term(row: InModelRow, reference: InModelRow) -> tuple[str, float]:
    """Which term of the cost model's S = τ / (d·c + v(n) + o) keeps ``row`` below ``reference``: each of ``row``'s
    τ (what α buys), d·c and v(n) replaced in turn by the reference's; the term whose swap raises S most, and the
    S ``row`` would then reach."""
    p, q = row.prediction, reference.prediction
    if p is None or q is None:
        raise ValueError("limiting_term needs both rows' predictions: run compare(..., costs=the machine's cost model)")
    swaps = {"α (through τ)": (q.tokens_per_call, p.draft, p.v), "c (through d·c)": (p.tokens_per_call, q.draft, p.v),
             "v (the verify's width)": (p.tokens_per_call, p.draft, q.v)}
    reach = {term: theory.predicted_speedup(t, d, v, p.overhead) for term, (t, d, v) in swaps.items()}
    term = max(reach, key=reach.get)
    return term, reach[term]


def goal_line(rows: Sequence[InModelRow], category: str = "code") -> str:
    """The issue's goal on ``category``, rendered from the rows: an in-model drafter at or above the feature head
    (not "slower" than it, by the noise band), or which term keeps the best of them below it."""
    here = {r.name: r for r in rows if r.category == category}
    ref = here.get(REFERENCE)
    measured = [r for n in IN_MODEL if (r := here.get(n)) is not None and r.available]
    if ref is None or not ref.available or not measured:
        return f"On {category}: no in-model drafter and feature head measured side by side."
    best = max(measured, key=lambda r: r.vs_reference)
    head = (f"On {category} the best of the other in-model drafters, **{best.label}**, runs at {best.vs_reference:.2f}× the feature "
            f"head's speed ({best.verdict_reference}, band ±{best.band:.0%})")
    if best.verdict_reference == "single run":
        return head + ": one round per prompt measures no noise band, so no verdict (run with repeats >= 2)."
    if best.verdict_reference == "faster":
        return head + ": above the feature head."
    if best.verdict_reference == "a tie":
        return head + ": level with the feature head within the noise band (a wide band says: measure more rounds)."
    if best.prediction is None or ref.prediction is None:
        return head + "; no cost model was given to say which term keeps it below."
    term, reach = limiting_term(best, ref)
    return (head + f". The term that keeps it below is **{term}**: with the feature head's value the cost model "
            f"predicts {reach:.2f}× our AR for it, against {best.prediction.speedup:.2f}× with its own.")


def table(rows: Sequence[InModelRow]) -> str:
    """A Markdown table of the rows: α per position, τ, c, speed against our AR and the feature head, the
    cost model's prediction."""
    fmt = lambda x, f="{:.2f}": "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f.format(x)  # noqa: E731
    lines = ["| category | drafter | α per position | τ | c | × our AR | verdict | × feature head | verdict | "
             "predicted × | same as AR |", "|---|---|---|---:|---:|---:|---|---:|---|---:|---|"]
    for r in rows:
        if not r.available:
            lines.append(f"| {r.category} | {r.label} | {r.reason.split(':')[0]} |" + " – |" * 8)
            continue
        alphas = " ".join(fmt(a) for a in r.alpha_per_position)
        lines.append(f"| {r.category} | {r.label} | {alphas} | {fmt(r.tau)} | {fmt(r.c, '{:.3f}')} | {fmt(r.vs_ar)} | "
                     f"{r.verdict} | {fmt(r.vs_reference)} | {r.verdict_reference} | "
                     f"{fmt(r.prediction.speedup if r.prediction else None)} | {r.same_as_ar}/{r.prompts} |")
    return "\n".join(lines)
