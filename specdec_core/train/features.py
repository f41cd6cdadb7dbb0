"""The target's work on every corpus position, stored in memory-mapped chunks and read lazily.

    corpus = build_features(target, seqs, source, train_from, folder)   # resumable
    corpus.fused[i]        # [L_i, 3d] float16, read from disk when indexed

One teacher-forced forward per sequence keeps, for each position, the hidden states of the three
``FUSED_LAYERS`` (EAGLE-3 reads a low, a middle and a high layer), the last hidden state after the
final norm, and the K most likely next tokens with their log-probabilities. Sequences are processed
``chunk`` at a time; each chunk is a folder of ``.npy`` files written to a temporary name and renamed
into place when complete, so an interrupted build restarts at the first missing chunk. Reading uses
``numpy.load(mmap_mode="r")``: a training step touches only the rows of its batch.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from transformers import PreTrainedModel

from ..files import atomic_dir, write_json
from ..progress import tqdm

TOP_K = 32
FIELDS = ("tokens", "fused", "last", "top_ids", "top_logp")


def fused_layers(num_layers: int) -> tuple[int, int, int]:
    """Indices into ``hidden_states`` (0 = the embeddings, i = the output of block i) of the low,
    middle and high layers EAGLE-3 fuses: the inputs of blocks 2, L/2 and L − 3."""
    return 2, num_layers // 2, num_layers - 3


class Field:
    """One field of a corpus as a list-like of per-sequence tensors (read from the mapped chunks)."""

    def __init__(self, corpus: Corpus, name: str) -> None:
        self.corpus, self.name = corpus, name

    def __len__(self) -> int:
        return len(self.corpus)

    def __getitem__(self, i: int) -> torch.Tensor:
        chunk, start, end = self.corpus.index[self.corpus.rows[i]]
        return torch.from_numpy(np.array(self.corpus.arrays[chunk][self.name][start:end]))

    def __iter__(self):
        return (self[i] for i in range(len(self)))


class Corpus:
    """Sequences ``rows`` of a feature store (all of them by default); fields are :class:`Field`."""

    def __init__(self, folder: Path, rows: list[int] | None = None) -> None:
        self.folder = Path(folder)
        meta = json.loads((self.folder / "meta.json").read_text())
        self.layers = tuple(meta["layers"])
        self.arrays = [{f: np.load(self.folder / c / f"{f}.npy", mmap_mode="r") for f in FIELDS} for c in meta["chunks"]]
        self.index = [(c, s, e) for c, bounds in enumerate(meta["bounds"]) for s, e in bounds]
        self._source, self._train_from = meta["source"], meta["train_from"]
        self.rows = list(range(len(self.index))) if rows is None else rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getattr__(self, name: str) -> Field:
        if name in FIELDS:
            return Field(self, name)
        raise AttributeError(name)

    @property
    def source(self) -> list[str]:
        return [self._source[r] for r in self.rows]

    @property
    def train_from(self) -> list[int]:
        """Per sequence, the first position whose prediction is trained on (0, or a follow-up's second turn)."""
        return [self._train_from[r] for r in self.rows]

    @property
    def n_tokens(self) -> int:
        return sum(self.index[r][2] - self.index[r][1] for r in self.rows)

    def select(self, keep: list[int]) -> Corpus:
        return Corpus(self.folder, [self.rows[i] for i in keep])


def batch(corpus: Corpus, rows: list[int], seq_len: int, fields: tuple[str, ...]) -> dict[str, torch.Tensor]:
    """Right-padded batch of the sequences ``rows``, at most ``seq_len`` positions each (a longer
    sequence keeps its end, where a follow-up's second turn is): tokens [B, T] (long), each of
    ``fields`` [B, T, ·] (float32; top_ids long), and mask [B, T] (True = a position trained on)."""
    seqs = [corpus.tokens[i] for i in rows]
    T = min(seq_len, max(s.numel() for s in seqs))
    out = {"tokens": torch.zeros(len(rows), T, dtype=torch.long), "mask": torch.zeros(len(rows), T, dtype=torch.bool)}  # host: the drafts' trainer runs on the CPU
    for b, (i, seq) in enumerate(zip(rows, seqs)):
        start = max(0, seq.numel() - T) if corpus.train_from[i] else 0
        n = min(T, seq.numel() - start)
        out["tokens"][b, :n] = seq[start : start + n].long()
        out["mask"][b, max(0, corpus.train_from[i] - start) : n] = True
        for f in fields:
            rows_f = getattr(corpus, f)[i][start : start + n]
            rows_f = rows_f.long() if f == "top_ids" else rows_f.float()
            if f not in out:
                out[f] = torch.zeros(len(rows), T, rows_f.shape[1], dtype=rows_f.dtype)  # host: the drafts' trainer runs on the CPU
            out[f][b, :n] = rows_f
    return out


@torch.inference_mode()
def target_work(target: PreTrainedModel, seq: torch.Tensor, layers: tuple[int, ...]) -> dict[str, np.ndarray]:
    """One teacher-forced forward over ``seq`` [L]: every field of the module docstring, as arrays."""
    out = target(input_ids=seq.view(1, -1).long(), output_hidden_states=True)
    top = out.logits[0].float().log_softmax(-1).topk(TOP_K, dim=-1)
    fused = torch.cat([out.hidden_states[i][0] for i in layers], dim=-1)
    return {"tokens": seq.int().numpy(), "fused": fused.half().numpy(), "last": out.hidden_states[-1][0].half().numpy(),  # host: the drafts' trainer runs on the CPU
            "top_ids": top.indices.int().numpy(), "top_logp": top.values.half().numpy()}  # host: the drafts' trainer runs on the CPU


def _write_chunk(target: PreTrainedModel, seqs: list[torch.Tensor], layers: tuple[int, ...], path: Path) -> None:
    parts = [target_work(target, s, layers) for s in seqs]
    with atomic_dir(path) as tmp:  # the chunk appears complete or not at all
        for f in FIELDS:
            np.save(tmp / f"{f}.npy", np.concatenate([p[f] for p in parts]))


def build_features(target: PreTrainedModel, seqs: list[torch.Tensor], source: list[str], train_from: list[int],
                   folder: Path, chunk: int = 128) -> Corpus:
    """The feature store of ``seqs`` in ``folder`` (built where missing; see the module docstring).
    A store built from other sequences or layers is an error, not a silent mix."""
    folder.mkdir(parents=True, exist_ok=True)
    layers = fused_layers(target.config.num_hidden_layers)
    lengths = [int(s.numel()) for s in seqs]
    meta = {"layers": layers, "lengths": lengths, "source": source, "train_from": train_from,
            "chunks": [f"c{i // chunk:05d}" for i in range(0, len(seqs), chunk)]}
    meta["bounds"] = [list(zip(np.cumsum([0] + lengths[i : i + chunk][:-1]).tolist(), np.cumsum(lengths[i : i + chunk]).tolist()))
                      for i in range(0, len(seqs), chunk)]
    meta_path = folder / "meta.json"
    if meta_path.exists():
        old = json.loads(meta_path.read_text())
        if [old["layers"], old["lengths"]] != [list(layers), lengths]:
            raise RuntimeError(f"{folder} holds features of other sequences or layers: delete it to rebuild")
    write_json(meta, meta_path)
    for n, name in enumerate(tqdm(meta["chunks"], desc="target features (teacher-forced)")):
        if not (folder / name).exists():
            _write_chunk(target, seqs[n * chunk : (n + 1) * chunk], layers, folder / name)
    return Corpus(folder)
