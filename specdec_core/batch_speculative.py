"""Speculative sampling for a batch: every row drafts, ONE target forward verifies all rows' guesses, and each row
keeps its own number of them.

The step of :mod:`specdec_core.speculative` with a batch dimension (B rows, γ guesses each):

    guesses [B, γ], counts [B]          the drafters' guesses, row b's first counts[b] real (the rest pads)
    logits = target([last, x_1..x_γ])   [B, γ + 1, V]: row b's window read at its own length
    n [B], next [B]                     the accept rule, row by row on the device (accept_batch)
    one read                            n, next and the guesses of every row come to the host together
    rollback(lengths + n)               row b keeps its n_b accepted guesses: a length write per row

Rows diverge freely: row 0 may accept all γ while row 1 accepts none, and the next step reads each row's window at
its new length. With a list of generators, row b draws its guesses, its accept uniforms and its next token from
its own generator in the order its batch-1 run does, so each row reproduces that run's tokens at the same seed.
The drafters (:class:`BatchModelDraft`, :class:`BatchLookup`) are the batch's counterparts of ``ModelDrafter``
(the draft model on its own batched cache) and ``NGramDrafter`` (a lookup in each row's tokens, on the host).

:class:`SpecBatch` holds B slots and makes that step; the loops around it are :func:`speculative_generate_batch`
(B prompts, start to end) and :func:`specdec_core.scheduler.run_load` (requests arriving, a finished row's slot
refilled). A row's window starts where the target's cache of it ends: one token (its last) for a running row, the
whole prompt for a newcomer, so a newcomer's prefill IS its first verify, in the same forward as the others'.
γ may change from step to step — a :class:`GammaPolicy` picks it from the live rows, 0 being a plain AR step —
and a row is exact whatever it is: the rule accepts or rejects each guess, the guesses only decide how many.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Sequence
from numbers import Integral
from typing import Protocol, runtime_checkable

import torch
from transformers import PreTrainedModel

from .batch import BatchDecoder, Prompts, batch_rows, row_generators
from .drafters import Drafter, ModelDrafter, NGramDrafter
from .frspec import kept_guess
from .generation import Clock, Generation, Output
from .records import SpecStats, SpecStep
from .sampling import Warp, sample, uniforms


@runtime_checkable
class GammaPolicy(Protocol):
    """γ chosen before each step of a batch: ``policy(batch)`` → the guesses per row for the next step, given the
    live rows (0 = no drafting: a plain AR step for the batch); if it has ``observe(drafted, accepted)``, the loop
    calls it after each step with the guesses drafted and accepted, summed over the live rows."""

    def __call__(self, batch: int) -> int: ...


def check_gamma(gamma: int | GammaPolicy) -> None:
    """A batch's ``gamma``: an int >= 0 (one γ for every step) or a :class:`GammaPolicy`."""
    if isinstance(gamma, bool) or not (isinstance(gamma, Integral) and gamma >= 0 or callable(gamma)):
        raise ValueError(f"gamma (draft tokens per step) must be an int >= 0 for a batch (0: plain AR steps) or a "
                         f"policy, policy(batch) -> γ, got {gamma!r} (\"auto\" chooses per step for one sequence: run "
                         "a batch at a fixed γ, or give it a policy)")


def step_gamma(gamma: int | GammaPolicy, batch: int) -> int:
    """γ for the next step of ``batch`` live rows: the int itself, or what the policy says (checked)."""
    g = gamma if isinstance(gamma, Integral) else gamma(batch)
    if isinstance(g, bool) or not isinstance(g, Integral) or g < 0:
        raise ValueError(f"the γ policy {type(gamma).__name__} returned {g!r} for a batch of {batch}: a policy returns "
                         "an int >= 0 (0: a plain AR step)")
    return int(g)


def observe(gamma: int | GammaPolicy, steps: Sequence[SpecStep | None], seconds: float | None = None) -> None:
    """Tell a policy that has ``observe`` what the step drafted and accepted, summed over its live rows, and what
    else its ``observe`` takes: the guesses the rule examined (a row keeping n of k looks at min(n + 1, k)) and
    the step's ``seconds``."""
    if hasattr(gamma, "observe"):
        done = [s for s in steps if s is not None]
        counts = sum(len(s.drafted) for s in done), sum(s.accepted for s in done)
        takes = inspect.signature(gamma.observe).parameters
        extra = {"examined": sum(min(s.accepted + 1, len(s.drafted)) for s in done)} if "examined" in takes else {}
        if "seconds" in takes and seconds is not None:
            extra["seconds"] = seconds
        gamma.observe(*counts, **extra)


def times_steps(gamma: int | GammaPolicy) -> bool:
    """Whether the loop should time each step for ``gamma`` (a policy whose ``observe`` takes ``seconds``)."""
    return hasattr(gamma, "observe") and "seconds" in inspect.signature(gamma.observe).parameters


class BatchModelDraft:
    """A ``ModelDrafter``'s draft model on a batched cache. Row b's cache keeps its context up to ``kept[b]``
    (what the target accepted of its last proposal, as ``ModelDrafter.accepted`` keeps it)."""

    def __init__(self, drafter: ModelDrafter, batch: int, capacity: int, warp: Warp,
                 generators: Sequence[torch.Generator | None]) -> None:
        self.dec = BatchDecoder(drafter.decoder.model, batch, capacity)
        self.vocab_ids, self.vocab_size = drafter.vocab_ids, drafter.vocab_size
        self.warp, self.generators, self.calls = warp, generators, 0
        self.kept = [0] * batch

    def reset(self, row: int) -> None:
        """Slot ``row`` takes a newcomer: nothing of its cache is kept (its next proposal runs the whole prompt)."""
        self.dec.reset(row)
        self.kept[row] = 0

    def propose(self, ids: torch.Tensor, lengths: list[int], ks: list[int], host: list[list[int]]
                ) -> tuple[torch.Tensor, list[int], torch.Tensor | None]:
        """Row b's ks[b] guesses after its context ids[b, :lengths[b]] (ids [B, S] on the device; ``host``, the same
        tokens as lists, is the lookup's), written into ids after it. Returns guesses [B, γ'] (γ' = max ks), the
        counts (= ks) and q [B, γ', V] (None when greedy). The first forward runs each drafting row's unseen tokens
        (a newcomer's whole prompt), ragged; then one forward per guess. A row with ks[b] = 0 runs nothing."""
        batch, dec, width, device = len(lengths), self.dec, max(ks), ids.device
        starts = [min(kept, length - 1) if k else held for kept, length, k, held in zip(self.kept, lengths, ks, dec.lengths)]
        sizes = [length - start if k else 0 for start, length, k in zip(starts, lengths, ks)]
        dec.rollback(starts)
        at = torch.tensor(starts, device=device).view(batch, 1) + torch.arange(max(sizes), device=device)
        logits = dec.step(ids.gather(1, at.clamp(max=ids.shape[1] - 1)), sizes,
                          keep=[[max(size - 1, 0)] for size in sizes])[:, 0]  # [B, V] after each row's context
        self.calls += 1
        tokens, probs = [], []
        for j in range(width):
            live = [j < k for k in ks]
            q, token = self._guess(logits, live)
            tokens.append(token)
            probs.append(q)
            at = (torch.tensor(lengths, device=device) + j).clamp(max=ids.shape[1] - 1).view(batch, 1)
            ids.scatter_(1, at, torch.where(torch.tensor(live, device=device).view(batch, 1), token.view(batch, 1),
                                            ids.gather(1, at)))  # a row past its guesses keeps the buffer's id
            if j < width - 1:  # the last guess runs next time, with the target's token
                self.calls += 1
                logits = dec.step(token.view(batch, 1), [int(j + 1 < k) for k in ks])[:, -1]
        return torch.stack(tokens, 1), list(ks), None if self.warp.greedy else torch.stack(probs, 1)

    def _guess(self, logits: torch.Tensor, live: list[bool]) -> tuple[torch.Tensor | None, torch.Tensor]:
        """One guess per row from logits [B, V or S]: (q [B, V] or None when greedy, tokens [B]). A row that
        asked for fewer guesses (``live`` False) draws nothing: its argmax fills the slot."""
        if self.warp.greedy:
            index = logits.argmax(-1)
            return None, index if self.vocab_ids is None else self.vocab_ids[index]
        fill = logits.argmax(-1)
        fill = fill if self.vocab_ids is None else self.vocab_ids[fill]
        qs, tokens = [], []
        for b, on in enumerate(live):
            if on:
                q, token = kept_guess(logits[b], self.vocab_ids, self.warp, self.generators[b], self.vocab_size, False)
            else:
                q, token = torch.zeros(self.vocab_size, device=logits.device), fill[b]
            qs.append(q)
            tokens.append(token)
        return torch.stack(qs), torch.stack(tokens)

    def accepted(self, lengths: list[int], ns: list[int], ks: list[int]) -> None:
        """Feedback: row b kept ns[b] of its ks[b] guesses after lengths[b] (the last guess never ran); a row that
        drafted nothing keeps what it had."""
        self.kept = [length + max(0, min(n, k - 1)) if k else kept
                     for length, n, k, kept in zip(lengths, ns, ks, self.kept)]


class BatchLookup:
    """An ``NGramDrafter`` for each row: prompt lookup in the row's tokens, which the loop keeps on the host (the
    lookup reads nothing from the device); q is one-hot."""

    calls = 0

    def __init__(self, drafter: NGramDrafter, warp: Warp) -> None:
        self.drafter, self.warp = drafter, warp

    def reset(self, row: int) -> None:
        pass  # no state: the lookup reads the row's tokens

    def propose(self, ids: torch.Tensor, lengths: list[int], ks: list[int], host: list[list[int]]
                ) -> tuple[torch.Tensor, list[int], torch.Tensor | None]:
        """Row b's ≤ ks[b] guesses, looked up in host[b] (its tokens) and written into ids [B, S] after its context.
        Returns guesses [B, γ'] (zeros past each row's count), the counts, and one-hot q [B, γ', V] (None greedy)."""
        width = max(max(ks), 1)
        found = [self.drafter.lookup(row, k) if k else [] for row, k in zip(host, ks)]
        padded = torch.tensor([f + [0] * (width - len(f)) for f in found], dtype=torch.long).to(ids.device)  # host: the n-gram lookups' guesses, copied to the device in one go
        at = torch.tensor(lengths, device=ids.device).view(-1, 1) + torch.arange(width, device=ids.device)
        at = at.clamp(max=ids.shape[1] - 1)  # a finished row's pads may reach past the buffer: they write nothing
        counts = [len(f) for f in found]
        real = torch.arange(width, device=ids.device).view(1, -1) < torch.tensor(counts, device=ids.device).view(-1, 1)
        ids.scatter_(1, at, torch.where(real.to(ids.device), padded, ids.gather(1, at)))  # pads keep the buffer's ids
        if self.warp.greedy:
            return padded, counts, None
        q = torch.nn.functional.one_hot(padded, self.drafter.vocab_size).float() * real.to(ids.device).unsqueeze(-1)
        return padded, counts, q

    def accepted(self, lengths: list[int], ns: list[int], ks: list[int]) -> None:
        pass  # no state


def batch_draft(drafter: Drafter, batch: int, capacity: int, warp: Warp,
                generators: Sequence[torch.Generator | None]) -> BatchModelDraft | BatchLookup:
    """The batch's counterpart of ``drafter`` (a ``ModelDrafter`` or an ``NGramDrafter``; others draft for one
    sequence)."""
    if isinstance(drafter, ModelDrafter) and type(drafter).propose is ModelDrafter.propose:
        return BatchModelDraft(drafter, batch, capacity, warp, generators)
    if isinstance(drafter, NGramDrafter) and type(drafter).propose is NGramDrafter.propose:
        return BatchLookup(drafter, warp)
    raise TypeError(f"a batch drafts with a ModelDrafter or an NGramDrafter; {type(drafter).__name__} drafts "
                    "for one sequence: pass one prompt [1, T]")


def accept_batch(guesses: torch.Tensor, counts: list[int], logits: torch.Tensor, warp: Warp, q: torch.Tensor | None,
                 generators: Sequence[torch.Generator | None], live: list[bool]) -> torch.Tensor:
    """The accept / residual / bonus rule for every row at once, on the device: guesses [B, γ'] (row b's first
    counts[b] real), logits [B, γ' + 1, V], q [B, γ', V] (None when greedy or γ' = 0) → [B, 2 + γ'] int64 =
    (n accepted, the next token, the guesses), the one tensor the step reads. Row b's uniforms and its next token
    come from its own generator, as in :func:`~specdec_core.accept.verify`; a finished row draws nothing."""
    batch, width = guesses.shape
    device = logits.device
    real = torch.arange(width, device=device).view(1, -1) < torch.tensor(counts, device=device).view(-1, 1)
    if warp.greedy:
        choice = logits.argmax(-1)  # [B, γ' + 1]
        n = ((guesses == choice[:, :width]) & real).long().cumprod(1).sum(1)  # [B]
        nxt = choice.gather(1, n.view(batch, 1)).view(batch)
        return torch.cat([n.view(batch, 1), nxt.view(batch, 1), guesses], 1)
    p = warp(logits)  # [B, γ' + 1, V]
    q = p.new_zeros(batch, 0, p.shape[-1]) if q is None else q  # γ' = 0: every row's next token is drawn from p
    u = torch.stack([torch.cat([uniforms(k, g, device) if (k and on) else torch.empty(0, device=device),
                                torch.ones(width - (k if on else 0), device=device)])
                     for k, g, on in zip(counts, generators, live)])  # [B, γ']
    at = guesses.unsqueeze(-1)
    ok = (u * q.gather(2, at).squeeze(-1) < p[:, :width].gather(2, at).squeeze(-1)) & real
    n = ok.long().cumprod(1).sum(1)  # [B]
    rows = torch.arange(batch, device=device)
    p_n = p[rows, n]  # [B, V]
    q_n = torch.cat([q, q.new_zeros(batch, 1, q.shape[-1])], 1)[rows, n]
    residual = (p_n - q_n).clamp(min=0)
    mass = residual.sum(-1, keepdim=True)
    residual = torch.where(mass > 0, residual / mass, p_n)  # p == q at a rejection: unreachable in exact arithmetic
    dist = torch.where((n == torch.tensor(counts, device=device)).view(batch, 1), p_n, residual)
    nxt = torch.stack([sample(dist[b], g) if on else dist[b].argmax() for b, (g, on) in enumerate(zip(generators, live))])
    return torch.cat([n.view(batch, 1), nxt.view(batch, 1), guesses], 1)


def window(starts: list[int], lengths: list[int], counts: list[int], width: int, live: list[bool]
           ) -> tuple[list[int], list[list[int]]]:
    """What each row sends to the verify forward, and which of its logits the rule reads. Row b sends its tokens from
    starts[b] (where the target's cache of it ends) to the end of its guesses: its unseen context — its last token,
    or a newcomer's whole prompt — then its counts[b] guesses; ``sizes[b]`` of them (0 for a row not live). It
    reads the logits at its last context token and at each guess slot: γ' + 1 columns (γ' = ``width``, the
    guesses' columns), those past its own guesses pointing at its last real one (the rule masks them)."""
    sizes = [length - start + count if on else 0 for start, length, count, on in zip(starts, lengths, counts, live)]
    ahead = [b for b, (size, count, on) in enumerate(zip(sizes, counts, live)) if on and size <= count]
    if ahead:  # (a row whose cache holds too little re-reads what it lacks: still exact)
        raise RuntimeError(f"rows {ahead}: the target's cache holds {[starts[b] for b in ahead]} tokens of contexts of "
                           f"{[lengths[b] for b in ahead]}: a rollback kept too much, or a slot was refilled "
                           "without BatchDecoder.reset")
    keep = [[max(0, min(length - start - 1 + j, size - 1)) for j in range(width + 1)]
            for start, length, size in zip(starts, lengths, sizes)]
    return sizes, keep


class SpecBatch:
    """B slots decoded together: the target's batched cache (``dec``), the draft's (``draft``: a BatchModelDraft or
    a BatchLookup; None when only AR steps run), and the tokens: ids [B, S] on the device (row b's context in
    ids[b, :lengths[b]], then its guesses), the same contexts on the host (``host``: lists, which the n-gram
    lookup reads; ``lengths``: ints), one generator per slot. ``capacity``: the longest row, prompt + new tokens."""

    def __init__(self, target: PreTrainedModel, drafter: Drafter | None, batch: int, capacity: int, warp: Warp,
                 generators: Sequence[torch.Generator | None]) -> None:
        self.dec, self.warp, self.generators = BatchDecoder(target, batch, capacity), warp, list(generators)
        self.draft = None if drafter is None else batch_draft(drafter, batch, capacity, warp, self.generators)
        # + 1: the next token of a row that accepted all of its last guesses may land one past its budget
        self.ids = torch.zeros(batch, capacity + 1, dtype=torch.long, device=target.device)
        self.host: list[list[int]] = [[] for _ in range(batch)]
        self.lengths = [0] * batch
        self.width = 0  # tokens per row of the last verify forward

    def admit(self, row: int, prompt: list[int], generator: torch.Generator | None = None) -> None:
        """A newcomer into slot ``row``: the slot's caches reset (its predecessor is forgotten) and the prompt written;
        the next :meth:`step` prefills it in the same forward as the other rows' decode tokens."""
        if not 0 < len(prompt) < self.ids.shape[1]:
            raise ValueError(f"a prompt of {len(prompt)} tokens into slots of {self.ids.shape[1] - 1}: give every "
                             "request at least one token, and the batch a capacity of its longest prompt + new tokens")
        self.ids[row, : len(prompt)] = torch.tensor(prompt, dtype=torch.long, device=self.ids.device)
        self.host[row], self.lengths[row], self.generators[row] = list(prompt), len(prompt), generator
        self.dec.reset(row)
        if self.draft is not None:
            self.draft.reset(row)

    def step(self, ks: list[int], gamma: int, live: list[bool], clock: Clock) -> list[SpecStep | None]:
        """One step for every slot: row b drafts ks[b] guesses (0: none, a plain AR step for it), ONE target forward
        reads each row's window (:func:`window`), the rule keeps n_b guesses, and each row's caches and tokens move
        on by its own count. Returns each live row's SpecStep (None for the others). One device read."""
        batch, device = len(ks), self.ids.device
        t0 = clock.mark()
        if max(ks) > 0 and self.draft is None:
            raise ValueError(f"γ = {max(ks)} needs a drafter: give the batch one, or keep γ at 0 (plain AR steps)")
        guesses, counts, q = (self.draft.propose(self.ids, self.lengths, ks, self.host) if max(ks) > 0
                              else (self.ids.new_zeros(batch, 0), [0] * batch, None))
        t1 = clock.mark()
        starts = list(self.dec.lengths)  # where the target's cache of each row ends
        sizes, keep = window(starts, self.lengths, counts, guesses.shape[1], live)
        self.width = max(sizes)
        at = torch.tensor(starts, device=device).view(batch, 1) + torch.arange(self.width, device=device)
        logits = self.dec.step(self.ids.gather(1, at.clamp(max=self.ids.shape[1] - 1)), sizes, keep)  # [B, γ' + 1, V]
        outcome = accept_batch(guesses, counts, logits, self.warp, q, self.generators, live).tolist()  # the one read
        end = clock.mark()
        ns = [row[0] if on else 0 for row, on in zip(outcome, live)]
        self.dec.rollback([length + n if on else held
                           for length, n, on, held in zip(self.lengths, ns, live, self.dec.lengths)])
        if max(ks) > 0:
            self.draft.accepted(self.lengths, ns, counts)
        # the next tokens after each live row's accepted guesses (which are in the buffer already)
        at = torch.tensor([length + n for length, n in zip(self.lengths, ns)], device=device).view(batch, 1)
        at = at.clamp(max=self.ids.shape[1] - 1)
        nxt = torch.tensor([row[1] for row in outcome], device=device).view(batch, 1)
        self.ids.scatter_(1, at, torch.where(torch.tensor(live, device=device).view(batch, 1), nxt, self.ids.gather(1, at)))
        steps: list[SpecStep | None] = []
        for b, (row, on) in enumerate(zip(outcome, live)):
            n, nxt, drafted = row[0], row[1], row[2 : 2 + counts[b]]
            steps.append(SpecStep(drafted, n, nxt, "bonus" if n == counts[b] else "resampled", gamma,
                                  draft_s=clock.seconds(t0, t1), marks=(t1, end)) if on else None)
            if on:
                self.host[b] += drafted[:n] + [nxt]
                self.lengths[b] += n + 1
        return steps


@torch.inference_mode()
def speculative_generate_batch(
    target: PreTrainedModel,
    drafter: Drafter,
    input_ids: Prompts,
    max_new_tokens: int,
    *,
    gamma: int | GammaPolicy = 4,
    temperature: float = 0.0,
    top_k: int | None = None,
    top_p: float | None = None,
    eos_token_id: int | Iterable[int] | None = None,
    generator: torch.Generator | Sequence[torch.Generator] | None = None,
    tokenizer=None,
) -> list[Generation]:
    """``speculative_generate`` for a batch (the module docstring): one :class:`~specdec_core.generation.Generation`
    per row with its own :class:`~specdec_core.records.SpecStats` (its steps; ``wall_time`` and ``draft_calls``
    the batch's). ``drafter``: a ``ModelDrafter`` or an ``NGramDrafter``; ``gamma``: an int (every step; 0 = AR
    steps) or a :class:`GammaPolicy`, asked before each step with the number of live rows."""
    check_gamma(gamma)
    rows = batch_rows(target, input_ids, max_new_tokens)
    batch, generators, warp = len(rows), row_generators(generator, len(rows)), Warp(temperature, top_k, top_p)
    state = SpecBatch(target, drafter, batch, max(r.numel() for r in rows) + max_new_tokens, warp, generators)
    for b, r in enumerate(rows):
        state.admit(b, r.tolist(), generators[b])  # the prompts' one read, before the first step
    outs, clock = [Output(max_new_tokens, eos_token_id) for _ in rows], Clock(target.device)
    timed, decoding = times_steps(gamma), False  # an adaptive policy reads the loop's clock
    steps: list[list[SpecStep]] = [[] for _ in rows]
    while not all(out.done for out in outs):
        live = [not out.done for out in outs]
        g = step_gamma(gamma, sum(live))
        start = clock.mark() if timed else None
        done = state.step([min(g, out.left) if on else 0 for out, on in zip(outs, live)], g, live, clock)
        for out, row, step in zip(outs, steps, done):
            if step is not None:
                out.emit(step.drafted[: step.accepted] + [step.next])
                row.append(step)
        observe(gamma, done, clock.seconds(start, clock.mark()) if timed and decoding else None)  # after its one read
        decoding = True  # the first step ran the prompts' prefill: a policy times decode steps only
    wall = clock.stop()
    for row in steps:
        for step in row:
            step.verify_s, step.marks = clock.seconds(*step.marks), ()
    calls = state.draft.calls if state.draft is not None else 0
    return [Generation(out.tokens, tokenizer.decode(out.tokens) if tokenizer is not None else None,
                       SpecStats(wall_time=wall, target_calls=len(row), draft_calls=calls, steps=row))
            for out, row in zip(outs, steps)]
