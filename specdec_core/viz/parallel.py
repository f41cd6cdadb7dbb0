"""Figures of lesson 07: Jacobi decoding (trajectories, tokens per iteration).
Each function takes plain data and returns a Figure."""

from __future__ import annotations

from .base import Figure, plt

# ---------------------------------------------------------------- lesson 07: Jacobi decoding
JACOBI_COLOURS = {"wrong": "#f6d5d5", "right": "#b9e4b9", "fixed": "#2e8b57", "after EOS": "#e6e6e6"}


def label_cells(ax, states, dark, label) -> None:
    """Write each state's tokens (``label``: id → text, spaces as ·, at most 6 characters) into its grid
    cells; white on the cells where ``dark[j, i]`` is true."""
    for j, state in enumerate(states):
        for i, token in enumerate(state):
            text = repr(label(token))[1:-1].replace(" ", "·")[:6] or "∅"
            ax.text(i, j, text, ha="center", va="center", fontsize=7, family="monospace",
                    color="white" if dark[j, i] else "black")


def jacobi_trajectory(states, truth, fixed, label=None, title: str = "") -> Figure:
    """One block's Jacobi trajectory as a grid: rows = iterations (0 = the guess), columns = positions.

    states: K+1 lists of n token ids; truth: the block's fixed point (shorter after an EOS); fixed:
    per state, how many leading tokens the convergence test has fixed (``jacobi.fixed_counts``);
    label: token id → text written in the cells (e.g. ``lambda t: tokenizer.decode([t])``).
    Colours: dark green fixed, light green right but not yet known to be, red wrong.
    """
    import numpy as np
    from matplotlib.colors import ListedColormap

    rows, n = len(states), len(states[0])
    kinds = list(JACOBI_COLOURS)
    grid = np.zeros((rows, n), dtype=int)
    for j, state in enumerate(states):
        for i, token in enumerate(state):
            if i >= len(truth):
                grid[j, i] = kinds.index("after EOS")
            elif i < fixed[j]:
                grid[j, i] = kinds.index("fixed")
            else:
                grid[j, i] = kinds.index("right" if token == truth[i] else "wrong")
    fig, ax = plt.subplots(figsize=(max(6.0, 0.72 * n + 1.2), max(2.6, 0.3 * rows + 1.3)))
    ax.imshow(grid, cmap=ListedColormap(list(JACOBI_COLOURS.values())), vmin=0, vmax=len(kinds) - 1, aspect="auto")
    if label is not None:
        label_cells(ax, states, grid == kinds.index("fixed"), label)
    ax.set_xticks(range(n), [str(i + 1) for i in range(n)], fontsize=8)
    ax.set_yticks(range(rows), [str(j) for j in range(rows)], fontsize=8)
    ax.set_xlabel("position in the block")
    ax.set_ylabel("iteration (0 = guess)")
    handles = [plt.Rectangle((0, 0), 1, 1, fc=c) for c in JACOBI_COLOURS.values()]
    ax.legend(handles, kinds, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    ax.set_title(title or f"{n} tokens in {rows - 1} iterations")
    fig.tight_layout()
    return fig


def jacobi_vs_ar(prompt_labels, tokens_per_iteration: dict, time_ratio: dict) -> Figure:
    """Grouped bars per prompt: tokens per iteration (AR = 1) and Jacobi's wall-clock ÷ AR's (lower is
    better). ``tokens_per_iteration`` and ``time_ratio`` map a setting (e.g. ``"block 16"``) to one
    value per prompt."""
    import numpy as np

    idx = np.arange(len(prompt_labels))
    width = 0.8 / max(len(tokens_per_iteration), 1)
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 3.8))
    for k, name in enumerate(tokens_per_iteration):
        left.bar(idx + k * width - 0.4 + width / 2, tokens_per_iteration[name], width, label=name)
        right.bar(idx + k * width - 0.4 + width / 2, time_ratio[name], width, label=name)
    left.axhline(1.0, color="grey", lw=0.8, ls="--")
    right.axhline(1.0, color="grey", lw=0.8, ls="--")
    left.set_ylabel("tokens per iteration (AR = 1)")
    left.set_title("tokens per forward pass")
    right.set_ylabel("Jacobi time ÷ AR time")
    right.set_title("wall-clock (below 1 = faster than AR)")
    for ax in (left, right):
        ax.set_xticks(idx, prompt_labels, rotation=20, fontsize=8, ha="right")
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
