"""Exact and funnel (Matryoshka) top-k search over unit vectors held in memory, with faiss.

Funnel search takes a shortlist by inner product on the first ``dims`` coordinates (re-normalised, as a
Matryoshka model's prefix is meant to be read) and re-ranks it by the full vectors: a full-length shortlist
gives exactly the exact search's result.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from subspaces.errors import DimensionError, SubspacesError


def unit_prefix(vectors: np.ndarray, dims: int | None = None) -> np.ndarray:
    """The first ``dims`` columns (all if None), each row scaled to unit length (zero rows stay zero)."""
    x = np.ascontiguousarray(vectors[:, :dims] if dims is not None else vectors, dtype=np.float32)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.maximum(norms, 1e-12)


def flat_index(vectors: np.ndarray) -> Any:
    """A faiss inner-product index over ``vectors`` (float32, rows as given)."""
    import faiss

    index = faiss.IndexFlatIP(vectors.shape[1])
    index.add(np.ascontiguousarray(vectors, dtype=np.float32))
    return index


def check_k(k: int, n: int) -> int:
    if k < 1:
        raise SubspacesError(f"k must be at least 1, got {k}")
    return min(k, n)


def exact(index: Any, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Scores and row numbers (each ``len(queries) x k``) of the ``k`` largest inner products in ``index``."""
    if queries.shape[1] != index.d:
        raise DimensionError(f"queries have {queries.shape[1]} dimensions, the index {index.d}")
    scores, rows = index.search(np.ascontiguousarray(queries, dtype=np.float32), check_k(k, index.ntotal))
    return scores, rows


def funnel(
    prefix_index: Any, vectors: np.ndarray, queries: np.ndarray, k: int, shortlist: int
) -> tuple[np.ndarray, np.ndarray]:
    """Shortlist ``shortlist`` rows on the prefix index, then keep the ``k`` best by full-vector inner product."""
    k = check_k(k, len(vectors))
    if shortlist < k:
        raise SubspacesError(f"shortlist ({shortlist}) must be at least k ({k})")
    shortlist = min(shortlist, len(vectors))
    _, candidates = prefix_index.search(unit_prefix(queries, prefix_index.d), shortlist)
    queries = np.asarray(queries, dtype=np.float32)
    scores = np.empty(candidates.shape, dtype=np.float32)
    block = max(1, 2**24 // (shortlist * vectors.shape[1]))  # gathered candidates stay under 64 MiB
    for start in range(0, len(queries), block):
        end = start + block
        # each query's full-vector score against its own candidates only
        scores[start:end] = np.einsum("qsd,qd->qs", vectors[candidates[start:end]], queries[start:end])
    best = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(scores, best, axis=1), np.take_along_axis(candidates, best, axis=1)
