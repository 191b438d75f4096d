"""Map a stored vector collection (.npy or .parquet) into the target space, chunk by chunk, atomically.

Input is read a chunk at a time (``.npy`` memory-mapped, ``.parquet`` batch by batch) and output written the same
way (a memory-mapped ``.npy`` or a streaming parquet writer) into a temporary file that replaces the output only
once every chunk is done, so collections larger than memory work and an interrupted run leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from subspaces.align.preprocess import check_embeddings
from subspaces.errors import DataError, DimensionError, SubspacesError
from subspaces.io import atomic_path, iter_parquet_embeddings, read_embedding_file


def _chunks(path: Path, chunk_size: int) -> tuple[int, str | None, Iterator[np.ndarray]]:
    if path.suffix == ".parquet":
        return iter_parquet_embeddings(path, chunk_size)
    source, _ = read_embedding_file(path, mmap=True)
    return len(source), None, (np.asarray(source[i : i + chunk_size]) for i in range(0, len(source), chunk_size))


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


def _same_file(a: Path, b: Path) -> bool:
    return a.resolve() == b.resolve() or (a.exists() and b.exists() and os.path.samefile(a, b))


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

    The input is never modified (``output_path`` must be another file). Bad rows (NaN, zero vectors) and a
    wrong width raise a :class:`DimensionError` naming the row in the file; an unreadable or ragged file a
    :class:`DataError`.
    """
    from subspaces.progress import Progress

    in_path, out_path = Path(input_path), Path(output_path)
    if int(chunk_size) < 1:
        raise SubspacesError(f"chunk_size must be at least 1, got {chunk_size}")
    if out_path.suffix not in (".npy", ".parquet"):
        raise DataError("output must end in .npy or .parquet", path=out_path)
    if _same_file(in_path, out_path):
        raise SubspacesError(f"output must differ from input ({in_path}): the original collection is never modified")
    aligner._check_fitted()
    n, column, chunks = _chunks(in_path, chunk_size)
    if n == 0:
        raise DataError("holds no rows", path=in_path)
    with (
        atomic_path(out_path) as tmp,
        _writer(tmp, out_path.suffix, n, aligner.n_features_out_, column) as write,
        Progress(n, f"align apply: mapping {in_path.name}", unit="row", enabled=progress) as bar,
    ):
        start = 0
        for chunk in chunks:
            try:
                mapped = aligner.transform(chunk, centered=centered)
            except DimensionError:
                # transform numbers rows within the chunk; checked again (only on failure) to name them in the file.
                where = f"{in_path}, rows {start}..{start + len(chunk) - 1}"
                check_embeddings(chunk, where, dim=aligner.n_features_in_, row_offset=start)
                raise
            write(start, mapped)
            start += len(chunk)
            bar.update(len(chunk))
    return n
