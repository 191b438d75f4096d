"""The loaded model (and optional Hyper-CL head and store) and the computations the routes ask of it.

Everything here runs on the batcher's worker thread or in a route's thread pool, never on the event loop.
Embeddings come out of :func:`subspaces.models.encoder.encode` at full dimension, unnormalised, so each request
truncates (Matryoshka) and normalises its own rows: the served rows are ``encode(..., normalize=True,
truncate_dim=d)``'s.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from subspaces.errors import DimensionError, SubspacesError
from subspaces.serve.settings import ServeSettings


class Engine:
    """The encoder, and optionally a tri-encoder (``--head``) and a store (``--store``), loaded from settings."""

    def __init__(self, settings: ServeSettings) -> None:
        from subspaces.models.backends import with_backend
        from subspaces.models.encoder import load_encoder

        self.backend, self.precision = settings.backend, settings.precision
        self.model = load_encoder(settings.model, device=settings.device)
        self.model.eval()
        self.dim = int(self.model.get_embedding_dimension() or 0)
        # A fast tokenizer keeps its truncation and padding settings in shared state that each call resets: counting
        # beside the worker's encoding would unpad its batches. So counting has its own copy, one call at a time.
        tokenizer = getattr(self.model, "tokenizer", None)
        self._counter = copy.deepcopy(tokenizer) if callable(tokenizer) else None
        self._counter_lock = threading.Lock()
        self.tri: Any | None = None
        if settings.head is not None:
            from subspaces.models.triencoder import TriEncoder

            self.tri = TriEncoder.load(settings.head, device=settings.device)
        self.store: Any | None = None
        if settings.store is not None:
            from subspaces.store import ModelFingerprint, Store

            self.store = Store.open(settings.store)
            # The route encodes queries with the served model: its vectors must be the store's kind.
            space = self.store.manifest.spaces[self.store.manifest.active]
            # Checked on the torch weights, before an exported graph replaces them (a graph has no parameters to
            # hash): an fp32 graph gives the same vectors to ~1e-6, an int8 one queries fp32 rows a little less well.
            space.model.check(ModelFingerprint.of(self.model, settings.model), what=f"--model {settings.model}")
        with_backend(self.model, settings.backend, settings.precision)

    def token_counts(self, texts: Sequence[str]) -> list[int]:
        """Tokens the model reads of each text (after truncation at its ``max_seq_length``)."""
        limit = self.model.max_seq_length
        if self._counter is None or not isinstance(limit, int):  # a static embedding: no limit, its own tokenizer
            return [max(1, len(t.split())) for t in texts]
        with self._counter_lock:
            ids = self._counter(list(texts), truncation=True, max_length=limit, verbose=False)["input_ids"]
        return [len(i) for i in ids]

    def encode(self, texts: list[str]) -> np.ndarray:
        """Full-dimension, unnormalised rows of ``texts`` in one forward pass (the batcher's ``encode_fn``)."""
        import torch

        from subspaces.models.encoder import encode

        with torch.inference_mode():
            return encode(self.model, texts, batch_size=max(1, len(texts)), normalize=False)

    def check_dimensions(self, dimensions: int | None) -> None:
        if dimensions is not None and not 0 < dimensions <= self.dim:
            raise DimensionError(f"dimensions must be between 1 and {self.dim}, got {dimensions}")

    def conditioned_similarity(self, pairs: Sequence[tuple[str, str]], condition: str) -> np.ndarray:
        """``cos(head(E(a), c), head(E(b), c))`` per pair, through the tri-encoder's caches."""
        if self.tri is None:
            raise SubspacesError("this server has no condition head: start it with --head DIR")
        first, second = [a for a, _ in pairs], [b for _, b in pairs]
        return self.tri.similarity(first, second, [condition] * len(pairs))

    def search(
        self, query: np.ndarray, k: int, dimensions: int | None = None, condition: str | None = None
    ) -> dict[str, Any]:
        """The ``k`` store rows nearest one unit query row: ``{"ids", "scores", "texts"}`` (a funnel with
        ``dimensions``: a shortlist on the prefix, re-ranked at full size). Under ``condition``, the store's
        conditional search: query and rows projected by the head's matrix for it, ranked exactly by cosine (the
        store checks the head sits on its model, and keeps the projected rows of recent conditions)."""
        if self.store is None:
            raise SubspacesError("this server has no store: start it with --store DIR")
        if condition is None:
            return self.store.search_vectors(query[None, :], k, dims=dimensions)[0]
        if self.tri is None:
            raise SubspacesError("this server has no condition head: start it with --head DIR")
        return self.store.search_vectors(query[None, :], k, condition=condition, head=self.tri)[0]

    def cache_stats(self) -> dict[str, dict[str, Any]]:
        """Per-cache statistics (hits, lookups, bytes, ...) of the tri-encoder's caches, when one is loaded."""
        return {} if self.tri is None else self.tri.cache_stats()["caches"]


def truncate_rows(rows: np.ndarray, dimensions: int | None) -> np.ndarray:
    """The first ``dimensions`` coordinates of each row, L2-normalised again (as ``truncate_and_normalize``)."""
    import torch

    from subspaces.models.encoder import truncate_and_normalize

    return truncate_and_normalize(torch.from_numpy(np.ascontiguousarray(rows)), dimensions).numpy()
