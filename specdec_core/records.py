"""What a run records: one small dataclass per method family, read by field (``gen.stats.alpha``), never by string.

Every record shares the run fields of :class:`RunStats`:

    wall_time     seconds from the first forward to the last token (the device drained at both ends)
    target_calls  target forwards that emit at least one token (AR: one per token, the prefill emits the
                  first; speculative and trees: one per verify; Jacobi and lookahead: one per iteration)
    new_tokens    tokens emitted (the prompt excluded)
    tokens_per_call = new_tokens ÷ target_calls: 1 for AR, the gain elsewhere (NaN without a target call)

A family adds its own fields and, where a run is a sequence of steps, a per-step record (``steps``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass
class RunStats:
    """The fields every run shares (module docstring). A student's own loop returns one of these too."""

    wall_time: float = 0.0
    target_calls: int = 0
    new_tokens: int = 0

    @property
    def tokens_per_call(self) -> float:
        """New tokens per target forward; NaN when the target never emitted a token (the naive method)."""
        return tokens_per_call(self.new_tokens, self.target_calls)


def tokens_per_call(new_tokens: int, target_calls: int) -> float:
    """New tokens per target forward; NaN when the target never emitted a token (e.g. the naive method)."""
    return new_tokens / target_calls if target_calls else math.nan


# ---- autoregressive ------------------------------------------------------------------------------


@dataclass
class ARStats(RunStats):
    """``ar.generate``: ``ttft`` the prefill's time (to the first token), ``token_times`` seconds per new token."""

    ttft: float = 0.0
    token_times: list[float] = field(default_factory=list)


# ---- speculative (a chain of guesses) ------------------------------------------------------------


@dataclass
class SpecStep:
    """One speculative step: the guesses drafted (ints; fewer than γ when the drafter ran short: the verify
    was padded), how many were accepted, the target's own token after them (``kind``: "resampled" at a
    rejection, "bonus" after all), the γ asked (the verify ran γ + 1 wide), and the seconds spent drafting
    (filled by the step) and verifying (filled after the run, from the clock's ``marks``)."""

    drafted: list[int]
    accepted: int
    next: int
    kind: str
    gamma: int
    draft_s: float = 0.0
    verify_s: float = 0.0
    marks: tuple = field(default=(), repr=False, compare=False)


@dataclass
class SpecStats(RunStats):
    """``speculative_generate``: ``draft_calls`` and the steps; ``alpha`` (accepted ÷ examined guesses),
    ``alpha_per_position``, ``draft_time`` and ``verify_time`` (s) are read off the steps."""

    draft_calls: int = 0
    steps: list[SpecStep] = field(default_factory=list)

    @property
    def alpha_per_position(self) -> list[float]:
        """Accepted ÷ examined guesses at each draft position (the test looks at a guess until one fails)."""
        examined, accepted = [0] * max(self.gammas, default=0), [0] * max(self.gammas, default=0)
        for s in self.steps:
            for i in range(min(s.accepted + 1, len(s.drafted))):
                examined[i], accepted[i] = examined[i] + 1, accepted[i] + (i < s.accepted)
        return [a / e if e else math.nan for a, e in zip(accepted, examined)]

    @property
    def alpha(self) -> float:
        examined = sum(min(s.accepted + 1, len(s.drafted)) for s in self.steps)
        return sum(s.accepted for s in self.steps) / examined if examined else math.nan

    draft_time = property(lambda self: sum(s.draft_s for s in self.steps))  # s
    verify_time = property(lambda self: sum(s.verify_s for s in self.steps))
    accepted_lengths = property(lambda self: [s.accepted for s in self.steps])
    gammas = property(lambda self: [s.gamma for s in self.steps], doc="γ of each step (one value unless chosen per step).")


# ---- the tutorial's naive method -----------------------------------------------------------------


@dataclass
class NaiveStats(RunStats):
    """``naive.naive_generate``: the draft's text (prompt + answer, the tutorial's output), the tutorial's
    ``score`` (mean log-likelihood, prompt included) and ``score_generated_only`` (the answer only) of the
    ``scored_ids`` (the re-tokenized text, ``prompt_tokens`` of them the prompt), and the time of each half.
    ``target_calls`` is 0: the scoring forward emits no token (``score_calls`` = 1)."""

    draft_text: str = ""
    score: float = math.nan
    score_generated_only: float = math.nan
    scored_ids: list[int] = field(default_factory=list)
    prompt_tokens: int = 0
    draft_time: float = 0.0
    score_time: float = 0.0
    score_calls: int = 1
    draft_calls: int = 0


# ---- token trees and lookahead (one forward verifies a tree; lookahead adds its window) -----------


@dataclass
class TreeStep:
    """One tree step: the drafted tokens and their parents (``tree.Tree``), the accepted ``path`` (nodes), the
    target's ``next`` token, the forward's ``width`` (a fixed shape's n + 1; auto: the step's menu width) and
    the part ``used`` (the rest: pads), ``trials`` per depth reached (children, rank accepted or -1), the
    ``shape`` asked, and the seconds drafting and verifying (from ``marks``, the clock's, after the run)."""

    drafted: list[int]
    parents: list[int]
    path: list[int]
    next: int
    width: int
    used: int
    trials: list[tuple[int, int]] = field(default_factory=list)
    shape: object = None
    draft_s: float = 0.0
    verify_s: float = 0.0
    marks: tuple = field(default=(), repr=False, compare=False)

    @property
    def accepted(self) -> int:
        return len(self.path)


@dataclass
class LookaheadStep(TreeStep):
    """A tree step whose tree is the pool's trie for the ``current`` token: the ``window`` it ran (levels), the
    ``tails`` and their trie ``paths``, each tail's ``matches`` with the target's argmax, the ``host`` seconds."""

    current: int = 0
    window: list[list[int]] = field(default_factory=list)
    tails: list[tuple[int, ...]] = field(default_factory=list)
    paths: list[list[int]] = field(default_factory=list)
    matches: list[int] = field(default_factory=list)
    host: float = 0.0


@dataclass
class TreeStats(RunStats):
    """``tree_generate`` and ``lookahead_generate``: ``draft_calls``, the steps and what is read off them
    (``draft_time`` and ``verify_time`` summed, …); lookahead adds the ``shape`` kept and ``search`` (what
    "auto" measured, ``lookahead_shapes.ShapeSearch.report``)."""

    draft_calls: int = 0
    steps: list[TreeStep] = field(default_factory=list)
    shape: object = None
    search: dict = field(default_factory=dict)
    tree: bool = True  # priced with the tree-mask v(n) (costmodel.predict)

    draft_time = property(lambda self: sum(s.draft_s for s in self.steps))  # s
    verify_time = property(lambda self: sum(s.verify_s for s in self.steps))
    accepted_lengths = property(lambda self: [s.accepted for s in self.steps])
    verify_widths = property(lambda self: [s.width for s in self.steps])  # tokens per forward, pads included
    tree_sizes = property(lambda self: [len(s.drafted) for s in self.steps])
    shapes = property(lambda self: [s.shape for s in self.steps])
    sibling_trials = property(lambda self: [t for s in self.steps for t in s.trials])
    accepted_ranks = property(lambda self: [r for s in self.steps for _, r in s.trials])
    pool_hits = property(lambda self: sum(len(s.drafted) > 0 for s in self.steps))  # lookahead: a candidate


# ---- Jacobi decoding (one block or several in flight; the CLLM and Jacobi Forcing adapters) -------


@dataclass
class JacobiStep:
    """One Jacobi iteration: the ``window`` of guesses it ran from (after recycling), the target's argmax
    ``new`` for each, the tokens it ``fixed`` (emitted: cut after an EOS), the forward's ``width`` (pads
    included: the run's fixed width) and whether the window started from a ``recycled`` n-gram."""

    window: list[int]
    new: list[int]
    fixed: int
    width: int
    recycled: bool = False


@dataclass
class JacobiStats(RunStats):
    """``jacobi_generate``: the settings and the iterations; the per-iteration lists are read off the steps.
    ``trajectory`` and ``stationary`` need one block in flight (``blocks`` = 1)."""

    block_size: int = 16
    blocks: int = 1
    activation: float = 0.85
    init: str = "repeat"
    steps: list[JacobiStep] = field(default_factory=list)

    iterations = property(lambda self: len(self.steps))
    fixed = property(lambda self: [s.fixed for s in self.steps])
    fast_forward = property(lambda self: [s.fixed - 1 for s in self.steps], doc="Tokens fixed beyond the first.")
    widths = property(lambda self: [s.width for s in self.steps], doc="Tokens per forward, pads included.")
    used = property(lambda self: [len(s.window) for s in self.steps], doc="Tokens per forward, pads excluded.")
    recycled = property(lambda self: sum(s.recycled for s in self.steps), doc="Iterations from a recycled guess.")
    tokens_per_iteration = RunStats.tokens_per_call
    mean_width = property(lambda self: sum(self.used) / max(self.iterations, 1), doc="Mean tokens per forward, pads excluded.")

    @property
    def trajectory(self) -> list[list[list[int]]]:
        """Per block, its states y^(0) (the guess), y^(1), …, y^(K) (the fixed point): the block's fixed tokens,
        then the window an iteration ran from (recycling included), then its argmax."""
        return [states for states, _ in self._blocks()]

    @property
    def stationary(self) -> list[int]:
        """Per iteration, tokens that became right in it and stay right to the end of their block although an
        earlier token of the state is still wrong."""
        out = []
        for states, truth in self._blocks():
            n = len(truth)  # stable[i]: the first iteration from which position i stays right
            stable = [next((m + 1 for m in range(len(states) - 1, 0, -1) if states[m][i] != truth[i]), 1)
                      for i in range(n)]
            for j in range(1, len(states)):
                wrong = next((i for i in range(n) if states[j][i] != truth[i]), n)  # the first wrong token
                out.append(sum(stable[i] == j for i in range(wrong + 1, n)))
        return out

    def _blocks(self) -> list[tuple[list[list[int]], list[int]]]:
        """Per block, (its states, its fixed tokens)."""
        if self.blocks != 1:
            raise ValueError(f"a block's trajectory needs one block in flight; this run had blocks={self.blocks}")
        blocks, done = [], []
        for s in self.steps:
            head = done[len(done) - len(done) % self.block_size :]  # the block's fixed tokens
            if not head:
                blocks.append(([], []))
            states, truth = blocks[-1]
            states[-1:] = [head + s.window, head + s.new]  # the start replaces the last result (recycling)
            truth += s.new[: s.fixed]
            done += s.new[: s.fixed]
        return blocks
