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
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch
from transformers import PreTrainedModel

from .batch import BatchDecoder, Prompts, batch_rows, row_generators
from .drafters import Drafter, ModelDrafter, NGramDrafter
from .frspec import kept_guess
from .generation import Clock, Generation, Output
from .records import SpecStats, SpecStep
from .sampling import Warp, sample, uniforms


class BatchModelDraft:
    """A ``ModelDrafter``'s draft model on a batched cache. Row b's cache keeps its context up to ``kept[b]``
    (what the target accepted of its last proposal, as ``ModelDrafter.accepted`` keeps it)."""

    def __init__(self, drafter: ModelDrafter, batch: int, capacity: int, warp: Warp,
                 generators: Sequence[torch.Generator | None]) -> None:
        self.dec = BatchDecoder(drafter.decoder.model, batch, capacity)
        self.vocab_ids, self.vocab_size = drafter.vocab_ids, drafter.vocab_size
        self.warp, self.generators, self.calls = warp, generators, 0
        self.kept = [0] * batch

    def propose(self, ids: torch.Tensor, lengths: list[int], ks: list[int], host: list[list[int]]
                ) -> tuple[torch.Tensor, list[int], torch.Tensor | None]:
        """Row b's ks[b] guesses after its context ids[b, :lengths[b]] (ids [B, S] on the device; ``host``, the same
        tokens as lists, is the lookup's), written into ids after it. Returns guesses
        [B, γ'] (γ' = max ks), the counts (= ks) and q [B, γ', V] (None when greedy). The first forward runs each
        row's unseen tokens, right-padded to the widest row (the pads are rolled back); then one forward per guess."""
        batch, dec, width = len(lengths), self.dec, max(ks)
        starts = [min(kept, length - 1) for kept, length in zip(self.kept, lengths)]
        m = max(length - start for start, length in zip(starts, lengths))
        dec.rollback(starts)
        at = torch.tensor(starts, device=ids.device).view(batch, 1) + torch.arange(m, device=ids.device)
        logits = dec.step(ids.gather(1, at))  # [B, m, V]
        rows = torch.arange(batch, device=ids.device)
        logits = logits[rows, torch.tensor([length - start - 1 for start, length in zip(starts, lengths)],
                                           device=ids.device)]  # [B, V] after each row's context
        dec.rollback(lengths)
        self.calls += 1
        tokens, probs = [], []
        for j in range(width):
            q, token = self._guess(logits, [j < k for k in ks])
            tokens.append(token)
            probs.append(q)
            ids.scatter_(1, torch.tensor(lengths, device=ids.device).view(batch, 1) + j, token.view(batch, 1))
            if j < width - 1:  # the last guess runs next time, with the target's token
                self.calls += 1
                logits = dec.step(token.view(batch, 1))[:, -1]
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
        """Feedback: row b kept ns[b] of its ks[b] guesses after lengths[b] (the last guess never ran)."""
        self.kept = [length + max(0, min(n, k - 1)) for length, n, k in zip(lengths, ns, ks)]


class BatchLookup:
    """An ``NGramDrafter`` for each row: prompt lookup in the row's tokens, which the loop keeps on the host (the
    lookup reads nothing from the device); q is one-hot."""

    calls = 0

    def __init__(self, drafter: NGramDrafter, warp: Warp) -> None:
        self.drafter, self.warp = drafter, warp

    def propose(self, ids: torch.Tensor, lengths: list[int], ks: list[int], host: list[list[int]]
                ) -> tuple[torch.Tensor, list[int], torch.Tensor | None]:
        """Row b's ≤ ks[b] guesses, looked up in host[b] (its tokens) and written into ids [B, S] after its context.
        Returns guesses [B, γ'] (zeros past each row's count), the counts, and one-hot q [B, γ', V] (None greedy)."""
        width = max(max(ks), 1)
        found = [self.drafter.lookup(row, k) if k else [] for row, k in zip(host, ks)]
        padded = torch.tensor([f + [0] * (width - len(f)) for f in found], dtype=torch.long).to(ids.device)  # host: the n-gram lookups' guesses, copied to the device in one go
        at = torch.tensor(lengths, device=ids.device).view(-1, 1) + torch.arange(width, device=ids.device)
        counts = [len(f) for f in found]
        real = torch.arange(width, device=ids.device).view(1, -1) < torch.tensor(counts, device=ids.device).view(-1, 1)
        ids.scatter_(1, at, torch.where(real.to(ids.device), padded, ids.gather(1, at)))  # pads keep the buffer's ids
        if self.warp.greedy:
            return padded, counts, None
        q = torch.nn.functional.one_hot(padded, self.drafter.vocab_size).float() * real.to(ids.device).unsqueeze(-1)
        return padded, counts, q

    def accepted(self, lengths: list[int], ns: list[int], ks: list[int]) -> None:
        pass  # no state


def accept_batch(guesses: torch.Tensor, counts: list[int], logits: torch.Tensor, warp: Warp, q: torch.Tensor | None,
                 generators: Sequence[torch.Generator | None], live: list[bool]) -> torch.Tensor:
    """The accept / residual / bonus rule for every row at once, on the device: guesses [B, γ'] (row b's first
    counts[b] real), logits [B, γ' + 1, V], q [B, γ', V] (None when greedy) → [B, 2 + γ'] int64 = (n accepted,
    the next token, the guesses), the one tensor the step reads. Row b's uniforms and its next token come from
    its own generator, as in :func:`~specdec_core.accept.verify`; a finished row draws nothing."""
    batch, width = guesses.shape
    device = logits.device
    real = torch.arange(width, device=device).view(1, -1) < torch.tensor(counts, device=device).view(-1, 1)
    if warp.greedy:
        choice = logits.argmax(-1)  # [B, γ' + 1]
        n = ((guesses == choice[:, :width]) & real).long().cumprod(1).sum(1)  # [B]
        nxt = choice.gather(1, n.view(batch, 1)).view(batch)
        return torch.cat([n.view(batch, 1), nxt.view(batch, 1), guesses], 1)
    p = warp(logits)  # [B, γ' + 1, V]
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


@torch.inference_mode()
def speculative_generate_batch(
    target: PreTrainedModel,
    drafter: Drafter,
    input_ids: Prompts,
    max_new_tokens: int,
    *,
    gamma: int = 4,
    temperature: float = 0.0,
    top_k: int | None = None,
    top_p: float | None = None,
    eos_token_id: int | Iterable[int] | None = None,
    generator: torch.Generator | Sequence[torch.Generator] | None = None,
    tokenizer=None,
) -> list[Generation]:
    """``speculative_generate`` for a batch (the module docstring): one :class:`~specdec_core.generation.Generation`
    per row with its own :class:`~specdec_core.records.SpecStats` (its steps; ``wall_time`` and ``draft_calls``
    the batch's). ``drafter``: a ``ModelDrafter`` or an ``NGramDrafter``; ``gamma``: a fixed int."""
    if not (isinstance(gamma, int) and gamma >= 1):
        raise ValueError(f"gamma (draft tokens per step) must be an int >= 1 for a batch, got {gamma!r} "
                         "(\"auto\" chooses per step for one sequence: run a batch at a fixed γ)")
    rows = batch_rows(target, input_ids, max_new_tokens)
    batch, generators, warp = len(rows), row_generators(generator, len(rows)), Warp(temperature, top_k, top_p)
    capacity = max(r.numel() for r in rows) + max_new_tokens + gamma + 1
    if isinstance(drafter, ModelDrafter) and type(drafter).propose is ModelDrafter.propose:
        draft = BatchModelDraft(drafter, batch, capacity, warp, generators)
    elif isinstance(drafter, NGramDrafter) and type(drafter).propose is NGramDrafter.propose:
        draft = BatchLookup(drafter, warp)
    else:
        raise TypeError(f"a batch drafts with a ModelDrafter or an NGramDrafter; {type(drafter).__name__} drafts "
                        "for one sequence: pass one prompt [1, T]")
    dec = BatchDecoder(target, batch, capacity)
    lengths = [r.numel() for r in rows]
    ids = torch.zeros(batch, capacity, dtype=torch.long, device=target.device)  # each row's context, then guesses
    for b, r in enumerate(rows):
        ids[b, : lengths[b]] = r
    host = [r.tolist() for r in rows]
    outs, clock = [Output(max_new_tokens, eos_token_id) for _ in rows], Clock(target.device)
    steps: list[list[SpecStep]] = [[] for _ in rows]
    if max(lengths) > 1:  # the cache holds everything but each row's last token
        dec.prefill([r[:-1] for r in rows])
    window = torch.arange(gamma + 1, device=target.device)
    while not all(out.done for out in outs):
        live = [not out.done for out in outs]
        ks = [min(gamma, out.left) if on else 0 for out, on in zip(outs, live)]
        t0 = clock.mark()
        guesses, counts, q = draft.propose(ids, lengths, ks, host)
        t1 = clock.mark()
        before = [length - 1 for length in lengths]  # the target's cache: each row's context but its last token
        logits = dec.step(ids.gather(1, torch.tensor(before, device=ids.device).view(batch, 1) + window))
        logits = logits[:, : guesses.shape[1] + 1]  # [B, γ' + 1, V]: the pads' rows past every row's guesses dropped
        outcome = accept_batch(guesses, counts, logits, warp, q, generators, live).tolist()  # the step's one read
        end = clock.mark()
        ns = [row[0] if on else 0 for row, on in zip(outcome, live)]
        for b, (row, on) in enumerate(zip(outcome, live)):
            if on:
                n, nxt, drafted = row[0], row[1], row[2 : 2 + counts[b]]
                tokens = drafted[:n] + [nxt]
                outs[b].emit(tokens)
                host[b] += tokens
                steps[b].append(SpecStep(drafted, n, nxt, "bonus" if n == counts[b] else "resampled", gamma,
                                         draft_s=clock.seconds(t0, t1), marks=(t1, end)))
        dec.rollback([length + n if on else length - 1 for length, n, on in zip(lengths, ns, live)])
        draft.accepted(lengths, ns, counts)
        nxt_at = torch.tensor([length + n for length, n in zip(lengths, ns)], device=ids.device).view(batch, 1)
        nxt = torch.tensor([row[1] for row in outcome], device=ids.device).view(batch, 1)
        ids.scatter_(1, nxt_at, torch.where(torch.tensor(live, device=ids.device).view(batch, 1), nxt, ids.gather(1, nxt_at)))
        lengths = [length + n + 1 if on else length for length, n, on in zip(lengths, ns, live)]
    wall = clock.stop()
    for row in steps:
        for step in row:
            step.verify_s, step.marks = clock.seconds(*step.marks), ()
    return [Generation(out.tokens, tokenizer.decode(out.tokens) if tokenizer is not None else None,
                       SpecStats(wall_time=wall, target_calls=len(row), draft_calls=draft.calls, steps=row))
            for out, row in zip(outs, steps)]
