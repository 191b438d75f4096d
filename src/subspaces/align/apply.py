"""Map a stored vector collection (.npy or .parquet) into the target space, chunk by chunk, atomically.

``.npy`` input is memory-mapped and the output written through a memory-mapped ``.npy`` in a temporary file, so
collections larger than memory work; the temporary file replaces the output only once every chunk is done.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from subspaces.errors import DataError, DimensionError
from subspaces.io import atomic_path, read_embedding_file


def apply_to_file(
    aligner,
    input_path: str | os.PathLike[str],
    output_path: str | os.PathLike[str],
    *,
    centered: bool = False,
    chunk_size: int = 65_536,
    progress: bool = False,
) -> int:
    """Write ``aligner.transform`` of every row of ``input_path`` to ``output_path``; returns the row count.

    Bad rows (NaN, zero vectors) raise a :class:`DimensionError` naming their global row number.
    """
    from tqdm.auto import tqdm

    source, column = read_embedding_file(input_path, mmap=True)
    if source.shape[1] != aligner.n_features_in_:
        raise DimensionError(f"{input_path}: has {source.shape[1]} dimensions, the aligner maps {aligner.n_features_in_}")
    n = source.shape[0]
    out_path = Path(output_path)
    if out_path.suffix not in (".npy", ".parquet"):
        raise DataError("output must end in .npy or .parquet", path=out_path)
    mapped_all = None if out_path.suffix == ".npy" else np.empty((n, aligner.n_features_out_), np.float32)
    with atomic_path(out_path) as tmp:
        if mapped_all is None:
            sink = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float32, shape=(n, aligner.n_features_out_))
        else:
            sink = mapped_all
        for start in tqdm(range(0, n, chunk_size), desc="mapping", unit="chunk", disable=not progress):
            chunk = np.asarray(source[start : start + chunk_size])
            try:
                sink[start : start + len(chunk)] = aligner.transform(chunk, centered=centered)
            except DimensionError as exc:
                raise DimensionError(f"{input_path}, rows {start}..{start + len(chunk) - 1}: {exc}") from exc
        if mapped_all is None:
            sink.flush()
            del sink
        else:
            import pandas as pd

            pd.DataFrame({column or "embedding": list(mapped_all)}).to_parquet(tmp)
    return n
