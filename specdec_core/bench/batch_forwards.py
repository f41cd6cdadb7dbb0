"""The cost model under load, measured: t(B, n), d(B) and a compute rate, through the harness → ``load_costs.LoadCosts``.

    costs = batch_forwards.measure(target, draft, batches=(1, 2, 4, 8), widths=(1, 2, 3, 5), context=80)
    costs.gain(8, gamma=2, alpha=0.6)              # load_costs.py: speculation's predicted gain at B = 8

Per B, one :class:`~specdec_core.batch.BatchDecoder` of the target and one of the draft hold B rows of ``context``
random tokens (seeded), in a buffer of the runs' own ``capacity`` (the attention reads every slot, masked or not).
A timed call is a burst of ``BURST`` batched forwards of one shape — the target over n new tokens a row, or the
draft over one — each followed by a rollback to the context (a length write: the next forward sees the same
cache); an entry is the call's seconds ÷ ``BURST``. The calls of one B run together, as a run at that B does, round
by round in an order shuffled each round, each round through :func:`~specdec_core.bench.harness.interleaved`
(one untimed warm-up round first), and an entry is the median over rounds. Why bursts and B by B: a lone forward
right after a different B's (another cache, another width) pays for the switch, which a run's step, following a
step of its own shape, never does; a table of lone forwards shuffled over every B priced t(1, 1) above the whole
AR loop's step that contains it.

The compute rate is a large product's FLOP/s on the engine itself: the target's largest decoder linear (its own
module: prepacked, int8 or plain, as the engine built it) on ``rows`` rows of its activations' dtype, through
the same harness. With ``machine.bandwidth()`` and the weight bytes it places the roofline's turn.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

import torch
from torch import nn
from transformers import PreTrainedModel

from .. import costmodel, machine
from ..batch import BatchDecoder
from ..generation import Generation
from ..load_costs import LoadCosts
from ..memory import weight_bytes
from .harness import Spread, interleaved

WIDTHS = (1, 2, 3, 4, 5)  # n = γ + 1 for γ ≤ 4
MATMUL_ROWS = 1024
BURST = 3  # forwards per timed call (module docstring)


def done() -> Generation:
    """What a timed forward hands the harness (it times calls that return a Generation): nothing generated."""
    return Generation([])


def shuffled_rounds(calls: dict[str, Callable[[], object]], rounds: int, seed: int = 0,
                    device: torch.device | str | None = None, on_call: Callable[[str], None] | None = None
                    ) -> dict[str, list[float]]:
    """Seconds of each call: one untimed warm-up round, then ``rounds`` rounds, each running every call once in a
    freshly shuffled order through :func:`~specdec_core.bench.harness.interleaved`."""
    rng, order = random.Random(seed), list(calls)
    wrapped = {name: (lambda fn=fn: (fn(), done())[1]) for name, fn in calls.items()}
    interleaved(wrapped, repeats=1, warmup=0, device=device)  # the warm-up round, untimed (its times dropped)
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(rounds):
        rng.shuffle(order)
        runs = interleaved({name: wrapped[name] for name in order}, repeats=1, warmup=0, device=device, on_call=on_call)
        for name in order:
            times[name].append(runs[name][0].seconds)
    return times


def largest_linear(model: PreTrainedModel) -> nn.Module:
    """The decoder linear with the most weights (any kind the engine put there: it has in/out_features); the
    output layer is left out (its product is the same kind, and 10× slower to time)."""
    head = model.get_output_embeddings()
    linears = [m for m in model.modules() if hasattr(m, "in_features") and hasattr(m, "out_features") and m is not head]
    if not linears:
        raise ValueError(f"{type(model).__name__} has no linear layer besides its output layer to time a product on")
    return max(linears, key=lambda m: m.in_features * m.out_features)


@torch.inference_mode()
def compute_rate(model: PreTrainedModel, rows: int = MATMUL_ROWS, rounds: int = 5, seed: int = 0) -> float:
    """FLOP/s of ``rows`` rows through the model's largest decoder linear (2 · rows · in · out FLOPs), median over
    ``rounds`` harness rounds after a warm-up: the rate a compute-bound step runs at on this engine."""
    linear = largest_linear(model)
    dtype = model.get_input_embeddings().weight.dtype  # the hidden states' dtype on this engine
    gen = torch.Generator().manual_seed(seed)  # host: the same rows on every device
    x = torch.randn(rows, linear.in_features, generator=gen).to(model.device, dtype)  # host: drawn from gen, then moved
    runs = interleaved({"product": lambda: (linear(x), done())[1]}, repeats=rounds, warmup=1, device=model.device)
    return 2.0 * rows * linear.in_features * linear.out_features / Spread.of([r.seconds for r in runs["product"]]).median


@torch.inference_mode()
def forward_table(target: PreTrainedModel, draft: PreTrainedModel, batches: Sequence[int], widths: Sequence[int],
                  context: int, capacity: int | None = None, rounds: int = 5, seed: int = 0,
                  on_call: Callable[[str], None] | None = None) -> tuple[dict[int, dict[int, float]], dict[int, float]]:
    """(t, d): t[B][n] the median seconds of a target forward of B rows × n new tokens, d[B] of a draft forward of B
    rows × 1, every row on a cache of ``context`` tokens (module docstring)."""
    if 1 not in widths:
        raise ValueError(f"widths must include n = 1 (the AR step every gain is a ratio of), got {list(widths)}")
    capacity = max(capacity or 0, context + max(widths) + 1)
    gen = torch.Generator().manual_seed(seed)  # host: the same context on every device
    ids = torch.randint(0, target.config.vocab_size, (max(batches), context + max(widths)),  # host: drawn from gen
                        generator=gen).to(target.device)
    table: dict[int, dict[int, float]] = {}
    draft_s: dict[int, float] = {}
    for b in batches:
        rows = list(ids[:b, :context])
        t_dec, d_dec = BatchDecoder(target, b, capacity), BatchDecoder(draft, b, capacity)
        t_dec.prefill(rows)
        d_dec.prefill(rows)
        calls = {f"t {b} {n}": burst(t_dec, ids[:b, context: context + n], context) for n in widths}
        calls[f"d {b}"] = burst(d_dec, ids[:b, context: context + 1], context)
        median = {name: Spread.of(ts).median / BURST for name, ts in shuffled_rounds(calls, rounds, seed + b, target.device,
                                                                                     on_call).items()}
        table[b] = {n: median[f"t {b} {n}"] for n in widths}
        draft_s[b] = median[f"d {b}"]
    return table, draft_s


def burst(dec: BatchDecoder, new: torch.Tensor, context: int) -> Callable[[], None]:
    """A call of ``BURST`` forwards of ``new`` [B, n] on ``dec``, each rolled back to ``context`` tokens a row."""
    def call() -> None:
        for _ in range(BURST):
            dec.step(new)
            dec.rollback([context] * len(new))
    return call


def measure(target: PreTrainedModel, draft: PreTrainedModel, batches: Sequence[int], widths: Sequence[int] = WIDTHS,
            context: int = 64, capacity: int | None = None, rounds: int = 5, params: int | None = None,
            engine: str = "", matmul_rows: int = MATMUL_ROWS, overhead_steps: int = costmodel.OVERHEAD_STEPS,
            bandwidth: float | None = None, seed: int = 0, on_call: Callable[[str], None] | None = None) -> LoadCosts:
    """The :class:`~specdec_core.load_costs.LoadCosts` of ``target`` (and ``draft``) on their engine here: t(B, n),
    d(B) (:func:`forward_table`), the compute rate (:func:`compute_rate`), the machine's bandwidth, the weight bytes,
    and the verify loop's extra o_v (``costmodel.loop_overhead``, batch 1). ``params``: the target's parameter count
    (default: its parameters' elements; pass the plain model's when the engine stores int8 weights as buffers);
    ``bandwidth``: bytes/s (default ``machine.bandwidth``, measured once per machine).
    The AR loop's step(B) comes from the batched AR runs (``LoadCosts.step_s``, bench/serving.py)."""
    if not batches or min(batches) < 1:
        raise ValueError(f"batches must be sizes >= 1, got {list(batches)}")
    t, d = forward_table(target, draft, sorted(set(batches)), sorted(set(widths)), context, capacity, rounds, seed, on_call)
    return LoadCosts(t=t, d=d, bandwidth=bandwidth or machine.bandwidth(target.device), weight_bytes=weight_bytes(target),
                     params=params or sum(p.numel() for p in target.parameters()),
                     flops_per_s=compute_rate(target, matmul_rows, rounds, seed),
                     verify_overhead_s=costmodel.loop_overhead(target, gamma=max(max(widths) - 1, 1), context=context,
                                                               steps=overhead_steps, seed=seed),
                     context=context, engine=engine)
