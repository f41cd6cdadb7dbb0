"""Medusa heads (Cai et al. 2024, arXiv:2401.10774): k extra output heads on the target's last hidden state.

The feature head (:mod:`specdec_core.feature_drafter`) runs its own little decoder block once per guess.
Medusa asks less: the target's last hidden state h_t (after its final norm: what the output layer reads)
already says something about the tokens after next. Head i (i = 1 … k) reads the same h_t and guesses the
token at t + i + 1 — all k guesses from ONE small matrix product, no recurrence, no own KV cache:

    h_i = h_t + SiLU(W_i h_t + b_i)                  (one residual block per head, d × d)
    q_i(x_{t+i+1}) = softmax( h_i · W_out[S]ᵀ )      (the target's own frozen output rows, FR-Spec's S)

No final norm on top: h_t is already normalised, and with W_i = 0 (the initialisation) head i starts as the
target's own output layer. The target's lm_head(h_t) gives token t + 1 itself: the verify's bonus.

Which h_t: the hidden state at the LAST position the target has run (the cache holds the context but its
last token; ``observe`` brings the rows of the accepted tokens after every verify, as for the feature head).
Head i then guesses context position m + i + 1, so head 1 guesses the first token after the context.

Two drafters, both exact:

- :class:`MedusaDrafter` chain: guess i is head i's argmax (greedy) or a draw from its q_i (sampled), with q_i
  returned, so the course's accept / residual rule (:mod:`specdec_core.accept`) keeps the target's law. q_i does
  not depend on the earlier guesses — allowed: the rule only needs each guess drawn from the q it is given.
- :meth:`MedusaDrafter.propose_tree`: Medusa's tree. A node of depth d and sibling rank r holds head d's r-th
  likeliest token; the topology (which rank paths to keep within a node budget) comes from the course's shape
  chooser, as Medusa's calibrated ``medusa_choices`` come from per-head top-k accuracies. Candidates are
  deterministic, so the course's exact tree verify (:func:`specdec_core.tree.accept`, "topk" rule) checks them.

Why not Medusa's *typical acceptance* (accept x when p(x) > min(ε, δ·exp(−H(p)))): it keeps any token the target
finds plausible enough and never samples a residual, so the output is no longer distributed as the target's
samples (at T > 0 it over-weights the likely tokens; it is a different sampler, not speculative sampling).
The course's rule is exact at every temperature, which its tests check (greedy equality, χ²).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from safetensors.torch import save as safetensors_bytes
from torch import nn
from transformers import PreTrainedModel

from . import assets
from .drafters import Drafter
from .files import atomic_write
from .frspec import kept_guess
from .precision import output_rows
from .sampling import Warp
from .tree import Tree
from .tree_shapes import Topology, node_depths

MEDUSA_FILE = assets.DRAFTS / "medusa-heads.safetensors"  # the offline target's shipped heads
TRAIN_COMMAND = "python -m specdec_core.train draft --kind medusa"


class MedusaHeads(nn.Module):
    """k residual blocks on one hidden state, all k computed by ONE linear d → k·d.

    Shapes: ``h`` [..., d] → [..., k, d] (row i - 1: head i's input to the output layer)."""

    def __init__(self, d: int, k: int = 3) -> None:
        super().__init__()
        if k < 1:
            raise ValueError(f"Medusa needs k >= 1 heads, got {k}")
        self.d, self.k = d, k
        self.proj = nn.Linear(d, k * d)  # [W_1; …; W_k] stacked: head i is rows (i-1)·d … i·d
        nn.init.zeros_(self.proj.weight)  # every head starts as the target's own output layer
        nn.init.zeros_(self.proj.bias)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        """h [..., d] → h + SiLU(W_i h + b_i) for i = 1 … k, [..., k, d]."""
        return h.unsqueeze(-2) + F.silu(self.proj(h).unflatten(-1, (self.k, self.d)))

    def config(self) -> dict:
        return {"d": self.d, "k": self.k}


def save_heads(path: Path, heads: MedusaHeads, vocab_ids: torch.Tensor, meta: dict | None = None) -> None:
    """Write the heads (fp16) and their output token set S [S] to one safetensors file (atomically)."""
    tensors = {k: v.detach().half().contiguous() for k, v in heads.state_dict().items()}
    tensors["vocab_ids"] = vocab_ids.int().contiguous()
    info = {"config": heads.config(), **(meta or {})}
    atomic_write(path, safetensors_bytes(tensors, metadata={"specdec": json.dumps(info)}))


def read_heads(path: Path) -> tuple[MedusaHeads, torch.Tensor, dict]:
    """Inverse of :func:`save_heads`: ``(heads in fp32, vocab_ids [S], metadata)``; a missing file is an
    error that says which command trains them."""
    from safetensors import safe_open

    assets.shipped(Path(path), "Medusa heads file", remake=TRAIN_COMMAND)
    with safe_open(str(path), "pt") as f:
        info = json.loads(f.metadata()["specdec"])
    tensors = load_file(str(path))
    vocab_ids = tensors.pop("vocab_ids").long()
    heads = MedusaHeads(**info["config"])
    heads.load_state_dict({k: v.float() for k, v in tensors.items()})
    return heads.eval(), vocab_ids, info


def load_heads(pair, path: Path = MEDUSA_FILE) -> MedusaDrafter:
    """The shipped Medusa heads as a drafter for ``pair``'s target (a :class:`~specdec_core.models.Pair`; the
    offline preset only: the heads read that model's hidden states)."""
    if getattr(pair, "preset", None) != "offline":
        raise ValueError(f"the Medusa heads ship for the offline target only (they read its hidden states), not for "
                         f"{getattr(pair, 'preset', pair)!r}: train heads for another target with {TRAIN_COMMAND}")
    heads, vocab_ids, _ = read_heads(path)
    return MedusaDrafter(pair.target, heads, vocab_ids)


class MedusaDrafter(Drafter):
    """The :class:`~specdec_core.drafters.Drafter` for :class:`MedusaHeads`: a chain (:meth:`propose`) or
    Medusa's tree (:meth:`propose_tree`), both from the target's last hidden state (``observe``)."""

    wants_hidden = True  # the loops pass the target's last hidden states of accepted rows to observe()

    def __init__(self, target: PreTrainedModel, heads: MedusaHeads, vocab_ids: torch.Tensor) -> None:
        device = target.get_input_embeddings().weight.device
        self.vocab_size = target.config.vocab_size
        self.vocab_ids = vocab_ids.to(device)  # [S] FR-Spec's output set
        self.w_out = output_rows(target)[self.vocab_ids].detach().float()  # [S, d], frozen
        self.heads = heads.to(device).eval()

    @property
    def k(self) -> int:
        return self.heads.k

    def begin(self, warp: Warp, generator: torch.Generator | None) -> None:
        super().begin(warp, generator)
        self.seen, self.last = 0, None  # positions observed; h at the newest one [d]

    @torch.inference_mode()
    def observe(self, hidden: torch.Tensor) -> None:
        """The target's last hidden states of the next n context positions [n, d]: only the newest is kept."""
        self.seen += hidden.shape[0]
        self.last = hidden[-1].float()

    @torch.inference_mode()
    def logits(self, context: torch.Tensor) -> torch.Tensor | None:
        """Every head's logits over S [k, S] for the tokens after ``context`` [1, T] (None before any
        hidden state: a one-token prompt has no position the target ran)."""
        if self.last is None:
            return None
        if context.shape[1] != self.seen + 1:
            raise RuntimeError(f"the drafter saw hidden states for {self.seen} positions but the context has "
                               f"{context.shape[1]} tokens: call observe() after every target pass")
        self.calls += 1
        return self.heads(self.last) @ self.w_out.T  # [k, S]

    def propose(self, context: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Up to min(k, heads) guesses: head i's argmax, or a draw from its warped q_i (q_i [V], 0 outside S)."""
        logits = self.logits(context)
        if logits is None or k < 1:
            empty = torch.empty(0, dtype=torch.long, device=context.device)
            return empty, torch.empty(0, self.vocab_size, device=context.device)
        guesses = [kept_guess(row, self.vocab_ids, self.warp, self.generator, self.vocab_size, self.greedy)
                   for row in logits[: min(k, self.k)]]
        tokens = torch.stack([token for _, token in guesses]).to(context.device)
        return tokens, None if self.greedy else torch.stack([q for q, _ in guesses]).to(context.device)

    def propose_tree(self, context: torch.Tensor, topology: Topology) -> Tree:
        """Medusa's tree for ``topology``: node (parent, rank r) at depth d holds head d's r-th likeliest token
        over S. Nodes deeper than k are left out (no head guesses there); deterministic → the "topk" rule."""
        logits = self.logits(context)
        depths = node_depths([p for p, _ in topology])
        keep = [i for i, d in enumerate(depths) if d <= self.k] if logits is not None else []
        if not keep:
            return Tree(torch.empty(0, dtype=torch.long, device=context.device), [], None, "topk")
        ranked = logits.topk(max(topology[i][1] for i in keep) + 1, dim=-1).indices  # [k, R] indices into S
        new = {old: n for n, old in enumerate(keep)}  # an ancestor of a kept node is shallower: kept too
        rows = torch.tensor([depths[i] - 1 for i in keep], device=ranked.device)  # the head of each node
        ranks = torch.tensor([topology[i][1] for i in keep], device=ranked.device)
        parents = [new[topology[i][0]] if topology[i][0] >= 0 else -1 for i in keep]
        return Tree(self.vocab_ids[ranked[rows, ranks]].to(context.device), parents, None, "topk")

    def accepted_path(self, path: list[int]) -> None:
        pass  # no state: observe() brings the accepted rows' hidden states
