"""Consistency LLMs (Kou et al. 2024): teach the target to jump to the Jacobi fixed point.

Jacobi decoding (lesson 07) solves a block of n greedy tokens by iterating; on a normal model it fixes about one
token per iteration, because a token whose prefix is still wrong is almost never right. A CLLM is the same model
fine-tuned on its own Jacobi *trajectories* so that from any state of a trajectory it predicts the fixed point:

    trajectory of one block:   y^(0) → y^(1) → … → y^(K) = y*    (y* = the greedy output)

    L_cons = E_{state y} [ Σ_i KL( q_θ⁻(· | x, y*_<i) ‖ q_θ(· | x, y_<i) ) ]   (θ⁻: no gradient)
    L_AR   = − Σ_i log q_θ(y*_i | x, y*_<i)        (keeps the model's greedy output what it was)
    L      = L_cons + w · L_AR                      (the paper's repo: w = 10, label smoothing 0.1)

Positions whose prefix y_<i already equals y*_<i see the same input in both terms, so their KL is
zero: only the positions after the first wrong token teach anything (they are the ones masked in).

This file: trajectories (:func:`jacobi_trajectory`) and the losses (:func:`ar_and_teacher`,
:func:`consistency_loss`); no I/O. Collecting them for a prompt set (cached, resumable) is
:mod:`specdec_core.train.trajectories`, the LoRA fine-tune :mod:`specdec_core.train.cllm_finetune`,
the evaluation :mod:`specdec_core.bench.cllm_eval`. The reference run (the shipped adapter), on 2 cores::

    python -m specdec_core.train cllm collect --shard 0/2 &  python -m specdec_core.train cllm collect --shard 1/2
    python -m specdec_core.train cllm train
    python -m specdec_core.train cllm evaluate
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from .generation import common_prefix
from .jacobi import jacobi_generate

BLOCK = 16
MAX_NEW_TOKENS = 64
SEED = 0
ANCHOR_LEN = 128  # tokens of each anchor sequence


# --- trajectories --------------------------------------------------------------------------------

@dataclass
class Trajectory:
    """The Jacobi trajectory of one prompt: prompt [P] ids (chat template applied); answer [L] the greedy output
    (L ≤ blocks · n, cut at EOS); states: per block an int tensor [K+1, n]: y^(0) (the guess), y^(1), …, y^(K)
    (the fixed point)."""

    prompt: torch.Tensor
    answer: torch.Tensor
    states: list[torch.Tensor]

    def block(self, b: int) -> tuple[int, torch.Tensor]:
        """(offset of block b in the answer, its fixed point y* [≤ n], shorter if an EOS ends it)."""
        n = self.states[0].shape[1]
        return b * n, self.answer[b * n : (b + 1) * n]


def has_repeated_ngram(tokens: list[int], n: int = 10) -> bool:
    """True if some n-gram occurs twice: the repetition loops CLLM's repo drops from its data."""
    grams = [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]
    return len(set(grams)) < len(grams)


def jacobi_trajectory(model: PreTrainedModel, ids: torch.Tensor, max_new_tokens: int = MAX_NEW_TOKENS,
                      block: int = BLOCK, eos_token_id: int | None = None) -> Trajectory:
    """Run Jacobi decoding (``init="repeat"``) from prompt ids [1, P] and keep every state; the
    trajectory's tensors live on the prompt's device (save it from the CPU: ``chat_ids``' default)."""
    gen = jacobi_generate(model, ids, max_new_tokens, block_size=block, eos_token_id=eos_token_id)
    states = [torch.tensor(s, dtype=torch.int32, device=ids.device) for s in gen.stats.trajectory]
    return Trajectory(ids[0].int(), torch.tensor(gen.new_tokens, dtype=torch.int32, device=ids.device), states)


def trajectory_of(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, prompt: str,
                  max_new_tokens: int = MAX_NEW_TOKENS, block: int = BLOCK) -> Trajectory:
    """The trajectory of one chat prompt (chat template applied)."""
    from .models import chat_ids

    return jacobi_trajectory(model, chat_ids(tokenizer, prompt), max_new_tokens, block, tokenizer.eos_token_id)


# --- the losses --------------------------------------------------------------------------------------

def left_pad(seqs: list[torch.Tensor], pad: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Left-padded ids [B, T], attention mask [B, T] and position ids [B, T]: every row ends in the
    last column, so ``logits_to_keep = k`` keeps each row's last k positions."""
    T, device = max(len(s) for s in seqs), seqs[0].device
    ids = torch.full((len(seqs), T), pad, dtype=torch.long, device=device)
    mask = torch.zeros(len(seqs), T, dtype=torch.long, device=device)
    for b, s in enumerate(seqs):
        ids[b, T - len(s):] = s.long().to(device)
        mask[b, T - len(s):] = 1
    return ids, mask, (mask.cumsum(-1) - 1).clamp(min=0)


def _logits(model: PreTrainedModel, seqs: list[torch.Tensor], keep: int, pad: int) -> torch.Tensor:
    """Logits [B, keep, V] of each sequence's last ``keep`` positions (float32), padded on the model's device."""
    ids, mask, pos = left_pad([s.to(model.device) for s in seqs], pad)
    return model(input_ids=ids, attention_mask=mask, position_ids=pos, logits_to_keep=keep).logits.float()


@dataclass
class Sample:
    """One training example: a trajectory, one of its blocks, one state of that block."""

    traj: Trajectory
    block: int
    state: int

    def parts(self) -> tuple[int, torch.Tensor, torch.Tensor]:
        """(block offset in the answer, fixed point y* [L], the state cut to L tokens [L])."""
        offset, truth = self.traj.block(self.block)
        return offset, truth, self.traj.states[self.block][self.state][: len(truth)]


def samples_of(traj: Trajectory) -> list[Sample]:
    """Every (block, state) of a trajectory that can teach something: a state with at least one
    position after its first wrong token (the fixed point and states one token short of it cannot)."""
    out = []
    for b in range(len(traj.states)):
        _, truth = traj.block(b)
        for j in range(traj.states[b].shape[0]):
            if common_prefix(traj.states[b][j][: len(truth)], truth) < len(truth) - 1:
                out.append(Sample(traj, b, j))
    return out


def ar_and_teacher(model: PreTrainedModel, batch: list[Sample], pad: int, smoothing: float = 0.1
                   ) -> tuple[torch.Tensor, list[torch.Tensor], float]:
    """One pass over [prompt, greedy answer] per sample gives both
    - L_AR: cross-entropy of the answer tokens (label smoothing ``smoothing``), and
    - the teacher q_θ⁻(· | x, y*_<i) of each sample's block: log-probs [L, V], detached;
    and the AR accuracy (how often the model's argmax is still the original greedy token)."""
    answers = [s.traj.answer.long().to(model.device) for s in batch]
    L = max(len(a) for a in answers)
    seqs = [torch.cat([s.traj.prompt.long().to(a.device), a]) for s, a in zip(batch, answers)]
    logits = _logits(model, seqs, L + 1, pad)
    losses, teachers, right, total = [], [], 0, 0
    for b, (s, a) in enumerate(zip(batch, answers)):
        rows = logits[b, L - len(a) : L]  # [len(a), V]: row k predicts answer[k]
        losses.append(F.cross_entropy(rows, a, label_smoothing=smoothing, reduction="sum"))
        right += int((rows.argmax(-1) == a).sum())
        total += len(a)
        offset, truth, _ = s.parts()
        teachers.append(rows[offset : offset + len(truth)].detach().log_softmax(-1))
    return torch.stack(losses).sum() / total, teachers, right / total


def anchor_loss(model: PreTrainedModel, seqs: list[torch.Tensor], labels: list[torch.Tensor], pad: int,
                smoothing: float = 0.1) -> tuple[torch.Tensor, float]:
    """An AR loss on other text: seqs [T] each, labels [T] = the original target's greedy next token
    at every position. It keeps the fine-tuned model's greedy choices where the trajectories do not
    reach (other topics, longer contexts); returns (loss per token, accuracy)."""
    T = max(len(x) for x in seqs)
    logits = _logits(model, seqs, T, pad)
    losses, right, total = [], 0, 0
    for b, y in enumerate(labels):
        rows, y = logits[b, T - len(y) :], y.long().to(logits.device)
        losses.append(F.cross_entropy(rows, y, label_smoothing=smoothing, reduction="sum"))
        right += int((rows.argmax(-1) == y).sum())
        total += len(y)
    return torch.stack(losses).sum() / total, right / total


def anchor_kl(model, seqs: list[torch.Tensor], pad: int) -> tuple[torch.Tensor, float]:
    """KL(base ‖ fine-tuned) per token on other text, seqs [T] each. The base is the same ``peft`` model
    with its adapters switched off (one more forward, without gradients). Unlike :func:`anchor_loss`,
    which keeps only the greedy choice, it holds the whole next-token distribution where the
    trajectories do not reach — what perplexity and sampling read. Returns (loss, argmax agreement)."""
    T = max(len(x) for x in seqs)
    with torch.no_grad(), model.disable_adapter():
        base = _logits(model, seqs, T, pad).log_softmax(-1)
    student = _logits(model, seqs, T, pad).log_softmax(-1)
    kls, right, total = [], 0, 0
    for b, x in enumerate(seqs):
        p, q = base[b, T - len(x) :], student[b, T - len(x) :]  # the sequence's own rows (left padding)
        kls.append((p.exp() * (p - q)).sum())
        right += int((p.argmax(-1) == q.argmax(-1)).sum())
        total += len(x)
    return torch.stack(kls).sum() / total, right / total


def consistency_loss(model: PreTrainedModel, batch: list[Sample], teachers: list[torch.Tensor], pad: int
                     ) -> tuple[torch.Tensor, float]:
    """Global consistency loss: KL(teacher ‖ student) at the positions after the first wrong token of each state,
    averaged over those positions; and how often the student's argmax there already is the fixed point's token
    (the tokens Jacobi would fast-forward or keep stationary). Student input per sample: [prompt, answer before
    the block, state[:L-1]]; its last L rows predict the L positions of the block, row i from the (possibly
    wrong) state prefix y_<i."""
    seqs, L = [], max(len(s.parts()[1]) for s in batch)
    for s in batch:
        offset, truth, state = s.parts()
        parts = (s.traj.prompt, s.traj.answer[:offset], state[: len(truth) - 1])
        seqs.append(torch.cat([x.long().to(model.device) for x in parts]))
    logits = _logits(model, seqs, L, pad)
    kls, right, total = [], 0, 0
    for b, (s, teacher) in enumerate(zip(batch, teachers)):
        _, truth, state = s.parts()
        student = logits[b, L - len(truth) :].log_softmax(-1)  # [len(truth), V]
        kl, mask = masked_kl(teacher, student, state, truth)
        kls.append(kl.sum())
        right += int((student[mask].argmax(-1) == truth.to(mask.device)[mask].long()).sum())
        total += int(mask.sum())
    return torch.stack(kls).sum() / max(total, 1), right / max(total, 1)


def masked_kl(teacher: torch.Tensor, student: torch.Tensor, state: torch.Tensor, truth: torch.Tensor
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-position KL(teacher ‖ student) of one block, zero where it teaches nothing, and that mask. teacher,
    student: log-probs [L, V] (row i: the distribution of block position i); state, truth: the state and the
    fixed point [L]. Position i counts when its prefix state[:i] is wrong, i.e. i > (number of leading tokens of
    state equal to truth). Returns (kl [L], mask [L] bool)."""
    mask = torch.arange(len(truth), device=teacher.device) > common_prefix(state, truth)
    return forward_kl(teacher, student) * mask, mask


def forward_kl(teacher: torch.Tensor, student: torch.Tensor) -> torch.Tensor:
    """KL(teacher ‖ student) per row, from log-probs [..., V]: Σ_v p*(v) (log p*(v) − log q(v)) → [...]."""
    return (teacher.exp() * (teacher - student)).sum(-1)
