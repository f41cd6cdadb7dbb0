"""Lesson 07b: one lookahead step (the window, the candidates, the mask) and what each shape buys."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..lookahead import candidate_tree
from .base import Figure, plt

BRANCH_COLOURS = {"current": "tab:green", "window": "tab:blue", "candidates": "tab:orange"}


def lookahead_step(labels: Sequence[str], offsets: torch.Tensor, mask: torch.Tensor, kinds: Sequence[str],
                   title: str = "") -> Figure:
    """Left: every token of one step's forward at its position (x: offset from the current token; rows:
    the current token, the window's levels, the candidates), coloured by branch. Right: the mask over the
    same tokens (a filled cell: the row's token attends to the column's)."""
    n = len(labels)
    fig, (ax, axm) = plt.subplots(1, 2, figsize=(12, 4.2), gridspec_kw={"width_ratios": [1.1, 1]})
    rows: list[int] = []
    level, last_kind = 0, None
    for i, kind in enumerate(kinds):  # a new row for each window level (offsets restart) and the candidates
        if i and (kind != last_kind or offsets[i] <= offsets[i - 1]):
            level += 1
        rows.append(level)
        last_kind = kind
    for i in range(n):
        ax.text(float(offsets[i]), -rows[i], labels[i], ha="center", va="center", fontsize=8,
                bbox={"boxstyle": "round", "fc": BRANCH_COLOURS[kinds[i]], "alpha": 0.35})
    ax.set_xlim(-0.7, float(offsets.max()) + 0.7)
    ax.set_ylim(-max(rows) - 0.7, 0.7)
    ax.set_xlabel("position − position of the current token")
    ax.set_yticks([])
    for kind, colour in BRANCH_COLOURS.items():
        ax.scatter([], [], color=colour, alpha=0.5, label=kind)
    ax.legend(loc="lower right", fontsize=8)
    ax.set_title("one forward: the current token, the window, the candidates")
    colours = [BRANCH_COLOURS[k] for k in kinds]
    image = torch.zeros(n, n, 4)
    for r in range(n):
        for c in range(n):
            if mask[r, c]:
                image[r, c] = torch.tensor(plt.matplotlib.colors.to_rgba(colours[r], 0.8))
    axm.imshow(image.numpy(), interpolation="nearest")
    axm.set_xticks(range(n), labels, rotation=90, fontsize=7)
    axm.set_yticks(range(n), labels, fontsize=7)
    axm.set_title("who sees whom (row attends to column)")
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def shape_sweep(shapes: Sequence[str], tau: Sequence[float], predicted: Sequence[float], widths: Sequence[float],
                title: str = "") -> Figure:
    """Per shape: tokens per forward τ (bars) and the cost model's predicted speed-up over AR (dots), with the
    forward's mean width written under each bar."""
    fig, ax = plt.subplots(figsize=(10, 3.8))
    x = range(len(shapes))
    ax.bar(x, tau, color="tab:blue", alpha=0.6, label="τ, tokens per forward (measured)")
    ax.plot(x, predicted, "o", color="tab:red", label="predicted × AR on this machine")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xticks(list(x), [f"{s}\nwidth {w:.0f}" for s, w in zip(shapes, widths)], fontsize=8)
    ax.set_xlabel("(W, N, G), prompt n-grams seeded (+) or not")
    ax.legend(fontsize=8)
    ax.set_title(title)
    fig.tight_layout()
    return fig


def lookahead_panel(runs: dict, tokenizer):
    """Sliders over cached runs: ``runs[(W, N, G, seeded)]`` a Generation of :func:`~specdec_core.lookahead.lookahead_generate`. Shows
    τ, pool hits, the accepted lengths and the longest n-gram the pool got right."""
    import ipywidgets as w
    from IPython.display import display

    keys = sorted(runs)
    pick = lambda i: sorted({k[i] for k in keys})  # noqa: E731
    out = w.Output()

    def show(W: int, N: int, G: int, seeded: bool) -> None:
        out.clear_output(wait=True)
        with out:
            gen = runs.get((W, N, G, seeded))
            if gen is None:
                print(f"no cached run for (W, N, G) = ({W}, {N}, {G}), seeded = {seeded}: pick another")
                return
            s = gen.stats
            best = max(s.steps, key=lambda st: st.accepted)
            counts = [s.accepted_lengths.count(k) for k in range(N)]
            print(f"τ = {gen.tokens_per_call:.2f} tokens per forward; the pool had a candidate in {s.pool_hits} of "
                  f"{s.target_calls} steps; mean width {sum(s.verify_widths) / len(s.verify_widths):.1f}")
            print("steps that accepted 0, 1, … candidate tokens:", counts)
            if best.accepted:
                tree, _ = candidate_tree(best.tails)
                print(f"longest accepted n-gram: {tokenizer.decode([best.current])!r} → "
                      f"{tokenizer.decode(tree.tokens[best.path].tolist())!r}")

    controls = {"W": w.SelectionSlider(options=pick(0)), "N": w.SelectionSlider(options=pick(1)),
                "G": w.SelectionSlider(options=pick(2)), "seeded": w.Checkbox(description="prompt n-grams")}
    w.interactive_output(show, controls)
    display(w.VBox([w.HBox(list(controls.values())), out]))
    show(*(controls[k].value for k in ("W", "N", "G", "seeded")))
