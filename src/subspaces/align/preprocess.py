"""Step 1 of mini-vec2vec: centre each space on its own training mean, then L2-normalise every row.

Centring removes the large common direction that sentence encoders share across all inputs (the "cone"), so
cosine structure reflects content; the stored means let new vectors be transformed exactly like the training set.
"""

from __future__ import annotations

import numpy as np

from subspaces import vectors
from subspaces.errors import DimensionError

ZERO_NORM = 1e-8  # below this a row has no direction to normalise


def check_embeddings(x: np.ndarray, what: str, *, dim: int | None = None, row_offset: int = 0) -> np.ndarray:
    """A 2-D float32 C-contiguous copy-free view of ``x``, or a :class:`DimensionError` naming the bad rows.

    ``row_offset`` is added to the row numbers in messages (for ``x`` a chunk of a larger collection).
    """
    x = np.asarray(x)
    if x.ndim != 2 or x.shape[0] == 0:
        raise DimensionError(f"{what}: expected a non-empty 2-D array (rows x dims), got shape {x.shape}")
    if dim is not None and x.shape[1] != dim:
        raise DimensionError(f"{what}: has {x.shape[1]} dimensions, the aligner was fitted on {dim}")
    x = np.ascontiguousarray(x, dtype=np.float32)
    bad = ~np.isfinite(x).all(axis=1)
    if bad.any():
        rows = np.flatnonzero(bad)
        raise DimensionError(f"{what}: {len(rows)} row(s) hold NaN or inf (first: row {row_offset + rows[0]})")
    zero = np.linalg.norm(x, axis=1) < ZERO_NORM
    if zero.any():
        rows = np.flatnonzero(zero)
        raise DimensionError(
            f"{what}: {len(rows)} row(s) are zero vectors (first: row {row_offset + rows[0]}), e.g. empty texts"
        )
    return x


def normalize_rows(x: np.ndarray) -> np.ndarray:
    """Unit rows in float32, normalised in ``x``'s own float type."""
    return vectors.normalize_rows(x, eps=ZERO_NORM).astype(np.float32, copy=False)


def center_normalize(x: np.ndarray, mean: np.ndarray) -> np.ndarray:
    """``normalize(x - mean)``; a row equal to the mean has no direction and maps to zero."""
    return normalize_rows(x - mean)
