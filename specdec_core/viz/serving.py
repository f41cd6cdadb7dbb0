"""Lesson 10's figures, drawn from the serving report (``results/serving-cpu.json``, ``bench/serving.py``): tokens/s
against the batch size with the roofline's turn, speculation's gain against B beside the cost model's prediction
and the crossover, and a panel whose sliders (B, γ, α) move the prediction over the stored points.

    results = json.loads(Path("results/serving-cpu.json").read_text())
    viz.serving.throughput(results); viz.serving.gain(results); viz.serving.prediction_widget(results)

The prediction is ``load_costs.LoadCosts.gain`` on the report's own cost table (t(B, n) and d(B) measured in the
same run): this module draws, the concept module computes.
"""

from __future__ import annotations

from ..load_costs import LoadCosts
from .base import Figure, plt


def _median(row: dict, key: str) -> float:
    return row[key]["median"]


def _whiskers(rows: list[dict], key: str, scale: float = 1.0) -> list[list[float]]:
    return [[scale * (r[key]["median"] - r[key]["lo"]) for r in rows], [scale * (r[key]["hi"] - r[key]["median"]) for r in rows]]


def throughput(results: dict, title: str = "") -> Figure:
    """Left: batched AR's tokens/s summed over the rows and per sequence against B (medians, min–max whiskers).
    Right: the step time against B beside the roofline — the memory floor (weight bytes ÷ bandwidth, flat) and the
    compute line (B tokens × 2 · params ÷ FLOP/s); their crossing, the roofline's turn B*, is marked on both."""
    rows = results["ar"]
    if not rows:
        raise ValueError("the report has no batched AR rows: run python -m specdec_core.bench.serving first")
    costs = LoadCosts.from_json(results["costs"])
    bs = [r["batch"] for r in rows]
    turn = results.get("roofline_turn") or costs.roofline_turn()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.8))
    left.errorbar(bs, [_median(r, "tokens_per_s") for r in rows], yerr=_whiskers(rows, "tokens_per_s"), fmt="o-",
                  capsize=3, label="summed over the B rows")
    left.errorbar(bs, [_median(r, "tokens_per_s_per_seq") for r in rows], yerr=_whiskers(rows, "tokens_per_s_per_seq"),
                  fmt="s--", capsize=3, label="per sequence")
    left.set_ylabel("decode tokens/s (median)")
    right.errorbar(bs, [1e3 * _median(r, "step_s") for r in rows], yerr=_whiskers(rows, "step_s", 1e3), fmt="o-",
                   capsize=3, label="batched AR step (measured)")
    floor = 1e3 * costs.weight_bytes / costs.bandwidth
    right.plot(bs, [floor] * len(bs), "--", color="grey", label="memory floor: weight bytes ÷ bandwidth")
    right.plot(bs, [1e3 * b * costs.flops_per_token / costs.flops_per_s for b in bs], ":", color="black",
               label="compute: B × 2·params ÷ FLOP/s")
    right.set_ylabel("ms per step")
    for ax in (left, right):
        ax.axvline(turn, color="tab:red", lw=1, ls="-.", label=f"roofline's turn B* ≈ {turn:.0f}")
        ax.set_xscale("log", base=2)
        ax.set_xticks(bs, [str(b) for b in bs])
        ax.set_xlabel("batch size B")
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=8)
    fig.suptitle(title or f"batched AR on {results.get('engine', {}).get('name', 'our engine')}", fontsize=10)
    fig.tight_layout()
    return fig


def gain(results: dict, title: str = "") -> Figure:
    """Speculation's gain over batched AR against B: one colour per γ, measured (points, min–max whiskers) and
    predicted by the cost model from the run's α (line), adaptive γ (black stars) where it ran; 1 = break-even,
    the measured crossover marked."""
    spec = results["spec"]
    if not spec:
        raise ValueError("the report has no speculation rows: run python -m specdec_core.bench.serving first")
    fig, ax = plt.subplots(figsize=(7, 4))
    for i, g in enumerate(sorted({r["gamma"] for r in spec})):
        rows = sorted((r for r in spec if r["gamma"] == g), key=lambda r: r["batch"])
        bs = [r["batch"] for r in rows]
        ax.errorbar(bs, [_median(r, "gain") for r in rows], yerr=_whiskers(rows, "gain"), fmt="o", color=f"C{i}",
                    capsize=3, label=f"γ = {g} measured")
        ax.plot(bs, [r["predicted"] for r in rows], "-", color=f"C{i}", alpha=0.7, label=f"γ = {g} predicted")
    if results.get("adaptive"):
        rows = results["adaptive"]
        ax.errorbar([r["batch"] for r in rows], [_median(r, "gain") for r in rows], yerr=_whiskers(rows, "gain"),
                    fmt="*", color="black", ms=10, capsize=3, label="adaptive γ (per step)")
    ax.axhline(1.0, color="grey", ls="--", lw=1, label="break-even (batched AR)")
    crossover = results.get("crossover", {}).get("measured")
    if crossover:
        ax.axvline(crossover, color="tab:red", lw=1, ls="-.", label=f"crossover: B = {crossover}")
    bs = sorted({r["batch"] for r in spec})
    ax.set_xscale("log", base=2)
    ax.set_xticks(bs, [str(b) for b in bs])
    ax.set_xlabel("batch size B")
    ax.set_ylabel("speculation's tokens/s ÷ batched AR's")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=7, loc="upper right")
    err = results.get("prediction_error", {}).get("median")
    ax.set_title(title or "speculation under load" + (f" (prediction's median error {err:.0%})" if err is not None else ""),
                 fontsize=10)
    fig.tight_layout()
    return fig


def predicted_gains(results: dict, gamma: int, alpha: float) -> dict[int, float]:
    """B → the cost model's gain at γ and α over the report's measured batches (the widget's line)."""
    costs = LoadCosts.from_json(results["costs"])
    return {b: costs.gain(b, gamma, alpha) for b in costs.batches}


def load_line(rows: list[dict], rate: float) -> str:
    """The stored load sweep at one rate: each mode's median TTFT, TPOT and throughput."""
    at = [r for r in rows if r["rate"] == rate]
    return f"{rate:.2f} requests/s (stored load sweep): " + "; ".join(
        f"{r['mode']}: TTFT {1e3 * r['median_ttft']:.0f} ms, TPOT {1e3 * r['median_tpot']:.0f} ms, "
        f"{r['throughput']:.1f} tokens/s" for r in at)


def prediction_widget(results: dict):
    """Sliders over B, γ and α: the predicted gain against B at (γ, α) drawn over the measured points of that γ, and
    a line with the prediction at the chosen B, the best γ there, and the crossover at that α. When the report has
    a load sweep, a second row's slider over its rates prints that rate's stored TTFT, TPOT and throughput."""
    import ipywidgets as widgets
    from IPython.display import display

    costs = LoadCosts.from_json(results["costs"])
    gammas, measured = costs.gammas(), results["spec"]
    alpha0 = float(results.get("crossover", {}).get("alpha") or 0.5)
    batch = widgets.SelectionSlider(options=costs.batches, value=costs.batches[0], description="B", continuous_update=False)
    gamma = widgets.SelectionSlider(options=gammas, value=gammas[0], description="γ", continuous_update=False)
    alpha = widgets.FloatSlider(value=round(alpha0, 2), min=0.0, max=1.0, step=0.05, description="α", continuous_update=False)
    out = widgets.Output()
    load = list((results.get("load") or {}).get("rows") or [])
    rates = sorted({r["rate"] for r in load})
    controls = {"batch": batch, "gamma": gamma, "alpha": alpha}
    if rates:
        controls["rate"] = widgets.SelectionSlider(options=[(f"{x:.2f}", x) for x in rates], value=rates[0],
                                                   description="requests/s", continuous_update=False)

    def show(batch: int, gamma: int, alpha: float, rate: float | None = None) -> None:
        line = predicted_gains(results, gamma, alpha)
        best, best_gain = costs.best(batch, alpha)
        crossover = costs.crossover(alpha)
        out.clear_output(wait=True)
        with out:
            print(f"B = {batch}, γ = {gamma}, α = {alpha:.2f}: predicted gain {line[batch]:.2f}× — best here: "
                  f"{'off (plain AR)' if best == 0 else f'γ = {best}, {best_gain:.2f}×'}; crossover at this α: "
                  f"{'none measured' if crossover is None else f'B = {crossover}'}")
            if rate is not None:
                print(load_line(load, rate))
            fig, ax = plt.subplots(figsize=(6.4, 3.6))
            ax.plot(list(line), list(line.values()), "-", label=f"predicted, γ = {gamma}, α = {alpha:.2f}")
            pts = sorted((r for r in measured if r["gamma"] == gamma), key=lambda r: r["batch"])
            ax.plot([r["batch"] for r in pts], [_median(r, "gain") for r in pts], "o", label=f"measured, γ = {gamma}")
            ax.plot([batch], [line[batch]], "x", color="black", ms=10)
            ax.axhline(1.0, color="grey", ls="--", lw=1)
            ax.set_xscale("log", base=2)
            ax.set_xticks(costs.batches, [str(b) for b in costs.batches])
            ax.set_xlabel("batch size B")
            ax.set_ylabel("gain over batched AR")
            ax.set_ylim(bottom=0)
            ax.legend(fontsize=8)
            fig.tight_layout()
            display(fig)
            plt.close(fig)

    ui = widgets.interactive_output(show, controls)
    rows = [widgets.HBox([batch, gamma, alpha])] + ([widgets.HBox([controls["rate"]])] if rates else [])
    return widgets.VBox([*rows, out, ui])
