"""An n-gram pool: what followed each token earlier, for guessing what follows it next.

Lookahead decoding (Fu et al. 2024) and Jacobi Forcing's *rejection recycling* (Hu, Kou et al. 2025)
keep the n-grams that appeared in earlier Jacobi states — right tokens often show up in a state at the
wrong place before they settle — and in the prompt. When the newest fixed token has such an n-gram,
its continuation is a better guess for the next positions than the current state:

    pool.add(tokens)                 every n-gram of tokens, keyed by its first token
    pool.remember(first, tail)       one n-gram: ``first`` followed by ``tail`` (n − 1 tokens)
    pool.continuation(token, k)      up to k tokens that followed ``token`` most recently, or []
    pool.candidates(token)           up to ``size`` tails that followed ``token``, most recent first

Per first token the pool keeps at most ``size`` tails (G in lookahead decoding), the least recently
seen dropped first; ``size = 1`` is Jacobi's recycling (the latest n-gram wins). A guess only changes
how many tokens a verification accepts, never which ones, so the output stays exact.
"""

from __future__ import annotations


class NGramPool:
    """Per first token, the ``size`` most recent n-grams that started with it (their n − 1 followers)."""

    def __init__(self, n: int = 4, size: int = 1) -> None:
        if n < 2:
            raise ValueError(f"an n-gram pool needs n >= 2 (a token and what followed it), got {n}")
        if size < 1:
            raise ValueError(f"an n-gram pool keeps at least one n-gram per token (size >= 1), got {size}")
        self.n, self.size = n, size
        self.follows: dict[int, list[tuple[int, ...]]] = {}  # oldest first

    def add(self, tokens: list[int]) -> None:
        """Remember every n-gram of ``tokens`` (shorter ones at the end too, unless a longer one is known)."""
        for i in range(len(tokens) - 1):
            self.remember(tokens[i], tuple(tokens[i + 1 : i + self.n]))

    def remember(self, first: int, tail: tuple[int, ...]) -> None:
        """Record that ``tail`` (at most n − 1 tokens) followed ``first``: it becomes the most recent."""
        entries = self.follows.setdefault(first, [])
        if len(tail) < self.n - 1 and any(len(e) > len(tail) for e in entries):
            return  # a cut-off n-gram at the end of a sequence does not displace a full one
        if tail in entries:
            entries.remove(tail)
        entries.append(tail)
        del entries[: -self.size]  # least recently seen first out

    def continuation(self, token: int, k: int) -> list[int]:
        """Up to ``k`` tokens that followed ``token`` in the most recent n-gram starting with it."""
        entries = self.follows.get(token)
        return list(entries[-1])[:k] if entries else []

    def candidates(self, token: int) -> list[tuple[int, ...]]:
        """The tails that followed ``token``, most recent first (at most ``size``)."""
        return self.follows.get(token, [])[::-1]
