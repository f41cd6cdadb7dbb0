"""Jacobi Forcing (Hu, Kou et al. 2025, arXiv:2512.14681): the CLLM objective with noisy context.

A CLLM (:mod:`specdec_core.cllm`) learns to jump from a state of ONE block to its fixed point, always with a clean
prefix. At decoding time with several blocks in flight the earlier blocks are still noisy, and a large block is
mostly noise at first. Jacobi Forcing packs all blocks of an answer into one training sequence, each at its own
*noise level*, and trains each noisy block to predict its fixed point while it sees the earlier blocks noisy too:

    noise level of a state    the share of its tokens that differ from the fixed point
    progressive schedule      block b gets the level (b mod W + 1) / W: easy to hard, again every W blocks
    packed sequence           [prompt, noisy_1 … noisy_B, clean_1 … clean_B]      (clean_b = y*_b)
    noise-aware mask          noisy_b sees the prompt, noisy_<b and itself (causally);
                              clean_b sees the prompt, clean_<b and itself (causally)
    position ids              noisy_b and clean_b sit at the same positions

One forward pass then gives both the student (the noisy rows: q_θ(· | x, noisy prefix)) and the
teacher and AR rows (the clean rows: q_θ⁻(· | x, y*_<i)):

    L = Σ_noisy positions KL(teacher ‖ student) / #noisy positions  +  λ · CE(clean rows, y*)

A position counts as noisy when its context in the noisy copy differs from the clean one (some earlier
answer token is wrong) — with one block this is CLLM's mask (:func:`specdec_core.cllm.masked_kl`).
The row that predicts position 0 of block b is the last row of block b − 1 (of the prompt for b = 0),
so the first position of a block is taught from a noisy context too. This file holds the schedule, the
packing, the mask and the loss; :mod:`specdec_core.train.cllm_finetune` trains with them.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers import PreTrainedModel

from .cllm import Trajectory, forward_kl
from .lm import additive  # noqa: F401  (jf.additive: the mask as the model takes it)


def noise_level(state: torch.Tensor, truth: torch.Tensor) -> float:
    """The share of the state's tokens [L] that differ from the fixed point's [L] (0: converged)."""
    return float((state[: len(truth)] != truth).float().mean()) if len(truth) else 0.0


def progressive_levels(n_blocks: int, window: int) -> list[float]:
    """Target noise levels for ``n_blocks`` blocks: 1/W, 2/W, …, 1 within each window of W blocks, so
    a sequence cycles from easy to hard instead of holding long stretches of pure noise."""
    if window < 1:
        raise ValueError(f"window must be >= 1 block, got {window}")
    return [(b % window + 1) / window for b in range(n_blocks)]


def pick_state(states: torch.Tensor, truth: torch.Tensor, level: float) -> torch.Tensor:
    """The state of one block's trajectory ([K+1, n] ids, y^(0) … y*) whose noise level is closest to
    ``level`` (the earliest on a tie), cut to the fixed point's length."""
    levels = [noise_level(s, truth) for s in states]
    best = min(range(len(levels)), key=lambda j: (abs(levels[j] - level), j))
    return states[best][: len(truth)]


def noisy_blocks(traj: Trajectory, levels: list[float]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """One training sequence of a trajectory: (noisy states, fixed points), one [n_b] pair per block,
    block b's state the one closest to ``levels[b]`` (blocks past the answer's end are left out)."""
    noisy, clean = [], []
    for b, level in zip(range(len(traj.states)), levels):
        _, truth = traj.block(b)
        if len(truth) == 0:
            break
        noisy.append(pick_state(traj.states[b], truth, level))
        clean.append(truth)
    return noisy, clean


def noise_aware_mask(prompt_len: int, lengths: list[int], device: torch.device | str | None = None) -> torch.Tensor:
    """Which position may attend to which, for [prompt, noisy blocks, clean blocks]: bool [S, S]
    (True = may attend), S = prompt_len + 2 · Σ lengths. Noisy rows never see clean tokens and clean
    rows never see noisy ones; within its own copy each position sees what a causal model would."""
    total = sum(lengths)
    S = prompt_len + 2 * total
    copy = torch.full((S,), -1, device=device)  # -1: the prompt (shared), 0: the noisy copy, 1: the clean copy
    copy[prompt_len : prompt_len + total], copy[prompt_len + total :] = 0, 1
    position = packed_positions(prompt_len, lengths, device)
    causal = position[None, :] <= position[:, None]  # by position, not by index: the copies interleave
    same_copy = (copy[None, :] == copy[:, None]) | (copy[None, :] == -1)
    return causal & same_copy


def packed_positions(prompt_len: int, lengths: list[int], device: torch.device | str | None = None) -> torch.Tensor:
    """Position ids [S] of [prompt, noisy blocks, clean blocks]: both copies of a block share them."""
    answer = torch.arange(prompt_len, prompt_len + sum(lengths), device=device)
    return torch.cat([torch.arange(prompt_len, device=device), answer, answer])


def pack(prompt: torch.Tensor, noisy: list[torch.Tensor], clean: list[torch.Tensor]
         ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The packed training sequence: (ids [1, S], position ids [1, S], attention mask [1, 1, S, S] bool),
    all on the prompt's device."""
    lengths = [len(c) for c in clean]
    if [len(x) for x in noisy] != lengths:
        raise ValueError(f"each noisy block needs its clean block's length: {[len(x) for x in noisy]} vs {lengths}")
    device = prompt.device
    ids = torch.cat([prompt.long(), *(x.long().to(device) for x in noisy), *(c.long().to(device) for c in clean)])[None]
    mask = noise_aware_mask(len(prompt), lengths, device)
    return ids, packed_positions(len(prompt), lengths, device)[None], mask[None, None]


def jacobi_forcing_loss(model: PreTrainedModel, prompt: torch.Tensor, noisy: list[torch.Tensor],
                        clean: list[torch.Tensor], ar_weight: float = 1.0, smoothing: float = 0.0
                        ) -> tuple[torch.Tensor, dict]:
    """L = mean KL(teacher ‖ student) over the noisy positions + ar_weight · CE(clean rows, y*), from ONE forward
    over the packed sequence. prompt [P]; noisy, clean: per block [n_b] ids (clean = the fixed points). Returns
    (loss, {"consistency", "ar", "student_right", "positions", "ar_right"}): student_right is how often the noisy
    rows' argmax there already is the fixed point's token (what Jacobi decoding fast-forwards); positions, how many
    positions were noisy; ar_right, how often the clean rows' argmax is still the greedy answer's token."""
    device = model.device
    ids, positions, mask = pack(prompt.to(device), noisy, clean)  # built on the model's device
    logits = model(input_ids=ids, position_ids=positions, attention_mask=additive(mask, model.dtype)).logits[0].float()
    P, L = len(prompt), sum(len(c) for c in clean)
    truth = ids[0, P + L :]  # [L]: the clean copy
    # the row before each answer position: the prompt's last row, then the copy's own rows
    student_rows = torch.cat([logits[P - 1 : P], logits[P : P + L - 1]])  # [L, V]
    clean_rows = torch.cat([logits[P - 1 : P], logits[P + L : P + 2 * L - 1]])  # [L, V]
    teacher = clean_rows.detach().log_softmax(-1)
    student = student_rows.log_softmax(-1)
    # position k is noisy when some answer token before it differs: a cumulative "wrong so far"
    wrong = (ids[0, P : P + L] != truth).long()  # the noisy copy against it
    noisy_context = (wrong.cumsum(0) - wrong) > 0  # [L]
    count = max(int(noisy_context.sum()), 1)
    kl = (forward_kl(teacher, student) * noisy_context).sum() / count
    ar = F.cross_entropy(clean_rows, truth, label_smoothing=smoothing)
    loss = kl + ar_weight * ar
    right = (student_rows.argmax(-1) == truth) & noisy_context
    parts = {"consistency": kl.item(), "ar": ar.item(), "student_right": int(right.sum()) / count,
             "positions": int(noisy_context.sum()), "ar_right": (clean_rows.argmax(-1) == truth).float().mean().item()}
    return loss, parts
