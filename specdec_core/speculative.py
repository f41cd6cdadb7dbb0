"""Speculative sampling (Leviathan et al. 2023; Chen et al. 2023): a cheap drafter guesses γ tokens,
the target checks all of them in ONE forward pass, and rejection sampling keeps the output
distributed exactly as the target's own samples.

Notation (docs/reference.md#speculative-sampling): p = target, q = draft. One step:

    x_1..x_γ ~ q                          drafter.propose(context, γ)
    p_1..p_{γ+1} = target([last, x_1..x_γ])   one forward over γ+1 positions
    accept x_i while u_i < p_i(x_i) / q_i(x_i)
    first rejection at i: emit y ~ norm(max(0, p_i − q_i))        (the residual)
    all accepted:         emit y ~ p_{γ+1}                         (the bonus token)

Why exact: P(emit x at a position) = q(x)·min(1, p(x)/q(x)) + P(reject)·residual(x)
= min(p, q)(x) + (1 − Σ min(p, q)) · (p − q)⁺(x) / Σ (p − q)⁺ = p(x), since Σ(p − q)⁺ = 1 − Σ min(p, q).

A *drafter* proposes the guesses (:mod:`specdec_core.drafters`: ``ModelDrafter`` runs a small LM,
``NGramDrafter`` copies from the context, ``feature_drafter.FeatureDrafter`` (EAGLE) reads the target's
hidden states); :func:`speculative_step` is the algorithm, :func:`speculative_generate` the loop around
it (the buffer, γ, EOS and the budget, timing, the record).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from transformers import PreTrainedModel

from .accept import verify, verify_greedy
from .batch import Prompts, is_batch
from .batch_speculative import speculative_generate_batch
from .drafters import Drafter
from .generation import Clock, Generation, Output
from .lm import Decoder, check_inputs
from .records import SpecStats, SpecStep
from .sampling import Warp
from .theory import AutoGamma, Chooser, FixedGamma, asks_auto

__all__ = ["speculative_generate", "speculative_step"]


def draft(drafter: Drafter, ids: torch.Tensor, length: int, k: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The drafter's ≤ k guesses after the context ids[:, :length], written into ids right after it.
    Returns (guesses [k'], q [k', V] or None when greedy)."""
    guesses, q = drafter.propose(ids[:, :length], k)
    guesses = guesses.to(ids.device)
    ids[0, length : length + guesses.numel()] = guesses
    return guesses, q


def speculative_step(target: Decoder, drafter: Drafter, ids: torch.Tensor, length: int, gamma: int, left: int,
                     warp: Warp, generator: torch.Generator | None, clock: Clock) -> tuple[list[int], SpecStep]:
    """Draft ≤ γ guesses after the context ids[:, :length], verify them in ONE target forward γ + 1 wide, keep
    what is accepted. ``target``'s cache holds ids[:, :length - 1]; ``left``: tokens the budget allows.

    The forward feeds ids[:, length - 1 : length + γ] = [last, x_1..x_k, pads]: a draft shorter than γ (a
    lookup that found nothing, the budget's end) is padded with what the buffer holds there (valid ids).
    The pads come last, so under the causal mask no guess sees them, and the rollback drops them: they are
    never kept. Afterwards the cache holds the context + the n accepted guesses and ids[0, length + n] is
    the target's own token. Returns (the n accepted guesses and that token, the step's record). Greedy,
    the step reads the device once: the accept test's result, the guesses included."""
    t0 = clock.mark()
    guesses, q = draft(drafter, ids, length, min(gamma, left))
    t1 = clock.mark()
    k = guesses.numel()
    logits = target.step(ids[:, length - 1 : length + gamma])[0, : k + 1]  # [k+1, V]: the pads' rows dropped
    if warp.greedy:
        verdict = verify_greedy(guesses, logits)
    elif q is None:
        raise TypeError(f"{type(drafter).__name__}.propose returned no q at temperature {warp.temperature}: "
                        "the sampled rule needs the distribution each guess was drawn from")
    else:
        verdict = verify(guesses, q.to(ids.device), warp(logits), generator)
    n, nxt, kind = verdict
    drafted = getattr(verdict, "drafted", None)
    if drafted is None:  # a rule that did not bring the guesses to the host with its result
        drafted = guesses.tolist()
    target.rollback(length + n)  # keep last + the accepted guesses; the rejected ones and the pads go
    drafter.accepted(n, k)
    if drafter.wants_hidden:
        drafter.observe(target.hidden[0, : n + 1])  # features of last + the accepted guesses
    ids[0, length + n] = nxt
    # The verify's host read came after t1 in the stream, so reading t1 now waits for nothing.
    record = SpecStep(drafted, n, nxt, kind, gamma, draft_s=clock.seconds(t0, t1), marks=(t1, clock.mark()))
    return drafted[:n] + [nxt], record


def _chooser(gamma: int | str | Chooser, costs) -> Chooser:
    """γ as a chooser: a fixed int, ``"auto"`` (an :class:`AutoGamma` for the machine ``costs``), or a chooser."""
    if asks_auto("gamma", gamma, costs, "an int >= 1 (draft tokens per step)"):
        return AutoGamma(costs.v, costs.step_s)
    if isinstance(gamma, int) and gamma >= 1:
        return FixedGamma(gamma)
    if hasattr(gamma, "choose") and hasattr(gamma, "max_gamma"):
        return gamma
    raise ValueError(f"gamma (draft tokens per step) must be an int >= 1, \"auto\" or an AutoGamma, got {gamma!r}")


@torch.inference_mode()
def speculative_generate(
    target: PreTrainedModel,
    drafter: Drafter,
    input_ids: Prompts,
    max_new_tokens: int,
    *,
    gamma: int | str | Chooser = 4,
    temperature: float = 0.0,
    top_k: int | None = None,
    top_p: float | None = None,
    eos_token_id: int | Iterable[int] | None = None,
    generator: torch.Generator | list[torch.Generator] | None = None,
    tokenizer=None,
    costs=None,
) -> Generation | list[Generation]:
    """Generate with speculative sampling; same output distribution as sampling ``target`` alone
    (the same tokens at temperature 0).

    input_ids [1, T]. ``drafter``: a :class:`ModelDrafter`, :class:`NGramDrafter` or any
    :class:`Drafter`. ``gamma``: guesses per step; ``"auto"`` chooses it before each step from the
    machine's cost model ``costs`` (a ``costmodel.CostModel``: v(n) and one step) and the run's α and c
    (:class:`~specdec_core.theory.AutoGamma`, which may also be passed itself). stats: a
    :class:`~specdec_core.records.SpecStats` (``alpha``, ``alpha_per_position``, ``draft_calls``,
    ``draft_time``, ``verify_time``, ``steps``, ``gammas``, …); ``target_calls`` counts the verify forwards
    (the prefill of the prompt emits no token).

    A batch — ``input_ids`` [B, T], or a list of [1, Tᵢ] prompts — runs on the static engine with a
    ``ModelDrafter`` or an ``NGramDrafter`` at a fixed γ, each row accepting its own number of guesses per step,
    and returns one Generation per row (:func:`~specdec_core.batch_speculative.speculative_generate_batch`;
    ``generator``: one per row, or one for all).
    """
    if is_batch(input_ids):
        return speculative_generate_batch(target, drafter, input_ids, max_new_tokens, gamma=gamma,
                                          temperature=temperature, top_k=top_k, top_p=top_p,
                                          eos_token_id=eos_token_id, generator=generator, tokenizer=tokenizer)
    check_inputs(target, input_ids, max_new_tokens)
    chooser = _chooser(gamma, costs)
    if not isinstance(drafter, Drafter):
        raise TypeError(f"{type(drafter).__name__} is not a drafter: subclass specdec_core.drafters.Drafter "
                        "and write its propose(context, k)")
    warp = Warp(temperature, top_k, top_p)
    drafter.begin(warp, generator)
    # A feature drafter (EAGLE) also reads the target's hidden states of every accepted token.
    dec = Decoder(target, keep_hidden=drafter.wants_hidden, layers=drafter.hidden_layers)
    # One preallocated buffer: the context is ids[:, :length], guesses are written after it and the accepted
    # ones stay there; zeros (valid ids) where a short draft's pads are read.
    length = input_ids.shape[1]
    ids = torch.zeros(1, length + max_new_tokens + chooser.max_gamma + 1, dtype=torch.long, device=target.device)
    ids[:, :length] = input_ids
    out, clock, steps = Output(max_new_tokens, eos_token_id), Clock(target.device), []
    if length > 1:  # the cache holds everything but the last token
        dec.prefill(ids[:, : length - 1])
        if drafter.wants_hidden:
            drafter.observe(dec.hidden[0])
    while not out.done:
        tokens, step = speculative_step(dec, drafter, ids, length, chooser.choose(out.left), out.left, warp,
                                        generator, clock)
        out.emit(tokens)
        chooser.update(step)
        steps.append(step)
        length += len(tokens)
    wall = clock.stop()
    for step in steps:
        step.verify_s, step.marks = clock.seconds(*step.marks), ()
    stats = SpecStats(wall_time=wall, target_calls=len(steps), draft_calls=drafter.calls, steps=steps)
    return Generation(out.tokens, tokenizer.decode(out.tokens) if tokenizer is not None else None, stats)
