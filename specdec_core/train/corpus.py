"""The data the course's drafts are distilled on — the target's own work, computed once and cached.

Three sources, all offline, none overlapping an evaluation set (``prompts.HELDOUT``, ``CHAT``,
HumanEval):

- **on-policy chat**: the target's greedy answers to ``prompts.training_prompts()`` (DistillSpec,
  Zhou et al. 2023: a draft learns best on the text the target itself writes). These prompts come
  from 8 request patterns × 78 subjects, so their answers are formulaic;
- **self-written requests** (Magpie, Xu et al. 2024): give the target its chat template up to the
  start of a *user* turn and let it write the request itself (temperature 1) — an instruction-tuned
  model has learned what users ask, so this yields varied, natural requests with no human prompts;
  then its greedy answers to them, as above;
- **teacher-forced text**: real prose and code that ship with Python (the documentation topics of
  ``pydoc_data`` and standard-library source files). One target forward per sequence, no generation.

For every position of every sequence we keep what the target computed there:

    tokens   [L]        the sequence
    features [L, d]     the target's last hidden state (after the final norm: lm_head(feature) = logits)
    top_ids  [L, K]     the target's K most likely next tokens, and
    top_logp [L, K]     their log-probabilities (for distilling a standalone draft)

Everything is stored in one file under ``$SPECDEC_CACHE/distill/`` (written atomically, :mod:`specdec_core.files`), so the
training runs can be repeated, resumed and tuned without running the target again.
"""

from __future__ import annotations

import ast
import hashlib
import json
import math
import re
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm.auto import tqdm
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from .. import prompts
from ..assets import cache_dir
from ..files import torch_save, write_json

TOP_K = 32


@dataclass
class Corpus:
    """Cached target work: a list per sequence (see the module docstring for shapes)."""

    tokens: list[torch.Tensor]
    features: list[torch.Tensor]
    top_ids: list[torch.Tensor]
    top_logp: list[torch.Tensor]
    source: list[str]  # "chat", "magpie" or "text" per sequence

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def n_tokens(self) -> int:
        return sum(t.numel() for t in self.tokens)

    def select(self, keep: list[int]) -> Corpus:
        return Corpus(*([getattr(self, f)[i] for i in keep] for f in
                        ("tokens", "features", "top_ids", "top_logp", "source")))


def data_dir() -> Path:
    path = cache_dir() / "distill"
    path.mkdir(parents=True, exist_ok=True)
    return path


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


def chunk(tokenizer: PreTrainedTokenizerBase, texts: list[str], seq_len: int, budget: int) -> list[torch.Tensor]:
    """Cut texts into sequences of ``seq_len`` tokens until ``budget`` tokens are collected."""
    out, total = [], 0
    for text in texts:
        ids = tokenizer(text, add_special_tokens=False).input_ids
        for start in range(0, len(ids) - seq_len // 2, seq_len):
            piece = torch.tensor(ids[start : start + seq_len])
            out.append(piece)
            total += piece.numel()
            if total >= budget:
                return out
    return out


# --- the target's work -------------------------------------------------------------------------

def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9']+", text.lower()))


def too_close(request: str, reserved: list[str] | list[set[str]], threshold: float = 0.5) -> bool:
    """True when ``request`` shares at least ``threshold`` of its words (Jaccard) with a reserved prompt
    (given as text, or as word sets from :func:`_words` when the same list is checked many times)."""
    w = _words(request)
    return any(len(w & r) / max(1, len(w | r)) >= threshold
               for r in (_words(x) if isinstance(x, str) else x for x in reserved))


@torch.inference_mode()
def magpie_requests(
    target: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    n: int,
    seed: int = 0,
    batch_size: int = 32,
    max_new_tokens: int = 48,
    max_batches: int | None = None,
) -> list[str]:
    """Up to ``n`` user requests written by the target itself (Magpie): sample a user turn after the
    template's opening (system message + "user" header) at temperature 1, top-p 0.95.

    Kept: requests that end their turn within ``max_new_tokens`` and have 4–60 words, without
    duplicates and without any close to an evaluation or in-domain prompt (:func:`too_close`).
    """
    opening = tokenizer.apply_chat_template([{"role": "user", "content": "\x00"}], tokenize=False)
    opening = opening[: opening.index("\x00")]  # everything before the user's words
    ids = tokenizer(opening, return_tensors="pt", add_special_tokens=False).input_ids
    eos = tokenizer.eos_token_id
    reserved = [_words(p) for p in prompts.HELDOUT + prompts.CHAT + prompts.TUTORIAL + prompts.COPY_HEAVY + prompts.in_domain()]
    torch.manual_seed(seed)
    kept, seen = [], set()
    max_batches = max_batches or 10 * math.ceil(n / batch_size) + 10
    bar = tqdm(total=n, desc="self-written requests (Magpie)")
    for _ in range(max_batches):
        if len(kept) >= n:
            break
        out = target.generate(input_ids=ids.repeat(batch_size, 1), attention_mask=torch.ones(batch_size, ids.shape[1], dtype=torch.long),
                              do_sample=True, temperature=1.0, top_p=0.95, max_new_tokens=max_new_tokens,
                              eos_token_id=eos, pad_token_id=eos)
        for row in out[:, ids.shape[1]:].tolist():
            if eos not in row:
                continue  # unfinished: the request ran past max_new_tokens
            text = tokenizer.decode(row[: row.index(eos)]).strip()
            key = " ".join(text.lower().split())
            if not 4 <= len(text.split()) <= 60 or key in seen or too_close(text, reserved):
                continue
            seen.add(key)
            kept.append(text)
            bar.update(1)
    bar.close()
    if len(kept) < n:
        raise RuntimeError(f"the target wrote only {len(kept)} usable requests of {n} in {max_batches} batches: "
                           "Magpie needs an instruction-tuned model with a chat template (ask for fewer, or "
                           "raise max_batches)")
    return kept[:n]


@torch.inference_mode()
def chat_answers(
    target: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    chat_prompts: list[str],
    max_new_tokens: int = 128,
    batch_size: int = 16,
) -> list[torch.Tensor]:
    """The target's greedy answers, batched (left padding); returns prompt + answer ids per prompt."""
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    eos = tokenizer.eos_token_id
    out = []
    for i in tqdm(range(0, len(chat_prompts), batch_size), desc="target answers (on-policy data)"):
        batch = [tokenizer.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True,
                                               return_dict=True)["input_ids"] for p in chat_prompts[i : i + batch_size]]
        width = max(map(len, batch))
        ids = torch.tensor([[pad] * (width - len(b)) + b for b in batch])
        mask = torch.tensor([[0] * (width - len(b)) + [1] * len(b) for b in batch])
        gen = target.generate(input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=max_new_tokens,
                              eos_token_id=eos, pad_token_id=pad)
        for b, row in zip(batch, gen[:, width:].tolist()):
            answer = row[: row.index(eos) + 1] if eos in row else row
            out.append(torch.tensor(b + answer))
    return out


@torch.inference_mode()
def target_work(target: PreTrainedModel, seqs: list[torch.Tensor], desc: str) -> tuple[list, list, list]:
    """One forward per sequence: features [L, d] (fp16), top-K ids [L, K] and log-probs [L, K]."""
    feats, ids, logps = [], [], []
    for seq in tqdm(seqs, desc=desc):
        out = target(input_ids=seq.view(1, -1), output_hidden_states=True)
        logp = out.logits[0].float().log_softmax(-1)
        top = logp.topk(TOP_K, dim=-1)
        feats.append(out.hidden_states[-1][0].half())
        ids.append(top.indices.int())
        logps.append(top.values.half())
    return feats, ids, logps


def build(
    target: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    n_chat: int = prompts.TRAINING_PROMPTS_USED,
    text_tokens: int = 120_000,
    seq_len: int = 256,
    name: str = "corpus",
    n_magpie: int = 0,
) -> Corpus:
    """Build (or load) the cached corpus: ``n_chat`` templated chat answers, ``n_magpie`` answers to
    self-written requests, ``text_tokens`` of teacher-forced text. The generated parts are cached on
    their own first, since they are the slow part; delete the files under ``$SPECDEC_CACHE/distill``
    to rebuild."""
    tag = f"{n_chat}-{n_magpie}" if n_magpie else f"{n_chat}"
    path = data_dir() / f"{name}-{tag}-{text_tokens}-{seq_len}.pt"  # delete it after changing the recipe
    if path.exists():
        return Corpus(**torch.load(path))
    answers = _cached_answers(target, tokenizer, prompts.training_prompts(n_chat), f"answers-{n_chat}")
    magpie = []
    if n_magpie:
        requests_path = data_dir() / f"magpie-{n_magpie}.json"
        if requests_path.exists():
            requests = json.loads(requests_path.read_text())
        else:
            requests = magpie_requests(target, tokenizer, n_magpie)
            write_json(requests, requests_path, indent=0)
        magpie = _cached_answers(target, tokenizer, requests, f"answers-magpie-{n_magpie}")
    docs = chunk(tokenizer, python_docs(), seq_len, int(text_tokens * 0.6))
    code = chunk(tokenizer, python_source(), seq_len, text_tokens - sum(t.numel() for t in docs))
    seqs = answers + magpie + docs + code
    feats, ids, logps = target_work(target, seqs, "target features (teacher-forced)")
    source = ["chat"] * len(answers) + ["magpie"] * len(magpie) + ["text"] * (len(docs) + len(code))
    corpus = Corpus(seqs, feats, ids, logps, source)
    torch_save(corpus.__dict__, path)
    return corpus


def _cached_answers(target, tokenizer, requests: list[str], stem: str) -> list[torch.Tensor]:
    """:func:`chat_answers` for ``requests``, cached under a name that depends on the requests."""
    digest = hashlib.sha256("\n".join(requests).encode()).hexdigest()[:12]
    path = data_dir() / f"{stem}-{digest}.pt"
    if path.exists():
        return torch.load(path)
    answers = chat_answers(target, tokenizer, requests)
    torch_save(answers, path)
    return answers


def split(corpus: Corpus, valid_chat: int = 16) -> tuple[Corpus, Corpus]:
    """Hold out the last ``valid_chat`` sequences of each chat source (templated, self-written) for
    validation during training (the real evaluation uses ``prompts.HELDOUT``, from a different source)."""
    valid = set()
    for source in ("chat", "magpie"):
        valid |= set([i for i, s in enumerate(corpus.source) if s == source][-valid_chat:])
    return (corpus.select([i for i in range(len(corpus)) if i not in valid]), corpus.select(sorted(valid)))
