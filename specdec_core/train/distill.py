"""Distilling the offline drafts from the target (the shipped standalone draft comes from this module; the
shipped feature head from it as of commit 6cf7533: last layer, two passes — the head's recipe below is
EAGLE-3's, README "Drafts, the next recipe").

    python -m specdec_core.train draft --kind feature     # EAGLE-3-style head: fused layers, training-time test
    python -m specdec_core.train draft --kind model       # the standalone 4-layer draft
    python -m specdec_core.train ablation                 # lesson 04's appendix: the ablation table and data curve

(Run the two side by side, one thread each: ``OMP_NUM_THREADS=1``.)
Both learn from :mod:`specdec_core.train.corpus` (the target's features and top-32 distributions on
its own answers to templated, self-written and multi-turn requests and on teacher-forced text, built
once and cached). Training is by steps with a fixed seed, so a run reproduces its weights up
to floating-point noise; a checkpoint is written every ``save_every`` steps under
``$SPECDEC_CACHE/distill`` and a run resumes from it (:mod:`specdec_core.train.loop`).

The number that matters is *greedy agreement*: how often the draft's most likely token equals the
target's — the acceptance rate of a guess at temperature 0. We track it on held-out answers of each
chat source, at drafting steps 1, 2, 3 for the feature head (:func:`.eagle.evaluate`); the lessons
measure α itself with speculative decoding on ``prompts.HELDOUT``.
"""

from __future__ import annotations

import fcntl
import json
import math
import random
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedModel

from .. import assets
from ..feature_drafter import FeatureHead, save_head
from ..files import write_json
from . import corpus as corpus_data
from . import eagle, features
from .features import Corpus, fused_layers
from .loop import train_loop

SEED = 0
WARMUP = 50  # steps of linear warm-up; then cosine decay to FLOOR × the peak rate
FLOOR = 0.1
# The feature head's recipe: EAGLE-3's fused low/middle/high layers, trained unrolled over 3 own steps.
# (The head shipped today predates it: last layer, two passes, 1,250 steps; see drafts/training-log.json.)
FEATURE_RECIPE = {"inputs": "fused", "unroll": 3, "steps": 1500, "batch_size": 8, "seq_len": 256, "lr": 1e-3,
                  "ce_weight": 0.1, "vocab": 8192}


def reduced_vocab(corpus: Corpus, vocab_size: int, size: int, always: list[int]) -> torch.Tensor:
    """FR-Spec's output set [size]: the tokens the target predicts most often in the corpus (its
    greedy next tokens count double, the text's own tokens once), plus ``always`` (end of turn)."""
    counts = torch.zeros(vocab_size)  # host: the drafts' trainer runs on the CPU
    for ids, seq in zip(corpus.top_ids, corpus.tokens):
        counts.index_add_(0, ids[:, 0].long(), torch.full((ids.shape[0],), 2.0))  # host: the drafts' trainer runs on the CPU
        counts.index_add_(0, seq.long(), torch.ones(seq.numel()))  # host: the drafts' trainer runs on the CPU
    counts[torch.tensor(always)] = math.inf  # host: the drafts' trainer runs on the CPU
    # a stable sort puts ties (unseen tokens) in id order: BPE gives low ids to frequent merges
    order = torch.sort(counts, descending=True, stable=True).indices
    return order[:size].sort().values


def subset(corpus: Corpus, fraction: float) -> Corpus:
    """A seeded random ``fraction`` of the sequences (the data curve's smaller corpora)."""
    if fraction >= 1:
        return corpus
    keep = sorted(random.Random(SEED).sample(range(len(corpus)), max(1, round(fraction * len(corpus)))))
    return corpus.select(keep)


# --- the feature (EAGLE) head ------------------------------------------------------------------

def train_feature(target: PreTrainedModel, corpus: Corpus, inputs: str = "fused", unroll: int = 3,
                  steps: int = 1500, batch_size: int = 8, seq_len: int = 256, lr: float = 1e-3,
                  ce_weight: float = 0.1, vocab: int = 8192, fraction: float = 1.0, save_every: int = 50,
                  eval_every: int = 250, tag: str = "feature") -> tuple[FeatureHead, torch.Tensor, dict]:
    """Train a feature head; returns (head, reduced vocabulary ids, training log).

    ``inputs``: "fused" (EAGLE-3: three layers) or "last" (EAGLE-1: the last hidden state);
    ``unroll``: k >= 1, the training-time test over k own steps, or 0 for the two-pass recipe;
    ``fraction``: train on that share of the training sequences (the data curve)."""
    train, valid = corpus_data.split(corpus)
    train = subset(train, fraction)
    eos = target.generation_config.eos_token_id
    vocab_ids = reduced_vocab(train, target.config.vocab_size, vocab, [eos] if isinstance(eos, int) else list(eos))
    embed = target.get_input_embeddings().weight.detach().float()
    w_out = target.get_output_embeddings().weight.detach().float()[vocab_ids]  # [S, d]
    torch.manual_seed(SEED)
    layers = fused_layers(target.config.num_hidden_layers) if inputs == "fused" else (-1,)
    head = FeatureHead(d=embed.shape[1], n_heads=target.config.num_attention_heads,
                       ffn=target.config.intermediate_size, layers=layers)
    head.norm_out.weight.data.copy_(target.model.norm.weight.detach().float())

    def losses(b: dict) -> tuple[torch.Tensor, list[float]]:
        if unroll:
            return eagle.ttt_losses(head, embed, w_out, b, ce_weight, k=unroll)
        return eagle.two_pass_losses(head, embed, w_out, b, ce_weight)

    def evaluate(at: int, log: dict) -> None:
        agree = eagle.evaluate(head, embed, w_out, valid, seq_len, inputs)
        log.setdefault("eval_step", []).append(at)
        log.setdefault("valid_agree_steps", []).append(agree)
        log.setdefault("valid_agree", []).append(agree[0])
        log.setdefault("valid_agree2", []).append(agree[1])
        print(f"step {at}: loss {log['loss'][-1]:.3f}, held-out agreement at drafting steps 1-3: {agree}")

    log = _distill(tag, head, train, steps, batch_size, seq_len, lr, save_every, eval_every,
                   lambda rows: losses(eagle.batch(train, rows, seq_len, inputs)), evaluate)
    log |= {"inputs": inputs, "unroll": unroll, "train_tokens": train.n_tokens, "fraction": fraction}
    return head, vocab_ids, log


# --- the standalone draft ----------------------------------------------------------------------

def standalone_config(target: PreTrainedModel, hidden: int = 128, layers: int = 4) -> LlamaConfig:
    """A small Llama with the target's vocabulary and special tokens (≈ 7M parameters at 128 × 4)."""
    tc = target.config
    return LlamaConfig(vocab_size=tc.vocab_size, hidden_size=hidden, intermediate_size=4 * hidden,
                       num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                       max_position_embeddings=tc.max_position_embeddings, rope_theta=getattr(tc, "rope_theta", 10000.0),
                       tie_word_embeddings=True, bos_token_id=tc.bos_token_id, eos_token_id=tc.eos_token_id,
                       pad_token_id=tc.pad_token_id)


def standalone_losses(model: LlamaForCausalLM, b: dict) -> tuple[torch.Tensor, float]:
    """Knowledge distillation on the target's top-32: cross-entropy of the draft against the target's
    renormalised top-32 probabilities at every position. Returns (loss, greedy agreement)."""
    logp = model(input_ids=b["tokens"]).logits.log_softmax(-1)  # [B, T, V]
    mask, top_p = b["mask"], b["top_logp"].softmax(-1)
    loss = -(top_p * logp.gather(-1, b["top_ids"])).sum(-1)[mask].mean()
    agree = (logp.argmax(-1) == b["top_ids"][..., 0])[mask].float().mean().item()
    return loss, agree


def train_standalone(target: PreTrainedModel, corpus: Corpus, steps: int = 1100, batch_size: int = 8,
                     seq_len: int = 256, lr: float = 2e-3, hidden: int = 128, layers: int = 4,
                     save_every: int = 50, eval_every: int = 250, tag: str = "model") -> tuple[LlamaForCausalLM, dict]:
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
    fields = ("top_ids", "top_logp")

    def evaluate(at: int, log: dict) -> None:
        scores = [standalone_losses(model, features.batch(valid, list(range(i, min(i + batch_size, len(valid)))), seq_len, fields))[1]
                  for i in range(0, len(valid), batch_size)]
        log.setdefault("eval_step", []).append(at)
        log.setdefault("valid_agree", []).append(round(sum(scores) / len(scores), 4))
        print(f"step {at}: loss {log['loss'][-1]:.3f}, held-out agreement {log['valid_agree'][-1]:.3f}")

    log = _distill(tag, model, train, steps, batch_size, seq_len, lr, save_every, eval_every,
                   lambda rows: standalone_losses(model, features.batch(train, rows, seq_len, fields)), evaluate)
    return model, log | {"train_tokens": train.n_tokens}


# --- both drafts: one loop ------------------------------------------------------------------------

def _distill(tag: str, module: torch.nn.Module, train: Corpus, steps: int, batch_size: int, seq_len: int,
             lr: float, save_every: int, eval_every: int, losses, evaluate) -> dict:
    """:func:`~specdec_core.train.loop.train_loop` with batches of ``train`` drawn from a seeded
    generator (part of the checkpoint ``<tag>-checkpoint.pt``), AdamW (weight decay 0.01).
    ``losses(rows)`` → (loss, agreement or a list of them); ``evaluate(step, log)`` scores held-out data."""
    gen = torch.Generator().manual_seed(SEED)  # host: the drafts' trainer runs on the CPU

    def step(_: int) -> dict:
        rows = torch.randint(len(train), (batch_size,), generator=gen).tolist()  # host: the drafts' trainer runs on the CPU
        loss, agree = losses(rows)
        return {"loss": loss, "train_agree": agree[0] if isinstance(agree, list) else agree}

    return train_loop(module, step, steps=steps, lr=lr, warmup=WARMUP, floor=FLOOR, weight_decay=0.01, rng=gen,
                      checkpoint=corpus_data.data_dir() / f"{tag}-checkpoint.pt", save_every=save_every,
                      evaluate=evaluate, eval_every=eval_every, desc=f"distilling the {tag} draft")


def run_log_path(weights: Path) -> Path:
    """Where a run written with ``--out`` keeps its training log: beside its weights."""
    return weights.parent / f"{weights.stem}.training-log.json"


def save_log(kind: str, log: dict, meta: dict, path: Path = assets.DRAFTS_LOG) -> None:
    """Add one run's training log to a shipped log file (default ``training-log.json``; atomically)."""
    with open(corpus_data.data_dir() / f".{path.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # ablation runs side by side add to the same file
        logs = json.loads(path.read_text()) if path.exists() else {}
        logs[kind] = {**meta, **log}
        write_json(logs, path)


def load_corpus() -> tuple[PreTrainedModel, Corpus]:
    """The offline target (frozen) and the shipped drafts' corpus (built where missing, resumably;
    its answers are generated with the target's fast twin)."""
    from transformers import AutoTokenizer

    from ..fast import available, twin
    from ..models import PRESETS, load_model

    torch.manual_seed(SEED)
    target = load_model(PRESETS["offline"].target, "cpu")
    for p in target.parameters():
        p.requires_grad_(False)
    tokenizer = AutoTokenizer.from_pretrained(assets.ensure_target_dir())
    return target, corpus_data.build(target, tokenizer, writer=twin(target) if available() else target)


def distill_main(kind: str, steps: int | None = None, out: Path | None = None) -> int:
    """``python -m specdec_core.train draft --kind feature|model``: build (or load) the corpus, train,
    write the weights (default: the package's) and, for the shipped weights, their training log."""
    target, corpus = load_corpus()
    meta = {"corpus_sequences": len(corpus), "corpus_tokens": corpus.n_tokens, "threads": torch.get_num_threads()}
    if kind == "feature":
        recipe = FEATURE_RECIPE | ({} if steps is None else {"steps": steps})
        head, vocab_ids, log = train_feature(target, corpus, **recipe)
        meta["recipe"] = recipe
        path = out or assets.FEATURE_FILE
        save_head(path, head, vocab_ids, {"held_out_agreement": log["valid_agree"][-1]})
    else:
        model, log = train_standalone(target, corpus, **({} if steps is None else {"steps": steps}))
        path = out or assets.STANDALONE_DIR
        model.half().save_pretrained(path)  # fp16 on disk (≤ 20 MB); loaded back in fp32
        # FR-Spec's output set for drafting with it (the feature head's recipe: the same S)
        eos = target.generation_config.eos_token_id
        kept = reduced_vocab(corpus_data.split(corpus)[0], target.config.vocab_size, FEATURE_RECIPE["vocab"],
                             [eos] if isinstance(eos, int) else list(eos))
        write_json(kept.tolist(), path / assets.REDUCED_VOCAB)
    # the package's log for the shipped weights; a run written elsewhere keeps its log beside it
    save_log(kind, log, meta, assets.DRAFTS_LOG if out is None else run_log_path(path))
    print(f"wrote {path}; held-out greedy agreement {log['valid_agree'][-1]:.3f} after {log['seconds'] / 60:.1f} min")
    return 0


# --- the ablation of lesson 04 ---------------------------------------------------------------------

ABLATION = {  # name: (inputs, unroll, share of the training data)
    "last, two passes": ("last", 0, 1.0),
    "last, unrolled ×3": ("last", 3, 1.0),
    "fused, two passes": ("fused", 0, 1.0),
    "fused, unrolled ×3": ("fused", 3, 1.0),
    "fused, unrolled ×3, ¼ data": ("fused", 3, 0.25),
    "fused, unrolled ×3, ½ data": ("fused", 3, 0.5),
}


def ablation_main(steps: int = 400, only: list[str] | None = None, reference: bool = False,
                  head: Path | None = None, name: str = "") -> int:
    """``python -m specdec_core.train ablation``: :func:`run_ablation` on the shipped drafts' corpus,
    logged to ``assets.ABLATION_LOG`` (run several at once with ``--only``); ``--reference``: only
    measure the shipped head the same way (:func:`reference_row`), or ``head`` (a file written by
    ``train draft --kind feature --out FILE``, its training log beside it) as the row ``name``."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(assets.ensure_target_dir())
    if reference:
        from .. import models

        target = models.load_model(models.PRESETS["offline"].target, "cpu")
        if head is None:
            reference_row(target, tokenizer)
        else:
            reference_row(target, tokenizer, head, run_log_path(head), name=name or head.stem)
        return 0
    target, corpus = load_corpus()
    run_ablation(target, tokenizer, corpus, steps, only)
    return 0


REFERENCE = "shipped head"


def reference_row(target: PreTrainedModel, tokenizer, head_path: Path = assets.FEATURE_FILE,
                  train_log: Path = assets.DRAFTS_LOG, log: Path = assets.ABLATION_LOG, name: str = REFERENCE) -> dict:
    """A trained feature head (default: the shipped one) measured exactly like every ablation variant on
    ``prompts.HELDOUT`` (greedy, γ = 3), logged as a reference row ``name`` with its own recipe (from its
    training log). The shipped head's agreement on the corpus's validation split is left out (it trained on
    an older corpus and may have seen those answers); a head trained on today's corpus keeps its curve of
    held-out agreement against steps (``agree_curve``, lesson 04's α against training steps)."""
    from .. import prompts
    from ..bench.drafters import acceptance
    from ..fast import available, twin
    from ..feature_drafter import FeatureDrafter, load_head

    head, vocab_ids, _ = load_head(head_path)
    shipped = json.loads(train_log.read_text())["feature"]
    fast = twin(target) if available() else target
    heldout = acceptance(fast, tokenizer, FeatureDrafter(fast, head, vocab_ids), prompts.HELDOUT, gamma=3)
    row = {"inputs": "last" if list(head.layers) == [-1] else "fused", "unroll": shipped.get("unroll", 0),
           "fraction": 1.0, "train_tokens": shipped.get("train_tokens", shipped["corpus_tokens"]),
           "seconds": shipped["seconds"],
           "steps": len(shipped["step"]), "threads": shipped.get("threads"), "heldout": heldout}
    if "valid_agree_steps" in shipped:  # trained on today's corpus and split: its agreement curve is fair to show
        row["agree_curve"] = {"steps": shipped["eval_step"], "agree": shipped["valid_agree_steps"]}
    save_log(name, row, {}, log)
    print(f"{name}: HELDOUT α {heldout['alpha']:.3f}, {heldout['tokens_per_call']:.2f} tokens per target call")
    return row


def run_ablation(target: PreTrainedModel, tokenizer, corpus: Corpus, steps: int, only: list[str] | None = None,
                 log: Path = assets.ABLATION_LOG, variants: dict = ABLATION) -> None:
    """Every variant trained ``steps`` steps with the same seed, batches and loss, scored the same way —
    held-out agreement at drafting steps 1-3, and α on ``prompts.HELDOUT`` (greedy, γ = 3, untimed);
    each finished run is added to ``log`` and its head kept in the cache."""
    from .. import prompts
    from ..bench.drafters import acceptance
    from ..fast import available, twin
    from ..feature_drafter import FeatureDrafter

    fast = twin(target) if available() else target
    unknown = [name for name in only or [] if name not in variants]
    if unknown:
        raise ValueError(f"no ablation variant {unknown}: choose from {list(variants)}")
    for name in only or list(variants):  # in the order asked for
        inputs, unroll, fraction = variants[name]
        slug = "-".join([inputs, str(unroll), f"{fraction:g}", str(steps)])
        recipe = FEATURE_RECIPE | {"inputs": inputs, "unroll": unroll, "steps": steps}
        head, vocab_ids, run = train_feature(target, corpus, **recipe, fraction=fraction, eval_every=steps,
                                             tag=f"ablation-{slug}")
        save_head(corpus_data.data_dir() / f"ablation-{slug}.safetensors", head, vocab_ids)
        heldout = acceptance(fast, tokenizer, FeatureDrafter(fast, head, vocab_ids), prompts.HELDOUT, gamma=3)
        keep = ("inputs", "unroll", "fraction", "train_tokens", "seconds", "valid_agree_steps", "loss")
        save_log(name, {k: run[k] for k in keep} | {"steps": steps, "threads": torch.get_num_threads(),
                                                    "heldout": heldout}, {}, log)
        print(f"{name}: held-out agreement {run['valid_agree_steps'][-1]}, HELDOUT α {heldout['alpha']:.3f}, "
              f"{heldout['tokens_per_call']:.2f} tokens per target call")
