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
- ``jacobi_generate`` keeps the KV cache of the fixed prefix and runs only the unfixed part
  (as CLLM's ``jacobi_forward``); the newest fixed token goes first, since its row predicts the next.
  ``blocks=K`` keeps up to K blocks in flight (Jacobi Forcing's multi-block, :mod:`.jacobi_multiblock`).

The first iteration of all runs together with the prompt (the prefill). Every iteration fixes at
least one token, so ``target_calls`` (forwards that emit a token) is ``iterations``, as AR's is ``tokens``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

import torch
from transformers import PreTrainedModel

from .generation import Generation, common_prefix, eos_set, synchronize
from .jacobi_multiblock import window_size
from .lm import Decoder, check_inputs
from .ngram_pool import NGramPool

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


def initial_guess(
    init: str,
    n: int,
    last_token: int,
    vocab_size: int,
    pad_token_id: int,
    generator: torch.Generator | None = None,
) -> State:
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


def cut_at_eos(tokens: list[int], stops: set[int]) -> tuple[list[int], bool]:
    """tokens up to and including the first EOS, and whether there was one."""
    for i, token in enumerate(tokens):
        if token in stops:
            return tokens[: i + 1], True
    return tokens, False


def _guess(model, init, n, last_token, tokenizer, generator) -> State:
    vocab = model.get_output_embeddings().weight.shape[0]
    return initial_guess(init, n, last_token, vocab, _pad_id(model, tokenizer), generator)


@torch.inference_mode()
def jacobi_generate(
    model: PreTrainedModel,
    input_ids: torch.Tensor,
    max_new_tokens: int,
    *,
    block_size: int = 16,
    blocks: int = 1,
    activation: float = 0.85,
    init: str = "repeat",
    eos_token_id: int | Iterable[int] | None = None,
    generator: torch.Generator | None = None,
    tokenizer=None,
    recycle: int = 0,
) -> Generation:
    """Greedy generation by Jacobi iteration with the KV cache of the fixed prefix, up to ``blocks``
    blocks of ``block_size`` tokens in flight.

    input_ids: [1, T]. Output identical to ``ar.generate`` at temperature 0 (up to rounding: a forward
    over many tokens rounds differently from one over a single token, so in bf16 a near-tie can flip):
    it stops right after an EOS token (kept), else gives exactly ``max_new_tokens`` tokens. Each iteration
    is one forward over [newest fixed token, the window's unfixed guesses]; the cache then keeps only the
    fixed tokens. ``blocks`` = 1 (plain Jacobi): the window is the rest of the current block. ``blocks`` = K
    > 1 (Jacobi Forcing's multi-block): the next block's guesses join once the current one has fixed a
    share ``activation`` of its tokens (:mod:`specdec_core.jacobi_multiblock`). New guesses follow
    ``init`` (see :func:`initial_guess`; "repeat" repeats the last known token).
    ``recycle`` = n > 1 turns on *rejection recycling* (Jacobi Forcing): n-grams of the prompt and of
    every earlier state go into an :class:`~specdec_core.ngram_pool.NGramPool`, and where the newest fixed
    token has one, its continuation replaces the guesses that follow it. The convergence test verifies
    any state, so the output stays exactly the same.
    stats: iterations (= target_calls), tokens_per_iteration, fixed and fast_forward (per iteration),
    widths (tokens each forward read; the first includes the prompt), mean_width (of the later forwards),
    recycled (iterations that started from a pool guess); with one block also stationary and the
    trajectory (:func:`jacobi_stats`).
    """
    _check(model, input_ids, max_new_tokens, block_size, init)
    if blocks < 1 or not 0 <= activation <= 1:
        raise ValueError(f"need blocks >= 1 and 0 <= activation <= 1; got {blocks}, {activation}")
    stops = eos_set(eos_token_id)
    device = model.device
    prompt = input_ids.to(device)
    decoder = Decoder(model)
    pool = NGramPool(recycle) if recycle else None
    if pool is not None:
        pool.add(prompt[0].tolist())
    out: list[int] = []
    window: list[int] = []  # the unfixed guesses after out
    trajectory: list[list[State]] = []  # one block in flight: per block, its states
    fixed, widths, recycled, ended = [], [], 0, False

    synchronize(device)
    start = time.perf_counter()
    while len(out) < max_new_tokens and not ended:
        newest = out[-1] if out else int(prompt[0, -1])
        new_block = not window  # one block in flight: an empty window means a block starts
        size = window_size(len(out), len(window), max_new_tokens - len(out), block_size, blocks, activation)
        if size > len(window):
            window += _guess(model, init, size - len(window), window[-1] if window else newest, tokenizer, generator)
        if pool is not None and recycle_guess(pool, window, 0, newest):
            recycled += 1
        if blocks == 1:  # the block's state: its fixed tokens, then the window
            state = out[len(out) - len(out) % block_size :] + window
            if new_block:
                trajectory.append([state])
            else:
                trajectory[-1][-1] = state  # the iteration starts from this (maybe recycled) state
        guess = torch.tensor([window[:-1]], dtype=torch.long, device=device)
        if decoder.length == 0:  # the first iteration runs with the prompt: the prefill
            logits = decoder.prefill(torch.cat([prompt, guess], dim=1), logits_to_keep=len(window))
        else:  # the newest fixed token is not in the cache yet: its row predicts the window's first token
            logits = decoder.step(torch.cat([torch.tensor([[newest]], device=device), guess], dim=1))
        widths.append(guess.shape[1] + (1 if out else prompt.shape[1]))
        new = logits[0].argmax(-1).tolist()  # [len(window)]
        if pool is not None:
            pool.add(new)
        if blocks == 1:
            trajectory[-1].append(state[: len(state) - len(window)] + new)
        k = converged_count(window, new)
        done, ended = cut_at_eos(new[:k], stops)
        out.extend(done)
        fixed.append(len(done))
        window = new[k:]
        decoder.rollback(prompt.shape[1] + len(out) - 1)  # keep the fixed tokens but the newest
    synchronize(device)
    stats = {"wall_time": time.perf_counter() - start, "block_size": block_size, "blocks": blocks,
             "activation": activation, "init": init}
    if blocks == 1:
        assert all(len(s) - 1 <= len(s[0]) for s in trajectory), "a block took more iterations than tokens"
        stats |= jacobi_stats(trajectory, out)  # its "fixed" equals the loop's (the tests check)
    else:
        stats |= {"iterations": len(fixed), "target_calls": len(fixed), "fixed": fixed,
                  "fast_forward": [f - 1 for f in fixed],
                  "tokens_per_iteration": len(out) / len(fixed) if fixed else 0.0}
    stats |= {"widths": widths, "mean_width": sum(widths[1:]) / max(len(widths) - 1, 1), "recycled": recycled}
    return Generation(out, tokenizer.decode(out) if tokenizer is not None else None, stats)


def recycle_guess(pool: NGramPool, state: State, done: int, newest: int) -> bool:
    """Put the pool's continuation of the newest fixed token into the unfixed part of ``state`` (in
    place); True if that changed the state."""
    guess = pool.continuation(newest, len(state) - done)
    if not guess or guess == state[done : done + len(guess)]:
        return False
    state[done : done + len(guess)] = guess
    return True


@torch.inference_mode()
def jacobi_generate_nocache(
    model: PreTrainedModel,
    input_ids: torch.Tensor,
    max_new_tokens: int,
    *,
    block_size: int = 16,
    init: str = "repeat",
    eos_token_id: int | Iterable[int] | None = None,
    generator: torch.Generator | None = None,
    tokenizer=None,
) -> Generation:
    """The same, without a KV cache: every iteration re-runs prompt + fixed tokens + the whole block.

    Slow, but each line is the math: iterate until the convergence test says the block is fixed.
    """
    _check(model, input_ids, max_new_tokens, block_size, init)
    stops = eos_set(eos_token_id)
    prompt = input_ids.to(model.device)
    out: list[int] = []
    trajectory: list[list[State]] = []
    ended = False

    synchronize(model.device)
    start = time.perf_counter()
    while len(out) < max_new_tokens and not ended:
        n = min(block_size, max_new_tokens - len(out))
        prefix = torch.cat([prompt, torch.tensor([out], dtype=torch.long, device=prompt.device)], dim=1)
        state = _guess(model, init, n, int(prefix[0, -1]), tokenizer, generator)
        states = [state]
        while True:
            new = jacobi_iteration(model, prefix, state)
            fixed = converged_count(state, new)
            state = new
            states.append(state)
            block, ended = cut_at_eos(state[:fixed], stops)
            if fixed == n or ended:
                break
        assert len(states) - 1 <= n, f"block of {n} tokens took {len(states) - 1} iterations"
        out.extend(block)
        trajectory.append(states)
    synchronize(model.device)
    return _result(out, trajectory, time.perf_counter() - start, tokenizer, block_size, init)


def _result(out, trajectory, wall, tokenizer, block_size, init) -> Generation:
    stats = {"wall_time": wall, "block_size": block_size, "init": init, **jacobi_stats(trajectory, out)}
    text = tokenizer.decode(out) if tokenizer is not None else None
    return Generation(out, text, stats)


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


def jacobi_stats(trajectory: list[list[State]], new_tokens: list[int]) -> dict:
    """Everything a Generation of this module reports, computed from its trajectory alone.

    trajectory: per block, its states [y^(0) (the guess), y^(1), …, y^(K) (the fixed point)].
    Per iteration (all blocks in a row):
      fixed         tokens the convergence test fixed (≥ 1);
      fast_forward  fixed − 1: tokens fixed beyond the one every iteration gets;
      stationary    tokens that became right in this iteration and stay right until the end of their
                    block although an earlier token of the state is still wrong.
    Totals: iterations, target_calls (= iterations: each one emits at least one token; the first
    ran with the prefill), tokens_per_iteration, and the trajectory itself.
    """
    fixed, stationary = [], []
    for states, truth in zip(trajectory, split_blocks(trajectory, new_tokens)):
        counts = fixed_counts(states, len(truth))
        for j in range(1, len(states)):
            fixed.append(counts[j] - counts[j - 1])
            first_wrong = common_prefix(states[j], truth)  # tokens after it have a wrong prefix
            stationary.append(sum(_first_stable(states, truth, i) == j for i in range(first_wrong + 1, len(truth))))
    iterations = len(fixed)
    return {
        "iterations": iterations,
        "target_calls": iterations,
        "tokens_per_iteration": len(new_tokens) / iterations if iterations else 0.0,
        "fixed": fixed,
        "fast_forward": [f - 1 for f in fixed],
        "stationary": stationary,
        "trajectory": trajectory,
    }


def _first_stable(states: list[State], truth: list[int], i: int) -> int:
    """The first iteration j ≥ 1 from which position i equals the truth in every later state."""
    j = len(states)
    while j > 1 and states[j - 1][i] == truth[i]:
        j -= 1
    return j


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
    """The numbers the lesson's widget shows for one Jacobi generation."""
    s = gen.stats
    return {
        "tokens": len(gen.new_tokens),
        "iterations": s["iterations"],
        "tokens_per_iteration": round(s["tokens_per_iteration"], 3),
        "fast_forwarded": sum(s["fast_forward"]),
        "stationary": sum(s["stationary"]),
        "blocks": len(s["trajectory"]),
    }
