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

A *drafter* is a strategy (as in transformers' candidate_generator.py): ``ModelDrafter`` runs a small
LM, ``NGramDrafter`` copies from the context (prompt lookup), ``feature_drafter.FeatureDrafter``
(EAGLE) reads the target's hidden states. Each one subclasses :class:`Drafter`, which declares every
hook the loop calls.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

import torch
from transformers import PreTrainedModel

from .accept import verify, verify_greedy
from .frspec import kept_guess, reduced_head
from .generation import Generation, eos_set, synchronize, tokens_per_call
from .lm import Decoder, check_inputs
from .sampling import Warp
from .theory import AutoGamma
from .tree import Tree, chain
from .tree_drafters import expand, kept_after, lookup_tree
from .tree_shapes import Topology, depth_of

__all__ = ["Drafter", "LookupFirst", "ModelDrafter", "NGramDrafter", "speculative_generate", "verify", "verify_greedy"]


class Drafter:
    """Proposes tokens for the target to verify. The loop of :func:`speculative_generate` calls, per
    generation, ``begin`` once, then per step ``propose`` → (the target verifies) → ``accepted``, and,
    when ``wants_hidden`` is True, ``observe`` after the prefill and after every verify.

    Subclass it and override ``propose`` (and whichever other hook your drafter needs).
    """

    wants_hidden: bool = False  # True: the loop passes the target's hidden states to observe()
    hidden_layers: tuple[int, ...] = (-1,)  # which ones (indices into hidden_states; -1: the last)
    calls: int = 0  # forward passes of the drafter's own model in the current generation

    def begin(self, warp: Warp, generator: torch.Generator | None) -> None:
        """Start a new generation: forget earlier state; draw with ``warp``ed probabilities."""
        self.warp, self.generator, self.calls = warp, generator, 0

    @property
    def greedy(self) -> bool:
        """Temperature 0: the loop compares guesses with the target's argmax and never reads q, so a
        drafter may take its own argmax and return q = None (no distribution over the vocabulary)."""
        return getattr(getattr(self, "warp", None), "greedy", False)  # begin() sets warp

    def propose(self, context: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Guess up to ``k`` tokens after ``context`` [1, T].

        Returns ``(tokens [k'], q_probs [k', V])`` with k' <= k: the guesses and, for each, the
        distribution it was drawn from (one-hot for a deterministic guess). ``q_probs`` may be None
        when :attr:`greedy`.
        """
        raise NotImplementedError

    def accepted(self, n_accepted: int, n_drafted: int) -> None:
        """Feedback after a verify: the target kept the first ``n_accepted`` of the ``n_drafted``
        guesses, then added one token of its own (so the next context is the old one + n_accepted + 1)."""

    def observe(self, hidden: torch.Tensor) -> None:
        """The target's hidden states at ``hidden_layers``, side by side, [n, len(hidden_layers) · d],
        of the next n context positions (only called when ``wants_hidden``)."""

    def propose_tree(self, context: torch.Tensor, topology: Topology) -> Tree:
        """Guesses as a token tree for :func:`specdec_core.tree.tree_generate` (``topology``: the nodes'
        parents and sibling ranks, :mod:`specdec_core.tree_shapes`). The default proposes a chain as deep
        as the topology; drafters that can rank several candidates override it."""
        tokens, q = self.propose(context, max(depth_of(topology), 1))
        self._chain = tokens.numel()
        return chain(tokens, q)

    def accepted_path(self, path: list[int]) -> None:
        """Feedback after a tree verify: the target accepted the nodes ``path`` (root to leaf), then added
        one token of its own. The default passes it on as a chain's :meth:`accepted`."""
        self.accepted(len(path), getattr(self, "_chain", len(path)))


class _Legacy(Drafter):
    """A drafter written before :class:`Drafter` existed (any object with ``begin`` and ``propose``):
    its missing hooks take the defaults. Kept for one release; subclass Drafter instead."""

    def __init__(self, drafter) -> None:
        self.inner = drafter
        self.wants_hidden = getattr(drafter, "wants_hidden", False)
        for hook in ("accepted", "observe"):
            if hasattr(drafter, hook):
                setattr(self, hook, getattr(drafter, hook))

    def begin(self, warp: Warp, generator: torch.Generator | None) -> None:
        self.inner.begin(warp, generator)

    def propose(self, context: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        return self.inner.propose(context, k)

    @property
    def calls(self) -> int:
        return getattr(self.inner, "calls", 0)


class ModelDrafter(Drafter):
    """A small causal LM as the drafter, with its own KV cache.

    After a proposal the cache holds the context and every guess but the last. The loop's feedback
    (``accepted``) rolls back the rejected guesses, so the next proposal only runs the tokens the
    cache has not seen: the target's token, and the last guess when all were accepted.
    """

    def __init__(self, model: PreTrainedModel, vocab_ids: torch.Tensor | None = None) -> None:
        # FR-Spec: with vocab_ids [S] the draft's output layer keeps those rows only (specdec_core.frspec)
        self.vocab_ids, self.vocab_size = vocab_ids, model.config.vocab_size
        if vocab_ids is not None:
            self.vocab_ids = vocab_ids.to(model.device)
            model = reduced_head(model, self.vocab_ids)
        self.decoder = Decoder(model)
        self._base: int | None = None  # context length of the last proposal
        self._kept = 0  # tokens of the cache still right after the last feedback

    def begin(self, warp: Warp, generator: torch.Generator | None) -> None:
        super().begin(warp, generator)
        self.decoder.reset()
        self._base = None

    def accepted(self, n_accepted: int, n_drafted: int) -> None:
        self._slots = None
        self._kept = self._base + min(n_accepted, n_drafted - 1)  # the last guess was never run

    def propose(self, context: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        dec = self.decoder
        if self._base is not None:
            dec.rollback(min(self._kept, context.shape[1] - 1))  # re-run >= 1 token: fresh logits
        self._base, self._kept = context.shape[1], context.shape[1]  # no feedback: keep the context only
        self.calls += 1
        logits = dec.step(context[:, dec.length :].to(dec.device))[0, -1]
        tokens, probs = [], []
        for i in range(k):
            q, token = self.guess(logits)
            tokens.append(token)
            probs.append(q)
            if i < k - 1:  # the last guess is run next time, together with the target's token
                self.calls += 1
                logits = dec.step(token.view(1, 1))[0, -1]
        return torch.stack(tokens), None if probs[0] is None else torch.stack(probs)

    def propose_tree(self, context: torch.Tensor, topology: Topology) -> Tree:
        """The draft's top-ranked tokens at each node of ``topology``, one draft forward per depth
        (:func:`specdec_core.tree_drafters.expand`); deterministic, so verified by the one-hot rule."""
        dec = self.decoder
        if self._base is not None:
            dec.rollback(min(self._kept, context.shape[1] - 1))
        tree, self._slots = expand(dec, context, topology, self.vocab_ids)
        self._base = self._kept = context.shape[1]
        self.calls += 1 + max((tree.depths[i] for i in self._slots), default=0)
        return tree

    def accepted_path(self, path: list[int]) -> None:
        slots, self._slots = getattr(self, "_slots", None), None
        if slots is None:  # the last proposal was a chain
            return super().accepted_path(path)
        keep = kept_after(path, slots, self._base)
        self.decoder.keep(keep, start=self._base)
        self._kept = self._base + len(keep)

    def guess(self, logits: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor]:
        """One guess from the draft's logits ([V], or [S] with ``vocab_ids``): (q [V], the token drawn
        from exactly that q); greedy: (None, the argmax)."""
        return kept_guess(logits, self.vocab_ids, self.warp, self.generator, self.vocab_size, self.greedy)


class NGramDrafter(Drafter):
    """Prompt lookup decoding: find the latest earlier occurrence of the context's last n tokens
    (n = max_ngram … min_ngram) and propose the tokens that followed it. Costs no model call; its
    guesses are deterministic, so q is one-hot.
    """

    def __init__(self, vocab_size: int, max_ngram: int = 3, min_ngram: int = 1) -> None:
        self.vocab_size, self.max_ngram, self.min_ngram = vocab_size, max_ngram, min_ngram

    def propose(self, context: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        ids = context[0].tolist()
        for n in range(self.max_ngram, self.min_ngram - 1, -1):
            if len(ids) <= n:
                continue
            tail = ids[-n:]
            for start in range(len(ids) - n - 1, -1, -1):  # latest match first
                if ids[start : start + n] == tail:
                    found = ids[start + n : start + n + k]
                    tokens = torch.tensor(found, dtype=torch.long, device=context.device)
                    if self.greedy:
                        return tokens, None
                    return tokens, torch.nn.functional.one_hot(tokens, self.vocab_size).float()
        empty = torch.empty(0, dtype=torch.long, device=context.device)
        return empty, torch.empty(0, self.vocab_size, device=context.device)

    def propose_tree(self, context: torch.Tensor, topology: Topology) -> Tree:
        """Several earlier occurrences of the tail = several branches, merged into a trie of at most
        len(topology) nodes (:func:`specdec_core.tree_drafters.lookup_tree`)."""
        return lookup_tree(context[0].tolist(), len(topology), self.max_ngram, self.min_ngram,
                           max(depth_of(topology), 1), context.device)

    def accepted_path(self, path: list[int]) -> None:
        pass  # no state


class LookupFirst(Drafter):
    """Prompt lookup where the context repeats itself, another drafter elsewhere: each step asks
    ``lookup`` (an :class:`NGramDrafter`, free) first and ``fallback`` only when it finds nothing. The
    fallback sees every target pass (``observe``), so its state follows the context either way; the
    feedback (``accepted``) goes to whichever drafter proposed."""

    def __init__(self, lookup: NGramDrafter, fallback: Drafter) -> None:
        self.lookup, self.fallback = lookup, fallback
        self.wants_hidden, self.hidden_layers = fallback.wants_hidden, fallback.hidden_layers
        self._last: Drafter = fallback

    def begin(self, warp: Warp, generator: torch.Generator | None) -> None:
        super().begin(warp, generator)
        self.lookup.begin(warp, generator)
        self.fallback.begin(warp, generator)

    def propose(self, context: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        tokens, q = self.lookup.propose(context, k)
        self._last = self.lookup
        if tokens.numel() == 0:
            self._last = self.fallback
            tokens, q = self.fallback.propose(context, k)
        return tokens, q

    def accepted(self, n_accepted: int, n_drafted: int) -> None:
        self._last.accepted(n_accepted, n_drafted)

    def propose_tree(self, context: torch.Tensor, topology: Topology) -> Tree:
        tree = self.lookup.propose_tree(context, topology)
        self._last = self.lookup
        if not len(tree):
            self._last = self.fallback
            tree = self.fallback.propose_tree(context, topology)
        return tree

    def accepted_path(self, path: list[int]) -> None:
        self._last.accepted_path(path)

    def observe(self, hidden: torch.Tensor) -> None:
        self.fallback.observe(hidden)

    @property
    def calls(self) -> int:
        return self.fallback.calls

    @calls.setter
    def calls(self, value: int) -> None:  # Drafter.begin resets it; the count lives in the fallback
        pass


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
    (:class:`~specdec_core.theory.AutoGamma`, which may also be passed itself). stats: ``wall_time``, ``target_calls`` (verify forwards: the prefill of the
    prompt emits no token), ``draft_calls``, ``alpha`` (accepted ÷ examined draft tokens), ``alpha_per_position``,
    ``accepted_lengths`` (per step), ``tokens_per_call``, ``draft_time``, ``verify_time``, ``steps``.
    """
    check_inputs(target, input_ids, max_new_tokens)
    if gamma == "auto":
        if costs is None:
            raise ValueError('gamma="auto" needs the machine\'s cost model: pass '
                             'costs=costmodel.load_or_measure(target, "my target") (measured once, then cached)')
        gamma = AutoGamma(costs.v, costs.step_s)
    schedule = gamma if isinstance(gamma, AutoGamma) else None
    if schedule is not None:
        gamma = schedule.max_gamma
    elif not isinstance(gamma, int) or gamma < 1:
        raise ValueError(f"gamma (draft tokens per step) must be an int >= 1, \"auto\" or an AutoGamma, got {gamma!r}")
    if not isinstance(drafter, Drafter):
        if not (hasattr(drafter, "begin") and hasattr(drafter, "propose")):
            raise TypeError(f"{type(drafter).__name__} is not a drafter: subclass specdec_core.speculative.Drafter "
                            "and write its propose(context, k)")
        drafter = _Legacy(drafter)
    stops = eos_set(eos_token_id)
    device = target.device
    warp = Warp(temperature, top_k, top_p)
    drafter.begin(warp, generator)

    # The target's cache holds everything but the last token; each verify feeds [last, x_1..x_k].
    # A feature drafter (EAGLE) also reads the target's hidden states of every accepted token.
    wants_hidden = drafter.wants_hidden
    target_dec = Decoder(target, keep_hidden=wants_hidden, layers=drafter.hidden_layers)
    # Token ids live in one preallocated buffer: the context is ids[:, :length]; guesses are written
    # after it, and the accepted ones simply stay there (no concatenation per step).
    length = input_ids.shape[1]
    ids = torch.empty(1, length + max_new_tokens + gamma + 1, dtype=torch.long, device=device)
    ids[:, :length] = input_ids
    synchronize(device)
    start = time.perf_counter()
    if length > 1:
        target_dec.prefill(ids[:, : length - 1])
        if wants_hidden:
            drafter.observe(target_dec.hidden[0])
    new: list[int] = []
    examined, accepted, gammas = [0] * gamma, [0] * gamma, []
    steps: list[dict] = []
    draft_time = verify_time = 0.0

    while len(new) < max_new_tokens:
        gammas.append(schedule.choose() if schedule else gamma)
        k = min(gammas[-1], max_new_tokens - len(new))
        t0 = time.perf_counter()
        drafted, q = drafter.propose(ids[:, :length], k)  # [k'], [k', V] or None; a drafter may return fewer
        drafted = drafted.to(device)
        k = drafted.numel()
        ids[0, length : length + k] = drafted
        synchronize(device)
        t1 = time.perf_counter()
        logits = target_dec.step(ids[:, length - 1 : length + k])[0]  # [k+1, V]: last + the guesses
        if warp.greedy:
            n, nxt, kind = verify_greedy(drafted, logits)
        elif q is None:
            raise TypeError(f"{type(drafter).__name__}.propose returned no q at temperature {temperature}: "
                            "the sampled rule needs the distribution each guess was drawn from")
        else:
            n, nxt, kind = verify(drafted, q.to(device), warp(logits), generator)
        target_dec.rollback(length + n)  # keep last + the accepted guesses
        drafter.accepted(n, k)
        if wants_hidden:
            drafter.observe(target_dec.hidden[0, : n + 1])  # features of last + the accepted guesses
        synchronize(device)
        draft_time += t1 - t0
        verify_time += time.perf_counter() - t1

        for i in range(min(n + 1, k)):  # positions the accept test looked at
            examined[i] += 1
            accepted[i] += i < n
        if schedule:
            schedule.update(min(n + 1, k), n, k, t1 - t0)
        guesses = drafted.tolist()
        steps.append({"drafted": guesses, "accepted": n, "next": nxt, "kind": kind})
        ids[0, length + n] = nxt
        for token in guesses[:n] + [nxt]:
            new.append(token)
            if token in stops or len(new) == max_new_tokens:
                break
        if new[-1] in stops:
            break
        length += n + 1

    wall = time.perf_counter() - start
    n_examined, n_accepted = sum(examined), sum(accepted)
    stats = {
        "wall_time": wall,
        "target_calls": len(steps),
        "draft_calls": drafter.calls,
        "alpha": n_accepted / n_examined if n_examined else float("nan"),
        "alpha_per_position": [a / e if e else float("nan") for a, e in zip(accepted, examined)],
        "accepted_lengths": [s["accepted"] for s in steps],
        "tokens_per_call": tokens_per_call(len(new), len(steps)),
        "draft_time": draft_time,
        "verify_time": verify_time,
        "steps": steps,
        "gammas": gammas,  # γ of each step (one value unless gamma="auto")
    }
    text = tokenizer.decode(new) if tokenizer is not None else None
    return Generation(new, text, stats)
