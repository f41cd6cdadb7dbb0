"""The data the course's drafts are distilled on — the target's own work, computed once and cached.

Sources, all offline, none overlapping an evaluation prompt (:func:`specdec_core.train.requests.reserved`):

- **templated chat**: the target's greedy answers to ``prompts.training_prompts()`` (DistillSpec,
  Zhou et al. 2023: a draft learns best on the text the target itself writes) — 8 request patterns ×
  78 subjects, so their answers are formulaic;
- **self-written requests** (Magpie, Xu et al. 2024; :mod:`~specdec_core.train.requests`): requests the
  target writes itself, plain and in four steered styles (code, lists, explanations, writing), and
  multi-turn follow-ups to its own answers; then its greedy answers to them. The requests ship with
  the drafts (``assets.MAGPIE_FILE``, ``assets.MORE_REQUESTS_FILE``), so a rebuild answers the same ones;
- **teacher-forced text**: real prose and code that ship with Python (the documentation topics of
  ``pydoc_data`` and standard-library source files). One target forward per sequence, no generation.

For every position of every sequence we keep what the target computed there (:mod:`.features`):

    tokens   [L]        the sequence
    fused    [L, 3d]    the target's hidden states at a low, a middle and a high layer (EAGLE-3's input)
    last     [L, d]     its last hidden state after the final norm (lm_head(last) = logits; EAGLE-1's input)
    top_ids  [L, K]     the target's K most likely next tokens, and
    top_logp [L, K]     their log-probabilities (the distillation targets)

Stored in shards of memory-mapped arrays under ``$SPECDEC_CACHE/distill/`` and read lazily: a
million tokens take about 5 GB, more than a training run should hold in memory. Every stage is
resumable (the answers by shard, the features by chunk).
"""

from __future__ import annotations

import ast
import json
import sysconfig
from pathlib import Path

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from .. import assets, prompts
from ..files import write_json
from .answers import Conversation, answer_text, answers, data_dir
from .features import Corpus, build_features
from .requests import STYLES, Keeper, follow_ups, magpie_requests, user_opening

__all__ = ["Corpus", "RECIPE", "build", "data_dir", "split"]

# The shipped drafts' corpus. Sizes were set by the 2-core machine's budget (generation ≈ 190 tokens/s).
RECIPE = {
    "templated": prompts.TRAINING_PROMPTS_USED,  # 560 templated requests
    "magpie": 1600,  # plain self-written requests (the shipped magpie-requests.json)
    "styles": {style: 250 for style in STYLES if style != "default"},  # steered self-written requests
    "follow_ups": 500,  # second turns written for the first magpie chats
    "text_tokens": 120_000,  # teacher-forced Python docs (60 %) and standard-library source
    "seq_len": 256,
    "max_new_tokens": 128,
    "files": {"magpie": assets.MAGPIE_FILE, "more": assets.MORE_REQUESTS_FILE},  # the shipped requests
}


# --- the raw text ------------------------------------------------------------------------------

def python_docs() -> list[str]:
    """The Python documentation's topic pages, shipped with every Python in ``pydoc_data``."""
    from pydoc_data.topics import topics

    return [topics[k] for k in sorted(topics)]


def python_source(max_files: int = 400) -> list[str]:
    """Standard-library modules' source (sorted, test suites skipped), docstrings included."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in root.glob("*.py") if not p.name.startswith(("test", "_")))
    texts = []
    for path in files[:max_files]:
        text = path.read_text(encoding="utf-8", errors="ignore")
        try:
            ast.parse(text)  # skip anything that is not valid Python for this interpreter
        except SyntaxError:
            continue
        texts.append(text)
    return texts


def heldout_prose(tokenizer: PreTrainedTokenizerBase, budget: int = 8192) -> torch.Tensor:
    """[1, ≥ budget] token ids of the Python docs' odd pages (the CLLM's text anchors train on the even
    ones): the text outside the domain that ``bench.jf_eval.quality`` measures perplexity on."""
    return torch.cat([x.long() for x in chunk(tokenizer, python_docs()[1::2], 512, budget)])[None]


def chunk(tokenizer: PreTrainedTokenizerBase, texts: list[str], seq_len: int, budget: int) -> list[torch.Tensor]:
    """Cut texts into sequences of ``seq_len`` tokens until ``budget`` tokens are collected."""
    out, total = [], 0
    for text in texts:
        ids = tokenizer(text, add_special_tokens=False).input_ids
        for start in range(0, len(ids) - seq_len // 2, seq_len):
            piece = torch.tensor(ids[start : start + seq_len], dtype=torch.int32)  # host: a text corpus in RAM
            out.append(piece)
            total += piece.numel()
            if total >= budget:
                return out
    return out


# --- the requests ------------------------------------------------------------------------------

def _user(text: str) -> Conversation:
    return [{"role": "user", "content": text}]


def shipped_requests(target: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, recipe: dict) -> dict:
    """The recipe's self-written requests: read from the shipped files, written by the target (and
    shipped) where missing. Returns {"magpie": [...], style: [...], …} (the follow-ups: :func:`conversations`)."""
    magpie_file, more_file = recipe["files"]["magpie"], recipe["files"]["more"]
    if not magpie_file.exists():
        write_json(magpie_requests(target, tokenizer, recipe["magpie"]), magpie_file, indent=0)
    more = json.loads(more_file.read_text()) if more_file.exists() else {}
    keep = Keeper()
    out = {"magpie": json.loads(magpie_file.read_text())[: recipe["magpie"]]}
    for text in out["magpie"] + [t for style in recipe["styles"] for t in more.get(style, [])]:
        keep.seen.add(" ".join(text.lower().split()))  # no style repeats a request already kept
    for seed, (style, n) in enumerate(recipe["styles"].items(), start=1):
        if len(more.get(style, [])) < n:
            more[style] = magpie_requests(target, tokenizer, n, seed=seed, style=style, keep=keep)
            write_json(more, more_file, indent=0)
        out[style] = more[style][:n]
    return out


def conversations(target: PreTrainedModel, tokenizer: PreTrainedTokenizerBase,
                  recipe: dict = RECIPE) -> dict[str, list[Conversation]]:
    """Every chat source's conversations (generating and caching the first-turn answers the
    follow-ups are written on)."""
    requests = shipped_requests(target, tokenizer, recipe)
    chats = {"templated": [_user(p) for p in prompts.training_prompts(recipe["templated"])]}
    chats |= {name: [_user(r) for r in requests[name]] for name in ["magpie", *recipe["styles"]]}
    n = recipe["follow_ups"]
    if n:
        more_file = recipe["files"]["more"]
        more = json.loads(more_file.read_text()) if more_file.exists() else {}
        firsts = chats["magpie"][:n]
        if not more.get("follow_ups"):
            seqs = answers(target, tokenizer, chats["magpie"], "magpie", recipe["max_new_tokens"])[:n]
            done = [c + [{"role": "assistant", "content": answer_text(tokenizer, c, s)}] for c, s in zip(firsts, seqs)]
            keep = Keeper()
            keep.seen |= {" ".join(r.lower().split()) for v in requests.values() for r in v}
            written = follow_ups(target, tokenizer, done, keep=keep)
            more["follow_ups"] = written
            write_json(more, more_file, indent=0)
        chats["follow_ups"] = more["follow_ups"]
    return chats


# --- the corpus ----------------------------------------------------------------------------------

def build(target: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, recipe: dict = RECIPE,
          name: str = "corpus", writer: PreTrainedModel | None = None) -> Corpus:
    """Build (or load) the cached corpus of ``recipe``: requests and answers (generated by ``writer``,
    e.g. the target's fast twin; default the target), then the target's features."""
    writer = writer or target
    chats = conversations(writer, tokenizer, recipe)
    seqs, source, train_from = [], [], []
    for kind, convs in chats.items():
        got = answers(writer, tokenizer, convs, kind, recipe["max_new_tokens"])
        seqs += got
        source += [kind] * len(got)
        # a follow-up's first turn is already in the corpus: its loss starts at the second request
        train_from += [len(user_opening(tokenizer, c[:-1])) if len(c) > 1 else 0 for c in convs]
    docs = chunk(tokenizer, python_docs(), recipe["seq_len"], int(recipe["text_tokens"] * 0.6))
    code = chunk(tokenizer, python_source(), recipe["seq_len"], recipe["text_tokens"] - sum(t.numel() for t in docs))
    seqs += docs + code
    source += ["text"] * (len(docs) + len(code))
    train_from += [0] * (len(docs) + len(code))
    return build_features(target, seqs, source, train_from, data_dir() / name)


def split(corpus: Corpus, valid_chat: int = 16) -> tuple[Corpus, Corpus]:
    """Hold out the last ``valid_chat`` sequences of each chat source for validation during training
    (the real evaluation uses ``prompts.HELDOUT``, from a different source)."""
    valid = set()
    for kind in dict.fromkeys(corpus.source):
        if kind != "text":
            valid |= set([i for i, s in enumerate(corpus.source) if s == kind][-valid_chat:])
    return (corpus.select([i for i in range(len(corpus)) if i not in valid]), corpus.select(sorted(valid)))
