"""Requests the target writes itself (Magpie, Xu et al. 2024) — varied chat data with no human prompts.

Give an instruction-tuned model its chat template up to the start of a *user* turn and let it write
the user's words (temperature 1): it has learned what users ask. Three variations widen what it writes:

- a **system message** that describes the users (``STYLES``: people asking for code, for lists and
  steps, for explanations…) steers the kind of request; the answers are then generated with the
  template's default system message, as at decoding time;
- a **follow-up**: after a request and the target's answer, the template is opened for a second user
  turn, so the target writes the next question of a multi-turn chat (:func:`follow_ups`);
- every kept request is checked against every prompt the course evaluates on (:func:`reserved`),
  with a word-overlap (Jaccard) filter, so no evaluation prompt or a near copy is ever trained on.
"""

from __future__ import annotations

import math
import re

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from .. import code_prompts, prompts
from ..progress import tqdm
from .answers import Conversation

STYLES = {
    "default": None,  # the template's own system message
    "code": "You are a Python programming assistant. Users ask you to write, explain, fix or test short programs.",
    "lists": "You are a helpful assistant. Users ask you for lists, steps, plans, comparisons and summaries.",
    "explain": "You are a patient teacher. Users ask you to explain how things work, in science, history and daily life.",
    "writing": "You are a writing assistant. Users ask you to write, rewrite or shorten emails, stories and messages.",
}


def words(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9']+", text.lower()))


def reserved() -> list[set[str]]:
    """Word sets of every prompt the course evaluates on: the chat sets, the copy-heavy prompts, the
    templated prompts the drafts never see, and lesson 08's held-out code requests."""
    texts = (prompts.HELDOUT + prompts.CHAT + prompts.TUTORIAL + prompts.COPY_HEAVY + prompts.in_domain()
             + code_prompts.heldout())
    return [words(t) for t in texts]


def too_close(request: str, reserved: list[str] | list[set[str]], threshold: float = 0.5) -> bool:
    """True when ``request`` shares at least ``threshold`` of its words (Jaccard) with a reserved prompt
    (given as text, or as word sets from :func:`words` when the same list is checked many times)."""
    w = words(request)
    return any(len(w & r) / max(1, len(w | r)) >= threshold
               for r in (words(x) if isinstance(x, str) else x for x in reserved))


def user_opening(tokenizer: PreTrainedTokenizerBase, history: Conversation) -> list[int]:
    """Ids of the chat template rendered for ``history`` and opened for the next user turn."""
    text = tokenizer.apply_chat_template(history + [{"role": "user", "content": "\x00"}], tokenize=False)
    return tokenizer(text[: text.index("\x00")], add_special_tokens=False).input_ids


@torch.inference_mode()
def sample_user_turns(target: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, openings: list[list[int]],
                      max_new_tokens: int = 48) -> list[str | None]:
    """One sampled user turn per opening (left-padded batch, temperature 1, top-p 0.95): its text,
    or None when the turn did not end within ``max_new_tokens``."""
    eos = tokenizer.eos_token_id
    width = max(map(len, openings))
    ids = torch.tensor([[eos] * (width - len(o)) + o for o in openings], device=target.device)
    mask = torch.tensor([[0] * (width - len(o)) + [1] * len(o) for o in openings], device=target.device)
    out = target.generate(input_ids=ids, attention_mask=mask, do_sample=True, temperature=1.0, top_p=0.95,
                          max_new_tokens=max_new_tokens, eos_token_id=eos, pad_token_id=eos)
    return [tokenizer.decode(row[: row.index(eos)]).strip() if eos in row else None
            for row in out[:, width:].tolist()]


class Keeper:
    """The filter every written request passes: 4–60 words, not seen before, not close to ``reserved()``."""

    def __init__(self) -> None:
        self.reserved, self.seen = reserved(), set()

    def __call__(self, text: str | None) -> bool:
        if text is None:
            return False
        key = " ".join(text.lower().split())
        if not 4 <= len(text.split()) <= 60 or key in self.seen or too_close(text, self.reserved):
            return False
        self.seen.add(key)
        return True


def magpie_requests(target: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, n: int, seed: int = 0,
                    style: str = "default", batch_size: int = 32, max_batches: int | None = None,
                    keep: Keeper | None = None) -> list[str]:
    """Up to ``n`` user requests written by the target after the opening of ``STYLES[style]``."""
    system = STYLES[style]
    opening = user_opening(tokenizer, [] if system is None else [{"role": "system", "content": system}])
    keep = keep or Keeper()
    torch.manual_seed(seed)
    kept: list[str] = []
    max_batches = max_batches or 10 * math.ceil(n / batch_size) + 10
    bar = tqdm(total=n, desc=f"self-written requests ({style})")
    for _ in range(max_batches):
        if len(kept) >= n:
            break
        for text in sample_user_turns(target, tokenizer, [opening] * batch_size):
            if len(kept) < n and keep(text):
                kept.append(text)
                bar.update(1)
    bar.close()
    if len(kept) < n:
        raise RuntimeError(f"the target wrote only {len(kept)} usable requests of {n} in {max_batches} batches: "
                           "Magpie needs an instruction-tuned model with a chat template (ask for fewer, or "
                           "raise max_batches)")
    return kept


def follow_ups(target: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, chats: list[Conversation],
               seed: int = 0, batch_size: int = 16, keep: Keeper | None = None) -> list[Conversation]:
    """Multi-turn conversations: each finished chat (user, assistant) gets one user follow-up written
    by the target; the chats whose follow-up fails the filter are dropped."""
    keep = keep or Keeper()
    torch.manual_seed(seed)
    out = []
    for i in tqdm(range(0, len(chats), batch_size), desc="follow-up requests"):
        batch = chats[i : i + batch_size]
        texts = sample_user_turns(target, tokenizer, [user_opening(tokenizer, c) for c in batch])
        out += [c + [{"role": "user", "content": t}] for c, t in zip(batch, texts) if keep(t)]
    return out
