"""Step 1 of mini-vec2vec: centre each space on its own training mean (removing the encoders' common direction),
then L2-normalise every row."""

from __future__ import annotations

from functools import partial

import numpy as np

from subspaces import vectors

normalize_rows = partial(vectors.normalize_rows, dtype=np.float32)  # the aligner works in float32


def check_embeddings(x: np.ndarray, what: str, *, dim: int | None = None, row_offset: int = 0) -> np.ndarray:
    """:func:`subspaces.vectors.check_rows` with the aligner's width ``dim``: a 2-D float32 array without NaN,
    inf or zero rows."""
    return vectors.check_rows(x, what, dim=dim, fitted="the aligner", row_offset=row_offset)


def center_normalize(x: np.ndarray, mean: np.ndarray) -> np.ndarray:
    """``normalize(x - mean)``; a row equal to the mean has no direction and maps to zero."""
    return normalize_rows(x - mean)
