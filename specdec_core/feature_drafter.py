"""An EAGLE-style feature drafter (Li et al. 2024), with an FR-Spec reduced output layer (Zhao et al. 2025).

A standalone draft must rediscover, with a few layers, what the target computes with thirty. EAGLE
instead reuses the target's own work: the target's last hidden state f_t (its "feature", what the
output layer reads) already says a lot about the next feature. The draft is ONE decoder block that
predicts the next feature from the current one and the token that comes next:

    f̂_{t+1} = Block( fc([embed(x_{t+1}); f_t]) )          (attending to all earlier positions)
    q(x_{t+2}) = softmax( f̂_{t+1} · W_head[S]ᵀ )            (the target's own, frozen output layer)

The first guess is made from real features; each further guess feeds the draft's own prediction back
in place of the missing f. Every verify pass gives the drafter the target's real features for the
accepted tokens (``observe``), and the guesses' features are forgotten.

FR-Spec (:mod:`specdec_core.frspec`): the output layer is restricted to the set S of the most
frequent tokens (8,192 of 49,152), six times less work per guess. The draft then gives q = 0 outside
S; rejection sampling still makes the output exactly the target's — a token outside S is never guessed.
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

from .drafters import Drafter
from .fast import is_twin, twin
from .files import atomic_write
from .frspec import kept_guess
from .kv_static import BUCKET
from .precision import output_rows
from .sampling import Warp
from .tree import Tree
from .tree_drafters import dynamic_tree
from .tree_shapes import Topology, depth_of


def rope(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """Rotary position embedding of x [B, H, T, D] at integer ``positions`` [T]."""
    half = x.shape[-1] // 2
    freqs = base ** (-torch.arange(half, device=x.device, dtype=torch.float32) / half)  # [D/2]
    angles = positions.float()[:, None] * freqs[None]  # [T, D/2]
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


class KVCache:
    """Keys and values of the rows run so far, [1, H, n, D] each; ``crop`` forgets the tail. Keys are
    stored already rotated, so a row keeps the position it ran at (explicit positions and a tree mask
    in :meth:`FeatureHead.forward`: slots need not be one sequence).

    ``static``: the static engine's layout (:class:`~specdec_core.lm.Decoder`'s): preallocated slots
    [1, H, capacity, D] (zeros past the length, which the head's mask hides), written in place; ``crop``
    moves the length; a full buffer grows by :data:`~specdec_core.kv_static.BUCKET` slots (a copy, rare)."""

    def __init__(self, static: bool = False) -> None:
        self.k: torch.Tensor | None = None
        self.v: torch.Tensor | None = None
        self.static, self.n = static, 0

    @property
    def length(self) -> int:
        return self.n

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Add T rows k, v [1, H, T, D]; returns every slot's keys and values [1, H, slots, D]."""
        if not self.static:
            self.k = k if self.k is None else torch.cat([self.k, k], dim=2)
            self.v = v if self.v is None else torch.cat([self.v, v], dim=2)
        else:
            end = self.n + k.shape[2]
            if self.k is None or end > self.k.shape[2]:  # allocate, or grow into a larger buffer
                size = -(-end // BUCKET) * BUCKET
                grown = [x.new_zeros(*x.shape[:2], size, x.shape[3]) for x in (k, v)]
                if self.k is not None:
                    grown[0][:, :, : self.n], grown[1][:, :, : self.n] = self.k[:, :, : self.n], self.v[:, :, : self.n]
                self.k, self.v = grown
            self.k[:, :, self.n : end], self.v[:, :, self.n : end] = k, v
        self.n += k.shape[2]
        return self.k, self.v

    def crop(self, length: int) -> None:
        self.n = min(self.n, length)
        if self.k is not None and not self.static:
            self.k, self.v = self.k[:, :, :length], self.v[:, :, :length]


class FeatureHead(nn.Module):
    """fc over [token embedding; feature] → one pre-norm transformer block → RMSNorm → next feature.

    ``layers``: the target's hidden states the head reads (indices into ``hidden_states``): (-1,),
    the last layer after the final norm (EAGLE-1), or a low, a middle and a high layer (EAGLE-3),
    which :meth:`fuse` projects from [·, 3d] to one d-wide feature. The head's own predictions are
    d wide and feed back without the projection.

    Shapes: ``emb`` and ``feat`` [B, T, d] → [B, T, d]. The final norm starts as the target's own
    final norm, since the target's features are normalised outputs.
    """

    def __init__(self, d: int = 576, n_heads: int = 9, ffn: int = 1536, layers: tuple[int, ...] = (-1,)) -> None:
        super().__init__()
        self.d, self.n_heads, self.ffn, self.layers = d, n_heads, ffn, tuple(layers)
        self.fuser = nn.Linear(len(self.layers) * d, d, bias=False) if len(self.layers) > 1 else None
        self.fc = nn.Linear(2 * d, d)
        self.norm1, self.norm2, self.norm_out = nn.RMSNorm(d, eps=1e-5), nn.RMSNorm(d, eps=1e-5), nn.RMSNorm(d, eps=1e-5)
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.proj = nn.Linear(d, d, bias=False)
        self.gate_up = nn.Linear(d, 2 * ffn, bias=False)
        self.down = nn.Linear(ffn, d, bias=False)

    def fuse(self, hidden: torch.Tensor) -> torch.Tensor:
        """The target's hidden states at ``layers`` [..., len(layers) · d] → one feature [..., d]."""
        return hidden if self.fuser is None else self.fuser(hidden)

    def forward(self, emb: torch.Tensor, feat: torch.Tensor, start: int = 0, cache: KVCache | None = None,
                mask: torch.Tensor | None = None, positions: torch.Tensor | None = None) -> torch.Tensor:
        """emb, feat [B, T, d] → the next features [B, T, d]. ``mask`` [T, past + T] (True = attend)
        replaces the causal mask over [cached | new]: the training-time test (train/eagle.py) lets each
        unrolled step see only its own chain, a token tree lets each node see its ancestors only.
        ``positions`` [T]: the rotary position of each new row (default ``start, start + 1, …``); the
        nodes of one tree depth share one position (prefix length + depth), as in the target's verify."""
        B, T, d = emb.shape
        h = self.fc(torch.cat([emb, feat], dim=-1))
        q, k, v = self.qkv(self.norm1(h)).view(B, T, 3, self.n_heads, d // self.n_heads).permute(2, 0, 3, 1, 4)
        if positions is None:
            positions = torch.arange(start, start + T, device=emb.device)
        elif positions.shape != (T,):
            raise ValueError(f"positions must be [T] = [{T}], got {tuple(positions.shape)}")
        positions = positions.to(emb.device)
        q, k = rope(q, positions), rope(k, positions)
        if cache is not None:
            k, v = cache.append(k, v)
        past = (k.shape[2] if cache is None else cache.length) - T
        hidden = k.shape[2] - past - T  # a static cache's slots past its length
        # Causal mask over [past | new]: new position i sees every cached position and new ones <= i.
        if mask is None and (T > 1 or hidden):
            mask = torch.ones(T, past + T, dtype=torch.bool, device=emb.device).tril(past)
        elif mask is not None:
            if mask.shape != (T, past + T):
                raise ValueError(f"{T} new rows on {past} cached ones need a mask [{T}, {past + T}], got {tuple(mask.shape)}")
            mask = mask.to(emb.device)
        if hidden:
            mask = torch.cat([mask, mask.new_zeros(T, hidden)], dim=1)
        att = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # [B, H, T, D]
        h = h + self.proj(att.transpose(1, 2).reshape(B, T, d))
        gate, up = self.gate_up(self.norm2(h)).chunk(2, dim=-1)
        h = h + self.down(F.silu(gate) * up)
        return self.norm_out(h)

    def config(self) -> dict:
        return {"d": self.d, "n_heads": self.n_heads, "ffn": self.ffn, "layers": list(self.layers)}


def save_head(path: Path, head: FeatureHead, vocab_ids: torch.Tensor, meta: dict | None = None) -> None:
    """Write the head (fp16) and its output token set to one safetensors file, config in its metadata."""
    tensors = {k: v.detach().half().contiguous() for k, v in head.state_dict().items()}
    tensors["vocab_ids"] = vocab_ids.int().contiguous()
    info = {"config": head.config(), **(meta or {})}
    atomic_write(path, safetensors_bytes(tensors, metadata={"specdec": json.dumps(info)}))


def load_head(path: Path) -> tuple[FeatureHead, torch.Tensor, dict]:
    """Inverse of :func:`save_head`: ``(head in fp32, vocab_ids [S], metadata)``."""
    from safetensors import safe_open

    with safe_open(str(path), "pt") as f:
        info = json.loads(f.metadata()["specdec"])
    tensors = load_file(str(path))
    vocab_ids = tensors.pop("vocab_ids").long()
    head = FeatureHead(**info["config"])
    head.load_state_dict({k: v.float() for k, v in tensors.items()})
    return head.eval(), vocab_ids, info


class FeatureDrafter(Drafter):
    """The :class:`~specdec_core.drafters.Drafter` for a :class:`FeatureHead`.

    ``wants_hidden`` tells ``speculative_generate`` to pass the target's hidden states at the head's
    ``layers`` to ``observe`` after the prefill and after each verify (only the rows of accepted tokens).
    """

    wants_hidden = True

    def __init__(self, target: PreTrainedModel, head: FeatureHead, vocab_ids: torch.Tensor, top_k: int | None = None) -> None:
        """``top_k``: candidates per expanded node and nodes expanded per depth of the dynamic tree
        (:meth:`propose_tree`; None: the widest sibling rank of the topology it is asked to fill)."""
        self.top_k = top_k
        self.calibration: list[tuple[float, bool]] | None = None  # a list: accepted_path records into it
        self.embed = target.get_input_embeddings()
        self.vocab_size = target.config.vocab_size
        device = self.embed.weight.device
        self.vocab_ids = vocab_ids.to(device)  # [S] the reduced output set (FR-Spec)
        self.w_out = output_rows(target)[self.vocab_ids].detach().float()  # [S, d]
        out = nn.Linear(self.w_out.shape[1], self.w_out.shape[0], bias=False, device=device)
        out.weight = nn.Parameter(self.w_out, requires_grad=False)
        # On a fast (prepacked) target, the head and its S output rows are prepacked too (fast.twin)
        self.head, self.out = (twin(head.to(device)), twin(out)) if is_twin(target) else (head.to(device), out)
        self.hidden_layers = head.layers
        self.static = getattr(target, "static_engine", False)  # the head's cache on the target's engine

    def begin(self, warp: Warp, generator: torch.Generator | None) -> None:
        super().begin(warp, generator)
        self.cache = KVCache(static=self.static)
        self.features = torch.empty(0, self.head.d, device=self.w_out.device)  # real f_0..f_m

    @torch.inference_mode()
    def observe(self, hidden: torch.Tensor) -> None:
        """Append the target's features for the next n positions of the context: its hidden states at
        the head's layers [n, len(layers) · d], fused to [n, d]."""
        self.features = torch.cat([self.features, self.head.fuse(hidden.float())])

    def _guess(self, feature: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor]:
        """One guess from a predicted feature [d]: (q [V], the token drawn from it), with every
        vocabulary-sized step done on the S kept tokens only (:func:`~specdec_core.frspec.kept_guess`);
        q is 0 outside S. Greedy: (None, the argmax over S)."""
        return kept_guess(self.out(feature), self.vocab_ids, self.warp, self.generator, self.vocab_size, self.greedy)

    def _run(self, tokens: torch.Tensor, feats: torch.Tensor) -> torch.Tensor:
        """Run pairs (feature f_j, token x_{j+1}) on top of the cache: tokens [n], feats [n, d] → [n, d]."""
        self.calls += 1
        emb = self.embed(tokens.view(1, -1)).float()
        return self.head(emb, feats[None], start=self.cache.length, cache=self.cache)[0]

    @torch.inference_mode()
    def propose(self, context: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        m = self.features.shape[0] - 1  # features exist for positions 0..m; context[m + 1] has none
        if m < 0 or k < 1:
            empty = torch.empty(0, dtype=torch.long, device=context.device)
            return empty, torch.empty(0, self.vocab_size, device=context.device)
        if context.shape[1] != m + 2:
            raise RuntimeError(f"the drafter saw features for {m + 1} positions but the context has "
                               f"{context.shape[1]} tokens: call observe() after every target pass")
        real = self.cache.length  # pairs with real features already in the cache
        tokens = context[0, real + 1 : m + 2].to(self.w_out.device)
        feature = self._run(tokens, self.features[real : m + 1])[-1]  # f̂_{m+1}
        guesses, probs = [], []
        for i in range(k):
            q, token = self._guess(feature)
            guesses.append(token)
            probs.append(q)
            if i < k - 1:  # feed the draft's own predicted feature back in
                feature = self._run(token.view(1), feature[None])[-1]
        self.cache.crop(m + 1)  # forget the guesses; real features replace them after verification
        q = None if probs[0] is None else torch.stack(probs).to(context.device)
        return torch.stack(guesses).to(context.device), q

    @torch.inference_mode()
    def propose_tree(self, context: torch.Tensor, topology: Topology) -> Tree:
        """EAGLE-2's dynamic tree (:func:`~specdec_core.tree_drafters.dynamic_tree`) of at most
        len(topology) nodes and depth ≤ the topology's, ONE head forward per depth: the chosen nodes
        of a depth run side by side at one position (prefix + depth), each seeing the context and its
        own ancestors (the tree mask). Of ``topology`` only its size, depth and widest sibling rank (the
        default ``top_k``) are read (``tree_shapes.budget_shape(budget, depth, top_k)`` makes one): the
        head's own cumulative probabilities choose where the tree grows. The candidates are
        deterministic: q is None and the verify uses the one-hot ("topk") rule at every temperature."""
        m = self.features.shape[0] - 1  # real features f_0..f_m; context[m + 1] has none
        budget, depth = len(topology), depth_of(topology)
        device = self.w_out.device
        self._probs = self._tree = None
        if m < 0 or budget < 1:
            return Tree(torch.empty(0, dtype=torch.long, device=context.device), [], None, "topk")
        if context.shape[1] != m + 2:
            raise RuntimeError(f"the drafter saw features for {m + 1} positions but the context has "
                               f"{context.shape[1]} tokens: call observe() after every target pass")
        real = self.cache.length
        root = self._run(context[0, real + 1 : m + 2].to(device), self.features[real : m + 1])[-1:]  # f̂_{m+1} [1, d]
        ctx, outs = m + 1, [root]  # the cache holds the m + 1 real pairs; outs[-1]: the last call's features

        def step(d: int, tokens: torch.Tensor, parent_rows: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            # depth-d nodes are the pairs (f̂ of the parent, the node's token) at position m + d
            n = tokens.numel()
            parent = outs[-1].expand(n, -1) if d == 1 else outs[-1][parent_rows]
            visible = torch.cat([torch.ones(n, ctx, dtype=torch.bool, device=device), mask.to(device)], dim=1)
            self.calls += 1
            emb = self.embed(self.vocab_ids[tokens].view(1, -1)).float()
            outs.append(self.head(emb, parent[None], cache=self.cache, mask=visible,
                                  positions=torch.full((n,), m + d, device=device))[0])
            return self.out(outs[-1]).float().log_softmax(-1)  # [n, S]

        k = self.top_k or max(rank for _, rank in topology) + 1
        grown = dynamic_tree(self.out(root[0]).float().log_softmax(-1), step, depth, k, budget)
        self.cache.crop(ctx)  # forget the nodes: the target's real features replace them (observe)
        self._tree, self._probs = grown.tree, grown.probs
        return Tree(self.vocab_ids[grown.tree.tokens].to(context.device), grown.tree.parents, None, "topk")

    def accepted_path(self, path: list[int]) -> None:
        """After a tree verify: nothing to roll back (the nodes were dropped in :meth:`propose_tree`; the
        loop's ``observe`` brings the accepted path's real features). With ``calibration`` a list, it
        records (the head's probability of the node given its parent, accepted?) for every node the
        verify tested: the children of the root and of each accepted node."""
        tree, probs = getattr(self, "_tree", None), getattr(self, "_probs", None)
        if self.calibration is None or tree is None or not len(tree):
            return
        p = probs.tolist()
        on_path = set(path)
        for node in [-1] + path:
            self.calibration.extend((p[c], c in on_path) for c in tree.children(node))
