"""Step 1 of mini-vec2vec: centre each space on its own training mean (removing the encoders' common direction),
then L2-normalise every row."""

from __future__ import annotations

import numpy as np

from subspaces import vectors

ZERO_NORM = 1e-8  # below this a row has no direction to normalise


def check_embeddings(x: np.ndarray, what: str, *, dim: int | None = None, row_offset: int = 0) -> np.ndarray:
    """:func:`subspaces.vectors.check_rows` with the aligner's width ``dim``: a 2-D float32 array without NaN,
    inf or zero rows."""
    return vectors.check_rows(x, what, dim=dim, fitted="the aligner", row_offset=row_offset, eps=ZERO_NORM)


def normalize_rows(x: np.ndarray) -> np.ndarray:
    """Unit rows in float32, normalised in ``x``'s own float type."""
    return vectors.normalize_rows(x, eps=ZERO_NORM).astype(np.float32, copy=False)


def center_normalize(x: np.ndarray, mean: np.ndarray) -> np.ndarray:
    """``normalize(x - mean)``; a row equal to the mean has no direction and maps to zero."""
    return normalize_rows(x - mean)
