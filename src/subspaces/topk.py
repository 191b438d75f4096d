"""Top-k by inner product with faiss: exact search, and funnel search (a shortlist on a prefix index re-ranked by
the full vectors). The store's search plans and the aligner's neighbour search both stand on it."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from subspaces import vectors as maths
from subspaces.errors import DimensionError, SubspacesError


def flat_index(vectors: np.ndarray) -> Any:
    """A faiss inner-product index over ``vectors`` (float32, rows as given)."""
    return flat_index_of([vectors], vectors.shape[1])


INT8_SCAN_ROWS = 50_000  # from here a funnel's shortlist scan is faster on 8-bit codes than on floats...
INT8_SCAN_QUERIES = 20  # ...for fewer queries than this: faiss searches larger float batches by matrix products


def int8_index(vectors: np.ndarray) -> Any:
    """A faiss inner-product index over an 8-bit scalar-quantized copy of ``vectors`` (per-dimension ranges from
    the rows): a quarter of the bytes to scan, for a shortlist that the full vectors re-rank."""
    return int8_index_of(lambda: [vectors], vectors.shape[1])


def flat_index_of(blocks: Iterable[np.ndarray], dim: int) -> Any:
    """:func:`flat_index` over rows given a block at a time."""
    import faiss

    index = faiss.IndexFlatIP(dim)
    for block in blocks:
        index.add(np.ascontiguousarray(block, dtype=np.float32))
    return index


def int8_index_of(blocks: Callable[[], Iterable[np.ndarray]], dim: int) -> Any:
    """:func:`int8_index` over rows given a block at a time (``blocks()``, read twice): training on the two rows of
    the per-dimension minima and maxima gives the ranges, and so the codes, that training on every row gives."""
    import faiss

    low, high = np.full(dim, np.inf, np.float32), np.full(dim, -np.inf, np.float32)
    for block in blocks():
        if len(block):
            low, high = np.minimum(low, block.min(axis=0)), np.maximum(high, block.max(axis=0))
    index = faiss.IndexScalarQuantizer(dim, faiss.ScalarQuantizer.QT_8bit, faiss.METRIC_INNER_PRODUCT)
    index.train(np.ascontiguousarray(np.stack([low, high]), dtype=np.float32))
    for block in blocks():
        index.add(np.ascontiguousarray(block, dtype=np.float32))
    return index


def scans_codes(rows: int, queries: int) -> bool:
    """Whether a funnel takes its shortlist from 8-bit codes of the prefix (a large corpus and few queries) rather
    than floats (figures: docs/adapt.md)."""
    return rows >= INT8_SCAN_ROWS and queries < INT8_SCAN_QUERIES


def check_k(k: int, n: int) -> int:
    if k < 1:
        raise SubspacesError(f"k must be at least 1, got {k}")
    return min(k, n)


def _no_rows(queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The scores and row numbers of a search with no candidate rows (``k`` still checked): ``len(queries) x 0``."""
    check_k(k, 1)
    return np.empty((len(queries), 0), np.float32), np.empty((len(queries), 0), np.int64)


def selector(subset: np.ndarray | None) -> Any:
    """faiss search parameters that admit only the rows ``subset`` (a ``where=`` filter's matches), or None."""
    if subset is None:
        return None
    import faiss

    return faiss.SearchParameters(sel=faiss.IDSelectorBatch(np.asarray(subset, dtype=np.int64)))  # type: ignore[call-arg]


def exact(
    index: Any, queries: np.ndarray, k: int, *, subset: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Scores and row numbers (each ``len(queries) x k``) of the ``k`` largest inner products in ``index``; with
    ``subset``, only those rows are candidates (a row short of ``k`` ends in -1s)."""
    if queries.shape[1] != index.d:
        raise DimensionError(f"queries have {queries.shape[1]} dimensions, the index {index.d}")
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    n = index.ntotal if subset is None else len(subset)
    if n == 0:
        return _no_rows(queries, k)
    params = selector(subset)
    if params is None:
        return index.search(queries, check_k(k, n))
    return index.search(queries, check_k(k, n), params=params)


def funnel(
    prefix_index: Any,
    vectors: np.ndarray,
    queries: np.ndarray,
    k: int,
    shortlist: int,
    *,
    prefix_queries: np.ndarray | None = None,
    subset: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Shortlist ``shortlist`` rows on the prefix index, then keep the ``k`` best by full-vector inner product.
    ``prefix_queries``: the queries as the prefix index reads them (default: their unit first ``d`` coordinates);
    ``subset`` as :func:`exact`'s."""
    n = len(vectors) if subset is None else len(subset)
    k = check_k(k, max(n, 1))
    if shortlist < k:
        raise SubspacesError(f"shortlist ({shortlist}) must be at least k ({k})")
    if n == 0:
        return _no_rows(queries, k)
    shortlist = min(shortlist, n)
    if prefix_queries is None:
        prefix_queries = maths.unit_prefix(np.asarray(queries, dtype=np.float32), prefix_index.d)
    _, candidates = exact(prefix_index, prefix_queries, shortlist, subset=subset)
    queries = np.asarray(queries, dtype=np.float32)
    scores = np.empty(candidates.shape, dtype=np.float32)
    # Gathered candidates stay under 4 MiB, near the cache (1.3x faster than 64 MiB blocks).
    block = max(1, 2**20 // (shortlist * vectors.shape[1]))
    for start in range(0, len(queries), block):
        end = start + block
        # each query's full-vector score against its own candidates only
        scores[start:end] = np.einsum("qsd,qd->qs", vectors[candidates[start:end]], queries[start:end])
    scores[candidates < 0] = -np.inf  # no candidate there (fewer rows pass the filter than the shortlist)
    best = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(scores, best, axis=1), np.take_along_axis(candidates, best, axis=1)


def exact_blocks(
    blocks: Iterable[tuple[int, np.ndarray]], queries: np.ndarray, k: int, n: int, *, subset: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`exact` over rows read a block at a time (``(first row, rows)``, ``n`` rows in all; ``subset``
    ascending), holding one block and each query's best ``k`` so far."""
    import faiss

    queries = np.ascontiguousarray(queries, dtype=np.float32)
    candidates = n if subset is None else len(subset)
    if candidates == 0:
        return _no_rows(queries, k)
    k = check_k(k, candidates)
    best = Best(len(queries), k)
    for start, block in blocks:
        if block.shape[1] != queries.shape[1]:
            raise DimensionError(f"queries have {queries.shape[1]} dimensions, the rows {block.shape[1]}")
        rows = np.arange(start, start + len(block))
        if subset is not None:
            local = subset[np.searchsorted(subset, start) : np.searchsorted(subset, start + len(block))] - start
            if not len(local):
                continue
            block, rows = np.ascontiguousarray(block[local]), rows[local]
        scores, found = faiss.knn(queries, np.ascontiguousarray(block), min(k, len(block)), faiss.METRIC_INNER_PRODUCT)
        best.add(scores, rows[found])
    return best.result()


class Best:
    """The ``k`` largest scores of each of ``queries`` rows over blocks of candidates, best first, ties by lower row
    number (as a stable sort of every score would give): ``argpartition`` per block, never a sort of every row."""

    def __init__(self, queries: int, k: int) -> None:
        self.k = k
        self.scores = np.full((queries, 0), -np.inf, dtype=np.float32)
        self.rows = np.full((queries, 0), -1, dtype=np.int64)

    def add(self, scores: np.ndarray, rows: np.ndarray) -> None:
        """Candidates ``rows`` (a row per query, or one row of row numbers for every query) and their scores."""
        rows = np.broadcast_to(rows, scores.shape)
        self.scores, self.rows = largest(
            np.concatenate([self.scores, scores.astype(np.float32, copy=False)], axis=1),
            np.concatenate([self.rows, rows], axis=1),
            self.k,
        )

    def result(self) -> tuple[np.ndarray, np.ndarray]:
        return self.scores, self.rows


def largest(scores: np.ndarray, rows: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per query, the ``k`` largest ``scores`` and their ``rows``, best first, ties by lower row number."""
    top_scores, top_rows = scores, np.broadcast_to(rows, scores.shape)
    tied = np.zeros(len(scores), dtype=bool)
    if scores.shape[1] > k:  # the k largest by argpartition; a query with a tie across the k-th place is redone
        kth = -np.partition(-scores, k - 1, axis=1)[:, k - 1 : k]
        tied = (scores >= kth).sum(axis=1) > k
        picked = np.argpartition(-scores, k - 1, axis=1)[:, :k]
        top_scores, top_rows = np.take_along_axis(scores, picked, axis=1), np.take_along_axis(top_rows, picked, axis=1)
    order = np.lexsort((top_rows, -top_scores), axis=-1)
    out_scores = np.take_along_axis(top_scores, order, axis=1).astype(np.float32)
    out_rows = np.take_along_axis(top_rows, order, axis=1).astype(np.int64)
    for i in np.flatnonzero(tied):  # every row reaching the k-th score, then ordered: lower rows win the ties
        s, r = scores[i], np.broadcast_to(rows, scores.shape)[i]
        kept = np.flatnonzero(s >= kth[i, 0])
        best = np.lexsort((r[kept], -s[kept]))[:k]
        out_scores[i], out_rows[i] = s[kept][best], r[kept][best]
    return out_scores, out_rows
