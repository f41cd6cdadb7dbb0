"""ipywidgets panels over pure functions (``interactive_output`` style).

Each panel: a pure function in specdec_core computes the result (unit-tested); the panel only
wires sliders to it and draws. Sections, one per lesson.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import ipywidgets as widgets
from IPython.display import display

if TYPE_CHECKING:
    from .drafts import DrafterRow

__all__ = ["widgets", "display"]


# ---------------------------------------------------------------- lesson 03: γ and temperature
def speculative_panel(run_point, c: float, v, max_gamma: int = 8):
    """Sliders over γ and temperature. ``run_point(gamma, temperature)`` → bench.drafters.Point (the pure
    function; results are cached, so moving back to a setting is instant); the figure puts the
    measured point on Leviathan's curve for the measured α and the cost ratios c, v."""
    from functools import lru_cache

    from .. import viz

    cached = lru_cache(maxsize=None)(run_point)
    gamma = widgets.IntSlider(value=4, min=1, max=max_gamma, description="γ", continuous_update=False)
    temperature = widgets.SelectionSlider(options=[0.0, 0.7, 1.0], value=0.0, description="temperature",
                                          continuous_update=False, style={"description_width": "initial"})
    out = widgets.Output()

    def show(gamma: int, temperature: float) -> None:
        point = cached(gamma, temperature)
        out.clear_output(wait=True)
        with out:
            print(f"γ = {point.gamma}, T = {point.temperature}: α = {point.alpha:.2f}, "
                  f"tokens per target call = {point.tokens_per_call:.2f}, "
                  f"measured speed-up = {point.measured_speedup:.2f}×, theory = {point.predicted_speedup:.2f}×")
            fig = viz.speedup_curves([point.alpha if point.alpha == point.alpha else 0.0], c, v, max_gamma, [point])
            display(fig)
            viz.plt.close(fig)

    ui = widgets.interactive_output(show, {"gamma": gamma, "temperature": temperature})
    box = widgets.VBox([widgets.HBox([gamma, temperature]), out, ui])
    return box


# ---------------------------------------------------------------- lesson 01: the sampling step
def sampling_panel(logits, tokenizer, top: int = 15):
    """Sliders over temperature, top-k and top-p; bars of ``sampling.logits_to_probs`` (the pure,
    unit-tested function) on the ``top`` most likely tokens of ``logits`` [V]."""
    from .. import viz
    from ..sampling import logits_to_probs

    shown = logits.float().topk(top).indices
    labels = [repr(tokenizer.decode([int(i)])) for i in shown]
    temperature = widgets.FloatSlider(value=1.0, min=0.0, max=2.0, step=0.1, description="temperature",
                                      continuous_update=False)
    top_k = widgets.IntSlider(value=0, min=0, max=50, description="top-k (0 off)", continuous_update=False)
    top_p = widgets.FloatSlider(value=1.0, min=0.05, max=1.0, step=0.05, description="top-p", continuous_update=False)
    out = widgets.Output()

    def show(temperature: float, top_k: int, top_p: float) -> None:
        probs = logits_to_probs(logits, temperature, top_k or None, top_p)
        out.clear_output(wait=True)
        with out:
            kept = int((probs > 0).sum())
            print(f"tokens that can be drawn: {kept:,} of {probs.numel():,}; "
                  f"mass on the {top} shown: {probs[shown].sum():.3f}")
            fig = viz.next_token_bars(probs[shown].tolist(), labels,
                                      f"T = {temperature}, top-k = {top_k or 'off'}, top-p = {top_p}")
            display(fig)
            viz.plt.close(fig)

    ui = widgets.interactive_output(show, {"temperature": temperature, "top_k": top_k, "top_p": top_p})
    return widgets.VBox([widgets.HBox([temperature, top_k, top_p]), out, ui])


# ---------------------------------------------------------------- lesson 02: the threshold variant
def threshold_panel(draft_scores, target_scores, draft_times, score_times, target_times, draft_is_target,
                    q, p, value: float = -1.0, token_value: float = -4.0):
    """Two threshold sliders over the "keep the draft if its score ≥ threshold, else the target
    writes" variant. Left, whole drafts: ``naive.threshold_outcome`` on the measured prompts (scores
    are averages over many tokens, near 0). Right, one-token drafts: ``naive.threshold_first_token``,
    exact, with q and p (a score is one token's log p, much lower). The pure functions compute
    everything; this panel only draws."""
    import numpy as np

    from .. import viz
    from ..exactness import total_variation
    from ..naive import threshold_first_token, threshold_outcome, threshold_sweep

    grid = [float("-inf"), *np.linspace(-20.0, 1.0, 400).tolist(), float("inf")]
    rates, distances = threshold_sweep(q, p, grid)
    spec_rate = 1.0 - total_variation(p, q)
    low = float(np.floor(min([*draft_scores, *target_scores, value]) - 0.5))
    whole_slider = widgets.FloatSlider(value=value, min=low, max=0.0, step=0.05, description="whole drafts",
                                       continuous_update=False)
    token_slider = widgets.FloatSlider(value=token_value, min=-15.0, max=0.0, step=0.1, description="one token",
                                       continuous_update=False)
    out = widgets.Output()

    def show(threshold: float, token_threshold: float) -> None:
        whole = threshold_outcome(draft_scores, threshold, draft_times, score_times, target_times, draft_is_target)
        r, a = threshold_first_token(q, p, token_threshold)
        tv = total_variation(r, p.double())
        out.clear_output(wait=True)
        with out:
            print(f"whole drafts (measured prompts): {whole['accepted']:.0%} kept, speed-up {whole['speedup']:.2f}×, "
                  f"answers equal to the target's own: {whole['target_output']:.0%}")
            print(f"one-token drafts (exact): {a:.2%} accepted, TV(output, target) = {tv:.4f}   "
                  f"[speculative sampling: {spec_rate:.2%} accepted, TV = 0]")
            fig = viz.threshold_tradeoff(draft_scores, target_scores, threshold, rates, distances, (a, tv), spec_rate)
            display(fig)
            viz.plt.close(fig)

    ui = widgets.interactive_output(show, {"threshold": whole_slider, "token_threshold": token_slider})
    return widgets.VBox([widgets.HBox([whole_slider, token_slider]), out, ui])


# ---------------------------------------------------------------- lesson 07: Jacobi decoding
def jacobi_panel(model, tokenizer, prompts: dict, max_new_tokens: int = 16, block_sizes=(4, 8, 16),
                 inits=("repeat", "random", "pad"), seed: int = 0):
    """Prompt, block size and initial guess for Jacobi decoding: ``jacobi.jacobi_generate`` and
    ``jacobi.summarize`` (pure, unit-tested) give the numbers, the figure the first block's
    trajectory. ``prompts`` maps a label to input ids [1, T]. Results are cached: going back is instant."""
    import torch

    from .. import viz
    from ..jacobi import fixed_counts, jacobi_generate, summarize

    cache: dict = {}

    def run(label: str, block_size: int, init: str):
        if (label, block_size, init) not in cache:
            cache[label, block_size, init] = jacobi_generate(
                model, prompts[label], max_new_tokens, block_size=block_size, init=init,
                eos_token_id=tokenizer.eos_token_id, generator=torch.Generator().manual_seed(seed),
                tokenizer=tokenizer)
        return cache[label, block_size, init]

    labels = list(prompts)
    prompt = widgets.Dropdown(options=labels, value=labels[0], description="prompt")
    block = widgets.SelectionSlider(options=list(block_sizes), value=block_sizes[-1], description="block size",
                                    continuous_update=False)
    init = widgets.ToggleButtons(options=list(inits), value=inits[0], description="init")
    out = widgets.Output()

    def show(label: str, block_size: int, init_kind: str) -> None:
        gen = run(label, block_size, init_kind)
        states = gen.stats.trajectory[0]
        truth = gen.new_tokens[: len(states[0])]
        out.clear_output(wait=True)
        with out:
            print(", ".join(f"{k} {v}" for k, v in summarize(gen).items()))
            print("text:", repr(gen.text))
            fig = viz.jacobi_trajectory(states, truth, fixed_counts(states, len(truth)),
                                        label=lambda t: tokenizer.decode([t]), title="first block")
            display(fig)
            viz.plt.close(fig)

    ui = widgets.interactive_output(show, {"label": prompt, "block_size": block, "init_kind": init})
    return widgets.VBox([widgets.HBox([prompt, block]), init, out, ui])


# ---------------------------------------------------------------- lesson 05: NF4 block size
def quantization_panel(weights, sizes=(16, 32, 64, 128, 256, 512, 1024, 4096)):
    """Block size, code book and double quantization for ``weights``: ``nf4.tradeoff`` (the pure,
    unit-tested function) gives the error and the bits per weight; the figure marks the choice on
    the curves of the three code books."""
    from functools import lru_cache

    from .. import nf4, viz

    cached = lru_cache(maxsize=None)(lambda b, t, dq: nf4.tradeoff(weights, b, t, dq))
    size = widgets.SelectionSlider(options=list(sizes), value=64, description="block size", continuous_update=False)
    kind = widgets.ToggleButtons(options=["nf4", "fp4", "int4"], value="nf4", description="code book")
    double = widgets.Checkbox(value=False, description="double quantization")
    out = widgets.Output()

    def show(blocksize: int, quant_type: str, double_quant: bool) -> None:
        point = cached(blocksize, quant_type, double_quant)
        rows = {t: [cached(b, t, False) for b in sizes] for t in ("nf4", "fp4", "int4")}
        rows["nf4 + dq"] = [cached(b, "nf4", True) for b in sizes]
        out.clear_output(wait=True)
        with out:
            print(f"{quant_type}, block {blocksize}{' + double quantization' if double_quant else ''}: "
                  f"rms error {point['relative_error']:.2%} of the rms weight, "
                  f"{point['bits_per_parameter']:.3f} bits per weight")
            fig = viz.quantization_tradeoff(rows, point)
            display(fig)
            viz.plt.close(fig)

    ui = widgets.interactive_output(show, {"blocksize": size, "quant_type": kind, "double_quant": double})
    return widgets.VBox([widgets.HBox([size, double]), kind, out, ui])


# ---------------------------------------------------------------- lesson 06: precision of target and draft
def precision_panel(table, predict):
    """Pick the precision of the target and of the draft separately: ``predict(table, target, draft)``
    (``bench.quantized.predict``, the pure, unit-tested function) reads memory and α from the measured
    ``quantized.PrecisionTable`` and predicts tokens/s with Leviathan's formula; the grids outline the choice."""
    from .. import viz

    names = list(table.names)
    target = widgets.Dropdown(options=names, value=names[-1], description="target")
    draft = widgets.Dropdown(options=names, value=names[-1], description="draft")
    out = widgets.Output()
    grid = {(t, d): predict(table, t, d) for t in names for d in names}

    def show(target_name: str, draft_name: str) -> None:
        p = grid[target_name, draft_name]
        measured = p["measured_spec_tokens_per_s"]
        out.clear_output(wait=True)
        with out:
            print(f"target {target_name}, draft {draft_name}: {p['memory_mb']:,.0f} MB of weights, α = {p['alpha']:.2f}, "
                  f"{p['tokens_per_step']:.2f} tokens per target call (γ = {table.gamma})")
            print(f"predicted: target alone {p['ar_tokens_per_s']:.1f} tokens/s, speculative "
                  f"{p['spec_tokens_per_s']:.1f} tokens/s ({p['speedup']:.2f}×)"
                  + (f"; measured speculative {measured:.1f} tokens/s" if measured == measured else ""))
            rows = [[grid[t, d] for d in names] for t in names]
            fig = viz.precision_grid(names, [[c["alpha"] for c in r] for r in rows],
                                     [[c["spec_tokens_per_s"] for c in r] for r in rows],
                                     [[c["memory_mb"] for c in r] for r in rows],
                                     chosen=(names.index(target_name), names.index(draft_name)))
            display(fig)
            viz.plt.close(fig)

    ui = widgets.interactive_output(show, {"target_name": target, "draft_name": draft})
    return widgets.VBox([widgets.HBox([target, draft]), out, ui])


# ---------------------------------------------------------------- lesson 04: choosing γ per drafter
def drafter_panel(sweeps: dict[str, list[DrafterRow]], max_gamma: int) -> widgets.VBox:
    """A drafter dropdown and a γ slider over precomputed sweeps: ``sweeps`` maps a drafter's name to
    its ``drafter_eval.gamma_sweep`` rows (one ``DrafterRow`` per γ). ``viz_drafts.drafter_view`` (the
    pure, unit-tested function) draws theory's S curve for the α, c, v measured at that γ with the
    measured points on it, and describes the row; nothing is re-run, so moving the slider is instant."""
    from .. import viz
    from .drafts import drafter_view

    if not sweeps:
        raise ValueError("no sweeps: run drafter_eval.gamma_sweep for at least one drafter")
    names = list(sweeps)
    drafter = widgets.Dropdown(options=names, value=names[0], description="drafter")
    gamma = widgets.IntSlider(value=min(4, max_gamma), min=1, max=max_gamma, description="γ",
                              continuous_update=False)
    out = widgets.Output()

    def show(name: str, g: int) -> None:
        fig, text = drafter_view(sweeps[name], g, name)
        out.clear_output(wait=True)
        with out:
            print(f"{name}, {text}")
            display(fig)
            viz.plt.close(fig)

    ui = widgets.interactive_output(show, {"name": drafter, "g": gamma})
    return widgets.VBox([widgets.HBox([drafter, gamma]), out, ui])
