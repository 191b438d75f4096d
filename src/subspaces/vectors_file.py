"""Map every row of a stored vector collection (.npy or .parquet) into another file, chunk by chunk, into a
temporary file that replaces the output once complete: ``align apply`` and ``adapt apply`` both stream through it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from subspaces.errors import DataError, SubspacesError
from subspaces.io import atomic_path, embedding_chunks, same_file
from subspaces.progress import Progress

#: ``transform(rows, where, start)``: ``rows`` (the file's rows ``start``.., named ``where`` in errors) mapped.
RowsTransform = Callable[[np.ndarray, str, int], np.ndarray]


@contextlib.contextmanager
def _writer(
    tmp: Path, suffix: str, n: int, dim: int, column: str | None
) -> Iterator[Callable[[int, np.ndarray], None]]:
    """``write(start, rows)`` into a memory-mapped ``.npy`` of ``n x dim``, or appended to a parquet file."""
    if suffix == ".npy":
        sink = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float32, shape=(n, dim))

        def write(start: int, rows: np.ndarray) -> None:
            sink[start : start + len(rows)] = rows

        try:
            yield write
        finally:
            sink.flush()
            del sink
        return
    import pyarrow as pa
    import pyarrow.parquet as pq

    name = column or "embedding"  # a parquet input's column name is kept
    # Fixed-size lists: every row has ``dim`` numbers, and no 32-bit offsets to overflow on large chunks.
    parquet = pq.ParquetWriter(tmp, pa.schema([(name, pa.list_(pa.float32(), dim))]))

    def append(start: int, rows: np.ndarray) -> None:
        values = pa.FixedSizeListArray.from_arrays(pa.array(rows.ravel(), type=pa.float32()), dim)
        parquet.write_table(pa.table({name: values}))

    try:
        yield append
    finally:
        parquet.close()


def map_vectors_file(
    input_path: str | os.PathLike[str],
    output_path: str | os.PathLike[str],
    transform: RowsTransform,
    *,
    width: int,
    label: str,
    chunk_size: int = 65_536,
    show_progress: bool = False,
) -> int:
    """Write ``transform`` of every chunk of ``input_path`` to ``output_path`` (another file, .npy or .parquet;
    ``width`` floats a row); returns the row count. ``label`` starts the progress line."""
    in_path, out_path = Path(input_path), Path(output_path)
    if int(chunk_size) < 1:
        raise SubspacesError(f"chunk_size must be at least 1, got {chunk_size}")
    if out_path.suffix not in (".npy", ".parquet"):
        raise DataError("output must end in .npy or .parquet", path=out_path)
    if same_file(in_path, out_path):
        raise SubspacesError(f"output must differ from input ({in_path}): the original collection is never modified")
    n, column, chunks = embedding_chunks(in_path, chunk_size)
    if n == 0:
        raise DataError("holds no rows", path=in_path)
    with (
        atomic_path(out_path) as tmp,
        _writer(tmp, out_path.suffix, n, width, column) as write,
        Progress(n, f"{label} {in_path.name}", unit="row", enabled=show_progress) as bar,
    ):
        start = 0
        for chunk in chunks:
            write(start, transform(chunk, f"{in_path}, rows {start}..{start + len(chunk) - 1}", start))
            start += len(chunk)
            bar.update(len(chunk))
    return n
