"""Collecting Jacobi trajectories for the CLLM fine-tune: cached, sharded and resumable.

    python -m specdec_core.train cllm collect --shard 0/2 &  python -m specdec_core.train cllm collect --shard 1/2

Each shard holds the trajectories (:class:`specdec_core.cllm.Trajectory`) of every k-th prompt in one
file under ``$SPECDEC_CACHE/cllm``, rewritten atomically every few prompts, so an interrupted run
picks up where it stopped.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from ..assets import cache_dir
from ..cllm import BLOCK, MAX_NEW_TOKENS, Trajectory, has_repeated_ngram, trajectory_of
from ..files import torch_save
from ..progress import tqdm


def data_path(prompts: list[str], max_new_tokens: int, block: int, shard: tuple[int, int]) -> Path:
    """The cache file of one shard of a collection (named by a digest of the prompts and the settings)."""
    digest = hashlib.sha256("\n".join(prompts).encode()).hexdigest()[:10]
    folder = cache_dir() / "cllm"
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"trajectories-{digest}-{max_new_tokens}-{block}-{shard[0]}of{shard[1]}.pt"


def collect(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, prompts: list[str],
            max_new_tokens: int = MAX_NEW_TOKENS, block: int = BLOCK, shard: tuple[int, int] = (0, 1),
            save_every: int = 10) -> list[Trajectory]:
    """Trajectories of ``prompts[shard[0]::shard[1]]``, cached under ``$SPECDEC_CACHE/cllm``.

    The cache file is rewritten atomically every ``save_every`` prompts, so an interrupted run picks
    up where it stopped. Samples with a repeated 10-gram are dropped (counted in ``skipped``).
    """
    path = data_path(prompts, max_new_tokens, block, shard)
    mine = prompts[shard[0] :: shard[1]]
    saved = torch.load(path, weights_only=False) if path.exists() else {"done": 0, "items": [], "skipped": 0}
    for i in tqdm(range(saved["done"], len(mine)), desc=f"Jacobi trajectories (shard {shard[0]}/{shard[1]})",
                  initial=saved["done"], total=len(mine)):
        t = trajectory_of(model, tokenizer, mine[i], max_new_tokens, block)
        if has_repeated_ngram(t.answer.tolist()):
            saved["skipped"] += 1
        else:
            saved["items"].append(t.__dict__)
        saved["done"] = i + 1
        if saved["done"] % save_every == 0 or saved["done"] == len(mine):
            torch_save(saved, path)
    return [Trajectory(**d) for d in saved["items"]]


def load_trajectories(prompts: list[str], shards: int = 2, max_new_tokens: int = MAX_NEW_TOKENS,
                      block: int = BLOCK) -> list[Trajectory]:
    """All shards of a finished collection, in a fixed order; a clear error if one is missing."""
    out = []
    for s in range(shards):
        path = data_path(prompts, max_new_tokens, block, (s, shards))
        saved = torch.load(path, weights_only=False) if path.exists() else None
        if saved is None or saved["done"] < len(prompts[s::shards]):
            raise FileNotFoundError(
                f"trajectory shard {s}/{shards} is missing or unfinished ({path}): run "
                f"`python -m specdec_core.train cllm collect --shard {s}/{shards}` first")
        out += [Trajectory(**d) for d in saved["items"]]
    return out


def share(trajectories: list[Trajectory], fraction: float, seed: int = 0) -> list[Trajectory]:
    """A fixed random share of the trajectories (whole answers), for the data curve. Shares are nested:
    a smaller one is part of every larger one (one permutation, cut at different lengths)."""
    if not 0 < fraction <= 1:
        raise ValueError(f"the share of the trajectories must be in (0, 1], got {fraction}")
    order = torch.randperm(len(trajectories), generator=torch.Generator().manual_seed(seed)).tolist()  # host: a seeded shuffle
    return [trajectories[i] for i in sorted(order[: max(1, round(fraction * len(trajectories)))])]


def answer_tokens(trajectories: list[Trajectory]) -> int:
    """Trajectory tokens, counted as the answers' tokens (the x-axis of the data curve)."""
    return sum(len(t.answer) for t in trajectories)
