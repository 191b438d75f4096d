"""Atomic file writes; texts, CSV/JSON-lines records and embeddings read with errors that name the file and line."""

from __future__ import annotations

import contextlib
import csv
import functools
import gzip
import io
import json
import os
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import numpy as np

from subspaces.errors import DataError, DimensionError, SubspacesError


@functools.cache
def _umask() -> int:
    mask = os.umask(0)  # the only way to read it is to set it; put it straight back
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; on success rename it over ``path``.

    An interrupted or failing writer leaves ``path`` untouched (the old file, or none).
    """
    target = Path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(
            prefix=f".{target.name}.", suffix=".tmp" + "".join(target.suffixes), dir=target.parent
        )
    except OSError as exc:  # named by the user's path, not by the temporary name
        raise _cannot_write(target, exc) from None
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        if tmp_path.exists():  # mkstemp makes it private (0600); give it the mode a plain open() would
            os.chmod(tmp_path, 0o666 & ~_umask())
        try:
            os.replace(tmp_path, target)
        except OSError as exc:
            raise _cannot_write(target, exc) from None
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def _cannot_write(target: Path, exc: OSError) -> SubspacesError:
    reason = "it is a folder" if target.is_dir() else (exc.strerror or str(exc))
    return SubspacesError(f"cannot write {target}: {reason}")


def check_writable(path: str | os.PathLike[str], what: str = "output", *, folder: bool = False) -> Path:
    """``path``, or a refusal before any work if it will not take the file (``folder``: the folder): a folder (a
    file), a path under a file, or a folder that refuses a new file (tried). ``what`` names the option."""
    target = Path(path)
    if folder and target.exists() and not target.is_dir():
        raise SubspacesError(f"{what} {target} is a file; name a folder")
    if not folder and target.is_dir():
        raise SubspacesError(f"{what} {target} is a folder; name the file to write")
    home = target if folder else target.parent  # where the file(s) will be made
    parent = home
    while not parent.exists() and parent != parent.parent:  # the missing folders are made when it is written
        parent = parent.parent
    if not parent.is_dir():
        raise SubspacesError(f"cannot write {what} {target}: {parent} is a file, not a folder")
    if parent == home:
        try:
            fd, probe = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=parent)
        except OSError as exc:
            raise SubspacesError(f"cannot write {what} {target}: {exc.strerror or exc}") from None
        os.close(fd)
        os.unlink(probe)
    elif not os.access(parent, os.W_OK | os.X_OK):
        raise SubspacesError(f"cannot write {what} {target}: {parent} is not writable")
    return target


def same_file(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    """Whether ``a`` and ``b`` name one file: the same path once symlinks and ``..`` are resolved, or (both
    existing) the same inode, as a hard link is."""
    pa, pb = Path(a), Path(b)
    if pa.resolve() == pb.resolve():
        return True
    try:
        return pa.exists() and pb.exists() and os.path.samefile(pa, pb)
    except OSError:
        return False


StrPath = str | os.PathLike[str]
#: A command's inputs by option name: a path, several, or None (not given).
InputPaths = Mapping[str, StrPath | Sequence[StrPath] | None]


def check_not_input(output: str | os.PathLike[str] | None, what: str, inputs: InputPaths) -> None:
    """Refuse, before any work, an output path that names one of the command's ``inputs`` (option -> its path or
    paths; None: not given); ``"-"`` (standard input or output) is no file."""
    if output is None or str(output) == "-":
        return
    for name, given in inputs.items():
        paths = [given] if given is None or isinstance(given, (str, os.PathLike)) else list(given)
        for path in paths:
            if path is not None and str(path) != "-" and same_file(output, path):
                raise SubspacesError(
                    f"{what} {output} is the {name} file: output must differ from input (an input is never overwritten)"
                )


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike[str], mode: str = "w", **kwargs: Any) -> Iterator[IO[Any]]:
    with atomic_path(path) as tmp, open(tmp, mode, **kwargs) as handle:
        yield handle


def save_npy(path: str | os.PathLike[str], array: np.ndarray) -> None:
    """Write ``array`` to ``path`` (.npy) atomically."""
    with atomic_open(path, "wb") as handle:
        np.save(handle, array)


EMBEDDING_SUFFIXES = (".npy", ".parquet", ".jsonl")


def embedding_format(path: str | os.PathLike[str]) -> str:
    """The format an embeddings file's suffix names (``.npy``, ``.parquet``, ``.jsonl``); others are refused."""
    suffix = Path(path).suffix.lower()
    if suffix not in EMBEDDING_SUFFIXES:
        raise DataError(
            f"cannot write embeddings as {suffix or 'a file without a suffix'}: "
            f"name a {', '.join(EMBEDDING_SUFFIXES)} file (the suffix picks the format)",
            path=path,
        )
    return suffix


def save_embeddings(path: str | os.PathLike[str], array: np.ndarray, texts: Sequence[str] | None = None) -> None:
    """Write ``array`` atomically in the format of ``path``'s suffix: ``.npy``; ``.parquet``, one column
    ``embedding`` of fixed-size float32 lists; ``.jsonl``, one ``{"text", "embedding"}`` object a row (``text``
    when ``texts`` is given)."""
    kind = embedding_format(path)
    if texts is not None and len(texts) != len(array):
        raise ValueError(f"{len(texts)} texts for {len(array)} rows")
    if kind == ".npy":
        save_npy(path, array)
    elif kind == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        rows = np.ascontiguousarray(array, dtype=np.float32)
        column = pa.FixedSizeListArray.from_arrays(pa.array(rows.ravel(), type=pa.float32()), rows.shape[1])
        with atomic_path(path) as tmp:
            pq.write_table(pa.table({"embedding": column}), tmp)
    else:
        with atomic_open(path, "w", encoding="utf-8") as handle:
            for i, row in enumerate(array.tolist()):
                record = {"text": texts[i], "embedding": row} if texts is not None else {"embedding": row}
                handle.write(json.dumps(record, ensure_ascii=False) + "\n")


def save_json(path: str | os.PathLike[str], obj: Any) -> None:
    with atomic_open(path, "w", encoding="utf-8") as handle:
        json.dump(obj, handle, indent=2, ensure_ascii=False)
        handle.write("\n")


def check_file(path: str | os.PathLike[str]) -> Path:
    """``path`` if it is a file; else a :class:`DataError` that says whether it is a folder or missing."""
    p = Path(path)
    if p.is_dir():
        raise DataError("is a folder, not a file", path=p)
    if not p.is_file():
        raise DataError("file not found", path=p)
    return p


def open_text(path: str | os.PathLike[str], *, newline: str | None = None) -> IO[str]:
    """Open a UTF-8 text file, transparently gunzipping ``.gz`` (``newline=""`` for the csv module)."""
    p = check_file(path)
    if p.suffix.lower() == ".gz":
        return gzip.open(p, "rt", encoding="utf-8", newline=newline)
    return open(p, encoding="utf-8", newline=newline)


STDIN = "-"


@contextlib.contextmanager
def _reading(source: object) -> Iterator[None]:
    """Bytes that are not UTF-8, an unreadable file or a truncated gzip, as a :class:`DataError` naming ``source``."""
    try:
        yield
    except UnicodeDecodeError as exc:
        raise DataError(f"not UTF-8 text ({exc.reason} at byte {exc.start})", path=source) from exc
    except (OSError, EOFError) as exc:
        raise DataError(f"cannot read: {exc}", path=source) from exc


def read_lines(path: str | os.PathLike[str], *, skip_blank: bool = True, limit: int | None = None) -> list[str]:
    """One text per line from ``.txt``, ``.txt.gz`` or standard input (``-``, read as UTF-8 whatever the locale);
    blank lines are dropped when ``skip_blank``. A :class:`DataError` if missing, not UTF-8, or without text."""
    out: list[str] = []
    stdin = str(path) == STDIN
    source = "<stdin>" if stdin else path  # what the messages call it
    with (
        _reading(source),
        io.StringIO(sys.stdin.buffer.read().decode("utf-8"), newline=None) if stdin else open_text(path) as lines,
    ):
        for line in lines:
            text = line.rstrip("\n").rstrip("\r")
            if skip_blank and not text.strip():
                continue
            out.append(text)
            if limit is not None and len(out) >= limit:
                break
    if not out:
        raise DataError("holds no text", path=source)
    return out


def read_queries(path: str | os.PathLike[str]) -> list[str]:
    """One query per line, result i answering line i + 1: a blank line between queries is refused with its number
    (dropping it would shift every later result), blank lines at the end are ignored."""
    lines = read_lines(path, skip_blank=False)
    while lines and not lines[-1].strip():
        lines.pop()
    source = "<stdin>" if str(path) == STDIN else path
    if not lines:
        raise DataError("holds no text", path=source)
    for number, line in enumerate(lines, 1):
        if not line.strip():
            raise DataError(
                "blank query line; each line is one query (result i answers line i): remove it", source, number
            )
    return lines


TEXT_SUFFIXES = (".jsonl", ".ndjson", ".csv")
NOT_TEXT_SUFFIXES = (".json", ".parquet", ".npy", ".npz")


def base_suffix(path: str | os.PathLike[str]) -> str:
    """``"a.jsonl.gz"`` -> ``".jsonl"``."""
    name = Path(path).name.lower().removesuffix(".gz")
    return Path(name).suffix


def read_texts(path: str | os.PathLike[str], *, text_field: str = "text") -> list[str]:
    """The texts of ``path``, in order: each line of a text file or ``-`` (blank lines kept as empty texts); the
    ``text_field`` of each JSON line (``.jsonl``/``.ndjson``); the ``text_field`` column of a ``.csv``. Each may be
    gzipped; other structured formats are refused rather than read as lines of text."""
    kind = "" if str(path) == STDIN else base_suffix(path)
    if kind in NOT_TEXT_SUFFIXES:
        raise DataError(
            f"a {kind} file is not read as text: give .txt (one text a line), .jsonl (the {text_field!r} field of "
            f"each line) or .csv (its {text_field!r} column)",
            path=path,
        )
    if kind not in TEXT_SUFFIXES:
        return read_lines(path, skip_blank=False)
    with _reading(path):
        texts = _read_jsonl_texts(path, text_field) if kind != ".csv" else _read_csv_texts(path, text_field)
    if not texts:
        raise DataError("holds no rows", path=path)
    return texts


def read_jsonl(path: str | os.PathLike[str], *, label: object = None) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` for each non-blank line of a JSON-lines file (``.gz`` read through, a byte-order
    mark dropped); anything else is refused naming the file (``label``, default ``path``) and the line."""
    where = path if label is None else label
    with _reading(where), open_text(path) as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line.removeprefix("\ufeff") if number == 1 else line)
            except ValueError as exc:
                raise DataError(f"not JSON ({exc})", where, number) from None
            if not isinstance(record, dict):
                raise DataError(f"expected a JSON object, got {_json_type(record)}", where, number)
            yield number, record


def read_csv(
    path: str | os.PathLike[str], columns: Sequence[str], optional: Sequence[str] = (), **dialect: Any
) -> Iterator[tuple[int, int, dict[str, str]]]:
    """``(row number from 0, line number, {column: cell})`` for each non-blank row of a CSV file (``.gz`` read
    through, ``dialect``: :func:`csv.reader`'s options) whose header names all of ``columns`` (and any of
    ``optional``); every row has the header's field count, else a :class:`DataError` naming the file and line."""
    p = check_file(path)
    with _reading(p), open_text(p, newline="") as handle:
        reader = csv.reader(handle, **dialect)
        try:
            header = [h.strip() for h in next(reader)]
            header[:1] = [h.removeprefix("\ufeff") for h in header[:1]]  # a byte-order mark
            missing = [c for c in columns if c not in header]
            if missing:
                *rest, last = columns
                needed = f"{', '.join(rest)} and {last}" if rest else last
                message = f"header lacks column(s) {', '.join(missing)}: it must name {needed}, found {header}"
                raise DataError(message, p, 1)
            wanted = {c: header.index(c) for c in (*columns, *optional) if c in header}
            for number, row in enumerate(reader):
                if not row or all(not c.strip() for c in row):
                    continue
                if len(row) != len(header):
                    raise DataError(f"expected {len(header)} fields, found {len(row)}", p, reader.line_num)
                yield number, reader.line_num, {c: row[i] for c, i in wanted.items()}
        except StopIteration:
            raise DataError("file is empty", path=p) from None
        except (OSError, EOFError, csv.Error) as exc:  # a truncated gzip, an unreadable file, a broken quote
            raise DataError(f"cannot read as CSV: {exc}", path=p) from exc


def _read_jsonl_texts(path: str | os.PathLike[str], field: str) -> list[str]:
    texts: list[str] = []
    for number, record in read_jsonl(path):
        if field not in record:
            fields = ", ".join(map(repr, list(record)[:5])) or "none"
            raise DataError(f"no field {field!r} (its fields: {fields}; choose one with --text-field)", path, number)
        text = record[field]
        if not isinstance(text, str):
            raise DataError(f"field {field!r} is a JSON {_json_type(text)}, not a string", path, number)
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:  # legal JSON ("\ud800"), not text a tokenizer can read
            bad = f"U+{ord(text[exc.start]):04X}"
            raise DataError(f"field {field!r} holds a lone surrogate ({bad}), not Unicode text", path, number) from None
        texts.append(text)
    return texts


def _json_type(value: Any) -> str:
    names = {bool: "boolean", int: "number", float: "number", list: "array", dict: "object", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def _read_csv_texts(path: str | os.PathLike[str], column: str) -> list[str]:
    texts: list[str] = []
    with open_text(path, newline="") as handle:
        reader = csv.DictReader(handle)
        try:
            header = reader.fieldnames
            if not header:
                return texts
            if column not in header:
                names = ", ".join(map(repr, header[:8]))
                raise DataError(f"no column {column!r} in the header (its columns: {names}; use --text-field)", path, 1)
            for row in reader:
                text = row.get(column)
                if text is None:
                    raise DataError(f"the row has no {column!r} cell", path, reader.line_num)
                texts.append(text)
        except csv.Error as exc:
            raise DataError(f"not valid CSV ({exc})", path, reader.line_num) from None
    return texts


def _parquet_column(path: Path):
    """The open ``pyarrow.parquet.ParquetFile`` of ``path`` and the name of its one embedding column."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as exc:
        raise DataError(f"not a readable parquet file: {exc}", path=path) from exc
    schema = parquet.schema_arrow
    # pandas stores a non-default index as extra columns (e.g. "__index_level_0__"); they are not data.
    index = {c for c in (schema.pandas_metadata or {}).get("index_columns", []) if isinstance(c, str)}
    names = [n for n in schema.names if n not in index]
    if len(names) != 1:
        raise DataError(f"expected one embedding column, found {names}", path=path)
    kind = schema.field(names[0]).type
    if not (pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind)):
        raise DataError(f"column {names[0]!r} holds {kind}, not lists of numbers", path=path)
    if not (pa.types.is_floating(kind.value_type) or pa.types.is_integer(kind.value_type)):
        raise DataError(f"column {names[0]!r} holds lists of {kind.value_type}, not numbers", path=path)
    return parquet, names[0]


def _list_batch_to_array(column, path: Path, first_row: int, dim: int | None) -> np.ndarray:
    """A parquet list column (one batch) as a 2-D float32 array; every row must hold ``dim`` numbers."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if column.null_count:
        row = first_row + int(np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False))[0])
        raise DataError(f"row {row} of the embedding column is null", path=path)
    lengths = pc.list_value_length(column).to_numpy(zero_copy_only=False)
    dim = int(lengths[0]) if dim is None and len(lengths) else dim
    if len(lengths) and (lengths != dim).any():
        row = first_row + int(np.flatnonzero(lengths != dim)[0])
        raise DataError(
            f"row {row} of the embedding column holds {lengths[row - first_row]} numbers, the rows before it {dim}",
            path=path,
        )
    try:
        values = column.flatten().to_numpy(zero_copy_only=False).astype(np.float32)
    except (pa.ArrowException, TypeError, ValueError) as exc:
        raise DataError(f"embedding values are not numbers: {exc}", path=path) from exc
    return values.reshape(len(column), dim or 0)


def embedding_chunks(path: str | os.PathLike[str], chunk_size: int) -> tuple[int, str | None, Iterator[np.ndarray]]:
    """Row count, parquet column name (None for .npy) and 2-D float chunks of an embeddings file, read a chunk at a
    time (a .npy memory-mapped)."""
    p = check_file(path)
    if p.suffix != ".parquet":
        source, _ = read_embedding_file(p, mmap=True)
        return len(source), None, (np.asarray(source[i : i + chunk_size]) for i in range(0, len(source), chunk_size))
    parquet, column = _parquet_column(p)

    def chunks() -> Iterator[np.ndarray]:
        import pyarrow as pa

        done, dim = 0, None
        try:
            for batch in parquet.iter_batches(batch_size=chunk_size, columns=[column]):
                arr = _list_batch_to_array(batch.column(0), p, done, dim)
                dim = arr.shape[1]
                done += len(arr)
                yield arr
        except pa.ArrowException as exc:
            raise DataError(f"unreadable parquet data: {exc}", path=p) from exc

    return parquet.metadata.num_rows, column, chunks()


def read_embedding_file(path: str | os.PathLike[str], *, mmap: bool = False) -> tuple[np.ndarray, str | None]:
    """A 2-D array from ``.npy`` (memory-mapped if ``mmap``) or ``.parquet`` with one list column (read whole), and
    for parquet the column's name. No value checks: see :func:`load_embeddings`."""
    p = check_file(path)
    column = None
    if p.suffix == ".parquet":
        n, column, chunks = embedding_chunks(p, 65_536)
        parts = list(chunks)
        if n == 0 or not parts:
            raise DataError("holds no rows", path=p)
        arr = np.concatenate(parts)  # the reader checked that every row has the first row's length
    elif p.suffix == ".npy":
        try:
            arr = np.load(p, mmap_mode="r" if mmap else None, allow_pickle=False)
        except (ValueError, EOFError, OSError) as exc:  # EOFError: an empty or truncated file
            raise DataError(f"not a readable .npy array: {exc or 'empty file'}", path=p) from exc
    else:
        raise DataError("expected a .npy or .parquet file", path=p)
    if arr.ndim != 2:
        raise DimensionError(f"{p}: expected a 2-D array (rows x dims), got shape {arr.shape}")
    return arr, column


def load_embeddings(path: str | os.PathLike[str]) -> np.ndarray:
    """Load a 2-D float array (see :func:`read_embedding_file`), checked for rows and NaN/inf."""
    arr, _ = read_embedding_file(path)
    if arr.shape[0] == 0:
        raise DataError("holds no rows", path=path)
    bad = np.flatnonzero(~np.isfinite(arr).all(axis=1))
    if len(bad):
        raise DimensionError(f"{path}: {len(bad)} row(s) hold NaN or inf (first: row {bad[0]})")
    return arr
