"""The CLLM fine-tune: LoRA adapters trained with the consistency and AR losses of :mod:`specdec_core.cllm`,
or with Jacobi Forcing's (:mod:`specdec_core.jacobi_forcing`) on the same trajectories.

``objective="cllm"``: each step draws ``batch_size`` random (trajectory, block, state) samples and runs
two passes of the model: one over [prompt, greedy answer] (the AR loss, and — detached — the teacher
distributions at the fixed point) and one over [prompt, answer before the block, state] (the student).
``objective="jf"``: each step draws ``batch_size`` trajectories; every block of each gets a state at
the progressive schedule's noise level (shifted at random, so each block meets every level) and one
packed forward gives student, teacher and AR rows. The loop
(warm-up + cosine schedule, clipping, resumable checkpoints) is :mod:`specdec_core.train.loop`.
The adapter ships in float16 in ``specdec_core/drafts/cllm``; :func:`specdec_core.models.load_cllm`
merges it into a copy of the target.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import PreTrainedModel

from ..assets import cache_dir
from ..cllm import ANCHOR_LEN, SEED, Trajectory, anchor_kl, anchor_loss, ar_and_teacher, consistency_loss, samples_of
from ..files import atomic_write, write_json
from ..jacobi_forcing import jacobi_forcing_loss, noisy_blocks, progressive_levels
from ..models import quiet_peft, with_lora
from .loop import train_loop


@dataclass
class Recipe:
    """The reference run's settings (``python -m specdec_core.train cllm train`` uses these)."""

    steps: int = 600
    batch_size: int = 4
    lr: float = 1e-3  # LoRA takes a larger rate than the paper's full fine-tune (2e-5)
    ar_weight: float = 10.0
    smoothing: float = 0.1
    warmup: float = 0.03  # share of the steps spent warming up (then cosine decay to zero)
    r: int = 12
    alpha: int = 24
    lora: bool = True  # False: a full fine-tune (every weight trains; for a GPU)
    anchors: int = 1  # anchor sequences per step (other text, AR loss on the target's greedy choices)
    anchor_source: str = "corpus"  # "corpus": the drafts' corpus; "text": Python's docs and source (no generation)
    anchor_kind: str = "ar"  # "ar": cross-entropy on the base model's greedy tokens; "kl": KL to its distribution (LoRA)
    objective: str = "cllm"  # "cllm": one block, clean prefix; "jf": Jacobi Forcing (all blocks, noisy context)
    window: int = 4  # Jacobi Forcing's progressive schedule: levels 1/W … 1 over W consecutive blocks


def train(model: PreTrainedModel, trajectories: list[Trajectory], recipe: Recipe | None = None,
          pad: int = 0, checkpoint: Path | None = None, save_every: int = 50, progress: bool = True,
          stop_after: int | None = None, max_seconds: float | None = None,
          anchors: list[tuple[torch.Tensor, torch.Tensor]] | None = None):
    """LoRA fine-tune on the trajectories: each step takes ``batch_size`` random (block, state)
    samples, one AR pass and one consistency pass. Returns (peft model, log).

    With ``checkpoint`` the adapter, optimizer and sampler state are saved atomically every
    ``save_every`` steps and a restarted run resumes from them. ``stop_after`` (steps) or
    ``max_seconds`` end a run early, as an interruption would: the checkpoint (if any) is kept and
    the schedule is the full recipe's, so a later call finishes the same run. ``anchors``: (ids [T],
    greedy next tokens [T]) pairs of other text; ``recipe.anchors`` of them join the AR loss each step."""
    with quiet_peft():  # the first import of peft in a lesson: its notices say nothing to a student
        from peft import get_peft_model_state_dict, set_peft_model_state_dict

    recipe = recipe or Recipe()
    if hasattr(model, "peft_config"):
        peft_model = model
    elif recipe.lora:
        torch.manual_seed(SEED)  # the LoRA initialisation
        peft_model = with_lora(model, recipe.r, recipe.alpha)
    else:
        peft_model = model.requires_grad_(True)
    if recipe.objective not in ("cllm", "jf"):
        raise ValueError(f"objective must be 'cllm' or 'jf', got {recipe.objective!r}")
    if recipe.anchor_kind not in ("ar", "kl") or (recipe.anchor_kind == "kl" and not hasattr(peft_model, "peft_config")):
        raise ValueError(f"anchor_kind must be 'ar' or 'kl' (kl needs LoRA: the base is the model with its adapters "
                         f"off), got {recipe.anchor_kind!r} with lora={recipe.lora}")
    pool = [s for t in trajectories for s in samples_of(t)]
    if not pool:
        raise ValueError("no trainable samples: every trajectory converged one token per iteration from its prefix")
    teaching = list({id(s.traj): s.traj for s in pool}.values())  # trajectories with something to teach
    rng = random.Random(SEED)

    def anchored(ar: torch.Tensor | float) -> torch.Tensor | float:
        if recipe.anchors and anchors:
            seqs, labels = zip(*rng.sample(anchors, recipe.anchors))
            if recipe.anchor_kind == "kl":
                ar = ar + anchor_kl(peft_model, list(seqs), pad)[0]
            else:
                ar = ar + anchor_loss(peft_model, list(seqs), list(labels), pad, recipe.smoothing)[0]
        return ar

    def cllm_step(_: int) -> dict:
        batch = rng.sample(pool, recipe.batch_size)
        ar, teachers, ar_acc = ar_and_teacher(peft_model, batch, pad, recipe.smoothing)
        ar = anchored(ar)
        cons, acc = consistency_loss(peft_model, batch, teachers, pad)
        return {"loss": cons + recipe.ar_weight * ar, "consistency": cons.item(), "ar": ar.item(),
                "after_error_acc": acc, "ar_acc": ar_acc}

    def jf_step(_: int) -> dict:
        losses, parts = [], []
        for traj in rng.sample(teaching, recipe.batch_size):
            shift = rng.randrange(recipe.window)  # block b gets level (b + shift) mod W: every block meets every level
            levels = progressive_levels(len(traj.states) + shift, recipe.window)[shift:]
            noisy, clean = noisy_blocks(traj, levels)
            loss, p = jacobi_forcing_loss(peft_model, traj.prompt, noisy, clean, recipe.ar_weight, recipe.smoothing)
            losses.append(loss)
            parts.append(p)
        anchor = anchored(0.0)  # the anchor's AR loss (0.0 without anchors)
        ar = sum(p["ar"] for p in parts) / len(parts) + (anchor.item() if torch.is_tensor(anchor) else anchor)
        positions = max(sum(p["positions"] for p in parts), 1)
        return {"loss": torch.stack(losses).mean() + recipe.ar_weight * anchor,
                "consistency": sum(p["consistency"] for p in parts) / len(parts), "ar": ar,
                "after_error_acc": sum(p["student_right"] * p["positions"] for p in parts) / positions,
                "ar_acc": sum(p["ar_right"] for p in parts) / len(parts)}

    weights = None
    if recipe.lora:
        weights = (lambda: get_peft_model_state_dict(peft_model), lambda s: set_peft_model_state_dict(peft_model, s))
    step = jf_step if recipe.objective == "jf" else cllm_step
    log = train_loop(peft_model, step, steps=recipe.steps, lr=recipe.lr, warmup=int(recipe.warmup * recipe.steps),
                     rng=rng, checkpoint=checkpoint, save_every=save_every, weights=weights, stop_after=stop_after,
                     max_seconds=max_seconds, progress=progress,
                     desc="Jacobi Forcing fine-tune" if recipe.objective == "jf" else "CLLM fine-tune")
    return peft_model, log


@torch.no_grad()  # not inference_mode: the anchors enter training's autograd graph
def text_anchors(model: PreTrainedModel, tokenizer, budget: int = 64_000, part: int = 0, seq_len: int = ANCHOR_LEN,
                 batch: int = 16) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(ids [T], greedy next tokens [T]) of text that ships with Python — half documentation prose,
    half standard-library code, ``budget`` tokens in sequences of ``seq_len`` — with the model's own
    greedy choice at every position: one forward per batch, no generation. ``part`` 0 or 1 takes every
    other document, so part 1 is held-out text for measuring perplexity."""
    from .corpus import chunk, python_docs, python_source

    seqs = chunk(tokenizer, python_docs()[part::2], seq_len, budget // 2)
    seqs += chunk(tokenizer, python_source()[part::2], seq_len, budget - sum(len(x) for x in seqs))
    seqs = [x for x in seqs if len(x) == seq_len]
    out = []
    for i in range(0, len(seqs), batch):
        ids = torch.stack(seqs[i : i + batch]).long().to(model.device)
        top = model(input_ids=ids).logits.argmax(-1).cpu()  # host: anchor data, kept with its host sequences
        out += [(x.int(), y) for x, y in zip(seqs[i : i + batch], top)]
    return out


def save_adapter(peft_model, folder: Path, log: dict, meta: dict) -> None:
    """The adapter in float16 (safetensors, ≈ 7 MB at r = 12), its config and the training log; after
    a full fine-tune (``Recipe.lora=False``) the whole model instead, as a Hugging Face folder."""
    from peft import get_peft_model_state_dict
    from safetensors.torch import save as safetensors_bytes

    folder.mkdir(parents=True, exist_ok=True)
    write_json({**meta, **log}, folder / "training-log.json")
    if not hasattr(peft_model, "peft_config"):
        peft_model.save_pretrained(str(folder))
        return
    state = {k: v.detach().half().contiguous() for k, v in get_peft_model_state_dict(peft_model).items()}
    config = peft_model.peft_config["default"]
    if str(config.base_model_name_or_path).startswith(str(cache_dir())):  # the offline target's local copy
        config.base_model_name_or_path = "HuggingFaceTB/SmolLM2-135M-Instruct"  # not this machine's path
    config.save_pretrained(str(folder))
    atomic_write(folder / "adapter_model.safetensors", safetensors_bytes(state))
