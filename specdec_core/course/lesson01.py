"""Checkers for lesson 01's exercises: the sampling step, and one KV-cache decode step.

    check_sample_step(sample_step)     # sample_step(logits [V], temperature, top_k, top_p, generator) -> int
    check_decode_step(decode_step)     # decode_step(model, cache, token_id) -> logits [V]

Each runs the student's function on small seeded inputs (a tiny random Llama for the decode step)
against the library's reference and prints ✓ / ✗ lines through :class:`Checks`.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache

from ..exactness import total_variation
from ..lm import cache_kwarg
from ..sampling import logits_to_probs, sample
from ..toy import tiny_llama
from .checks import Checks

DRAWS = 3000  # samples per setting: the empirical distribution is then within ~0.05 TV of the true one


def reference_sample_step(
    logits: torch.Tensor,
    temperature: float,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
) -> int:
    """The answer: greedy at temperature 0, else warp (temperature, top-k, top-p) and draw one id."""
    if temperature == 0:
        return int(logits.argmax())
    return int(sample(logits_to_probs(logits, temperature, top_k, top_p), generator))


def _checker_logits() -> torch.Tensor:
    """Fixed logits over 12 ids with a clear order, so each warp changes the distribution a lot."""
    return torch.tensor([2.0, 1.4, 1.1, 0.9, 0.5, 0.3, 0.0, -0.2, -0.5, -1.0, -1.5, -2.0])


def _draws(fn, logits, temperature, top_k, top_p, seed: int) -> list[int]:
    gen = torch.Generator().manual_seed(seed)
    return [int(fn(logits, temperature, top_k, top_p, gen)) for _ in range(DRAWS)]


def _tv(samples: list[int], probs: torch.Tensor) -> float:
    """Total variation between the samples' frequencies and ``probs``."""
    return total_variation(torch.bincount(torch.tensor(samples), minlength=probs.shape[-1]).double(), probs)


def check_sample_step(fn) -> None:
    """Test ``fn(logits, temperature, top_k, top_p, generator) -> int`` against the reference."""
    logits = _checker_logits()
    V = logits.shape[0]
    with Checks("sample_step") as c:
        out = c.call(fn, logits, 0.0, None, None, torch.Generator().manual_seed(0))
        shuffled = logits[torch.randperm(V, generator=torch.Generator().manual_seed(1))]
        out2 = c.call(fn, shuffled, 0.0, None, None, torch.Generator().manual_seed(0))
        c.expect(
            int(out) == 0 and int(out2) == int(shuffled.argmax()),
            "temperature 0 picks the argmax",
            "at temperature 0 return int(logits.argmax()) — no randomness",
        )
        settings = [
            (1.0, None, None, "temperature 1 samples from softmax(logits)", "probs = softmax(logits / T); draw with torch.multinomial(probs, 1, generator=generator)"),
            (0.5, None, None, "temperature 0.5 sharpens the distribution", "divide the logits by the temperature BEFORE the softmax"),
            (1.0, 3, None, "top_k=3 keeps only the 3 most likely ids", "set every logit below the k-th largest to -inf (torch.topk), then softmax"),
            (1.0, None, 0.7, "top_p=0.7 keeps the smallest set reaching 70% of the mass", "sort probs descending; keep ids while the mass BEFORE them is < top_p (the id that crosses top_p stays)"),
            (2.0, 6, 0.5, "temperature, top-k and top-p combine in that order", "apply temperature, then top-k, then top-p on the warped distribution"),
        ]
        for seed, (t, k, p, what, hint) in enumerate(settings):
            draws = c.call(_draws, fn, logits, t, k, p, seed)
            ref = logits_to_probs(logits, t, k, p)
            outside = sum(ref[x] == 0 for x in draws)
            c.expect(
                outside == 0 and _tv(draws, ref) < 0.05,
                what,
                f"{hint} ({outside} of {DRAWS} draws were ids that should be impossible; "
                f"distance from the right distribution {_tv(draws, ref):.2f})",
            )
        again = c.call(_draws, fn, logits, 1.0, None, None, 0)
        c.expect(
            again == c.call(_draws, fn, logits, 1.0, None, None, 0),
            "the same generator seed gives the same tokens",
            "draw with the generator you are given: torch.multinomial(probs, 1, generator=generator)",
        )


# ---------------------------------------------------------------------------------------------
# One KV-cache decode step
# ---------------------------------------------------------------------------------------------


@torch.inference_mode()
def reference_decode_step(model, cache: DynamicCache, token_id: int) -> torch.Tensor:
    """The answer: run ONE new token on top of the cache; return the next token's logits [V]."""
    ids = torch.tensor([[token_id]], device=model.device)
    out = model(input_ids=ids, use_cache=True, **{cache_kwarg(model): cache})
    return out.logits[0, -1]


@torch.inference_mode()
def _prefilled(model, prompt: torch.Tensor) -> DynamicCache:
    cache = DynamicCache(config=model.config)
    model(input_ids=prompt, use_cache=True, **{cache_kwarg(model): cache})
    return cache


@torch.inference_mode()
def _full_logits(model, ids: list[int]) -> torch.Tensor:
    return model(input_ids=torch.tensor([ids]), use_cache=False).logits[0, -1]


def check_decode_step(fn) -> None:
    """Test ``fn(model, cache, token_id) -> logits [V]`` on a tiny random Llama."""
    from ..ar import generate

    model = tiny_llama(vocab_size=48, seed=11, logit_scale=4.0)
    prompt = [0, 7, 3, 19, 25]
    with Checks("decode_step") as c:
        cache = _prefilled(model, torch.tensor([prompt]))
        logits = c.call(fn, model, cache, 30)
        logits = torch.as_tensor(logits).reshape(-1)
        want = _full_logits(model, prompt + [30])
        c.expect(
            logits.shape == want.shape and torch.allclose(logits.float(), want, atol=1e-4),
            "the logits equal a full forward over prompt + token",
            "pass the cache to the model (model(input_ids=[[token_id]], use_cache=True, **{cache_kwarg(model): cache})) "
            "and return the raw logits of the last position, out.logits[0, -1]",
        )
        c.expect(
            cache.get_seq_length() == len(prompt) + 1,
            "the cache grew by exactly one token",
            f"run only the ONE new token through the model (the cache holds {cache.get_seq_length()} "
            f"tokens, expected {len(prompt) + 1})",
        )
        logits2 = torch.as_tensor(c.call(fn, model, cache, 12)).reshape(-1)
        c.expect(
            logits2.shape == want.shape and torch.allclose(logits2.float(), _full_logits(model, prompt + [30, 12]), atol=1e-4),
            "a second step continues from the first",
            "use the cache you are given; do not create a new one inside decode_step",
        )
        # a greedy loop built on the student's step reproduces the baseline
        cache = _prefilled(model, torch.tensor([prompt]))
        with torch.inference_mode():
            token = int(model(input_ids=torch.tensor([prompt])).logits[0, -1].argmax())
        tokens = [token]
        for _ in range(7):
            token = int(torch.as_tensor(c.call(fn, model, cache, token)).argmax())
            tokens.append(token)
        c.expect(
            tokens == generate(model, torch.tensor([prompt]), 8).new_tokens,
            "greedy decoding with your step equals ar.generate",
            "each call must feed exactly the token it is given, on top of everything already in the cache",
        )
