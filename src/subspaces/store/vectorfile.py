"""A table version's float vectors in one file, ``vectors/<table>/v<version>.npy``, for searches of a space too large
to hold in memory (over :data:`IN_MEMORY_BYTES`). Written once per version under a temporary name, then renamed;
read by positional reads, in blocks or at a few rows, so a search holds no more of it than it reads. A read-only
store without the file is refused in one line (:func:`current`).
"""

from __future__ import annotations

import errno
import os
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from subspaces.errors import SubspacesError

FOLDER = "vectors"
IN_MEMORY_BYTES = 256 * 2**20  # a space's float vectors up to this size are read into memory, larger ones streamed
BLOCK_BYTES = 4 * 2**20  # rows read (and scored) at a time from the file: a few MiB, near the cache
BATCH_ROWS = 8192  # rows read from LanceDB at a time while writing the file


def block_rows(dim: int) -> int:
    """How many rows of ``dim`` float32 values a block holds (at least 1,024)."""
    return max(1024, BLOCK_BYTES // (4 * dim))


class VectorFile:
    """The vector file at ``path``: its memory map (``array``, read a few rows at a time) and block reads."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.array: np.ndarray = np.load(path, mmap_mode="r", allow_pickle=False)
        self.shape: tuple[int, int] = (int(self.array.shape[0]), int(self.array.shape[1]))
        self.offset = int(self.array.offset)
        self.dtype = self.array.dtype  # float32 for vectors; int8 for a quantized copy's codes read the same way

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, rows: Any) -> np.ndarray:
        """The rows at ``rows`` (any shape, or a slice) by positional reads (a memory map would keep pages)."""
        if isinstance(rows, slice):
            rows = np.arange(*rows.indices(self.shape[0]))
        index = np.asarray(rows, dtype=np.int64)
        n, dim = self.shape
        flat = np.where(index.ravel() < 0, index.ravel() + n, index.ravel())
        if flat.size and (flat.min() < 0 or flat.max() >= n):
            raise IndexError(f"row {int(flat.max() if flat.max() >= n else flat.min())} of {n:,}")
        unique, back = np.unique(flat, return_inverse=True)
        out = np.empty((len(unique), dim), dtype=self.dtype)
        width = dim * self.dtype.itemsize
        fd = os.open(self.path, os.O_RDONLY)
        try:
            starts = np.flatnonzero(np.diff(unique, prepend=-2) != 1)  # runs of consecutive rows, one read each
            ends = np.append(starts[1:], len(unique))
            for first, last in zip(starts.tolist(), ends.tolist(), strict=True):
                size = (last - first) * width
                data = os.pread(fd, size, self.offset + int(unique[first]) * width)
                if len(data) != size:
                    raise OSError(f"{self.path} ended before row {int(unique[last - 1]):,}")
                out[first:last] = np.frombuffer(data, dtype=self.dtype).reshape(last - first, dim)
        finally:
            os.close(fd)
        return out[back.ravel()].reshape(*index.shape, dim)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        """Every row (what a small space's callers read whole)."""
        whole = self[np.arange(self.shape[0])]
        return whole if dtype is None else whole.astype(dtype)

    def blocks(self, size: int) -> Iterator[tuple[int, np.ndarray]]:
        """``(first row, rows)``, ``size`` rows at a time, in one reused buffer (valid until the next read)."""
        n, dim = self.shape
        buffer = np.empty((min(size, max(n, 1)), dim), dtype=self.dtype)
        with open(self.path, "rb", buffering=0) as fh:
            for start in range(0, n, size):
                rows = min(size, n - start)
                view = buffer[:rows]
                fh.seek(self.offset + start * dim * self.dtype.itemsize)
                if fh.readinto(view.data.cast("B")) != view.nbytes:
                    raise OSError(f"{self.path} ended before row {start + rows:,}")
                yield start, view


def current(folder: Path, table: Any, dim: int) -> VectorFile:
    """``table``'s vector file (written first if missing; other versions' files removed)."""
    path = folder / FOLDER / table.name / f"v{table.version}.npy"
    rows = table.count()
    if path.is_file():
        found = VectorFile(path)
        if found.shape == (rows, dim):
            return found
    try:
        write(path, table, rows, dim)
    except OSError as exc:
        if exc.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):  # a full disk and co. are another story
            raise
        raise SubspacesError(
            f"{folder}: searching its {rows:,} x {dim} vectors of {table.name} reads them from a file the first "
            f"search writes under {folder / FOLDER}, and this folder is read-only ({exc.strerror}): make it "
            "writable for one search (the file is kept and reused), or search a writable copy"
        ) from exc
    for old in path.parent.iterdir():  # a reader still mapping an old file keeps it until it closes (POSIX)
        if old != path:
            old.unlink(missing_ok=True)
    return VectorFile(path)


def write(path: Path, table: Any, rows: int, dim: int) -> None:
    """Stream ``table``'s vectors into ``path``: written under a temporary name, flushed, then renamed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")
    try:
        with open(tmp, "wb") as fh:  # plain writes: the rows pass through the page cache, not this process
            header = {"descr": np.lib.format.dtype_to_descr(np.dtype(np.float32)), "fortran_order": False}
            np.lib.format.write_array_header_1_0(fh, header | {"shape": (rows, dim)})
            done = 0
            for part in table.vector_blocks(dim, BATCH_ROWS):
                if done + len(part) > rows:
                    raise OSError(f"{table.label}: the table holds more rows than it counted ({rows:,})")
                fh.write(np.ascontiguousarray(part, dtype=np.float32).tobytes())
                done += len(part)
            if done != rows:
                raise OSError(f"{table.label}: read {done:,} rows of the {rows:,} the table counts")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def drop(folder: Path, table: str) -> None:
    """Remove every vector file of ``table`` (before the table: a new one restarts its versions)."""
    shutil.rmtree(folder / FOLDER / table, ignore_errors=True)
