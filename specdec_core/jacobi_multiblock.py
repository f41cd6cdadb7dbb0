"""Multi-block Jacobi decoding (Jacobi Forcing, Hu, Kou et al. 2025): more than one block in flight.

Plain Jacobi decoding (:mod:`specdec_core.jacobi`) iterates on one block until it has converged. With
several blocks in flight the next block starts iterating before the current one is done — on a prefix
that is still partly noisy — so that when the current block converges, the next one is partly right:

    window          the unfixed tokens after the output: the rest of the real-active block, then up to
                    K − 1 pseudo-active blocks of guesses
    activation      a new block of n guesses joins the window once the real-active block has fixed at
                    least a share r of its n tokens (the paper uses r = 0.85, K = 2)
    one iteration   ONE forward over [newest fixed token, window[:-1]]; the convergence test runs over
                    the whole window, so its leading unchanged tokens + 1 are fixed across block borders

The convergence test verifies every token, so the output is exactly the greedy output. A wider window
costs a wider forward (v(width) target steps, lesson 01): the stats report every forward's width.
With ``blocks=1`` this is :func:`~specdec_core.jacobi.jacobi_generate`, iteration for iteration.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

import torch
from transformers import PreTrainedModel

from .generation import Generation, eos_set, synchronize
from .jacobi import converged_count, cut_at_eos, recycle_guess
from .lm import Decoder, check_inputs
from .ngram_pool import NGramPool


def _window_size(done: int, window: int, remaining: int, n: int, blocks: int, activation: float) -> int:
    """How many unfixed tokens the window should hold before the next iteration.

    done: tokens fixed so far; window: unfixed tokens it holds now; remaining: tokens still allowed."""
    real_end = (done // n + 1) * n  # the real-active block ends here
    size = max(window, real_end - done)  # at least the rest of the real-active block
    in_flight = -(-(done + size) // n) - done // n  # blocks the window overlaps
    if in_flight < blocks and done % n >= activation * n:
        size += n  # a pseudo-active block joins
    return min(size, remaining)


@torch.inference_mode()
def jacobi_generate_multiblock(
    model: PreTrainedModel,
    input_ids: torch.Tensor,
    max_new_tokens: int,
    *,
    block_size: int = 16,
    blocks: int = 2,
    activation: float = 0.85,
    recycle: int = 0,
    eos_token_id: int | Iterable[int] | None = None,
    tokenizer=None,
) -> Generation:
    """Greedy generation by Jacobi iteration with up to ``blocks`` blocks of ``block_size`` in flight.

    input_ids [1, T]. New guesses repeat the last known token (``init="repeat"``); ``recycle`` = n > 1
    also starts iterations from an n-gram pool (:func:`~specdec_core.jacobi.jacobi_generate`). Output
    identical to ``ar.generate`` at temperature 0 (stops right after an EOS, kept). stats: wall_time,
    iterations (= target_calls), tokens_per_iteration, fixed (per iteration), widths (tokens each
    forward read), mean_width, recycled.
    """
    check_inputs(model, input_ids, max_new_tokens)
    if block_size < 1 or blocks < 1 or not 0 <= activation <= 1:
        raise ValueError(f"need block_size >= 1, blocks >= 1, 0 <= activation <= 1; got {block_size}, {blocks}, {activation}")
    stops, device = eos_set(eos_token_id), model.device
    prompt = input_ids.to(device)
    decoder = Decoder(model)
    pool = NGramPool(recycle) if recycle else None
    if pool is not None:
        pool.add(prompt[0].tolist())
    out: list[int] = []
    window: list[int] = []
    fixed, widths, recycled, ended = [], [], 0, False

    synchronize(device)
    start = time.perf_counter()
    while len(out) < max_new_tokens and not ended:
        newest = out[-1] if out else int(prompt[0, -1])
        size = _window_size(len(out), len(window), max_new_tokens - len(out), block_size, blocks, activation)
        window += [window[-1] if window else newest] * (size - len(window))  # new guesses repeat the last token
        if pool is not None and recycle_guess(pool, window, 0, newest):
            recycled += 1
        guess = torch.tensor([window[:-1]], dtype=torch.long, device=device)
        if decoder.length == 0:  # the first iteration runs with the prompt: the prefill
            logits = decoder.prefill(torch.cat([prompt, guess], dim=1), logits_to_keep=len(window))
        else:  # the newest fixed token is not in the cache yet: its row predicts the window's first token
            logits = decoder.step(torch.cat([torch.tensor([[newest]], device=device), guess], dim=1))
        widths.append(guess.shape[1] + (1 if out else prompt.shape[1]))
        new = logits[0].argmax(-1).tolist()  # [len(window)]
        if pool is not None:
            pool.add(new)
        k = converged_count(window, new)
        done, ended = cut_at_eos(new[:k], stops)
        out.extend(done)
        fixed.append(k)
        window = new[k:]
        decoder.rollback(prompt.shape[1] + len(out) - 1)  # keep the fixed tokens but the newest
    synchronize(device)
    iterations = len(fixed)
    stats = {
        "wall_time": time.perf_counter() - start,
        "iterations": iterations,
        "target_calls": iterations,
        "tokens_per_iteration": len(out) / iterations if iterations else 0.0,
        "fixed": fixed,
        "widths": widths,
        "mean_width": sum(widths[1:]) / max(len(widths) - 1, 1),  # the prefill's width includes the prompt
        "recycled": recycled,
        "block_size": block_size,
        "blocks": blocks,
    }
    return Generation(out, tokenizer.decode(out) if tokenizer is not None else None, stats)
