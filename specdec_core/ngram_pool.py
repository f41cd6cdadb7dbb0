"""An n-gram pool: what followed each token earlier, for guessing what follows it next.

Lookahead decoding (Fu et al. 2024) and Jacobi Forcing's *rejection recycling* (Hu, Kou et al. 2025)
keep the n-grams that appeared in earlier Jacobi states — right tokens often show up in a state at the
wrong place before they settle — and in the prompt. When the newest fixed token has such an n-gram,
its continuation is a better guess for the next positions than the current state:

    pool.add(tokens)                 every n-gram of tokens, keyed by its first token (the latest wins)
    pool.continuation(token, k)      up to k tokens that followed ``token`` last time, or []

A guess only changes how fast Jacobi decoding converges, never what it converges to (its
convergence test verifies any state), so recycling keeps the output exact.
"""

from __future__ import annotations


class NGramPool:
    """Per first token, the latest n-gram that started with it (its n − 1 followers)."""

    def __init__(self, n: int = 4) -> None:
        if n < 2:
            raise ValueError(f"an n-gram pool needs n >= 2 (a token and what followed it), got {n}")
        self.n = n
        self.follows: dict[int, tuple[int, ...]] = {}

    def add(self, tokens: list[int]) -> None:
        """Remember every n-gram of ``tokens`` (shorter ones at the end are kept too, if nothing longer is)."""
        for i in range(len(tokens) - 1):
            tail = tuple(tokens[i + 1 : i + self.n])
            if len(tail) == self.n - 1 or len(self.follows.get(tokens[i], ())) <= len(tail):
                self.follows[tokens[i]] = tail

    def continuation(self, token: int, k: int) -> list[int]:
        """Up to ``k`` tokens that followed ``token`` in the latest n-gram starting with it."""
        return list(self.follows.get(token, ()))[:k]
