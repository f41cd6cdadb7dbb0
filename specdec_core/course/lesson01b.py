"""Checkers for lesson 01b's exercise: the static KV cache's rollback and keep, on the buffers themselves.

    check_static_rollback(static_rollback)
        # static_rollback(keys, values, length, to) -> new length
        #   keys, values [B, H, S, D]: slots 0 .. length - 1 hold tokens; forget all but the first ``to``
    check_static_keep(static_keep)
        # static_keep(keys, values, start, indices, length) -> new length
        #   the last call's tokens sit in slots start .. length - 1; keep ``indices`` (increasing, into them),
        #   moved to slots start, start + 1, … (an index copy within the buffer)

Each answer runs first on seeded random buffers against the reference (hidden cases: a hard-coded answer
fails), then inside a real static engine: a toy model's ``Decoder(static=True)`` whose cache the answer edits,
after which the next step's logits must equal those of the dynamic cache (``Decoder(static=False)``) fed
the tokens that should remain.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..lm import Decoder
from ..toy import tiny_llama
from .checks import Checks

RANDOM_CASES = 12
ATOL = 1e-5


# ---- the answers ---------------------------------------------------------------------------------


def reference_static_rollback(keys: torch.Tensor, values: torch.Tensor, length: int, to: int) -> int:
    """The answer: only the length moves. Slots past it stay as they are: the engine's mask hides them and
    the next step writes over them."""
    if not 0 <= to <= length:
        raise ValueError(f"rollback to {to}: the cache holds {length} tokens")
    return to


def reference_static_keep(keys: torch.Tensor, values: torch.Tensor, start: int, indices: list[int],
                          length: int) -> int:
    """The answer: slot start + indices[j] → slot start + j, in keys and values [B, H, S, D]; then the length.
    index_select reads every source before anything is written, so overlapping slots are safe."""
    slots = torch.tensor([start + i for i in indices], dtype=torch.long, device=keys.device)
    keys[:, :, start : start + len(indices)] = keys.index_select(2, slots)
    values[:, :, start : start + len(indices)] = values.index_select(2, slots)
    return start + len(indices)


# ---- the cases -----------------------------------------------------------------------------------


def _buffers(gen: torch.Generator, heads: int, slots: int, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(1, heads, slots, dim, generator=gen), torch.randn(1, heads, slots, dim, generator=gen)


def _keep_cases(seed: int = 0) -> list[tuple[int, int, int, int, list[int]]]:
    """(heads, dim, start, length, indices): one hand-made case, then seeded random ones."""
    gen = torch.Generator().manual_seed(seed)
    cases = [(2, 4, 3, 9, [0, 2, 5])]
    for _ in range(RANDOM_CASES):
        start = int(torch.randint(0, 12, (1,), generator=gen))
        n = int(torch.randint(1, 9, (1,), generator=gen))
        chosen = torch.randperm(n, generator=gen)[: int(torch.randint(0, n + 1, (1,), generator=gen))]
        cases.append((int(torch.randint(1, 4, (1,), generator=gen)), int(torch.randint(2, 6, (1,), generator=gen)),
                      start, start + n, sorted(chosen.tolist())))
    return cases


def _as_length(out) -> int | None:
    try:
        return int(out)
    except (TypeError, ValueError, RuntimeError):
        return None


def _set_length(dec: Decoder, tokens: torch.Tensor) -> None:
    """What the engine keeps beside the buffers: the ids it holds and each layer's write position."""
    dec.tokens = tokens
    for layer in dec.cache.layers:
        if layer.is_initialized:
            layer.cumulative_length.fill_(tokens.shape[1])


def _toy():
    return tiny_llama(vocab_size=40, hidden_size=32, num_layers=2, seed=3, max_position_embeddings=512)


@torch.inference_mode()
def _dynamic_next(model, kept: list[int], token: int) -> torch.Tensor:
    """Logits [V] of ``token`` after ``kept`` on the dynamic cache (the reference engine)."""
    dec = Decoder(model, static=False)
    dec.prefill(torch.tensor([kept]))
    return dec.step(torch.tensor([[token]]))[0, -1]


# ---- rollback ------------------------------------------------------------------------------------


def check_static_rollback(fn: Callable) -> None:
    """Test ``fn(keys, values, length, to) -> int`` on random buffers and inside a toy static engine."""
    gen = torch.Generator().manual_seed(1)
    with Checks("static_rollback") as c:
        right, untouched = True, True
        for length, to in [(7, 4), *[(int(n), int(torch.randint(0, int(n) + 1, (1,), generator=gen)))
                                      for n in torch.randint(1, 20, (RANDOM_CASES,), generator=gen)]]:
            keys, values = _buffers(gen, 2, 24, 4)
            before = keys.clone(), values.clone()
            got = _as_length(c.call(fn, keys, values, length, to))
            right &= got == to
            untouched &= torch.equal(keys, before[0]) and torch.equal(values, before[1])
        c.expect(right, "the new length is `to`, for every length and `to`",
                 "return the number of tokens that remain: `to` (the cache's length after the rollback)")
        c.expect(untouched, "the buffers are left as they were",
                 "a static rollback writes nothing: slots past the length are hidden by the engine's mask and "
                 "overwritten by the next step, so moving the length is the whole job")
        try:
            fn(*_buffers(gen, 2, 24, 4), 5, 6)
            raised = False
        except ValueError:
            raised = True
        except Exception:  # noqa: BLE001 - any other error is a wrong kind
            raised = False
        c.expect(raised, "rolling forward past the length raises ValueError",
                 "check 0 <= to <= length and raise ValueError otherwise: the slots past the length hold "
                 "nothing valid")
        model = _toy()
        prompt, guesses = [3, 4, 5, 6, 7], [8, 9, 10, 11]
        dec = Decoder(model, static=True)
        with torch.inference_mode():
            dec.prefill(torch.tensor([prompt]))
            dec.step(torch.tensor([guesses]))  # four guesses; the first two turn out right
            layers = [layer for layer in dec.cache.layers if layer.is_initialized]
            news = {_as_length(c.call(fn, layer.keys, layer.values, dec.length, len(prompt) + 2)) for layer in layers}
            new = news.pop() if len(news) == 1 else None
            ok = new is not None and 0 <= new <= dec.length
            if ok:
                _set_length(dec, dec.tokens[:, :new])
                got = dec.step(torch.tensor([[12]]))[0, -1]
        c.expect(ok and torch.allclose(got, _dynamic_next(model, prompt + guesses[:2], 12), atol=ATOL),
                 "in a static engine, the next step after your rollback gives the dynamic cache's logits",
                 "after rolling back to prompt + 2 guesses, the next token must see exactly those tokens: "
                 "return `to`, not the old length")


# ---- keep ----------------------------------------------------------------------------------------


def check_static_keep(fn: Callable) -> None:
    """Test ``fn(keys, values, start, indices, length) -> int`` on random buffers and in a toy static engine."""
    gen = torch.Generator().manual_seed(2)
    with Checks("static_keep") as c:
        length_ok, keys_ok, values_ok, before_ok = True, True, True, True
        for heads, dim, start, length, indices in _keep_cases():
            keys, values = _buffers(gen, heads, 24, dim)
            want_k, want_v = keys.clone(), values.clone()
            want = reference_static_keep(want_k, want_v, start, indices, length)
            old_k, old_v = keys.clone(), values.clone()
            got = _as_length(c.call(fn, keys, values, start, list(indices), length))
            kept = slice(start, want)
            length_ok &= got == want
            keys_ok &= torch.equal(keys[:, :, kept], want_k[:, :, kept])
            values_ok &= torch.equal(values[:, :, kept], want_v[:, :, kept])
            before_ok &= torch.equal(keys[:, :, :start], old_k[:, :, :start]) and torch.equal(
                values[:, :, :start], old_v[:, :, :start])
        c.expect(length_ok, "the new length is start + len(indices)",
                 "return how many tokens remain: everything before `start`, plus the kept ones")
        c.expect(keys_ok, "the kept keys sit in slots start, start + 1, … in order",
                 "copy slot start + indices[j] to slot start + j along dim 2 (the slots), e.g. "
                 "keys[:, :, start:start + n] = keys.index_select(2, slots); moving only the length keeps the "
                 "wrong tokens")
        c.expect(values_ok, "the kept values moved with their keys",
                 "do the same copy in `values`: a key without its value is a different token")
        c.expect(before_ok, "slots before `start` are untouched",
                 "write only slots start .. start + len(indices) - 1: the slots before hold the accepted prefix")
        _keep_in_engine(c, fn)


def _keep_in_engine(c: Checks, fn: Callable) -> None:
    """A token tree on a toy static engine: keep one path, then the next step must see prompt + path."""
    model = _toy()
    prompt = [3, 4, 5, 6, 7]
    # a tree of 5 guesses: node 0 and 1 at depth 0 (siblings), node 2 under 0, node 3 under 1, node 4 under 2
    tokens, parents = [8, 9, 10, 11, 12], [-1, -1, 0, 1, 2]
    depth = [0, 0, 1, 1, 2]
    seen = torch.eye(5, dtype=torch.bool)
    for i, p in enumerate(parents):
        while p >= 0:
            seen[i, p], p = True, parents[p]
    agree = True
    for path in ([0, 2, 4], [1, 3], [1]):
        dec = Decoder(model, static=True)
        with torch.inference_mode():
            dec.prefill(torch.tensor([prompt]))
            dec.step_masked(torch.tensor([tokens]), len(prompt) + torch.tensor(depth), seen)
            start = len(prompt)
            layers = [layer for layer in dec.cache.layers if layer.is_initialized]
            news = {_as_length(c.call(fn, layer.keys, layer.values, start, list(path), dec.length)) for layer in layers}
            new = news.pop() if len(news) == 1 else None
            ok = new == start + len(path)
            if ok:
                _set_length(dec, torch.tensor([prompt + [tokens[i] for i in path]]))
                got = dec.step(torch.tensor([[13]]))[0, -1]
        agree &= ok and torch.allclose(got, _dynamic_next(model, prompt + [tokens[i] for i in path], 13), atol=ATOL)
    c.expect(agree, "in a static engine, after keeping a tree's path, the next step gives the dynamic cache's logits",
             "for each layer, the keys and values of the path's nodes must end up right after the prompt, in "
             "path order; the next token then attends to prompt + path, as on the dynamic cache")
