"""Lesson 04b: a token tree and its mask, v(n) with and without the tree mask, τ against the programme, and the
panel over cached dynamic-tree runs (node budget, depth → one step's tree and its accepted path)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..records import TreeStep
from .base import Figure, plt


def tree_picture(parents: Sequence[int], labels: Sequence[str], mask: torch.Tensor, path: Sequence[int] = (),
                 title: str = "") -> Figure:
    """Left: the tree (the root at depth 0, node i under ``parents[i]``, the accepted ``path`` in green).
    Right: the verify's mask over [root, nodes…] (a filled cell: the row's token attends to the column's)."""
    n = len(parents)
    depth = []
    for p in parents:
        depth.append(1 if p < 0 else depth[p] + 1)
    rows: dict[int, int] = {}
    y = []
    for d in depth:
        y.append(rows.get(d, 0))
        rows[d] = rows.get(d, 0) + 1
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.8), gridspec_kw={"width_ratios": [1.4, 1]})
    on_path = set(path)
    left.scatter([0], [0], s=500, color="#bbbbbb", zorder=2)
    left.annotate("root", (0, 0), ha="center", va="center", fontsize=8)
    for i in range(n):
        px, py = (0, 0) if parents[i] < 0 else (depth[parents[i]], -y[parents[i]])
        ok = i in on_path
        left.plot([px, depth[i]], [py, -y[i]], color="#2a9d8f" if ok else "#cccccc", lw=2.5 if ok else 1, zorder=1)
        left.scatter([depth[i]], [-y[i]], s=500, color="#2a9d8f" if ok else "#e9c46a", zorder=2)
        left.annotate(labels[i], (depth[i], -y[i]), ha="center", va="center", fontsize=7)
    left.set_xticks(range(max(depth, default=0) + 1))
    left.set_xlabel("depth (position after the root)")
    left.set_yticks([])
    left.set_title("the tree (green: the accepted path)", fontsize=9)
    right.imshow(mask.numpy(), cmap="Greens", vmin=0, vmax=1.3)
    right.set_xticks(range(n + 1), ["root"] + [str(i) for i in range(n)], fontsize=7)
    right.set_yticks(range(n + 1), ["root"] + [str(i) for i in range(n)], fontsize=7)
    right.set_xlabel("attends to")
    right.set_title("mask: each node sees the root, its ancestors and itself", fontsize=9)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def v_curves(ns: Sequence[int], curves: dict[str, Sequence[float]], title: str = "") -> Figure:
    """v(n), one curve per label (e.g. causal, tree mask), with the line v = 1 (a one-token step)."""
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for label, vs in curves.items():
        ax.plot(ns, vs, "o-", label=label)
    ax.axhline(1.0, color="grey", ls="--", label="one decode step")
    ax.set_xlabel("tokens in one forward, n")
    ax.set_ylabel("v(n): forward ÷ one step")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig


def tau_vs_budget(budgets: Sequence[int], measured: Sequence[float], predicted: Sequence[float],
                  speedup: Sequence[float] | None = None, title: str = "") -> Figure:
    """Tokens per target call against the tree's node budget: measured and the programme's 1 + E; on a
    second axis, the cost model's predicted speed-up of each budget."""
    fig, ax = plt.subplots(figsize=(7, 3.6))
    ax.plot(budgets, measured, "o-", label="τ measured")
    ax.plot(budgets, predicted, "s--", label="1 + E (Sequoia's programme)")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("nodes in the tree")
    ax.set_ylabel("tokens per target call")
    if speedup is not None:
        twin = ax.twinx()
        twin.plot(budgets, speedup, "^:", color="#e76f51", label="predicted speed-up")
        twin.set_ylabel("predicted × AR", color="#e76f51")
        twin.legend(fontsize=8, loc="lower right")
    ax.legend(fontsize=8, loc="upper left")
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig


def best_step(steps: Sequence[TreeStep]) -> int:
    """The step that accepted the most guesses (the first of them): the panel opens on it."""
    return max(range(len(steps)), key=lambda i: (steps[i].accepted, -i)) if steps else 0


def step_picture(step: TreeStep, tokenizer, title: str = "") -> Figure:
    """One recorded step of ``tree_generate`` (``stats.steps[i]``): its tree labelled with the drafted
    tokens, its mask, and the accepted path in green."""
    from ..tree import Tree, tree_mask

    tokens = torch.tensor(step.drafted, dtype=torch.long)
    _, mask = tree_mask(Tree(tokens, list(step.parents)))
    labels = [repr(tokenizer.decode([t]))[1:-1][:6] for t in step.drafted]
    return tree_picture(step.parents, labels, mask, step.path, title)


def tree_panel(runs: dict, tokenizer) -> None:
    """Sliders over cached runs, ``runs[(budget, depth)]`` a Generation of ``tree_generate`` (see
    ``bench.trees.budget_runs``): τ and the tree sizes of that setting, and one step's tree with its accepted
    path (a step slider; it opens on the step that accepted the most)."""
    import ipywidgets as w
    from IPython.display import display

    budgets, depths = sorted({b for b, _ in runs}), sorted({d for _, d in runs})
    out = w.Output()
    controls = {"budget": w.SelectionSlider(options=budgets, description="nodes"),
                "depth": w.SelectionSlider(options=depths, description="depth"),
                "step": w.IntSlider(min=-1, max=200, value=-1, description="step (−1: best)")}

    def show(budget: int, depth: int, step: int) -> None:
        out.clear_output(wait=True)
        with out:
            gen = runs.get((budget, depth))
            if gen is None:
                print(f"no tree of {budget} nodes reaches depth {depth} with these children a node: pick another")
                return
            steps = gen.stats.steps
            i = best_step(steps) if step < 0 or step >= len(steps) else step
            lengths = gen.stats.accepted_lengths
            print(f"{budget} nodes, depth {depth}: τ = {gen.tokens_per_call:.2f} tokens per target call over "
                  f"{len(steps)} calls; accepted 0, 1, 2, … guesses in {[lengths.count(k) for k in range(depth + 1)]} steps")
            accepted = tokenizer.decode([steps[i].drafted[j] for j in steps[i].path])
            print(f"step {i} of {len(steps)}: accepted {accepted!r} + the target's {tokenizer.decode([steps[i].next])!r}")
            fig = step_picture(steps[i], tokenizer, f"{budget} nodes, depth {depth}: step {i}")
            display(fig)
            plt.close(fig)

    w.interactive_output(show, controls)
    display(w.VBox([w.HBox(list(controls.values())), out]))
    show(*(controls[k].value for k in ("budget", "depth", "step")))
