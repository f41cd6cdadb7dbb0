"""Figures of lessons 01–03: the AR baseline, the naive method, speculative sampling.
Each function takes plain data and returns a Figure."""

from __future__ import annotations

from .base import Figure, plt

# ---------------------------------------------------------------- lesson 03: speculative sampling
STEP_COLOURS = {"accepted": "#9be29b", "rejected": "#f4a3a3", "resampled": "#ffd27f", "bonus": "#9cc8ff"}


def speculative_steps(tokenizer, steps: list, max_steps: int = 6) -> Figure:
    """Draw speculative steps (``records.SpecStep``) as coloured tokens: green accepted, red rejected (in italics),
    orange the target's replacement drawn from the residual, blue the bonus token."""
    steps = steps[:max_steps]
    width_in = 11.0
    fig, ax = plt.subplots(figsize=(width_in, 0.55 * len(steps) + 0.8))
    fig.subplots_adjust(left=0.01, right=0.99, top=0.95, bottom=0.02)
    ax.set_axis_off()
    # x in units of one monospace character (10 pt DejaVu Sans Mono is ≈ 0.6 × 10 pt wide)
    chars = width_in * 0.98 * 72 / 6.0
    ax.set_xlim(0, chars)
    ax.set_ylim(len(steps) + 0.5, -0.8)
    for row, step in enumerate(steps):
        n = step.accepted
        pieces = [(t, "accepted") for t in step.drafted[:n]]
        pieces += [(t, "rejected") for t in step.drafted[n : n + 1]]
        pieces.append((step.next, step.kind))
        x = 9.0
        ax.text(0.0, row, f"step {row + 1}", va="center", fontsize=9, family="monospace")
        for token, kind in pieces:
            label = repr(tokenizer.decode([token]))[1:-1] or "·"
            ax.text(x, row, label, va="center", fontsize=10, family="monospace",
                    fontstyle="italic" if kind == "rejected" else "normal",
                    bbox=dict(boxstyle="round,pad=0.25", fc=STEP_COLOURS[kind], ec="none"))
            x += len(label) + 1.5
    for i, (kind, colour) in enumerate(STEP_COLOURS.items()):
        ax.text(9.0 + 14 * i, -0.6, kind, fontsize=9, bbox=dict(boxstyle="round", fc=colour, ec="none"))
    return fig


def law_comparison(exact, counts, labels=None, title: str = "") -> Figure:
    """Bars: the exact probabilities vs the empirical frequencies of the same outcomes."""
    import numpy as np

    exact = np.asarray(exact, float).ravel()
    freq = np.asarray(counts, float).ravel() / max(np.sum(counts), 1)
    idx = np.arange(exact.size)
    fig, ax = plt.subplots(figsize=(10, 3.2))
    ax.bar(idx - 0.2, exact, width=0.4, label="target, exact")
    ax.bar(idx + 0.2, freq, width=0.4, label="speculative, sampled")
    if labels is not None:
        ax.set_xticks(idx, labels, rotation=60, fontsize=8)
    ax.set_ylabel("probability")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    return fig


def roofline(ns, forward_s, floor_s: float, title: str = "") -> Figure:
    """The cost model as a picture: time of one forward over n new tokens (left), and per token
    (right), against the memory floor — every weight byte read once at the measured bandwidth.
    ``forward_s``: one list of seconds per n, or {label: list} to compare engines."""
    curves = forward_s if isinstance(forward_s, dict) else {"measured": forward_s}
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    for label, seconds in curves.items():
        ms = [t * 1e3 for t in seconds]
        left.plot(ns, ms, "o-", label=f"{label} forward")
        right.plot(ns, [m / n for m, n in zip(ms, ns)], "o-", label=f"{label}, per token")
    left.axhline(floor_s * 1e3, color="grey", ls="--", label="floor: weight bytes ÷ bandwidth")
    right.plot(ns, [floor_s * 1e3 / n for n in ns], "--", color="grey", label="floor ÷ n")
    for ax, unit in ((left, "ms per forward"), (right, "ms per token")):
        ax.set_xlabel("new tokens per forward, n")
        ax.set_ylabel(unit)
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def breakdown_bars(breakdowns: dict[str, dict[str, float]], title: str = "") -> Figure:
    """Stacked bars of where a forward's time goes (``bench.probes.step_breakdown``), one bar per
    label (e.g. "plain, n = 1", "fast, n = 4")."""
    labels = list(breakdowns)
    parts = [k for k in next(iter(breakdowns.values())) if k != "total"]
    fig, ax = plt.subplots(figsize=(1.6 * len(labels) + 3, 3.6))
    bottom = [0.0] * len(labels)
    for part in parts:
        ms = [breakdowns[label][part] * 1e3 for label in labels]
        ax.bar(labels, ms, bottom=bottom, label=part)
        bottom = [b + m for b, m in zip(bottom, ms)]
    ax.set_ylabel("ms per forward")
    ax.legend(fontsize=8)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig


def pvalue_histograms(pvalues: dict[str, list[float]], bins: int = 10) -> Figure:
    """Histograms of repeated experiments' p-values, one panel per sampler: flat for an exact one
    (the dashed line: what uniform p-values give), piled up at 0 for a broken one."""
    fig, axes = plt.subplots(1, len(pvalues), figsize=(4.2 * len(pvalues), 3.0), squeeze=False)
    for ax, (name, ps) in zip(axes[0], pvalues.items()):
        ax.hist(ps, bins=bins, range=(0, 1), color="#1f77b4", edgecolor="white")
        ax.axhline(len(ps) / bins, color="grey", ls="--", lw=1, label="uniform")
        ax.set_xlim(0, 1)
        ax.set_title(f"{name}: {len(ps)} experiments", fontsize=10)
        ax.set_xlabel("chi-square p-value")
    axes[0][0].set_ylabel("experiments")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    return fig


def speedup_curves(alphas, c: float, v, max_gamma: int = 10, points=()) -> Figure:
    """Leviathan's S(α, γ) = E(α, γ)/(γc + v(γ + 1)) against γ for several α; measured points on top.
    ``v``: one number, or the machine's v(n) (a callable, e.g. ``CostModel.v``)."""
    from ..theory import speedup

    gammas = list(range(1, max_gamma + 1))
    fig, ax = plt.subplots(figsize=(7, 4))
    for a in alphas:
        ax.plot(gammas, [speedup(a, g, c, v) for g in gammas], label=f"α = {a:.2f}")
    for p in points:
        ax.plot(p.gamma, p.measured_speedup, "ko")
        ax.annotate(f"measured\nα={p.alpha:.2f}", (p.gamma, p.measured_speedup), fontsize=8,
                    xytext=(5, 5), textcoords="offset points")
    ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax.set_xlabel("γ (draft tokens per step)")
    ax.set_ylabel("speed-up over plain decoding")
    ax.set_title(f"S = E(α, γ) / (γc + v(γ+1)),  c = {c:.2f}, " + ("v(n) measured" if callable(v) else f"v = {v:.2f}"))
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------- lesson 01: autoregressive baseline
def kv_cache_latency(lengths, with_cache, without_cache, token_times: dict | None = None) -> Figure:
    """Left: seconds for ONE next token vs context length, with and without the KV cache.
    Right (optional): per-token latency of two generate runs, ``{"label": [seconds per token]}``."""
    panels = 2 if token_times else 1
    fig, axes = plt.subplots(1, panels, figsize=(5.5 * panels, 3.6), squeeze=False)
    ax = axes[0, 0]
    ax.plot(lengths, [t * 1e3 for t in without_cache], "o-", color="#d62728", label="no cache: re-run everything")
    ax.plot(lengths, [t * 1e3 for t in with_cache], "o-", color="#1f77b4", label="KV cache: run 1 token")
    ax.set_xlabel("context length (tokens)")
    ax.set_ylabel("ms for the next token")
    ax.set_ylim(bottom=0)
    ax.set_title("one decode step")
    ax.legend(fontsize=8)
    if token_times:
        ax = axes[0, 1]
        for label, times in token_times.items():
            ax.plot(range(1, len(times) + 1), [t * 1e3 for t in times], ".-", label=label)
        ax.set_xlabel("new token #")
        ax.set_ylabel("ms")
        ax.set_ylim(bottom=0)
        ax.set_title("a whole generation, token by token")
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def weights_vs_kv_cache(lengths, weight_bytes: int, kv_bytes_per_token: int, measured: dict | None = None,
                        title: str = "") -> Figure:
    """Memory of the weights (flat) and of the KV cache (linear in tokens); measured caches as dots."""
    fig, ax = plt.subplots(figsize=(6.5, 3.6))
    mb = 1024**2
    ax.plot(lengths, [weight_bytes / mb] * len(lengths), color="grey", label="weights")
    ax.plot(lengths, [n * kv_bytes_per_token / mb for n in lengths], color="#1f77b4", label="KV cache (formula)")
    if measured:
        ax.plot(list(measured), [b / mb for b in measured.values()], "o", color="#ff7f0e", label="KV cache (measured)")
    ax.set_xlabel("tokens in the context (batch 1)")
    ax.set_ylabel("MB")
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def next_token_bars(probs, labels, title: str = "") -> Figure:
    """A bar chart of a next-token distribution over the given (already selected) tokens."""
    fig, ax = plt.subplots(figsize=(9, 3.2))
    ax.bar(range(len(probs)), probs, color="#1f77b4")
    ax.set_xticks(range(len(labels)), labels, rotation=60, fontsize=8)
    ax.set_ylabel("probability")
    ax.set_ylim(0, 1)
    ax.set_title(title)
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------- lesson 02: the naive method
def first_token_histograms(bars: dict, labels, title: str = "") -> Figure:
    """Grouped bars, one group per token: ``{"series name": [probability per token]}``."""
    import numpy as np

    idx = np.arange(len(labels))
    width = 0.8 / max(len(bars), 1)
    fig, ax = plt.subplots(figsize=(11, 3.6))
    for i, (name, values) in enumerate(bars.items()):
        ax.bar(idx + (i - (len(bars) - 1) / 2) * width, values, width=width, label=name)
    ax.set_xticks(idx, labels, rotation=60, fontsize=8)
    ax.set_ylabel("probability")
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def score_bars(prompt_labels, scores: dict, title: str = "") -> Figure:
    """Average log-likelihood per prompt for several texts: ``{"text kind": [score per prompt]}``."""
    import numpy as np

    idx = np.arange(len(prompt_labels))
    width = 0.8 / max(len(scores), 1)
    fig, ax = plt.subplots(figsize=(10, 3.6))
    for i, (name, values) in enumerate(scores.items()):
        ax.bar(idx + (i - (len(scores) - 1) / 2) * width, values, width=width, label=name)
    ax.set_xticks(idx, prompt_labels, fontsize=8)
    ax.set_ylabel("avg log-likelihood (nats/token)")
    ax.axhline(0, color="black", lw=0.5)
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def threshold_tradeoff(draft_scores, target_scores, threshold: float, rates, distances, current, spec_rate: float) -> Figure:
    """Left: the five drafts' scores (and the target's own answers') against the threshold.
    Right: one-token drafts, exact — acceptance rate vs TV(output, target) as the threshold moves;
    the current threshold as a dot, speculative sampling (lesson 03) as a star at distance 0."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(11.5, 3.8))
    n = len(draft_scores)
    left.bar([i - 0.2 for i in range(n)], draft_scores, width=0.4, color="C0", label="draft's answer")
    left.bar([i + 0.2 for i in range(n)], target_scores, width=0.4, color="C1", label="target's own answer")
    left.axhline(threshold, color="black", ls="--", label=f"threshold {threshold:.2f}")
    left.set_xticks(range(n), [f"prompt {i + 1}" for i in range(n)], fontsize=8)
    left.set_ylabel("score (nats/token)")
    left.set_title("whole drafts: kept if their score ≥ threshold")
    left.legend(fontsize=8)
    right.plot(rates, distances, "-", color="grey")
    right.plot([current[0]], [current[1]], "o", color="#d62728", ms=9, label="this threshold")
    right.plot([spec_rate], [0.0], "*", color="#2ca02c", ms=14, label="speculative sampling (lesson 03)")
    right.set_xlabel("share of drafts accepted (speed)")
    right.set_ylabel("TV(output, target)")
    right.set_xlim(-0.02, 1.02)
    right.set_ylim(-0.02, 1.02)
    right.set_title("one-token drafts, exact: curve over all thresholds on log p(x)")
    right.legend(fontsize=8)
    fig.tight_layout()
    return fig
