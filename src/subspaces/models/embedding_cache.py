"""One embedding cache for the conditional and KGC models: an in-memory LRU per kind over optional disk shards.

``store.embed(kind, texts)`` (kinds: ``sentence``, ``condition``, a bi-encoder's ``pair``) sends every distinct text
to its encoder once: one content-keyed :class:`~subspaces.cache.LRUCache` per kind, over an
:class:`EmbeddingShardCache` per encoder whose shards, on disk when asked, are keyed by the encoder's *weights* and
the texts, so a rerun encodes nothing and a fine-tuned encoder never reads a stale vector. Vectors are float32, not
normalised.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from subspaces.cache import LRUCache
from subspaces.config import cache_dir
from subspaces.errors import SubspacesError
from subspaces.fingerprint import Text, content_key, model_fingerprint, texts_key
from subspaces.io import save_npy
from subspaces.progress import Progress

ENCODE_CHUNK = 1024  # texts per encode call (sentence-transformers length-sorts and batches within one)


@dataclass
class ShardStats:
    """Shards read from disk versus encoded (and the texts encoded) in this object's lifetime."""

    hit_shards: int = 0
    miss_shards: int = 0
    miss_texts: int = 0


class EmbeddingShardCache:
    """Encode texts a shard of ``shard_size`` consecutive *distinct* texts at a time, each shard kept on disk as
    ``<folder>/<fingerprint>/<sha256 of texts>.npy`` (written atomically; a damaged shard is recomputed, not
    trusted). ``folder=None``: ``cache_dir()/kgc-embeddings``; ``False``: nothing on disk."""

    def __init__(
        self,
        model: Any,
        folder: str | Path | None | bool = None,
        *,
        shard_size: int = 2048,
        batch_size: int = 64,
        show_progress: bool = True,
    ) -> None:
        self.model = model
        self.shard_size = shard_size
        self.batch_size = batch_size
        self.show_progress = show_progress
        self.stats = ShardStats()
        self.folder: Path | None = None
        if folder is not False:
            self.fingerprint = model_fingerprint(model)
            root = Path(folder) if isinstance(folder, (str, Path)) else cache_dir() / "kgc-embeddings"
            self.folder = root / self.fingerprint

    def encode(self, texts: Sequence[Text], description: str = "encoding") -> np.ndarray:
        """Embeddings of ``texts`` in order, as float32 ``(n, d)``."""
        texts = list(texts)
        # Shard the distinct texts in first-seen order, so a list with repeats and its deduplicated form (what a
        # memory cache passes on) share their shards.
        distinct = list(dict.fromkeys(texts))
        if len(distinct) < len(texts):
            row = {text: i for i, text in enumerate(distinct)}
            return self.encode(distinct, description)[[row[t] for t in texts]]
        if not texts:
            return np.zeros((0, int(self.model.get_embedding_dimension())), dtype=np.float32)
        parts: list[np.ndarray] = []
        with Progress(len(texts), description, unit="text", enabled=self.show_progress) as bar:
            for start in range(0, len(texts), self.shard_size):
                shard = texts[start : start + self.shard_size]
                path = None if self.folder is None else self.folder / f"{texts_key(self.fingerprint, shard)}.npy"
                vectors = _read(path, len(shard))
                if vectors is None:
                    vectors = self._encode(shard)
                    if path is not None:
                        save_npy(path, vectors)
                    self.stats.miss_shards += 1
                    self.stats.miss_texts += len(shard)
                else:
                    self.stats.hit_shards += 1
                parts.append(vectors)
                bar.update(len(shard))
        return np.concatenate(parts, axis=0)

    def _encode(self, texts: list[Text]) -> np.ndarray:
        from subspaces.models.encoder import encode

        chunks: list[Any] = [texts[i : i + ENCODE_CHUNK] for i in range(0, len(texts), ENCODE_CHUNK)]  # str or pairs
        return np.concatenate(
            [np.asarray(encode(self.model, c, batch_size=self.batch_size, show_progress=False)) for c in chunks]
        )


def _read(path: Path | None, rows: int) -> np.ndarray | None:
    if path is None or not path.is_file():
        return None
    try:
        vectors = np.load(path, allow_pickle=False)
    except (OSError, ValueError):
        return None
    if vectors.ndim != 2 or vectors.shape[0] != rows or not np.isfinite(vectors).all():
        return None
    return vectors


@dataclass(frozen=True)
class CacheSettings:
    """How a conditional model (tri- or bi-encoder) caches what it computes: one setting for every cache it holds."""

    memory_bytes: int | None = 512 * 2**20  # the bound of each in-memory LRU (None: unbounded)
    disk: str | Path | None | bool = False  # disk shards: a folder, None (the default cache folder) or False (none)
    show_progress: bool = False  # a named progress display for large encodings


class EmbeddingCache:
    """``embed(kind, texts)`` for the ``encoders`` of each kind (``{"sentence": enc, "condition": enc}``), as the
    module says, cached as ``settings`` say (a progress display only for ``progress_min`` texts or more)."""

    def __init__(
        self, encoders: Mapping[str, Any], settings: CacheSettings = CacheSettings(), batch_size: int = 64
    ) -> None:
        if settings.disk is True:
            raise SubspacesError("disk must be a folder, None (the default cache folder) or False")
        self.encoders = dict(encoders)
        self.memory = {kind: LRUCache(settings.memory_bytes, name=kind) for kind in self.encoders}
        self.disk = settings.disk
        self.batch_size = batch_size
        self.show_progress = settings.show_progress
        self.progress_min = 2048
        self.encoded_texts = 0  # texts that went through an encoder (not read from disk)
        self.encode_seconds = 0.0
        self._shards: dict[int, EmbeddingShardCache] = {}

    def embed(self, kind: str, texts: Sequence[Text], description: str | None = None) -> torch.Tensor:
        """``(n, d)`` float32 embeddings of ``texts`` in order; only distinct unseen texts are encoded."""
        if kind not in self.encoders:
            raise SubspacesError(f"no encoder for {kind!r} texts; this store holds {', '.join(self.encoders)}")
        texts = list(texts)
        keys = [content_key(kind, *(t if isinstance(t, tuple) else (t,))) for t in texts]
        label = description or f"encoding {kind} texts"
        rows = self.memory[kind].get_many(
            keys, lambda missing: list(self._encode(kind, [texts[i] for i in missing], label))
        )
        if not rows:
            return torch.zeros(0, int(self.encoders[kind].get_embedding_dimension()))
        return torch.from_numpy(np.stack(rows))

    def _encode(self, kind: str, texts: list[Text], description: str) -> np.ndarray:
        encoder = self.encoders[kind]
        started = time.perf_counter()
        shards = self._shards.get(id(encoder))
        if shards is None:
            shards = self._shards[id(encoder)] = EmbeddingShardCache(encoder, self.disk)
        shards.batch_size = self.batch_size
        shards.show_progress = self.show_progress and len(texts) >= self.progress_min
        before = shards.stats.miss_texts
        vectors = shards.encode(texts, description)
        self.encoded_texts += shards.stats.miss_texts - before
        # (NaN or inf never gets here: encode refuses it, and a shard holding it is recomputed)
        self.encode_seconds += time.perf_counter() - started
        return vectors

    def clear(self, reset_stats: bool = True) -> None:
        """Forget every vector (and the encoders' fingerprints: call after their weights change)."""
        for cache in self.memory.values():
            cache.clear()
            if reset_stats:
                cache.reset_stats()
        self._shards.clear()

    def reset_stats(self) -> None:
        for cache in self.memory.values():
            cache.reset_stats()
        self.encoded_texts = 0
        self.encode_seconds = 0.0
