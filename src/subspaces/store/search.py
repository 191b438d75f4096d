"""Exact and funnel (Matryoshka) top-k search over unit vectors held in memory, with faiss.

Funnel search takes a shortlist by inner product on the first ``dims`` coordinates (re-normalised, as a
Matryoshka model's prefix is meant to be read; on a large corpus scanned as 8-bit codes, :func:`int8_index`,
since the shortlist only has to contain the answer) and re-ranks it by the full float vectors: a full-length
shortlist gives exactly the exact search's result.

A model not trained for truncation (most are) spreads its variance over every coordinate, so its first ``d``
coordinates shortlist poorly. :func:`subspaces.vectors.principal_axes` gives such a store an orthogonal basis
ordered by variance: rows and queries rotated into it have the same inner products at full dimension (the
re-rank, and so exact search, are unchanged), while its first ``d`` axes carry the most of the rows' variance any
``d`` axes can (:func:`prefix_rows`).

:func:`search_vectors` and :func:`search_quantized` search two arrays (``vectors search``): exact, funnel, or
the corpus's int8 / binary codes rescored.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from subspaces import quantize as codes
from subspaces import vectors as maths
from subspaces.errors import DimensionError, SubspacesError


def unit_prefix(vectors: np.ndarray, dims: int | None = None) -> np.ndarray:
    """The first ``dims`` columns (all if None) as float32, what faiss reads, each row scaled to unit length (zero
    rows stay zero)."""
    return maths.unit_prefix(np.asarray(vectors, dtype=np.float32), dims)


def prefix_rows(vectors: np.ndarray, dims: int, axes: np.ndarray | None = None) -> np.ndarray:
    """Rows as a prefix search reads them: their first ``dims`` coordinates, or (``axes``, a ``dim x dim``
    orthonormal basis such as :func:`subspaces.vectors.principal_axes`) their first ``dims`` coordinates in
    that basis; re-normalised."""
    x = np.asarray(vectors, dtype=np.float32)
    return unit_prefix(x @ axes[:, :dims] if axes is not None else x, dims)


def flat_index(vectors: np.ndarray) -> Any:
    """A faiss inner-product index over ``vectors`` (float32, rows as given)."""
    import faiss

    index = faiss.IndexFlatIP(vectors.shape[1])
    index.add(np.ascontiguousarray(vectors, dtype=np.float32))
    return index


# whose first ``dims`` coordinates a prefix reads: the model's, the principal axes' (vectors.principal_axes) or
# those of the adapter ``store shrink`` fitted (store.shrink)
BASES = ("model", "pca", "adapter")
INT8_SCAN_ROWS = 50_000  # from here a funnel's shortlist scan is faster on 8-bit codes than on floats...
INT8_SCAN_QUERIES = 20  # ...for fewer queries than this: faiss searches larger float batches by matrix products


def int8_index(vectors: np.ndarray) -> Any:
    """A faiss inner-product index over an 8-bit scalar-quantized copy of ``vectors`` (per-dimension ranges from
    the rows): a quarter of the bytes to scan, for a shortlist that the full vectors re-rank."""
    import faiss

    x = np.ascontiguousarray(vectors, dtype=np.float32)
    index = faiss.IndexScalarQuantizer(x.shape[1], faiss.ScalarQuantizer.QT_8bit, faiss.METRIC_INNER_PRODUCT)
    index.train(x)
    index.add(x)
    return index


def scans_codes(rows: int, queries: int) -> bool:
    """Whether a funnel takes its shortlist from 8-bit codes of the prefix (:func:`int8_index`) or from floats:
    codes for a large corpus and few queries (a quarter of the bytes to scan: 100k x 128 took 1.7 ms a query as
    floats, 0.9 ms as codes, the same Recall@10 after the full re-rank), floats otherwise (a small corpus scans as
    fast whole; a batch takes faiss's matrix-product path: 2.2x exact search's queries/s against the codes' 0.7x
    on 1,000 queries at once, ``funnel_bench.py``)."""
    return rows >= INT8_SCAN_ROWS and queries < INT8_SCAN_QUERIES


def check_k(k: int, n: int) -> int:
    if k < 1:
        raise SubspacesError(f"k must be at least 1, got {k}")
    return min(k, n)


def selector(subset: np.ndarray | None) -> Any:
    """faiss search parameters that admit only the rows ``subset`` (a ``where=`` filter's matches), or None."""
    if subset is None:
        return None
    import faiss

    return faiss.SearchParameters(sel=faiss.IDSelectorBatch(np.asarray(subset, dtype=np.int64)))  # type: ignore[call-arg]


def exact(
    index: Any, queries: np.ndarray, k: int, *, subset: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Scores and row numbers (each ``len(queries) x k``) of the ``k`` largest inner products in ``index``.
    ``subset``: only these rows are candidates (applied inside the scan, before the top k); where fewer than
    ``k`` rows are candidates, the rest of a row is -1."""
    if queries.shape[1] != index.d:
        raise DimensionError(f"queries have {queries.shape[1]} dimensions, the index {index.d}")
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    n = index.ntotal if subset is None else len(subset)
    if n == 0:
        check_k(k, 1)
        return np.empty((len(queries), 0), np.float32), np.empty((len(queries), 0), np.int64)
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
    ``prefix_queries``: the queries as the prefix index reads them (default: their first ``d`` coordinates).
    ``subset``: only these rows are candidates (the shortlist is taken among them); a row short of ``k``
    candidates ends in -1s."""
    n = len(vectors) if subset is None else len(subset)
    k = check_k(k, max(n, 1))
    if shortlist < k:
        raise SubspacesError(f"shortlist ({shortlist}) must be at least k ({k})")
    if n == 0:
        return np.empty((len(queries), 0), np.float32), np.empty((len(queries), 0), np.int64)
    k, shortlist = min(k, n), min(shortlist, n)
    if prefix_queries is None:
        prefix_queries = unit_prefix(queries, prefix_index.d)
    _, candidates = exact(prefix_index, prefix_queries, shortlist, subset=subset)
    queries = np.asarray(queries, dtype=np.float32)
    scores = np.empty(candidates.shape, dtype=np.float32)
    # Gathered candidates stay under 4 MiB, near the cache: 1,024 queries x 200 candidates x 384 re-ranked 1.3x
    # faster than in 64 MiB blocks (benchmarks/align_speed_dev.py search-speed).
    block = max(1, 2**20 // (shortlist * vectors.shape[1]))
    for start in range(0, len(queries), block):
        end = start + block
        # each query's full-vector score against its own candidates only
        scores[start:end] = np.einsum("qsd,qd->qs", vectors[candidates[start:end]], queries[start:end])
    scores[candidates < 0] = -np.inf  # no candidate there (fewer rows pass the filter than the shortlist)
    best = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(scores, best, axis=1), np.take_along_axis(candidates, best, axis=1)


def _unit_pair(corpus: Any, queries: Any) -> tuple[np.ndarray, np.ndarray]:
    """Checked corpus and query rows of one width, unit length."""
    corpus, queries = (unit_prefix(maths.check_rows(x, what)) for x, what in ((corpus, "corpus"), (queries, "queries")))
    if queries.shape[1] != corpus.shape[1]:
        raise DimensionError(f"queries have {queries.shape[1]} dimensions, the corpus {corpus.shape[1]}")
    return corpus, queries


def search_vectors(
    corpus: Any, queries: Any, k: int, dims: int | None = None, shortlist_factor: int = 10, basis: str = "model"
) -> tuple[np.ndarray, np.ndarray]:
    """Scores and corpus rows (each queries x k) by cosine; with ``dims``, a funnel that shortlists
    ``shortlist_factor x k`` rows on the first ``dims`` coordinates (``basis="pca"``: of the corpus's principal
    axes) and re-ranks them at full dimension, as the store's funnel does."""
    if basis not in BASES:
        raise SubspacesError(f"--basis must be one of {', '.join(BASES)}, got {basis!r}")
    if basis == "pca" and dims is None:
        raise SubspacesError("--basis pca says whose prefix the funnel reads: give --dims too")
    corpus, queries = _unit_pair(corpus, queries)
    if dims is None:
        return exact(flat_index(corpus), queries, k)
    if not 0 < dims <= corpus.shape[1]:
        raise DimensionError(f"--dims {dims} is outside 1..{corpus.shape[1]}")
    if shortlist_factor < 1:
        raise SubspacesError(f"--shortlist-factor must be at least 1, got {shortlist_factor}")
    axes = maths.principal_axes(corpus) if basis == "pca" else None
    prefixes = prefix_rows(corpus, dims, axes)
    index = int8_index(prefixes) if scans_codes(len(corpus), len(queries)) else flat_index(prefixes)
    return funnel(index, corpus, queries, k, shortlist_factor * k, prefix_queries=prefix_rows(queries, dims, axes))


def search_quantized(
    corpus: Any, queries: Any, k: int, kind: codes.Kind, rescore: int | None = 4, calibration_rows: int = 10_000
) -> tuple[np.ndarray, np.ndarray, str | None]:
    """Scores, corpus rows and what the shortlist was rescored against, searching the corpus's codes by cosine.

    The rows are unit-normalised, then quantized: int8 with ranges calibrated on a seeded sample of
    ``calibration_rows`` rows, binary by sign. A shortlist of ``rescore x k`` rows (None: none) is rescored by the
    float query, against the dequantized codes (int8: what a store of codes alone can do) or against the float
    corpus (binary: one bit a dimension is too coarse to re-rank by)."""
    corpus, queries = _unit_pair(corpus, queries)
    cal = codes.calibrate_int8(codes.calibration_sample(corpus, calibration_rows)) if kind == "int8" else None
    floats = corpus if kind == "binary" else None
    quantized = codes.quantize(corpus, kind, cal)
    scores, rows = codes.search(queries, quantized, kind=kind, k=k, calibration=cal, rescore=rescore, corpus=floats)
    against = None if rescore is None else ("float corpus" if floats is not None else "dequantized codes")
    return scores, rows, against
