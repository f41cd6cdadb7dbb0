"""Training the Medusa heads (:mod:`specdec_core.medusa`) on the target's teacher-forced distributions.

    python -m specdec_core.train draft --kind medusa       # ≤ 10 minutes on 2 cores (no make target)

The data is the drafts' corpus (:mod:`specdec_core.train.corpus`): for every position t, the target's last
hidden state h_t (after its final norm, the field ``last``). The target's own distribution of token t + i + 1
is its output layer at position t + i, softmax(h_{t+i} · W_out[S]ᵀ) over FR-Spec's set S — so the teacher
costs one product per batch, no extra target forward. Head i at t learns it by cross-entropy (the KL up to a
constant), weighted DECAY**(i − 1): a later head only pays when the earlier ones were right.

The feature head's full corpus is used where it is cached (``draft --kind feature`` builds it: ≈ 1.6 h on 2
cores); otherwise a small one, the corpus's teacher-forced text only (:data:`TEXT_TOKENS` of Python documentation
and standard-library source: one target forward per sequence, no answers to generate), built and cached.
S is the shipped feature head's (one output set for both heads). The per-head top-1 agreement with the
target on the held-out split and the seconds go to ``drafts/training-log.json`` under "medusa".
"""

from __future__ import annotations

import time
from pathlib import Path

import torch
import torch.nn.functional as F
from transformers import PreTrainedModel

from .. import assets
from ..feature_drafter import load_head
from ..medusa import MEDUSA_FILE, MedusaHeads, save_heads
from . import corpus as corpus_data
from . import features
from .corpus import RECIPE
from .features import Corpus
from .loop import train_loop

SEED = 0
DECAY = 0.8  # head i's loss weight: DECAY ** (i - 1), as in Medusa
# k = 3 heads; 1,024 positions a step; max_seconds keeps the run inside the 10-minute budget on 2 cores
MEDUSA_RECIPE = {"k": 3, "steps": 600, "batch_size": 4, "seq_len": 256, "lr": 2e-3, "max_seconds": 480}
TEXT_TOKENS = 32_000  # the fallback corpus: teacher-forced text only (no answers to generate)


def medusa_losses(heads: MedusaHeads, w_out: torch.Tensor, b: dict) -> tuple[torch.Tensor, list[float]]:
    """(the weighted loss, each head's top-1 agreement) on a batch ``b`` (``features.batch`` with "last").

    b["last"] [B, T, d] the target's h_t; w_out [S, d]. Head i at t is scored against the target at t + i."""
    h, mask = b["last"], b["mask"]
    T = h.shape[1]
    with torch.no_grad():
        p = (h @ w_out.T).softmax(-1)  # [B, T, S]: the target's distribution of token t + 1, at every t
    logits = heads(h) @ w_out.T  # [B, T, k, S]
    total, agree = 0.0, []
    for i in range(1, heads.k + 1):
        if i >= T:
            break
        valid = mask[:, : T - i] & mask[:, i:]  # both positions trained on, t + i inside the sequence
        logp = logits[:, : T - i, i - 1].log_softmax(-1)  # head i at t ...
        target = p[:, i:]  # ... against the target's distribution at t + i (token t + i + 1)
        total = total + DECAY ** (i - 1) * -(target * logp).sum(-1)[valid].mean()
        agree.append((logp.argmax(-1) == target.argmax(-1))[valid].float().mean().item())
    return total, agree


@torch.no_grad()
def evaluate(heads: MedusaHeads, w_out: torch.Tensor, valid: Corpus, seq_len: int, batch_size: int = 8) -> list[float]:
    """Each head's top-1 agreement with the target (over S) on ``valid``, position-weighted means."""
    sums, counts = [0.0] * heads.k, [0] * heads.k
    for start in range(0, len(valid), batch_size):
        b = features.batch(valid, list(range(start, min(start + batch_size, len(valid)))), seq_len, ("last",))
        _, agree = medusa_losses(heads, w_out, b)
        n = [int((b["mask"][:, : b["mask"].shape[1] - i] & b["mask"][:, i:]).sum()) for i in range(1, len(agree) + 1)]
        for j, (a, c) in enumerate(zip(agree, n)):
            sums[j], counts[j] = sums[j] + a * c, counts[j] + c
    return [round(s / max(c, 1), 4) for s, c in zip(sums, counts)]


def train_medusa(target: PreTrainedModel, corpus: Corpus, vocab_ids: torch.Tensor, k: int = 3, steps: int = 300,
                 batch_size: int = 4, seq_len: int = 256, lr: float = 2e-3, max_seconds: float | None = None,
                 checkpoint: Path | None = None, progress: bool = True) -> tuple[MedusaHeads, dict]:
    """Train k heads on ``corpus`` (its held-out split scored at the end); returns (heads, log). The
    target stays frozen: only the heads' d × k·d block is trained."""
    train, valid = held_out(corpus)
    w_out = target.get_output_embeddings().weight.detach().float()[vocab_ids]  # [S, d]
    torch.manual_seed(SEED)
    heads = MedusaHeads(w_out.shape[1], k)
    gen = torch.Generator().manual_seed(SEED)  # host: the drafts' trainer runs on the CPU

    def step(_: int) -> dict:
        rows = torch.randint(len(train), (batch_size,), generator=gen).tolist()  # host: the drafts' trainer runs on the CPU
        loss, agree = medusa_losses(heads, w_out, features.batch(train, rows, seq_len, ("last",)))
        return {"loss": loss, "train_agree": agree[0]}

    def scored(at: int, log: dict) -> None:
        agree = evaluate(heads, w_out, valid, seq_len)
        log.setdefault("eval_step", []).append(at)
        log.setdefault("valid_agree_heads", []).append(agree)
        print(f"step {at}: loss {log['loss'][-1]:.3f}, held-out top-1 agreement of heads 1-{k}: {agree}")

    log = train_loop(heads, step, steps=steps, lr=lr, warmup=min(50, steps // 5), floor=0.1, weight_decay=0.0,
                     rng=gen, checkpoint=checkpoint, evaluate=scored, eval_every=max(1, steps // 4), max_seconds=max_seconds,
                     desc="training the Medusa heads", progress=progress)
    if not log.get("eval_step") or log["eval_step"][-1] != log["step"][-1] + 1:  # stopped early by max_seconds
        scored(log["step"][-1] + 1, log)
    return heads, log | {"train_tokens": train.n_tokens, "valid_sequences": len(valid)}


def held_out(corpus: Corpus) -> tuple[Corpus, Corpus]:
    """(train, valid): the drafts' split (held-out chats), or every 10th sequence of a text-only corpus."""
    train, valid = corpus_data.split(corpus)
    if len(valid):
        return train, valid
    return (corpus.select([i for i in range(len(corpus)) if i % 10 != 9]),
            corpus.select([i for i in range(len(corpus)) if i % 10 == 9]))


def medusa_corpus(target: PreTrainedModel, tokenizer) -> tuple[Corpus, str]:
    """The feature head's cached corpus where it exists, else the teacher-forced text (built and cached)."""
    from ..fast import available, twin

    if (corpus_data.data_dir() / "corpus" / "meta.json").exists():
        return corpus_data.build(target, tokenizer, writer=twin(target) if available() else target), "corpus"
    seq_len = RECIPE["seq_len"]
    docs = corpus_data.chunk(tokenizer, corpus_data.python_docs(), seq_len, int(TEXT_TOKENS * 0.6))
    code = corpus_data.chunk(tokenizer, corpus_data.python_source(), seq_len, TEXT_TOKENS - sum(t.numel() for t in docs))
    seqs = docs + code
    folder = corpus_data.data_dir() / "medusa-text"
    return features.build_features(target, seqs, ["text"] * len(seqs), [0] * len(seqs), folder), "text only"


def medusa_main(steps: int | None = None, out: Path | None = None) -> int:
    """``python -m specdec_core.train draft --kind medusa``: the corpus, the heads, their log."""
    from transformers import AutoTokenizer

    from ..models import PRESETS, load_model
    from .distill import run_log_path, save_log

    torch.manual_seed(SEED)
    target = load_model(PRESETS["offline"].target, "cpu")
    for p in target.parameters():
        p.requires_grad_(False)
    tokenizer = AutoTokenizer.from_pretrained(assets.ensure_target_dir())
    t0 = time.perf_counter()
    corpus, name = medusa_corpus(target, tokenizer)
    corpus_s = time.perf_counter() - t0
    _, vocab_ids, _ = load_head(assets.shipped(assets.FEATURE_FILE, "feature head"))  # the same S
    recipe = MEDUSA_RECIPE | ({} if steps is None else {"steps": steps})
    heads, log = train_medusa(target, corpus, vocab_ids, checkpoint=corpus_data.data_dir() / "medusa-checkpoint.pt",
                              **recipe)
    path = out or MEDUSA_FILE
    agree = log["valid_agree_heads"][-1]
    save_heads(path, heads, vocab_ids, {"held_out_agreement": agree})
    meta = {"recipe": recipe, "corpus": name, "corpus_sequences": len(corpus), "corpus_tokens": corpus.n_tokens,
            "corpus_seconds_this_run": round(corpus_s, 1), "threads": torch.get_num_threads(),
            "parameters": sum(p.numel() for p in heads.parameters())}
    save_log("medusa", log, meta, assets.DRAFTS_LOG if out is None else run_log_path(path))
    print(f"wrote {path}; held-out top-1 agreement of heads 1-{heads.k} {agree} after {log['seconds'] / 60:.1f} min")
    return 0
