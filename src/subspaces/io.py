"""Atomic file writes and plain-text corpus reading."""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import numpy as np

from subspaces.errors import DataError


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; on success rename it over ``path``.

    An interrupted or failing writer leaves ``path`` untouched (the old file, or none).
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp" + "".join(target.suffixes), dir=target.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.replace(tmp_path, target)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike[str], mode: str = "w", **kwargs: Any) -> Iterator[IO[Any]]:
    with atomic_path(path) as tmp, open(tmp, mode, **kwargs) as handle:
        yield handle


def save_npy(path: str | os.PathLike[str], array: np.ndarray) -> None:
    """Write ``array`` to ``path`` (.npy) atomically."""
    with atomic_open(path, "wb") as handle:
        np.save(handle, array)


def save_json(path: str | os.PathLike[str], obj: Any) -> None:
    with atomic_open(path, "w", encoding="utf-8") as handle:
        json.dump(obj, handle, indent=2, ensure_ascii=False)
        handle.write("\n")


def open_text(path: str | os.PathLike[str]) -> IO[str]:
    """Open a UTF-8 text file, transparently gunzipping ``.gz``."""
    p = Path(path)
    if not p.is_file():
        raise DataError("file not found", path=p)
    if p.suffix == ".gz":
        return gzip.open(p, "rt", encoding="utf-8")
    return open(p, encoding="utf-8")


def read_lines(path: str | os.PathLike[str], *, skip_blank: bool = True, limit: int | None = None) -> list[str]:
    """One text per line from ``.txt`` or ``.txt.gz``; blank lines are dropped when ``skip_blank``.

    Raises :class:`DataError` if the file is missing, not UTF-8, or holds no text.
    """
    out: list[str] = []
    try:
        with open_text(path) as handle:
            for line in handle:
                text = line.rstrip("\n").rstrip("\r")
                if skip_blank and not text.strip():
                    continue
                out.append(text)
                if limit is not None and len(out) >= limit:
                    break
    except UnicodeDecodeError as exc:
        raise DataError(f"not UTF-8 text ({exc.reason} at byte {exc.start})", path=path) from exc
    except (OSError, EOFError) as exc:  # truncated gzip, unreadable file
        raise DataError(f"cannot read: {exc}", path=path) from exc
    if not out:
        raise DataError("holds no text", path=path)
    return out


def read_embedding_file(path: str | os.PathLike[str], *, mmap: bool = False) -> tuple[np.ndarray, str | None]:
    """A 2-D array from ``.npy`` (memory-mapped if ``mmap``) or ``.parquet`` with one list column.

    Returns the array and, for parquet, the embedding column's name (so a writer can keep it). No value checks:
    see :func:`load_embeddings`.
    """
    from subspaces.errors import DimensionError

    p = Path(path)
    if not p.is_file():
        raise DataError("file not found", path=p)
    column = None
    if p.suffix == ".parquet":
        import pandas as pd

        frame = pd.read_parquet(p)
        if frame.shape[1] != 1:
            raise DataError(f"expected one embedding column, found {list(frame.columns)}", path=p)
        try:
            arr = np.stack(frame.iloc[:, 0].to_numpy()).astype(np.float32)
        except ValueError as exc:
            raise DataError(f"rows of the embedding column differ in length: {exc}", path=p) from exc
        column = str(frame.columns[0])
    elif p.suffix == ".npy":
        try:
            arr = np.load(p, mmap_mode="r" if mmap else None, allow_pickle=False)
        except ValueError as exc:
            raise DataError(f"not a .npy array: {exc}", path=p) from exc
    else:
        raise DataError("expected a .npy or .parquet file", path=p)
    if arr.ndim != 2:
        raise DimensionError(f"{p}: expected a 2-D array (rows x dims), got shape {arr.shape}")
    return arr, column


def load_embeddings(path: str | os.PathLike[str], *, allow_nan: bool = False) -> np.ndarray:
    """Load a 2-D float array (see :func:`read_embedding_file`), checked for rows and NaN/inf."""
    from subspaces.errors import DimensionError

    arr, _ = read_embedding_file(path)
    if arr.shape[0] == 0:
        raise DataError("holds no rows", path=path)
    if not allow_nan and not np.isfinite(arr).all():
        bad = int((~np.isfinite(arr)).any(axis=1).sum())
        raise DimensionError(f"{path}: {bad} row(s) hold NaN or inf")
    return arr
