"""Lesson 04b's measurements of token trees (untimed: tokens per target call, acceptance by rank), and
the side-by-side rows it reads from ``make bench``'s reports.

    accept = acceptance_by_rank(pair, prompts, shape=(4, 2, 1))   # Sequoia's vector, measured here
    rows = tau_by_budget(pair, prompts, [4, 8, 16, 32], accept)   # τ of the programme's best tree per budget
    runs = budget_runs(pair, feature, ids, 48, budgets=(4, 8, 16), depths=(2, 3, 4))  # lesson 04b's tree panel
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ..drafters import ModelDrafter
from ..models import Pair, chat_ids
from ..progress import tqdm
from ..tree import tree_generate
from ..tree_shapes import best_tree, budget_shape, depth_of, from_branching, has_shape, record_trials


def acceptance_by_rank(pair: Pair, prompts: Sequence[str], shape=(4, 2, 1), max_new_tokens: int = 48,
                       ranks: int = 4) -> list[float]:
    """a[k]: of the depths where the verify tried the sibling of rank k, the share that accepted it —
    from greedy tree runs of the pair's draft model with a static ``shape`` (untimed)."""
    tried, hits = [0] * ranks, [0] * ranks
    for text in prompts:
        ids = chat_ids(pair.tokenizer, text, pair.device)
        out = tree_generate(pair.target, ModelDrafter(pair.draft), ids, max_new_tokens, shape=shape,
                            eos_token_id=pair.tokenizer.eos_token_id)
        record_trials(tried, hits, out.stats.sibling_trials)
    return [h / t if t else 0.0 for h, t in zip(hits, tried)]


def tau_by_budget(pair: Pair, prompts: Sequence[str], budgets: Sequence[int], accept: Sequence[float],
                  max_new_tokens: int = 48, max_depth: int = 6) -> list[dict]:
    """For each node budget: the programme's best tree for ``accept``, its predicted 1 + E, and the τ
    (tokens per target call) it measures on ``prompts``, greedy — pooled: every prompt's tokens ÷ every
    prompt's target calls. (A median over prompts would be one prompt's τ, and a short answer's τ — a few
    tokens in a few calls — barely moves with the tree.) ``taus``: each prompt's own τ."""
    rows = []
    for n in tqdm(budgets, desc="tree budgets"):
        value, topo = best_tree(n, accept, max_depth)
        tokens, calls, taus = 0, 0, []
        for text in prompts:
            ids = chat_ids(pair.tokenizer, text, pair.device)
            out = tree_generate(pair.target, ModelDrafter(pair.draft), ids, max_new_tokens, shape=topo,
                                eos_token_id=pair.tokenizer.eos_token_id)
            tokens, calls = tokens + len(out.new_tokens), calls + out.stats.target_calls
            taus.append(out.stats.tokens_per_call)
        rows.append({"budget": n, "nodes": len(topo), "depth": depth_of(topo), "predicted_tau": 1 + value,
                     "tau": tokens / max(calls, 1), "taus": taus, "topology": topo})
    return rows


# a table row names its method in a few words; the lesson's prose says what each one is
_PARENTHESES = re.compile(r" \((?=[^()]*[^\W\d_])[^()]*\)")  # words in parentheses; a shape (3, 2, 1) stays
_SHORTER = (("our ", ""), ("token tree", "tree"), ("lookahead decoding", "lookahead"),
            ("budget and depth auto", "dynamic, budget auto"), ("shape chosen on the warm-up", "shape auto"),
            ("pool seeded from the prompt", "seeded pool"))
_SHORT_VERDICT = {"a tie": "tie", "within the noise band": "in band", "outside: over-predicted": "over-predicted",
                  "outside: under-predicted": "under-predicted"}


def short_label(label: str) -> str:
    """A report's method label without its explanations: "our token tree, feature drafter (EAGLE-2's dynamic
    tree), budget and depth auto" → "tree, feature drafter, shape auto"."""
    label = _PARENTHESES.sub("", label)
    for long, short in _SHORTER:
        label = label.replace(long, short)
    return label


def side_by_side(reports: dict[str, dict], names: Sequence[str]) -> list[dict]:
    """One row per (category, method) from ``make bench``'s reports: the method's short label, ratio to AR
    with its verdict, τ, and the cost model's prediction with its verdict (None where the report lacks the
    method); verdicts in the table's words: "tie" for "a tie", "in band" for "within the noise band"."""
    out = []
    for category, report in reports.items():
        rows = {r["name"]: r for r in report["methods"]}
        for name in names:
            r = rows.get(name)
            if r is not None:
                verdicts = [_SHORT_VERDICT.get(v, v) for v in (r.get("verdict"), r.get("prediction_verdict"))]
                out.append({"category": category, "name": name, "label": short_label(r["label"]),
                            "ratio": r["ratio_to_ar"], "verdict": verdicts[0], "tau": r.get("tokens_per_call"),
                            "predicted": r.get("predicted"), "prediction_verdict": verdicts[1],
                            "band": report.get("noise_band")})
    return out


def static_tree(branching: Sequence[int]):
    """The topology of a static tree (``tree_shapes.from_branching``), re-exported for the lesson."""
    return from_branching(branching)


__all__ = ["acceptance_by_rank", "short_label", "side_by_side", "static_tree", "tau_by_budget"]


def budget_runs(pair: Pair, drafter, input_ids, max_new_tokens: int, budgets: Sequence[int], depths: Sequence[int],
                top_k: int = 4, progress=None) -> dict[tuple[int, int], object]:
    """Greedy ``tree_generate`` of ``drafter`` (EAGLE-2's dynamic tree when it is the feature drafter) at every
    (node budget, depth) that has a tree with at most ``top_k`` children a node: {(budget, depth): Generation},
    whose steps keep each drafted tree and its accepted path (untimed; lesson 04b's panel reads them)."""
    runs = {}
    for budget in budgets:
        for depth in depths:
            if has_shape(budget, depth, top_k):
                runs[(budget, depth)] = tree_generate(pair.target, drafter, input_ids, max_new_tokens,
                                                      shape=budget_shape(budget, depth, top_k),
                                                      eos_token_id=pair.tokenizer.eos_token_id)
            if progress is not None:
                progress.update()
    return runs
