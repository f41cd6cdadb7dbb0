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
it (buffers, γ, EOS, timing and statistics).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from transformers import PreTrainedModel

from .accept import verify, verify_greedy
from .drafters import Drafter
from .generation import Clock, Generation, eos_set, tokens_per_call
from .lm import Decoder, check_inputs
from .sampling import Warp
from .theory import AutoGamma

__all__ = ["speculative_generate", "speculative_step"]


def draft(drafter: Drafter, ids: torch.Tensor, length: int, k: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The drafter's ≤ k guesses after the context ids[:, :length], written into ids right after it.
    Returns (guesses [k'], q [k', V] or None when greedy)."""
    guesses, q = drafter.propose(ids[:, :length], k)
    guesses = guesses.to(ids.device)
    ids[0, length : length + guesses.numel()] = guesses
    return guesses, q


def speculative_step(target: Decoder, drafter: Drafter, ids: torch.Tensor, length: int, guesses: torch.Tensor,
                     q: torch.Tensor | None, warp: Warp,
                     generator: torch.Generator | None) -> tuple[int, int, str, list[int]]:
    """Verify the guesses [k] at ids[:, length : length + k] in ONE target forward and keep what is accepted.

    ``target``'s cache holds ids[:, :length - 1]; the forward feeds [last, x_1..x_k] and yields p_1..p_{k+1}.
    Afterwards the cache holds the context + the n accepted guesses, ids[0, length + n] is the target's
    own token, and the drafter has been told. Returns (n accepted, that token, "resampled" | "bonus", the
    guesses as ints). Greedy, the step reads the device once: the accept test's result, guesses included."""
    k = guesses.numel()
    logits = target.step(ids[:, length - 1 : length + k])[0]  # [k+1, V]
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
    target.rollback(length + n)  # keep last + the accepted guesses
    drafter.accepted(n, k)
    if drafter.wants_hidden:
        drafter.observe(target.hidden[0, : n + 1])  # features of last + the accepted guesses
    ids[0, length + n] = nxt
    return n, nxt, kind, drafted


def _schedule(gamma: int | str | AutoGamma, costs) -> tuple[int, AutoGamma | None]:
    """γ as (the most guesses per step, the AutoGamma that picks each step's γ or None)."""
    if gamma == "auto":
        if costs is None:
            raise ValueError('gamma="auto" needs the machine\'s cost model: pass '
                             'costs=costmodel.load_or_measure(target, "my target") (measured once, then cached)')
        gamma = AutoGamma(costs.v, costs.step_s)
    if isinstance(gamma, AutoGamma):
        return gamma.max_gamma, gamma
    if not isinstance(gamma, int) or gamma < 1:
        raise ValueError(f"gamma (draft tokens per step) must be an int >= 1, \"auto\" or an AutoGamma, got {gamma!r}")
    return gamma, None


def _stats(steps: list[dict], n_new: int, drafter: Drafter, wall: float, gamma: int) -> dict:
    """The statistics of a generation from its steps' records (``speculative_generate``'s docstring)."""
    examined, accepted = [0] * gamma, [0] * gamma
    for s in steps:
        for i in range(min(s["accepted"] + 1, len(s["drafted"]))):  # positions the accept test looked at
            examined[i] += 1
            accepted[i] += i < s["accepted"]
    n_examined = sum(examined)
    return {
        "wall_time": wall,
        "target_calls": len(steps),
        "draft_calls": drafter.calls,
        "alpha": sum(accepted) / n_examined if n_examined else float("nan"),
        "alpha_per_position": [a / e if e else float("nan") for a, e in zip(accepted, examined)],
        "accepted_lengths": [s["accepted"] for s in steps],
        "tokens_per_call": tokens_per_call(n_new, len(steps)),
        "draft_time": sum(s["draft_s"] for s in steps),
        "verify_time": sum(s["verify_s"] for s in steps),
        "steps": steps,
        "gammas": [s["gamma"] for s in steps],  # γ of each step (one value unless gamma="auto")
    }


@torch.inference_mode()
def speculative_generate(
    target: PreTrainedModel,
    drafter: Drafter,
    input_ids: torch.Tensor,
    max_new_tokens: int,
    *,
    gamma: int | str | AutoGamma = 4,
    temperature: float = 0.0,
    top_k: int | None = None,
    top_p: float | None = None,
    eos_token_id: int | Iterable[int] | None = None,
    generator: torch.Generator | None = None,
    tokenizer=None,
    costs=None,
) -> Generation:
    """Generate with speculative sampling; same output distribution as sampling ``target`` alone
    (the same tokens at temperature 0).

    input_ids [1, T]. ``drafter``: a :class:`ModelDrafter`, :class:`NGramDrafter` or any
    :class:`Drafter`. ``gamma``: guesses per step; ``"auto"`` chooses it before each step from the
    machine's cost model ``costs`` (a ``costmodel.CostModel``: v(n) and one step) and the run's α and c
    (:class:`~specdec_core.theory.AutoGamma`, which may also be passed itself). stats: ``wall_time``,
    ``target_calls`` (verify forwards: the prefill of the prompt emits no token), ``draft_calls``, ``alpha``
    (accepted ÷ examined draft tokens), ``alpha_per_position``, ``accepted_lengths`` (per step),
    ``tokens_per_call``, ``draft_time``, ``verify_time``, ``steps`` (per step: guesses, accepted, next
    token, kind, γ, seconds drafting and verifying), ``gammas``.
    """
    check_inputs(target, input_ids, max_new_tokens)
    gamma, schedule = _schedule(gamma, costs)
    if not isinstance(drafter, Drafter):
        raise TypeError(f"{type(drafter).__name__} is not a drafter: subclass specdec_core.drafters.Drafter "
                        "and write its propose(context, k)")
    stops, device, warp = eos_set(eos_token_id), target.device, Warp(temperature, top_k, top_p)
    drafter.begin(warp, generator)
    # A feature drafter (EAGLE) also reads the target's hidden states of every accepted token.
    dec = Decoder(target, keep_hidden=drafter.wants_hidden, layers=drafter.hidden_layers)
    # Token ids live in one preallocated buffer: the context is ids[:, :length]; guesses are written
    # after it, and the accepted ones simply stay there (no concatenation per step).
    length = input_ids.shape[1]
    ids = torch.empty(1, length + max_new_tokens + gamma + 1, dtype=torch.long, device=device)
    ids[:, :length] = input_ids
    clock = Clock(device)  # phase times: events on a GPU, read after the run (no wait inside a step)
    if length > 1:  # the cache holds everything but the last token
        dec.prefill(ids[:, : length - 1])
        if drafter.wants_hidden:
            drafter.observe(dec.hidden[0])
    new: list[int] = []
    steps: list[dict] = []
    marks = []
    while len(new) < max_new_tokens and not (new and new[-1] in stops):
        k = schedule.choose() if schedule else gamma
        t0 = clock.mark()
        guesses, q = draft(drafter, ids, length, min(k, max_new_tokens - len(new)))
        t1 = clock.mark()
        n, nxt, kind, drafted = speculative_step(dec, drafter, ids, length, guesses, q, warp, generator)
        marks.append((t0, t1, clock.mark()))
        if schedule:  # the step's host read came after t1 in the stream: reading t1 waits for nothing
            schedule.update(min(n + 1, len(drafted)), n, len(drafted), clock.seconds(t0, t1))
        steps.append({"drafted": drafted, "accepted": n, "next": nxt, "kind": kind, "gamma": k})
        emitted = (drafted[:n] + [nxt])[: max_new_tokens - len(new)]  # = ids[0, length : length + n + 1]
        cut = next((i + 1 for i, t in enumerate(emitted) if t in stops), len(emitted))  # up to an EOS
        new += emitted[:cut]
        length += n + 1
    wall = clock.stop()
    for step, (t0, t1, t2) in zip(steps, marks):
        step["draft_s"], step["verify_s"] = clock.seconds(t0, t1), clock.seconds(t1, t2)
    stats = _stats(steps, len(new), drafter, wall, gamma)
    return Generation(new, tokenizer.decode(new) if tokenizer is not None else None, stats)
