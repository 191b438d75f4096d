"""Search over unit vectors held in memory: the prefixes a funnel reads, and two arrays searched (``vectors search``).
The top-k itself is :mod:`subspaces.topk`'s.

Funnel search shortlists by inner product on the first ``dims`` coordinates (re-normalised, as a Matryoshka prefix
is read) and re-ranks the shortlist by the full vectors: a full-length shortlist gives the exact search's result. For
a model not trained for truncation, the prefix is read in the rows' principal axes instead
(:func:`subspaces.vectors.principal_axes`: orthogonal, so full-dimension scores are unchanged, while the first ``d``
axes carry the most variance any ``d`` can; :func:`prefix_rows`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from subspaces import quantize as codes
from subspaces import topk
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


# whose first ``dims`` coordinates a prefix reads: the model's, the principal axes' (vectors.principal_axes) or
# those of the adapter ``store shrink`` fitted (store.shrink)
BASES = ("model", "pca", "adapter")


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
        return topk.exact(topk.flat_index(corpus), queries, k)
    if not 0 < dims <= corpus.shape[1]:
        raise DimensionError(f"--dims {dims} is outside 1..{corpus.shape[1]}")
    if shortlist_factor < 1:
        raise SubspacesError(f"--shortlist-factor must be at least 1, got {shortlist_factor}")
    axes = maths.principal_axes(corpus) if basis == "pca" else None
    prefixes = prefix_rows(corpus, dims, axes)
    index = topk.int8_index(prefixes) if topk.scans_codes(len(corpus), len(queries)) else topk.flat_index(prefixes)
    return topk.funnel(index, corpus, queries, k, shortlist_factor * k, prefix_queries=prefix_rows(queries, dims, axes))


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
