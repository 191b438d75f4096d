"""Map a stored vector collection (.npy or .parquet) into the target space, chunk by chunk, atomically
(:func:`subspaces.vectors_file.map_vectors_file`)."""

from __future__ import annotations

import os

import numpy as np

from subspaces.align.preprocess import check_embeddings
from subspaces.errors import DimensionError
from subspaces.vectors_file import map_vectors_file


def apply_to_file(
    aligner,
    input_path: str | os.PathLike[str],
    output_path: str | os.PathLike[str],
    *,
    centered: bool = False,
    chunk_size: int = 65_536,
    show_progress: bool = False,
    force: bool = False,
) -> int:
    """Write ``aligner.transform`` of every row of ``input_path`` to ``output_path`` (another file); returns the row
    count. A map its fit did not trust is refused unless ``force``; a bad row is named by its place in the file."""

    def mapped(rows: np.ndarray, where: str, start: int) -> np.ndarray:
        try:
            return aligner.transform(rows, centered=centered)
        except DimensionError:
            # transform numbers rows within the chunk; checked again (only on failure) to name them in the file.
            check_embeddings(rows, where, dim=aligner.n_features_in_, row_offset=start)
            raise

    aligner._check_fitted()
    if not force:
        aligner.check_trusted()
    return map_vectors_file(
        input_path,
        output_path,
        mapped,
        width=aligner.n_features_out_,
        label="align apply: mapping",
        chunk_size=chunk_size,
        show_progress=show_progress,
    )
