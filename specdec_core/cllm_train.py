"""The CLLM fine-tune: LoRA adapters trained with the consistency and AR losses of :mod:`cllm`.

Each step draws ``batch_size`` random (trajectory, block, state) samples and runs two passes of the
model: one over [prompt, greedy answer] (the AR loss, and — detached — the teacher distributions at
the fixed point) and one over [prompt, answer before the block, state] (the student). On the offline
target one step of 4 samples (+ 1 anchor) takes ≈ 3.7 s on 2 cores (the reference run: 600 steps, 37 min). The
adapter ships in float16 in ``specdec_core/drafts/cllm``; :func:`load_cllm` merges it into a copy of
the target.
"""

from __future__ import annotations

import json
import math
import random
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm.auto import tqdm
from transformers import PreTrainedModel

from .assets import cache_dir
from .cllm import SEED, Trajectory, anchor_loss, ar_and_teacher, consistency_loss, samples_of
from .distill_data import atomic_save

ADAPTER_DIR = Path(__file__).parent / "drafts" / "cllm"  # the shipped reference adapter

LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def with_lora(model: PreTrainedModel, r: int = 12, alpha: int = 24):
    """The model wrapped by ``peft`` with LoRA adapters on every linear layer of every block (no
    dropout: teacher and student must be the same function)."""
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(r=r, lora_alpha=alpha, lora_dropout=0.0, target_modules=LORA_TARGETS, task_type="CAUSAL_LM")
    return get_peft_model(model, config)


@dataclass
class Recipe:
    """The reference run's settings (``python -m specdec_core.cllm train`` uses these)."""

    steps: int = 600
    batch_size: int = 4
    lr: float = 1e-3  # LoRA takes a larger rate than the paper's full fine-tune (2e-5)
    ar_weight: float = 10.0
    smoothing: float = 0.1
    warmup: float = 0.03
    r: int = 12
    alpha: int = 24
    lora: bool = True  # False: a full fine-tune (every weight trains; for a GPU)
    anchors: int = 1  # anchor sequences per step (other text, AR loss on the target's greedy choices)


def lr_at(step: int, recipe: Recipe) -> float:
    """Linear warm-up, then cosine decay to zero (the paper's schedule)."""
    warm = max(1, int(recipe.warmup * recipe.steps))
    if step < warm:
        return recipe.lr * (step + 1) / warm
    return recipe.lr * 0.5 * (1 + math.cos(math.pi * (step - warm) / max(1, recipe.steps - warm)))


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
    from peft import get_peft_model_state_dict, set_peft_model_state_dict

    recipe = recipe or Recipe()
    if hasattr(model, "peft_config"):
        peft_model = model
    elif recipe.lora:
        torch.manual_seed(SEED)  # the LoRA initialisation
        peft_model = with_lora(model, recipe.r, recipe.alpha)
    else:
        peft_model = model.requires_grad_(True)
    pool = [s for t in trajectories for s in samples_of(t)]
    if not pool:
        raise ValueError("no trainable samples: every trajectory converged one token per iteration from its prefix")
    opt = torch.optim.AdamW([p for p in peft_model.parameters() if p.requires_grad], lr=recipe.lr, weight_decay=0.0)
    rng = random.Random(SEED)
    log = {"step": [], "loss": [], "consistency": [], "ar": [], "after_error_acc": [], "ar_acc": [], "seconds": 0.0}
    start = 0
    if checkpoint is not None and checkpoint.exists():
        saved = torch.load(checkpoint, weights_only=False)
        if recipe.lora:
            set_peft_model_state_dict(peft_model, saved["adapter"])
        else:
            peft_model.load_state_dict(saved["adapter"])
        opt.load_state_dict(saved["opt"])
        rng.setstate(saved["rng"])
        log, start = saved["log"], saved["step"]
    t0 = time.perf_counter() - log["seconds"]
    peft_model.train()
    for step in tqdm(range(start, recipe.steps), desc="CLLM fine-tune", initial=start, total=recipe.steps,
                     disable=not progress):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, recipe)
        batch = rng.sample(pool, recipe.batch_size)
        ar, teachers, ar_acc = ar_and_teacher(peft_model, batch, pad, recipe.smoothing)
        if recipe.anchors and anchors:
            seqs, labels = zip(*rng.sample(anchors, recipe.anchors))
            ar = ar + anchor_loss(peft_model, list(seqs), list(labels), pad, recipe.smoothing)[0]
        cons, acc = consistency_loss(peft_model, batch, teachers, pad)
        loss = cons + recipe.ar_weight * ar
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(peft_model.parameters(), 1.0)
        opt.step()
        for key, value in (("step", step), ("loss", loss.item()), ("consistency", cons.item()), ("ar", ar.item()),
                           ("after_error_acc", acc), ("ar_acc", ar_acc)):
            log[key].append(round(value, 4) if isinstance(value, float) else value)
        log["seconds"] = time.perf_counter() - t0
        early = step + 1 == stop_after or (max_seconds is not None and log["seconds"] > max_seconds)
        if checkpoint is not None and ((step + 1) % save_every == 0 or early) and step + 1 < recipe.steps:
            trained = get_peft_model_state_dict(peft_model) if recipe.lora else peft_model.state_dict()
            atomic_save({"adapter": trained, "opt": opt.state_dict(),
                         "rng": rng.getstate(), "log": log, "step": step + 1}, checkpoint)
        if early:
            break
    peft_model.eval()
    if checkpoint is not None and log["step"] and log["step"][-1] + 1 == recipe.steps:
        checkpoint.unlink(missing_ok=True)
    return peft_model, log


def save_adapter(peft_model, folder: Path, log: dict, meta: dict) -> None:
    """The adapter in float16 (safetensors, ≈ 7 MB at r = 12), its config and the training log; after
    a full fine-tune (``Recipe.lora=False``) the whole model instead, as a Hugging Face folder."""
    from peft import get_peft_model_state_dict
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "training-log.json").write_text(json.dumps({**meta, **log}))
    if not hasattr(peft_model, "peft_config"):
        peft_model.save_pretrained(str(folder))
        return
    state = {k: v.detach().half().contiguous() for k, v in get_peft_model_state_dict(peft_model).items()}
    config = peft_model.peft_config["default"]
    if str(config.base_model_name_or_path).startswith(str(cache_dir())):  # the offline target's local copy
        config.base_model_name_or_path = "HuggingFaceTB/SmolLM2-135M-Instruct"  # not this machine's path
    config.save_pretrained(str(folder))
    save_file(state, str(folder / "adapter_model.safetensors.tmp"))
    (folder / "adapter_model.safetensors.tmp").replace(folder / "adapter_model.safetensors")


def load_cllm(base: PreTrainedModel | None = None, folder: Path = ADAPTER_DIR) -> PreTrainedModel:
    """The CLLM: a fresh copy of the offline target (or ``base``, changed in place) with the adapter
    merged into its weights — a plain model again, as fast as the original. A folder written by a
    full fine-tune holds the whole model: it is loaded as it is."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from .models import PRESETS, _shipped, load_model

    if (folder / "config.json").exists():
        return AutoModelForCausalLM.from_pretrained(str(folder)).eval()
    _shipped(folder / "adapter_model.safetensors", "CLLM adapter", "python -m specdec_core.cllm train")
    base = base if base is not None else load_model(PRESETS["offline"].target, "cpu")
    return PeftModel.from_pretrained(base, str(folder)).merge_and_unload().eval()


