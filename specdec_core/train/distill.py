"""Distilling the offline drafts from the target — reproduces the weights the course ships.

    python -m specdec_core.train draft --kind feature     # EAGLE-style head, 1250 steps, ≈ 40 min on one core
    python -m specdec_core.train draft --kind model       # standalone 4-layer draft, 1100 steps, ≈ 35 min

(The shipped weights come from the two running side by side, one thread each: ``OMP_NUM_THREADS=1``.)
Both learn from :mod:`specdec_core.train.corpus` (the target's features and top-32 distributions on
its own answers to templated and to self-written requests and on teacher-forced text: 2,639 sequences,
479k tokens, built once and cached, ≈ 53 min on 2 cores). Training is by steps with a fixed seed, so
a run reproduces the shipped weights up to floating-point noise; a checkpoint is written every
200 steps under ``$SPECDEC_CACHE/distill`` and a run resumes from it (:mod:`specdec_core.train.loop`).

The number that matters is *greedy agreement*: how often the draft's most likely token equals the
target's — the acceptance rate of the first guess at temperature 0. We track it on held-out answers
(to 16 templated and 16 self-written requests); the lessons measure α itself with speculative
decoding on ``prompts.HELDOUT``.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import torch
import torch.nn.functional as F
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedModel

from .. import assets
from ..feature_drafter import FeatureHead, save_head
from ..files import write_json
from . import corpus as corpus_data
from .corpus import Corpus
from .loop import train_loop

SEED = 0
MAGPIE_REQUESTS = 1600  # self-written requests in the shipped drafts' corpus (corpus.magpie_requests)
WARMUP = 50  # steps of linear warm-up; then cosine decay to FLOOR × the peak rate
FLOOR = 0.1


def reduced_vocab(corpus: Corpus, vocab_size: int, size: int, always: list[int]) -> torch.Tensor:
    """FR-Spec's output set [size]: the tokens the target predicts most often in the corpus (its
    greedy next tokens count double, the text's own tokens once), plus ``always`` (end of turn)."""
    counts = torch.zeros(vocab_size)
    for ids, seq in zip(corpus.top_ids, corpus.tokens):
        counts.index_add_(0, ids[:, 0].long(), torch.full((ids.shape[0],), 2.0))
        counts.index_add_(0, seq.long(), torch.ones(seq.numel()))
    counts[torch.tensor(always)] = math.inf
    # a stable sort puts ties (unseen tokens) in id order: BPE gives low ids to frequent merges
    order = torch.sort(counts, descending=True, stable=True).indices
    return order[:size].sort().values


def batch(corpus: Corpus, rows: list[int], seq_len: int) -> dict[str, torch.Tensor]:
    """Right-padded batch of the sequences ``rows``: tokens [B, T], features [B, T, d] (fp32),
    top_ids [B, T, K], top_p [B, T, K] (renormalised over the K), mask [B, T] (True = real)."""
    T = min(seq_len, max(corpus.tokens[i].numel() for i in rows))
    d, K = corpus.features[0].shape[1], corpus.top_ids[0].shape[1]
    out = {"tokens": torch.zeros(len(rows), T, dtype=torch.long), "features": torch.zeros(len(rows), T, d),
           "top_ids": torch.zeros(len(rows), T, K, dtype=torch.long), "top_p": torch.zeros(len(rows), T, K),
           "mask": torch.zeros(len(rows), T, dtype=torch.bool)}
    for b, i in enumerate(rows):
        n = min(T, corpus.tokens[i].numel())
        out["tokens"][b, :n] = corpus.tokens[i][:n]
        out["features"][b, :n] = corpus.features[i][:n].float()
        out["top_ids"][b, :n] = corpus.top_ids[i][:n].long()
        out["top_p"][b, :n] = corpus.top_logp[i][:n].float().softmax(-1)
        out["mask"][b, :n] = True
    return out


# --- the feature (EAGLE) head ------------------------------------------------------------------

def feature_losses(head: FeatureHead, embed: torch.Tensor, w_out: torch.Tensor, b: dict, ce_weight: float):
    """Two passes over a batch. Pass 1 reads the target's real features; pass 2 reads pass 1's
    predictions instead (what drafting the 2nd, 3rd… token will feed in), so the head learns to
    continue from its own output. Returns (loss, agreement of pass 1, agreement of pass 2).

    At position t the head sees (f_t, x_{t+1}) and predicts f_{t+1}; the logits of f_{t+1} through the
    reduced head w_out [S, d] predict x_{t+2}.
    """
    emb = embed[b["tokens"][:, 1:]]  # [B, T-1, d]
    feat, nxt = b["features"][:, :-1], b["features"][:, 1:]
    mask = b["mask"][:, 1:] & b["mask"][:, :-1]
    with torch.no_grad():
        p_target = (nxt @ w_out.T).softmax(-1)  # the target's distribution over the reduced set
        greedy = p_target.argmax(-1)
    total, agree = 0.0, []
    pred = None
    for _ in range(2):
        inputs = feat if pred is None else torch.cat([feat[:, :1], pred.detach()[:, :-1]], dim=1)
        pred = head(emb, inputs)
        logits = pred @ w_out.T
        l_feat = F.smooth_l1_loss(pred[mask], nxt[mask])
        l_ce = -(p_target * logits.log_softmax(-1)).sum(-1)[mask].mean()
        total = total + l_feat + ce_weight * l_ce
        agree.append((logits.argmax(-1) == greedy)[mask].float().mean().item())
    return total, agree[0], agree[1]


def train_feature(target: PreTrainedModel, corpus: Corpus, steps: int = 1250, batch_size: int = 8,
                  seq_len: int = 256, lr: float = 1e-3, ce_weight: float = 0.1, vocab: int = 8192,
                  save_every: int = 200, eval_every: int = 100) -> tuple[FeatureHead, torch.Tensor, dict]:
    """Train the EAGLE-style head; returns (head, reduced vocabulary ids, training log)."""
    train, valid = corpus_data.split(corpus)
    eos = target.generation_config.eos_token_id
    vocab_ids = reduced_vocab(train, target.config.vocab_size, vocab, [eos] if isinstance(eos, int) else list(eos))
    embed = target.get_input_embeddings().weight.detach().float()
    w_out = target.get_output_embeddings().weight.detach().float()[vocab_ids]  # [S, d]
    torch.manual_seed(SEED)
    head = FeatureHead(d=embed.shape[1], n_heads=target.config.num_attention_heads, ffn=target.config.intermediate_size)
    head.norm_out.weight.data.copy_(target.model.norm.weight.detach().float())
    return head, vocab_ids, _distill("feature", head, train, valid, steps, batch_size, seq_len, lr, save_every,
                                     eval_every, lambda b: feature_losses(head, embed, w_out, b, ce_weight))


# --- the standalone draft ----------------------------------------------------------------------

def standalone_config(target: PreTrainedModel, hidden: int = 128, layers: int = 4) -> LlamaConfig:
    """A small Llama with the target's vocabulary and special tokens (≈ 7M parameters at 128 × 4)."""
    tc = target.config
    return LlamaConfig(vocab_size=tc.vocab_size, hidden_size=hidden, intermediate_size=4 * hidden,
                       num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                       max_position_embeddings=tc.max_position_embeddings, rope_theta=getattr(tc, "rope_theta", 10000.0),
                       tie_word_embeddings=True, bos_token_id=tc.bos_token_id, eos_token_id=tc.eos_token_id,
                       pad_token_id=tc.pad_token_id)


def standalone_losses(model: LlamaForCausalLM, b: dict):
    """Knowledge distillation on the target's top-32: cross-entropy of the draft against the target's
    renormalised top-32 probabilities at every position. Returns (loss, greedy agreement, nan)."""
    logp = model(input_ids=b["tokens"]).logits.log_softmax(-1)  # [B, T, V]
    mask = b["mask"]
    loss = -(b["top_p"] * logp.gather(-1, b["top_ids"])).sum(-1)[mask].mean()
    agree = (logp.argmax(-1) == b["top_ids"][..., 0])[mask].float().mean().item()
    return loss, agree, float("nan")


def train_standalone(target: PreTrainedModel, corpus: Corpus, steps: int = 1100, batch_size: int = 8,
                     seq_len: int = 256, lr: float = 2e-3, hidden: int = 128, layers: int = 4,
                     save_every: int = 200, eval_every: int = 100) -> tuple[LlamaForCausalLM, dict]:
    """Train the standalone draft; its embeddings start as a PCA projection of the target's."""
    train, valid = corpus_data.split(corpus)
    torch.manual_seed(SEED)
    model = LlamaForCausalLM(standalone_config(target, hidden, layers))
    with torch.no_grad():
        emb = target.get_input_embeddings().weight.detach().float()
        _, _, v = torch.pca_lowrank(emb, q=hidden, center=True)  # top principal directions [d, hidden]
        proj = (emb - emb.mean(0)) @ v
        model.get_input_embeddings().weight.copy_(proj / proj.std() * 0.05)  # logits start near uniform
    model.generation_config.eos_token_id = target.generation_config.eos_token_id
    return model, _distill("model", model, train, valid, steps, batch_size, seq_len, lr, save_every, eval_every,
                           lambda b: standalone_losses(model, b))


# --- both drafts: one loop ------------------------------------------------------------------------

def _distill(kind: str, module: torch.nn.Module, train: Corpus, valid: Corpus, steps: int, batch_size: int,
             seq_len: int, lr: float, save_every: int, eval_every: int, losses) -> dict:
    """:func:`~specdec_core.train.loop.train_loop` with batches of ``train`` from a seeded generator
    (part of the checkpoint), AdamW (weight decay 0.01), and held-out agreement on ``valid``."""
    gen = torch.Generator().manual_seed(SEED)
    valid_rows = list(range(len(valid)))

    def step(_: int) -> dict:
        rows = torch.randint(len(train), (batch_size,), generator=gen).tolist()
        loss, agree, _ = losses(batch(train, rows, seq_len))
        return {"loss": loss, "train_agree": agree}

    def evaluate(at: int, log: dict) -> None:
        scores = [losses(batch(valid, valid_rows[i : i + batch_size], seq_len))[1:]
                  for i in range(0, len(valid_rows), batch_size)]
        for key, value in (("eval_step", at), ("valid_agree", sum(s[0] for s in scores) / len(scores)),
                           ("valid_agree2", sum(s[1] for s in scores) / len(scores))):
            log.setdefault(key, []).append(round(value, 4) if isinstance(value, float) else value)
        print(f"step {at}: loss {log['loss'][-1]:.3f}, held-out agreement {log['valid_agree'][-1]:.3f}"
              f" (from its own features: {log['valid_agree2'][-1]:.3f})")

    return train_loop(module, step, steps=steps, lr=lr, warmup=WARMUP, floor=FLOOR, weight_decay=0.01, rng=gen,
                      checkpoint=corpus_data.data_dir() / f"{kind}-checkpoint.pt", save_every=save_every,
                      evaluate=evaluate, eval_every=eval_every, desc=f"distilling the {kind} draft")


def save_log(kind: str, log: dict, meta: dict) -> None:
    """Add one draft's training log to the shipped ``training-log.json`` (written atomically)."""
    logs = json.loads(assets.DRAFTS_LOG.read_text()) if assets.DRAFTS_LOG.exists() else {}
    logs[kind] = {**meta, **log}
    write_json(logs, assets.DRAFTS_LOG)


def distill_main(kind: str, steps: int | None = None, out: Path | None = None) -> int:
    """``python -m specdec_core.train draft --kind feature|model``: build (or load) the corpus, train,
    write the weights (default: the package's) and, for the shipped weights, their training log."""
    from transformers import AutoTokenizer

    from ..models import PRESETS, load_model

    torch.manual_seed(SEED)
    target = load_model(PRESETS["offline"].target, "cpu")
    for p in target.parameters():
        p.requires_grad_(False)
    # The shipped requests are reused, so a rebuild answers the same ones (sampling them again would
    # give other requests on another machine); the first build writes them next to the weights.
    cached = corpus_data.data_dir() / f"magpie-{MAGPIE_REQUESTS}.json"
    if assets.MAGPIE_FILE.exists() and not cached.exists():
        shutil.copyfile(assets.MAGPIE_FILE, cached)
    corpus = corpus_data.build(target, AutoTokenizer.from_pretrained(assets.ensure_target_dir()), n_magpie=MAGPIE_REQUESTS)
    if not assets.MAGPIE_FILE.exists():
        shutil.copyfile(cached, assets.MAGPIE_FILE)
    meta = {"corpus_sequences": len(corpus), "corpus_tokens": corpus.n_tokens, "threads": torch.get_num_threads()}
    kw = {} if steps is None else {"steps": steps}
    if kind == "feature":
        head, vocab_ids, log = train_feature(target, corpus, **kw)
        path = out or assets.FEATURE_FILE
        save_head(path, head, vocab_ids, {"held_out_agreement": log["valid_agree"][-1]})
    else:
        model, log = train_standalone(target, corpus, **kw)
        path = out or assets.STANDALONE_DIR
        model.half().save_pretrained(path)  # fp16 on disk (≤ 20 MB); loaded back in fp32
    if out is None:
        save_log(kind, log, meta)
    print(f"wrote {path}; held-out greedy agreement {log['valid_agree'][-1]:.3f} after {log['seconds'] / 60:.1f} min")
    return 0
