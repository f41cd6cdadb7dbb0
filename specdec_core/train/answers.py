"""The target's own answers, generated once in resumable shards — the slow part of every corpus.

    seqs = answers(target, tokenizer, conversations, "magpie")   # [prompt + answer ids] per conversation

A conversation is a list of chat messages ending with a user turn ({"role": "user", "content": …}, with
earlier user / assistant turns for a multi-turn one). The answers are greedy (the target's most likely
text: DistillSpec's on-policy data), batched with left padding, and written ``shard`` conversations at
a time to ``$SPECDEC_CACHE/distill/answers-<name>-<digest>/`` (atomically): an interrupted run loses
at most one shard and the next run goes on from there. The digest depends on the conversations and
the generation settings, so changing either starts a new directory instead of mixing the two.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from ..assets import cache_dir
from ..files import torch_save
from ..progress import tqdm

Conversation = list[dict[str, str]]


def data_dir() -> Path:
    """``$SPECDEC_CACHE/distill``: everything the drafts' training computes from the target."""
    path = cache_dir() / "distill"
    path.mkdir(parents=True, exist_ok=True)
    return path


def shard_dir(name: str, conversations: list[Conversation], max_new_tokens: int) -> Path:
    digest = hashlib.sha256(json.dumps([conversations, max_new_tokens]).encode()).hexdigest()[:12]
    return data_dir() / f"answers-{name}-{digest}"


def render(tokenizer: PreTrainedTokenizerBase, conversation: Conversation) -> list[int]:
    """The chat template's ids for ``conversation``, up to the start of the assistant's answer."""
    return tokenizer.apply_chat_template(conversation, add_generation_prompt=True, return_dict=True)["input_ids"]


@torch.inference_mode()
def generate_batch(target: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, prompts: list[list[int]],
                   max_new_tokens: int) -> list[torch.Tensor]:
    """Greedy answers to a batch of rendered prompts; returns prompt + answer ids (EOS kept) per prompt."""
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    eos = tokenizer.eos_token_id
    width = max(map(len, prompts))
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts], device=target.device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=target.device)
    gen = target.generate(input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=max_new_tokens,
                          eos_token_id=eos, pad_token_id=pad)
    out = []
    for p, row in zip(prompts, gen[:, width:].tolist()):
        answer = row[: row.index(eos) + 1] if eos in row else row
        out.append(torch.tensor(p + answer, dtype=torch.int32))  # host: saved in shards on disk
    return out


def answers(target: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, conversations: list[Conversation],
            name: str, max_new_tokens: int = 128, batch_size: int = 16, shard: int = 64) -> list[torch.Tensor]:
    """prompt + answer ids [L] (int32) for every conversation, from the shards on disk where they
    exist, generating the missing ones (see the module docstring)."""
    folder = shard_dir(name, conversations, max_new_tokens)
    folder.mkdir(exist_ok=True)
    out: list[torch.Tensor] = []
    starts = range(0, len(conversations), shard)
    for n, start in enumerate(tqdm(starts, desc=f"target answers: {name} ({len(conversations)})")):
        path = folder / f"{n:05d}.pt"
        if not path.exists():
            rendered = [render(tokenizer, c) for c in conversations[start : start + shard]]
            seqs = [s for i in range(0, len(rendered), batch_size)
                    for s in generate_batch(target, tokenizer, rendered[i : i + batch_size], max_new_tokens)]
            torch_save(seqs, path)
        out += torch.load(path)
    return out


def answer_text(tokenizer: PreTrainedTokenizerBase, conversation: Conversation, seq: torch.Tensor) -> str:
    """The answer part of a generated sequence, as text (for building a follow-up turn on it)."""
    answer = seq[len(render(tokenizer, conversation)):].tolist()
    return tokenizer.decode(answer, skip_special_tokens=True).strip()
