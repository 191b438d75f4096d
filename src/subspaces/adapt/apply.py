"""Adapt a stored collection (.npy or .parquet) chunk by chunk, streamed as ``align apply`` does
(:func:`subspaces.vectors_file.map_vectors_file`)."""

from __future__ import annotations

import os

import numpy as np

from subspaces.adapt.adapter import MatryoshkaAdapter, check_vectors
from subspaces.vectors_file import map_vectors_file


def adapt_file(
    adapter: MatryoshkaAdapter,
    input_path: str | os.PathLike[str],
    output_path: str | os.PathLike[str],
    *,
    chunk_size: int = 65_536,
    show_progress: bool = False,
) -> int:
    """Write ``adapter.transform`` of every row of ``input_path`` to ``output_path`` (appearing only when complete);
    returns the row count. A bad row (NaN/inf, zero) or width raises a :class:`DimensionError` naming the row."""

    def adapted(rows: np.ndarray, where: str, start: int) -> np.ndarray:
        return adapter.transform(check_vectors(rows, where, dim=adapter.n_features_in_, row_offset=start))

    adapter._check_fitted()
    return map_vectors_file(
        input_path,
        output_path,
        adapted,
        width=adapter.n_features_in_,
        label="adapt apply:",
        chunk_size=chunk_size,
        show_progress=show_progress,
    )
