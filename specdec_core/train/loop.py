"""The one training loop of the course: the draft distillation and the CLLM fine-tune both run it.

    log = train_loop(module, step_fn, steps=1000, lr=1e-3, warmup=50, checkpoint=path, rng=gen)

Each step: set the learning rate (:func:`lr_at`: linear warm-up, then cosine decay to ``floor``·lr),
``step_fn(step)`` computes the loss (drawing its batch from ``rng``), backward, clip the gradient
norm to 1, AdamW step, and append the step's numbers to the log. With a ``checkpoint`` the trainable
weights, the optimizer, ``rng`` and the log are written atomically every ``save_every`` steps, and a
restarted run with the same number of steps resumes from them — to the same weights as a run that
was never interrupted. ``stop_after`` / ``max_seconds`` end a run early, as an interruption would.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from pathlib import Path

import torch

from ..files import torch_save
from ..progress import tqdm

StepFn = Callable[[int], dict]  # step → {"loss": scalar tensor, other metrics: floats}


def lr_at(step: int, steps: int, peak: float, warmup: int, floor: float = 0.0) -> float:
    """Learning rate at ``step`` of ``steps``: linear warm-up over ``warmup`` steps to ``peak``, then
    cosine decay from ``peak`` to ``floor · peak`` at the last step."""
    warmup = max(1, warmup)
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return peak * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress)))


def _rng_state(rng: torch.Generator | random.Random):
    return rng.get_state() if isinstance(rng, torch.Generator) else rng.getstate()


def _set_rng_state(rng: torch.Generator | random.Random, state) -> None:
    if isinstance(rng, torch.Generator):
        rng.set_state(state)
    else:
        rng.setstate(state)


def train_loop(
    module: torch.nn.Module,
    step_fn: StepFn,
    *,
    steps: int,
    lr: float,
    warmup: int,
    rng: torch.Generator | random.Random,
    floor: float = 0.0,
    weight_decay: float = 0.0,
    checkpoint: Path | None = None,
    save_every: int = 50,
    weights: tuple[Callable[[], dict], Callable[[dict], None]] | None = None,
    evaluate: Callable[[int, dict], None] | None = None,
    eval_every: int = 0,
    stop_after: int | None = None,
    max_seconds: float | None = None,
    desc: str = "training",
    progress: bool = True,
) -> dict:
    """Train the parameters of ``module`` that require a gradient; returns the log.

    The log holds a list per metric of ``step_fn`` (``loss`` included, rounded to 4 decimals),
    ``step``, and ``seconds`` (training time, summed over resumed runs). ``weights`` = (get, set) of
    the trainable state for the checkpoint (default: ``module.state_dict``). ``evaluate(step, log)``
    runs after every ``eval_every`` steps and after the last, with the module in eval mode.
    """
    get_weights, set_weights = weights or (module.state_dict, module.load_state_dict)
    opt = torch.optim.AdamW([p for p in module.parameters() if p.requires_grad], lr=lr, weight_decay=weight_decay)
    log: dict = {"step": [], "seconds": 0.0}
    start = 0
    if checkpoint is not None and checkpoint.exists():
        saved = torch.load(checkpoint, weights_only=False)
        if saved.get("steps") == steps and "weights" in saved:  # else a checkpoint of another run
            set_weights(saved["weights"])
            opt.load_state_dict(saved["opt"])
            _set_rng_state(rng, saved["rng"])
            log, start = saved["log"], saved["step"]
            print(f"{desc}: resuming from step {start} ({checkpoint})")
    t0 = time.perf_counter() - log["seconds"]
    module.train()
    bar = tqdm(desc=desc, initial=start, total=steps, disable=not progress)
    for step in range(start, steps):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, steps, lr, warmup, floor)
        out = step_fn(step)
        opt.zero_grad(set_to_none=True)
        out["loss"].backward()
        torch.nn.utils.clip_grad_norm_(module.parameters(), 1.0)
        opt.step()
        log["step"].append(step)
        for key, value in out.items():
            value = value.item() if isinstance(value, torch.Tensor) else value
            log.setdefault(key, []).append(round(value, 4) if isinstance(value, float) else value)
        if evaluate is not None and eval_every and ((step + 1) % eval_every == 0 or step + 1 == steps):
            module.eval()
            with torch.no_grad():
                evaluate(step + 1, log)
            module.train()
        log["seconds"] = time.perf_counter() - t0
        early = step + 1 == stop_after or (max_seconds is not None and log["seconds"] > max_seconds)
        if checkpoint is not None and step + 1 < steps and ((step + 1) % save_every == 0 or early):
            torch_save({"weights": get_weights(), "opt": opt.state_dict(), "rng": _rng_state(rng), "log": log,
                        "step": step + 1, "steps": steps}, checkpoint)
        bar.update()
        if early:  # the bar ends where the run did, and says why (a stored notebook shows it finished)
            bar.set_description(f"{desc} (stopped after step {step + 1} of {steps}: "
                                f"{'stop_after' if step + 1 == stop_after else f'the {max_seconds:g} s budget'})")
            bar.total = step + 1
            break
    bar.close()
    module.eval()
    if checkpoint is not None and log["step"] and log["step"][-1] + 1 == steps:
        checkpoint.unlink(missing_ok=True)  # finished: nothing to resume
    return log
