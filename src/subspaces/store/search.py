"""Search over unit vectors held in memory: the prefixes a funnel reads, and two arrays searched (``vectors search``).
A funnel shortlists on the first ``dims`` coordinates, re-normalised (in the rows' principal axes for a model not
trained for truncation: orthogonal, so full-dimension scores are unchanged), and re-ranks by the full vectors.
"""

from __future__ import annotations

from typing import Any, Literal, get_args

import numpy as np

from subspaces import quantize as codes
from subspaces import topk
from subspaces import vectors as maths
from subspaces.errors import DimensionError, SubspacesError


def prefix_rows(vectors: np.ndarray, dims: int, axes: np.ndarray | None = None) -> np.ndarray:
    """Rows' first ``dims`` coordinates (in the orthonormal basis ``axes``, if given), re-normalised."""
    x = np.asarray(vectors, dtype=np.float32)
    return maths.unit_prefix(x @ axes[:, :dims] if axes is not None else x, dims, dtype=np.float32)


def top_rows(rows: np.ndarray, queries: np.ndarray, k: int) -> np.ndarray:
    """Each query's ``k`` nearest rows by cosine, exactly (row numbers, best first)."""
    rows, queries = (maths.normalize_rows(x, dtype=np.float32) for x in (rows, queries))
    return topk.exact(topk.flat_index(rows), queries, k)[1]


def mean_overlap(a: np.ndarray, b: np.ndarray) -> float:
    """The mean fraction of row numbers that each row of ``a`` shares with the same row of ``b`` (two top-k)."""
    return float(np.mean([len(set(x) & set(y)) / len(x) for x, y in zip(a.tolist(), b.tolist(), strict=True)]))


# whose first ``dims`` coordinates a prefix reads: the model's, the principal axes' or the ``store shrink`` adapter's
Basis = Literal["model", "pca", "adapter"]
BASES: tuple[str, ...] = get_args(Basis)


def _unit_pair(corpus: Any, queries: Any) -> tuple[np.ndarray, np.ndarray]:
    """Checked corpus and query rows of one width, unit length."""
    corpus, queries = (
        maths.normalize_rows(maths.check_rows(x, what)) for x, what in ((corpus, "corpus"), (queries, "queries"))
    )
    if queries.shape[1] != corpus.shape[1]:
        raise DimensionError(f"queries have {queries.shape[1]} dimensions, the corpus {corpus.shape[1]}")
    return corpus, queries


SHORTLIST_FACTOR = 10  # the funnel's shortlist, x k


def search_vectors(
    corpus: Any,
    queries: Any,
    k: int,
    dims: int | None = None,
    shortlist_factor: int = SHORTLIST_FACTOR,
    basis: str = "model",
) -> tuple[np.ndarray, np.ndarray]:
    """Scores and corpus rows (each queries x k) by cosine; with ``dims``, a funnel as the store's."""
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
        raise SubspacesError(f"--shortlist must be at least 1, got {shortlist_factor}")
    axes = maths.principal_axes(corpus) if basis == "pca" else None
    prefixes = prefix_rows(corpus, dims, axes)
    index = topk.int8_index(prefixes) if topk.scans_codes(len(corpus), len(queries)) else topk.flat_index(prefixes)
    return topk.funnel(index, corpus, queries, k, shortlist_factor * k, prefix_queries=prefix_rows(queries, dims, axes))


def search_quantized(
    corpus: Any,
    queries: Any,
    k: int,
    kind: codes.Kind,
    rescore: int | None = 4,
    calibration_rows: int = codes.CALIBRATION_ROWS,
) -> tuple[np.ndarray, np.ndarray, str | None]:
    """Scores, corpus rows and what the shortlist was rescored against, searching the unit corpus's codes (int8
    calibrated on ``calibration_rows`` sampled rows, or binary) by cosine; ``rescore x k`` candidates (None: none)
    are rescored against the dequantized codes (int8) or the float corpus (binary)."""
    corpus, queries = _unit_pair(corpus, queries)
    cal = codes.calibrate_int8(codes.calibration_sample(corpus, calibration_rows)) if kind == "int8" else None
    floats = corpus if kind == "binary" else None
    quantized = codes.quantize(corpus, kind, cal)
    scores, rows = codes.search(queries, quantized, kind=kind, k=k, calibration=cal, rescore=rescore, corpus=floats)
    against = None if rescore is None else ("float corpus" if floats is not None else "dequantized codes")
    return scores, rows, against
