"""Jacobi decoding: greedy decoding of n tokens as n equations, solved in parallel.

Greedy decoding of a block of n tokens after a prefix x solves n equations, one after the other:

    y_1 = argmax p(· | x),   y_2 = argmax p(· | x, y_1),   …,   y_n = argmax p(· | x, y_<n)

Jacobi iteration (Santilli et al. 2023) guesses all n tokens at once, y^(0), and updates every
position in parallel from the previous state — ONE forward pass over [x, y^(k)] for all n rows:

    y_i^(k+1) = argmax p(· | x, y_<i^(k))          i = 1..n

A state that no longer changes satisfies every equation, so the fixed point is exactly the greedy
output. Convergence test: y_1 is always right (its prefix is x). If positions 1..m did not change
in an iteration they were already right (induction), so position m+1, computed from a right prefix,
is right too: every iteration fixes at least one token, a block needs at most n iterations.

Two versions, same trajectories:
- ``jacobi_generate_nocache`` re-runs the whole sequence each iteration: read this one first.
- ``jacobi_generate`` keeps the KV cache of the fixed prefix; each iteration (:func:`jacobi_step`) runs
  only the *window* of unfixed guesses (as CLLM's ``jacobi_forward``), the newest fixed token first,
  since its row predicts the next, padded to a fixed width. With ``blocks`` = K > 1 (Jacobi Forcing,
  Hu, Kou et al. 2025) the next block's guesses join the window before the current block is done, so
  that when it converges the next one is partly right (:func:`window_size`); K = 1 is plain Jacobi.
  The convergence test runs over the whole window, so the output stays exactly the greedy output.

Every iteration fixes at least one token, so ``target_calls`` (forwards that emit a token) is
``iterations``, as AR's is ``tokens``; the prompt's prefill emits nothing. Records:
:class:`~specdec_core.records.JacobiStats`.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from transformers import PreTrainedModel

from .generation import Clock, Generation, Output, common_prefix
from .lm import Decoder, check_inputs
from .ngram_pool import NGramPool
from .records import JacobiStats, JacobiStep
from .tree import padded

INITS = ("repeat", "random", "pad")
State = list[int]  # one block: n token ids


# --- the two building blocks (the exercise of lesson 07) ---------------------------------------


@torch.inference_mode()
def jacobi_iteration(model: PreTrainedModel, prefix: torch.Tensor, state: State) -> State:
    """One Jacobi iteration without cache: the new block state from the old one.

    prefix: [1, P] ids (prompt + tokens fixed so far); state: n guessed ids. One forward over
    [prefix, state[:-1]] (n - 1 + P tokens); its last n rows predict positions 1..n of the block
    (row i sees the prefix and state[:i]). state[-1] is not needed: nothing in the block follows it.
    """
    ids = torch.cat([prefix, torch.tensor([state[:-1]], dtype=torch.long, device=prefix.device)], dim=1)
    logits = model(input_ids=ids, use_cache=False, logits_to_keep=len(state)).logits  # [1, n, V]
    return logits[0].argmax(-1).tolist()


def converged_count(old: State, new: State) -> int:
    """How many leading tokens of ``new`` are certainly right: those that did not change, plus one.

    The first token is always right (its prefix is fixed). A leading token equal to its previous
    value was predicted from a right prefix, so its successor's prefix is right as well.
    """
    m = 0
    while m < len(new) and old[m] == new[m]:
        m += 1
    return min(m + 1, len(new))


def initial_guess(init: str, n: int, last_token: int, vocab_size: int, pad_token_id: int,
                  generator: torch.Generator | None = None) -> State:
    """The starting state y^(0) of a block of n tokens.

    ``repeat``: the last known token n times; ``random``: uniform ids (from ``generator``);
    ``pad``: the pad token n times.
    """
    if init == "repeat":
        return [last_token] * n
    if init == "pad":
        return [pad_token_id] * n
    if init == "random":
        device = generator.device if generator is not None else "cpu"
        return torch.randint(0, vocab_size, (n,), generator=generator, device=device).tolist()
    raise ValueError(f"unknown init {init!r}: choose one of {', '.join(INITS)}")


# --- generation ---------------------------------------------------------------------------------


def window_size(done: int, window: int, remaining: int, n: int, blocks: int, activation: float) -> int:
    """How many unfixed guesses the window holds for the next iteration: the rest of the block being fixed
    (the real-active block), plus the next block's n guesses once that block has fixed a share
    ``activation`` of its tokens — while fewer than ``blocks`` (K) blocks are in flight (the paper: r = 0.85,
    K = 2). done: tokens fixed so far; window: guesses it holds now; remaining: tokens the budget allows;
    n: the block size. At most K·n: every forward has that width (K = 1: the rest of the block, ≤ n)."""
    real_end = (done // n + 1) * n  # the real-active block ends here
    size = max(window, real_end - done)  # at least the rest of the real-active block
    in_flight = -(-(done + size) // n) - done // n  # blocks the window overlaps
    if in_flight < blocks and done % n >= activation * n:
        size += n  # a pseudo-active block joins
    return min(size, remaining)


def _check(model: PreTrainedModel, input_ids: torch.Tensor, max_new_tokens: int, block_size: int, init: str) -> None:
    check_inputs(model, input_ids, max_new_tokens)
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1 (tokens solved in parallel), got {block_size}")
    if init not in INITS:
        raise ValueError(f"unknown init {init!r}: choose one of {', '.join(INITS)}")


def _pad_id(model: PreTrainedModel, tokenizer) -> int:
    """The pad token of the tokenizer, else of the model's configs, else the EOS token, else 0."""
    for name in ("pad_token_id", "eos_token_id"):
        for source in (tokenizer, getattr(model, "generation_config", None), model.config):
            value = getattr(source, name, None) if source is not None else None
            if isinstance(value, (list, tuple)):
                value = value[0] if value else None
            if value is not None:
                return int(value)
    return 0


def _guess(model, init, n, last_token, tokenizer, generator) -> State:
    vocab = model.get_output_embeddings().out_features
    return initial_guess(init, n, last_token, vocab, _pad_id(model, tokenizer), generator) if n > 0 else []


def recycle_guess(pool: NGramPool, state: State, done: int, newest: int) -> bool:
    """Put the pool's continuation of the newest fixed token into the unfixed part of ``state`` (in
    place); True if that changed the state."""
    guess = pool.continuation(newest, len(state) - done)
    if not guess or guess == state[done : done + len(guess)]:
        return False
    state[done : done + len(guess)] = guess
    return True


def jacobi_step(decoder: Decoder, newest: int, window: State, width: int, pool: NGramPool | None = None
                ) -> tuple[list[int], JacobiStep]:
    """One Jacobi iteration: ONE forward of ``width`` tokens over [newest, window[:-1], pads].

    decoder: holds the prompt and the fixed tokens but the newest, whose row predicts window[0]; window:
    the unfixed guesses (1 ≤ len ≤ width), first replaced by ``pool``'s continuation of ``newest`` if it
    has one (rejection recycling: the convergence test verifies any state). Pads see only themselves and
    are never kept. Returns (the tokens fixed: the window's leading unchanged guesses + 1, the record); the
    cache then holds every fixed token but the newest again.
    """
    recycled = pool is not None and recycle_guess(pool, window, 0, newest)
    n, past = len(window), decoder.length
    ids = torch.tensor([newest, *window[:-1]])  # host: the guesses are Python ints, moved with the forward
    causal = torch.ones(n, n, dtype=torch.bool).tril()  # host: built here, moved once by step_masked
    ids, offsets, mask = padded(ids, torch.arange(n), causal, width)  # host: offsets, moved with the forward
    logits = decoder.step_masked(ids.view(1, -1), past + offsets, mask)  # [1, width, V]
    new = logits[0, :n].argmax(-1).tolist()  # the one device→host transfer: the convergence test reads tokens
    if pool is not None:
        pool.add(new)
    k = converged_count(window, new)
    decoder.rollback(past + k)  # the newest and the k − 1 guesses that were right (their keys are right)
    return new[:k], JacobiStep(list(window), new, k, width, recycled)


@torch.inference_mode()
def jacobi_generate(model: PreTrainedModel, input_ids: torch.Tensor, max_new_tokens: int, *, block_size: int = 16,
                    blocks: int = 1, activation: float = 0.85, init: str = "repeat",
                    eos_token_id: int | Iterable[int] | None = None, generator: torch.Generator | None = None,
                    tokenizer=None, recycle: int = 0) -> Generation:
    """Greedy generation by Jacobi iteration with the KV cache of the fixed prefix, up to ``blocks``
    blocks of ``block_size`` tokens in flight (:func:`window_size`, ``activation``: its share r).

    input_ids: [1, T]. Output identical to ``ar.generate`` at temperature 0 (up to rounding: a forward
    over many tokens rounds differently from one over a single token, so in bf16 a near-tie can flip):
    it stops right after an EOS token (kept), else gives exactly ``max_new_tokens`` tokens. Every iteration
    is :func:`jacobi_step`, of width ``blocks · block_size``. New guesses follow ``init`` (see
    :func:`initial_guess`; "repeat" repeats the last known token). ``recycle`` = n > 1 turns on *rejection
    recycling* (Jacobi Forcing): n-grams of the prompt and of every state go into an
    :class:`~specdec_core.ngram_pool.NGramPool`, and its continuation of the newest fixed token replaces
    the guesses that follow it. stats: :class:`~specdec_core.records.JacobiStats`.
    """
    _check(model, input_ids, max_new_tokens, block_size, init)
    if blocks < 1 or not 0 <= activation <= 1:
        raise ValueError(f"need blocks >= 1 and 0 <= activation <= 1; got {blocks}, {activation}")
    prompt, width, out = input_ids.to(model.device), blocks * block_size, Output(max_new_tokens, eos_token_id)
    decoder, pool = Decoder(model), NGramPool(recycle) if recycle else None
    if pool is not None:
        pool.add(prompt[0].tolist())
    stats = JacobiStats(block_size=block_size, blocks=blocks, activation=activation, init=init)
    clock = Clock(model.device)
    decoder.prefill(prompt, capacity=prompt.shape[1] + max_new_tokens + width)
    decoder.rollback(prompt.shape[1] - 1)  # the newest token stays out of the cache: its row predicts the next
    newest, window = int(prompt[0, -1]), []
    while not out.done:
        size = window_size(len(out.tokens), len(window), out.left, block_size, blocks, activation)
        window += _guess(model, init, size - len(window), window[-1] if window else newest, tokenizer, generator)
        tokens, step = jacobi_step(decoder, newest, window, width, pool)
        step.fixed = len(out.emit(tokens))
        stats.steps.append(step)
        newest, window = tokens[-1], step.new[len(tokens) :]
    stats.wall_time, stats.target_calls = clock.stop(), len(stats.steps)
    return Generation(out.tokens, tokenizer.decode(out.tokens) if tokenizer is not None else None, stats)


@torch.inference_mode()
def jacobi_generate_nocache(model: PreTrainedModel, input_ids: torch.Tensor, max_new_tokens: int, *,
                            block_size: int = 16, init: str = "repeat", eos_token_id: int | Iterable[int] | None = None,
                            generator: torch.Generator | None = None, tokenizer=None) -> Generation:
    """The same, one block at a time, without a KV cache: every iteration re-runs the prompt, the fixed
    tokens and the block's unfixed guesses (:func:`jacobi_iteration`). Slow, but each line is the math."""
    _check(model, input_ids, max_new_tokens, block_size, init)
    prompt, out, window = input_ids.to(model.device), Output(max_new_tokens, eos_token_id), []
    stats, clock = JacobiStats(block_size=block_size, init=init), Clock(model.device)
    while not out.done:
        prefix = torch.cat([prompt, prompt.new_tensor([out.tokens])], dim=1)  # [1, P + fixed]
        if not window:  # a block starts
            window = _guess(model, init, min(block_size, out.left), int(prefix[0, -1]), tokenizer, generator)
        new = jacobi_iteration(model, prefix, window)
        k = converged_count(window, new)
        stats.steps.append(JacobiStep(window, new, len(out.emit(new[:k])), prefix.shape[1] + len(window) - 1))
        window = new[k:]
    stats.wall_time, stats.target_calls = clock.stop(), len(stats.steps)
    return Generation(out.tokens, tokenizer.decode(out.tokens) if tokenizer is not None else None, stats)


# --- what the trajectories tell -------------------------------------------------------------------


def split_blocks(trajectory: list[list[State]], new_tokens: list[int]) -> list[list[int]]:
    """The final tokens of each block (the last block may be cut short by an EOS)."""
    blocks, offset = [], 0
    for states in trajectory:
        n = len(states[0])
        blocks.append(new_tokens[offset : offset + n])
        offset += n
    return blocks


def fixed_counts(states: list[State], length: int | None = None) -> list[int]:
    """For each state of a block, how many of its leading tokens the convergence test has fixed
    (0 for the guess y^(0)); ``length`` caps it (a block cut short by an EOS)."""
    length = len(states[0]) if length is None else length
    counts = [0]
    for j in range(1, len(states)):
        counts.append(min(converged_count(states[j - 1], states[j]), length))
    return counts


def accuracy_after_error(trajectory: list[list[State]], new_tokens: list[int]) -> tuple[int, int]:
    """(right, total) over all positions that follow a wrong token, in every state after y^(0).

    By construction a token whose prefix is right is right; this counts how often the model gets a
    token right although something before it is wrong — what Jacobi needs to beat AR.
    """
    right = total = 0
    for states, truth in zip(trajectory, split_blocks(trajectory, new_tokens)):
        for state in states[1:]:
            first_wrong = common_prefix(state, truth)
            for i in range(first_wrong + 1, len(truth)):
                total += 1
                right += state[i] == truth[i]
    return right, total


def ngrams_seen_early(trajectory: list[list[State]], new_tokens: list[int], n: int = 2) -> tuple[int, int]:
    """(seen, total): n-grams of the answer that appeared somewhere in an earlier state of their block
    before the convergence test fixed them — the raw material lookahead decoding collects and verifies."""
    seen = total = 0
    for states, truth in zip(trajectory, split_blocks(trajectory, new_tokens)):
        grams_until: list[set[tuple[int, ...]]] = []  # n-grams of states[0..j]
        pool: set[tuple[int, ...]] = set()
        for state in states:
            pool = pool | {tuple(state[i : i + n]) for i in range(len(state) - n + 1)}
            grams_until.append(pool)
        counts = fixed_counts(states, len(truth))
        fixed_at = [j for j in range(1, len(states)) for _ in range(counts[j] - counts[j - 1])]
        for i in range(len(truth) - n + 1):
            total += 1
            # the n-gram is fixed when its last token is; was it in a state before that iteration?
            seen += tuple(truth[i : i + n]) in grams_until[fixed_at[i + n - 1] - 1]
    return seen, total


def summarize(gen: Generation) -> dict:
    """The numbers the lesson's widget shows for one Jacobi generation (one block in flight)."""
    s: JacobiStats = gen.stats
    return {"tokens": len(gen.new_tokens), "iterations": s.iterations, "tokens_per_iteration": round(s.tokens_per_iteration, 3),
            "fast_forwarded": sum(s.fast_forward), "stationary": sum(s.stationary), "blocks": len(s.trajectory)}
