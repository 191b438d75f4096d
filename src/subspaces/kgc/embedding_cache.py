"""Entity embeddings computed in shards and cached on disk, keyed by the model's weights and the shard's texts.

Encoding WN18RR's 40,943 entity texts takes minutes on a CPU, and every evaluation and every frozen-encoder
training run needs them. Each shard of ``shard_size`` consecutive texts is stored as
``<cache>/kgc-embeddings/<model fingerprint>/<sha256 of the texts>.npy``, so

* a second run with the same encoder and texts reads every shard back and encodes nothing;
* an interrupted run resumes from the shards already written (each is written atomically);
* a changed text (another neighbour setting, a new description) invalidates only its own shard;
* repeated texts are encoded once (shards hold distinct texts, in first-seen order);
* a fine-tuned encoder has other weights, hence another fingerprint, and never reads a stale vector.

Texts may be strings or ``(text, text_pair)`` tuples (the bi-encoder's "head text [SEP] relation" queries).
Vectors are stored as the encoder returns them (not normalised); callers normalise as they need.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from subspaces.io import save_npy

Text = str | tuple[str, str]


def model_fingerprint(model: torch.nn.Module, extra: str = "") -> str:
    """A hex digest of the model's parameters and buffers (names, shapes, values) and of ``extra``.

    Hashing the weights themselves (about 0.2 s for MiniLM) makes the key right for fine-tuned models held
    only in memory, where a name or path would not be.
    """
    digest = hashlib.sha256(extra.encode())
    digest.update(str(getattr(model, "max_seq_length", "")).encode())
    for name, tensor in model.state_dict().items():
        digest.update(name.encode())
        digest.update(str(tuple(tensor.shape)).encode())
        digest.update(tensor.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()[:24]


def texts_key(fingerprint: str, texts: Sequence[Text]) -> str:
    digest = hashlib.sha256(fingerprint.encode())
    for text in texts:
        digest.update(b"\x1e")
        digest.update("\x1f".join(text).encode() if isinstance(text, tuple) else text.encode())
    return digest.hexdigest()[:32]


@dataclass
class ShardStats:
    """Shards (and texts) read from disk versus encoded in this object's lifetime."""

    hit_shards: int = 0
    miss_shards: int = 0
    hit_texts: int = 0
    miss_texts: int = 0

    @property
    def hit_rate(self) -> float:
        total = self.hit_texts + self.miss_texts
        return self.hit_texts / total if total else 0.0


class EmbeddingShardCache:
    """Encode texts through a disk cache of shards. ``folder=None`` uses ``cache_dir()/kgc-embeddings``."""

    def __init__(
        self,
        model,  # SentenceTransformer
        folder: str | Path | None = None,
        *,
        shard_size: int = 2048,
        batch_size: int = 64,
        fingerprint: str | None = None,
        show_progress: bool = True,
    ) -> None:
        from subspaces.config import cache_dir

        self.model = model
        self.shard_size = shard_size
        self.batch_size = batch_size
        self.fingerprint = fingerprint or model_fingerprint(model)
        self.folder = Path(folder) if folder is not None else cache_dir() / "kgc-embeddings"
        self.folder = self.folder / self.fingerprint
        self.show_progress = show_progress
        self.stats = ShardStats()

    def shard_path(self, texts: Sequence[Text]) -> Path:
        return self.folder / f"{texts_key(self.fingerprint, texts)}.npy"

    def encode(self, texts: Sequence[Text], description: str = "encoding") -> np.ndarray:
        """Embeddings of ``texts`` in order, as float32 ``(n, d)``."""
        from rich.progress import Progress

        from subspaces.models.encoder import encode

        texts = list(texts)
        # Shard the distinct texts in first-seen order, so a list with repeats and its deduplicated form (what a
        # memory cache passes on) share their shards.
        distinct = list(dict.fromkeys(texts))
        if len(distinct) < len(texts):
            row = {text: i for i, text in enumerate(distinct)}
            return self.encode(distinct, description)[[row[t] for t in texts]]
        parts: list[np.ndarray] = []
        starts = range(0, len(texts), self.shard_size)
        with Progress(transient=True, disable=not self.show_progress) as progress:
            task = progress.add_task(description, total=len(texts))
            for start in starts:
                shard = texts[start : start + self.shard_size]
                path = self.shard_path(shard)
                vectors = self._read(path, len(shard))
                if vectors is None:
                    vectors = encode(self.model, shard, batch_size=self.batch_size, show_progress=False)
                    vectors = np.asarray(vectors, dtype=np.float32)
                    save_npy(path, vectors)
                    self.stats.miss_shards += 1
                    self.stats.miss_texts += len(shard)
                else:
                    self.stats.hit_shards += 1
                    self.stats.hit_texts += len(shard)
                parts.append(vectors)
                progress.advance(task, len(shard))
        if not parts:
            dim = self.model.get_embedding_dimension()
            return np.zeros((0, dim), dtype=np.float32)
        return np.concatenate(parts, axis=0)

    @staticmethod
    def _read(path: Path, rows: int) -> np.ndarray | None:
        if not path.is_file():
            return None
        try:
            vectors = np.load(path, allow_pickle=False)
        except (OSError, ValueError):  # a damaged shard is recomputed, not trusted
            return None
        if vectors.ndim != 2 or vectors.shape[0] != rows or not np.isfinite(vectors).all():
            return None
        return vectors
