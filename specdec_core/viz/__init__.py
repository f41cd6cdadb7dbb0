"""Figures and widgets of the course: matplotlib figures over plain data, ipywidgets panels over
pure functions.

    decoding.py      lessons 01–03: KV cache, the naive method, speculative steps, speed-up curves
    drafts.py        lesson 04: training curves, drafters side by side, γ curves
    quantization.py  lessons 05–06: NF4 levels, error vs block size, precision grid
    parallel.py      lesson 07: Jacobi trajectories, tokens per iteration
    cllm.py          lesson 08: the CLLM fine-tune's curves, tables and before/after trajectories
    jacobi_forcing.py  lesson 08b: the noise-aware mask, packed sequences, the ablation, side-by-side tables
    trees.py         lesson 04b: a token tree and its mask, v(n) per kind, τ against the node budget, the tree panel
    in_model.py      lesson 04c: acceptance per draft position per drafter, self-speculation's α per depth
    lookahead.py     lesson 07b: one lookahead step (window, candidates, mask), τ per shape, the shape panel
    report.py        lesson 09: the benchmark's bars
    serving.py       lesson 10: tokens/s against B (the roofline's turn), speculation's gain against B, the prediction panel
    widgets.py       the sliders of every lesson (imported on its own: it needs ipywidgets)

``from specdec_core import viz`` then ``viz.kv_cache_latency(...)``: every figure of the lesson
modules is available here by name.
"""

from .base import Figure, plt
from .decoding import (
    STEP_COLOURS,
    breakdown_bars,
    first_token_histograms,
    kv_cache_latency,
    law_comparison,
    next_token_bars,
    pvalue_histograms,
    roofline,
    score_bars,
    speculative_steps,
    speedup_curves,
    threshold_tradeoff,
    weights_vs_kv_cache,
)
from .in_model import acceptance_by_position, alpha_by_depth
from .lookahead import lookahead_step, shape_sweep
from .parallel import JACOBI_COLOURS, jacobi_trajectory, jacobi_vs_ar, label_cells
from .quantization import (
    QUANT_COLOURS,
    nf4_levels,
    precision_grid,
    quantization_results,
    quantization_tradeoff,
    quantized_bars,
)
from .report import benchmark_bars
from .trees import step_picture, tau_vs_budget, tree_panel, tree_picture, v_curves

__all__ = [
    "Figure", "JACOBI_COLOURS", "QUANT_COLOURS", "STEP_COLOURS", "acceptance_by_position", "alpha_by_depth", "benchmark_bars", "breakdown_bars", "first_token_histograms",
    "jacobi_trajectory", "jacobi_vs_ar", "kv_cache_latency", "label_cells", "law_comparison", "lookahead_step", "next_token_bars",
    "nf4_levels", "plt", "pvalue_histograms", "precision_grid", "quantization_results", "quantization_tradeoff", "quantized_bars", "roofline",
    "score_bars", "shape_sweep", "speculative_steps", "speedup_curves", "step_picture", "tau_vs_budget", "threshold_tradeoff",
    "tree_panel", "tree_picture",
    "v_curves", "weights_vs_kv_cache",
]
