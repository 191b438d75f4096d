"""Adapt a stored collection (.npy or .parquet) chunk by chunk into a temporary file renamed over the output.

The chunked reader, the writers and the same-file check are ``align apply``'s (:mod:`subspaces.align.apply`), so
both commands stream the same formats and leave nothing behind when interrupted.
"""

from __future__ import annotations

import os
from pathlib import Path

from subspaces.adapt.adapter import MatryoshkaAdapter, check_vectors
from subspaces.align.apply import _chunks, _same_file, _writer
from subspaces.errors import DataError, SubspacesError
from subspaces.io import atomic_path


def adapt_file(
    adapter: MatryoshkaAdapter,
    input_path: str | os.PathLike[str],
    output_path: str | os.PathLike[str],
    *,
    chunk_size: int = 65_536,
    progress: bool = False,
) -> int:
    """Write ``adapter.transform`` of every row of ``input_path`` to ``output_path``; returns the row count.

    The input is never modified (the output must be another file) and the output appears only when complete.
    A bad row (NaN/inf, zero) or a wrong width raises a :class:`DimensionError` naming the row in the file.
    """
    from subspaces.progress import Progress

    in_path, out_path = Path(input_path), Path(output_path)
    if int(chunk_size) < 1:
        raise SubspacesError(f"chunk_size must be at least 1, got {chunk_size}")
    if out_path.suffix not in (".npy", ".parquet"):
        raise DataError("output must end in .npy or .parquet", path=out_path)
    if _same_file(in_path, out_path):
        raise SubspacesError(f"output must differ from input ({in_path}): the original collection is never modified")
    adapter._check_fitted()
    n, column, chunks = _chunks(in_path, chunk_size)
    if n == 0:
        raise DataError("holds no rows", path=in_path)
    with (
        atomic_path(out_path) as tmp,
        _writer(tmp, out_path.suffix, n, adapter.n_features_in_, column) as write,
        Progress(n, f"adapt apply: {in_path.name}", unit="row", enabled=progress) as bar,
    ):
        start = 0
        for chunk in chunks:
            where = f"{in_path}, rows {start}..{start + len(chunk) - 1}"
            rows = check_vectors(chunk, where, dim=adapter.n_features_in_, row_offset=start)
            write(start, adapter.transform(rows))
            start += len(chunk)
            bar.update(len(chunk))
    return n
