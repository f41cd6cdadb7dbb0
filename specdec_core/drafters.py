"""Drafters: what proposes the guesses a target verifies (lesson 03; trees in lesson 04b).

A *drafter* is a strategy (as in transformers' candidate_generator.py). Each one subclasses
:class:`Drafter`, which declares every hook the loops of :func:`specdec_core.speculative.speculative_generate`
(a chain of guesses) and :func:`specdec_core.tree.tree_generate` (a token tree) call:

    ModelDrafter    a small causal LM with its own KV cache
    NGramDrafter    prompt lookup: copies what followed an earlier occurrence of the context's tail
    LookupFirst     prompt lookup where it finds something, another drafter elsewhere
    feature_drafter.FeatureDrafter (EAGLE) reads the target's hidden states (its own file)
"""

from __future__ import annotations

import torch
from transformers import PreTrainedModel

from .frspec import kept_guess, reduced_head
from .lm import Decoder
from .sampling import Warp
from .tree import Tree, chain
from .tree_drafters import expand, kept_after, lookup_tree
from .tree_shapes import Topology, depth_of

__all__ = ["Drafter", "LookupFirst", "ModelDrafter", "NGramDrafter"]


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
        found = self.lookup(context[0].tolist(), k)
        if not found:
            empty = torch.empty(0, dtype=torch.long, device=context.device)
            return empty, torch.empty(0, self.vocab_size, device=context.device)
        tokens = torch.tensor(found, dtype=torch.long, device=context.device)
        if self.greedy:
            return tokens, None
        return tokens, torch.nn.functional.one_hot(tokens, self.vocab_size).float()

    def lookup(self, ids: list[int], k: int) -> list[int]:
        """The ≤ k tokens that followed the latest earlier occurrence of the longest matching tail of ``ids``
        (host ints: a batch keeps each row's tokens on the host); [] when no tail recurs."""
        for n in range(self.max_ngram, self.min_ngram - 1, -1):
            if len(ids) <= n:
                continue
            tail = ids[-n:]
            for start in range(len(ids) - n - 1, -1, -1):  # latest match first
                if ids[start : start + n] == tail:
                    return ids[start + n : start + n + k]
        return []

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
