"""Bring vectors into a store that it did not encode, and take every row out again. An import (:class:`Source`:
``.npy``, ``.parquet``/Arrow IPC, JSON lines or a LanceDB table, with side files) is read twice in batches:
:func:`validate` checks everything and writes nothing, then :func:`write_rows` writes the rows the store lacks, a
commit a batch. Vectors are scaled to unit length (a row already unit within float32 rounding is kept bit for bit,
so an export re-imported is the same store). :func:`export` streams a space to ``.parquet`` or ``.npy`` with
JSON-lines side files. Formats and refusals: docs/store.md ("Import and export").
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import numpy as np

from subspaces.errors import DataError, DimensionError, SubspacesError
from subspaces.fingerprint import row_digest, sha256_hex
from subspaces.io import atomic_path, base_suffix, check_writable, open_text, read_jsonl
from subspaces.progress import Progress
from subspaces.settings import setting
from subspaces.store import columns, scaleout
from subspaces.store.encoders import encode
from subspaces.store.inputs import check_unicode, text_id, visible
from subspaces.store.table import block_of, first_line, vectors_of
from subspaces.store.table import schema as table_schema

if TYPE_CHECKING:
    from subspaces.store.core import Store

BATCH_ROWS = 4096
CHECK_ROWS = 64  # texts re-encoded to check a declared model
MIN_COSINE = 0.95  # the mean cosine below which the declared model did not write these vectors
TABLE_SUFFIXES = (".parquet", ".arrow", ".feather", ".ipc")
JSON_SUFFIXES = (".jsonl", ".ndjson")
UNIT = 1e-6  # a row whose length is 1 within this is kept as given (float32 rounding of a unit vector)


@dataclass(frozen=True)
class ImportSettings:
    """How an import reads its input and checks a declared model, declared once: ``store import``'s options (and
    ``--config`` keys); :func:`.core.import_vectors` takes them as keywords (``Source``'s and the check's)."""

    vector_field: Optional[str] = setting(None, "The vector column (default: vector, or the one list).")
    id_field: Optional[str] = setting(None, "The id column (default: id, where present).")
    text_field: Optional[str] = setting(None, "The text column (default: text, where present).")
    batch_rows: int = setting(BATCH_ROWS, "Rows read, checked and committed at a time.")
    check_rows: int = setting(CHECK_ROWS, "Texts re-encoded to check a declared --model.")
    min_cosine: float = setting(MIN_COSINE, "The mean cosine of those below which the declared model is refused.")

    def __post_init__(self) -> None:  # refused before a model loads or the input is read
        if self.batch_rows < 1:
            raise SubspacesError(f"batch_rows must be at least 1, got {self.batch_rows}")


@dataclass
class Chunk:
    """Consecutive input rows from ``first``: raw vectors and what the input gives beside them."""

    first: int
    vectors: np.ndarray
    ids: list[str] | None = None
    texts: list[str | None] | None = None
    metadata: list[dict[str, Any] | None] | None = None


class Source:
    """The rows of a vector input and its side files, readable more than once, batch by batch."""

    def __init__(
        self,
        vectors: str | os.PathLike[str],
        *,
        table: str | None = None,
        ids: str | os.PathLike[str] | None = None,
        texts: str | os.PathLike[str] | None = None,
        metadata: str | os.PathLike[str] | None = None,
        vector_field: str | None = None,
        id_field: str | None = None,
        text_field: str | None = None,
        batch_rows: int = BATCH_ROWS,
    ) -> None:
        if batch_rows < 1:
            raise SubspacesError(f"batch_rows must be at least 1, got {batch_rows}")
        self.path = Path(vectors)
        self.table, self.vector_field = table, vector_field
        # A field named by the caller must be in the input; the defaults (id, text) are read where it has them.
        self.named = {"id": id_field is not None, "text": text_field is not None}
        self.id_field, self.text_field = id_field or "id", text_field or "text"
        self.side = {"ids": ids, "texts": texts, "metadata": metadata}
        self.batch_rows = batch_rows
        for side in self.side.values():
            if side is not None and not Path(side).is_file():
                raise DataError("no such file" if not Path(side).exists() else "is a folder, not a file", side)
        if self.table is not None:
            return
        if self.path.is_dir():
            names = sorted(p.name.removesuffix(".lance") for p in self.path.glob("*.lance"))
            raise DataError(
                f"is a folder: name the table of this LanceDB database to import (--table; it holds {', '.join(names)})"
                if names
                else "is a folder, not a vectors file or a LanceDB database",
                self.path,
            )
        if not self.path.is_file():
            raise DataError("no such file", self.path)
        if base_suffix(self.path) not in (".npy", *TABLE_SUFFIXES, *JSON_SUFFIXES):
            raise DataError(
                "is not a vectors file: give .npy, .parquet, .arrow/.feather, .jsonl or a LanceDB table", self.path
            )
        if base_suffix(self.path) == ".npy":
            fields = (("vector", vector_field), ("id", id_field), ("text", text_field))
            named = [f"{what}_field {name!r}" for what, name in fields if name is not None]
            if named:
                raise DataError(
                    f"is an array of vectors, with no fields: {', '.join(named)} names a field of a table or JSON "
                    "lines (give ids and texts as side files: --ids, --texts)",
                    self.path,
                )

    def label(self) -> str:
        return f"{self.path}, table {self.table}" if self.table is not None else str(self.path)

    def chunks(self) -> Iterator[Chunk]:
        """The input's rows a batch at a time, the side files' beside them (refused if shorter or longer)."""
        sides = {what: _side_lines(Path(p), what) for what, p in self.side.items() if p is not None}
        done = 0
        for chunk in self._read():
            n = len(chunk.vectors)
            for what, lines in sides.items():
                got = [value for _, value in zip(range(n), lines, strict=False)]
                if len(got) < n:
                    raise DataError(
                        f"has {done + len(got):,} {what} for more vector rows: give one a row", self.side[what]
                    )
                if getattr(chunk, what) is not None:
                    raise DataError(f"the vectors' input already holds {what}; give them once", self.side[what])
                setattr(chunk, what, got)
            done += n
            yield chunk
        for what, lines in sides.items():
            if next(lines, None) is not None:
                raise DataError(f"has more {what} than the {done:,} vector rows: give one a row", self.side[what])

    def _read(self) -> Iterator[Chunk]:
        if self.table is not None:
            yield from self._lance()
        elif base_suffix(self.path) == ".npy":
            yield from self._npy()
        elif base_suffix(self.path) in TABLE_SUFFIXES:
            yield from self._arrow()
        else:
            yield from self._jsonl()

    def _npy(self) -> Iterator[Chunk]:
        try:
            array = np.load(self.path, mmap_mode="r", allow_pickle=False)
        except (ValueError, EOFError, OSError) as exc:
            raise DataError(f"not a readable .npy array: {exc or 'empty file'}", self.path) from None
        if array.ndim != 2:
            raise DimensionError(f"{self.path}: expected a 2-D array (rows x dims), got shape {array.shape}")
        if not (np.issubdtype(array.dtype, np.floating) or np.issubdtype(array.dtype, np.integer)):
            raise DataError(f"holds {array.dtype} values, not numbers", self.path)
        for start in range(0, len(array), self.batch_rows):
            yield Chunk(start, np.asarray(array[start : start + self.batch_rows], dtype=np.float32))

    def _arrow(self) -> Iterator[Chunk]:
        import pyarrow as pa
        import pyarrow.dataset as ds

        fmt = "parquet" if base_suffix(self.path) == ".parquet" else "ipc"
        try:
            if fmt == "parquet":
                # page by page through a 1 MiB buffer: a dataset scan reads whole row groups (maybe the whole file)
                import pyarrow.parquet as pq

                reader = pq.ParquetFile(self.path, pre_buffer=False, buffer_size=1 << 20)
                batches = reader.iter_batches(batch_size=self.batch_rows)
            else:
                batches = ds.dataset(self.path, format=fmt).to_batches(batch_size=self.batch_rows)
            yield from self._records_of(batches)
        except (pa.ArrowException, OSError) as exc:
            raise DataError(f"not a readable {fmt} file: {first_line(exc)}", self.path) from None

    def _lance(self) -> Iterator[Chunk]:
        import lancedb
        import pyarrow as pa

        try:
            table = lancedb.connect(str(self.path)).open_table(str(self.table))
            yield from self._records_of(table.search().limit(None).to_batches(self.batch_rows))
        except (pa.ArrowException, OSError, ValueError, RuntimeError) as exc:
            if isinstance(exc, SubspacesError):
                raise
            raise DataError(
                f"cannot read table {self.table!r} of this LanceDB database: {first_line(exc)}", self.path
            ) from None

    def _records_of(self, batches: Iterable[Any]) -> Iterator[Chunk]:
        first = 0
        for batch in batches:
            if batch.num_rows:
                yield self._record(batch, first)
                first += batch.num_rows

    def _record(self, batch: Any, first: int) -> Chunk:
        """A record batch as a chunk: its vector column, id, text and metadata (the other columns merged in)."""
        names = [n for n in batch.schema.names if not n.startswith("_") and not n.startswith("__index_level")]
        vector = self.vector_field
        if vector is None:
            lists = [n for n in names if _is_list(batch.schema.field(n).type)]
            vector = "vector" if "vector" in names else (lists[0] if len(lists) == 1 else None)
            if vector is None:
                raise DataError(
                    f"no vector column: name it (--vector-field; the columns are {', '.join(names)})", self.label()
                )
        if vector not in names:
            raise DataError(f"has no column {vector!r} (it has {', '.join(names)})", self.label())
        column = batch.column(vector)
        if not _is_list(column.type):
            raise DataError(f"column {vector!r} holds {column.type}, not lists of numbers", self.label())
        for what, name in (("id", self.id_field), ("text", self.text_field)):
            if self.named[what] and name not in names:
                raise DataError(
                    f"has no field {name!r} (named as the {what} field; it has {', '.join(sorted(names))})",
                    self.label(),
                )
        wanted = [n for n in names if n != vector or n in (self.id_field, self.text_field)]
        values = {n: batch.column(n).to_pylist() for n in wanted}
        return self._chunk(first, _list_vectors(column, self.label(), first), values, vector)

    def _chunk(self, first: int, vectors: np.ndarray, values: dict[str, list[Any]], vector: str) -> Chunk:
        """A chunk of ``vectors`` and the fields' ``values`` (name -> one a row): the id, the text, and the others
        but ``vector`` merged into the metadata."""
        chunk = Chunk(first, vectors, texts=values.get(self.text_field))
        if self.id_field in values:
            chunk.ids = _ids(values[self.id_field], self.label(), first)
        rest = {n: v for n, v in values.items() if n not in (vector, self.id_field, self.text_field)}
        if rest:
            chunk.metadata = [_merged(rest, i, self.label(), first) for i in range(len(vectors))]
        return chunk

    def _jsonl(self) -> Iterator[Chunk]:
        rows: list[dict[str, Any]] = []
        first = 0
        given: dict[str, bool] = {}  # whether the file gives ids and texts: its first row says, for every batch
        texts_seen = False
        for _, record in read_jsonl(self.path, label=self.label()):
            if not given:
                given = self._fields_given(record)
            texts_seen = texts_seen or self.text_field in record
            rows.append(record)
            if len(rows) == self.batch_rows:
                yield self._records(rows, first, given)
                first, rows = first + len(rows), []
        if rows:
            yield self._records(rows, first, given)
        if self.named["text"] and given and not texts_seen:  # ids given: a text may start in any row, but in one
            raise DataError(f"has no field {self.text_field!r} in any row (named as the text field)", self.label())

    def _fields_given(self, row: dict[str, Any]) -> dict[str, bool]:
        """Whether JSON lines give ids and texts, by their first row; refuses a named field it lacks."""
        given = {"id": self.id_field in row, "text": self.text_field in row}
        for what, name in (("id", self.id_field), ("text", self.text_field)):
            if self.named[what] and not given[what] and (what == "id" or not given["id"]):
                raise DataError(
                    f"row 0 has no field {name!r} (named as the {what} field; its fields are {', '.join(sorted(row))})",
                    self.label(),
                )
        return given

    def _records(self, rows: list[dict[str, Any]], first: int, given: dict[str, bool]) -> Chunk:
        """A batch of JSON lines as a chunk. Every row agrees with the first on giving an id; where ids are derived, a
        later row may not give a text the first lacks (which ids came from what would depend on the batch size)."""
        vector = self.vector_field or "vector"
        label = self.label()
        values = []
        for i, row in enumerate(rows, first):
            if (self.id_field in row) != given["id"]:
                raise DataError(
                    f"row {i} has no field {self.id_field!r} (row 0 has one): give every row an id, or none"
                    if given["id"]
                    else f"row {i} has a field {self.id_field!r} that row 0 lacks: give every row an id, or none",
                    label,
                )
            if not given["id"] and not given["text"] and self.text_field in row:
                raise DataError(
                    f"row {i} has a field {self.text_field!r} that row 0 lacks: without ids the rows' ids are derived "
                    "from their texts (or, in a file without texts, their vectors); give every row a text, or ids",
                    label,
                )
            if vector not in row:
                raise DataError(f"row {i} has no field {vector!r} (its fields are {', '.join(sorted(row))})", label)
            value = row[vector]
            if not isinstance(value, list) or not all(
                isinstance(x, (int, float)) and not isinstance(x, bool) for x in value
            ):
                raise DataError(f"row {i}: field {vector!r} is not a list of numbers", label)
            values.append(value)
        size = len(values[0])
        bad = next((i for i, v in enumerate(values) if len(v) != size), None)
        if bad is not None:
            raise DimensionError(f"{label}: row {first + bad} holds {len(values[bad])} numbers, row {first} {size}")
        vectors = np.asarray(values, dtype=np.float64).astype(np.float32).reshape(len(values), -1)
        fields = dict.fromkeys(n for row in rows for n in row)  # any row's (rows given ids: a text where it is)
        return self._chunk(first, vectors, {n: [row.get(n) for row in rows] for n in fields}, vector)


def _is_list(kind: Any) -> bool:
    import pyarrow as pa

    return pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind)


def _list_vectors(column: Any, label: str, first: int) -> np.ndarray:
    """A list column as float32 rows; refuses a null row, a row of another length, values that are no numbers."""
    import pyarrow as pa

    if column.null_count:
        row = first + int(np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False))[0])
        raise DataError(f"row {row}: the vector is null", label)
    if not (pa.types.is_floating(column.type.value_type) or pa.types.is_integer(column.type.value_type)):
        raise DataError(f"the vectors hold {column.type.value_type} values, not numbers", label)
    if pa.types.is_fixed_size_list(column.type):
        lengths = np.full(len(column), column.type.list_size)
    else:
        lengths = np.diff(column.offsets.to_numpy())
    if len(lengths) and (lengths != lengths[0]).any():
        row = int(np.flatnonzero(lengths != lengths[0])[0])
        raise DimensionError(f"{label}: row {first + row} holds {lengths[row]} numbers, row {first} {lengths[0]}")
    values = column.flatten().to_numpy(zero_copy_only=False)
    if values.dtype == object:  # nulls inside a vector
        raise DataError("a vector holds a null value", label)
    return np.asarray(values, dtype=np.float32).reshape(len(column), int(lengths[0]) if len(lengths) else 0)


def _ids(values: list[Any], label: str, first: int) -> list[str]:
    for i, value in enumerate(values, first):
        if not _is_id(value):
            raise DataError(f"row {i}: the id {value!r} is not a non-empty string or an integer", label)
    return [str(value) for value in values]


def _is_id(value: Any) -> bool:
    return isinstance(value, (str, int)) and not isinstance(value, bool) and value != ""


def _merged(values: dict[str, list[Any]], i: int, label: str, first: int) -> dict[str, Any] | None:
    """Row ``i``'s metadata: its ``metadata`` field (an object, or JSON of one) with the other fields over it."""
    meta: dict[str, Any] = {}
    for name, column in values.items():
        value = column[i]
        if name == "metadata":
            if isinstance(value, str):
                try:
                    value = json.loads(value)
                except ValueError:
                    raise DataError(f"row {first + i}: metadata is not JSON", label) from None
            if value is not None and not isinstance(value, dict):
                raise DataError(f"row {first + i}: metadata is a {type(value).__name__}, not an object", label)
            meta = (value or {}) | meta
        elif value is not None:
            meta[name] = value
    return meta or None


def _side_lines(path: Path, what: str) -> Iterator[Any]:
    """A side file's values, one a line: ids and texts (JSON strings in ``.jsonl``), metadata objects."""
    as_json = what == "metadata" or base_suffix(path) in JSON_SUFFIXES
    try:
        with open_text(path) as handle:
            for number, line in enumerate(handle, 1):
                line = line.rstrip("\n").rstrip("\r")
                if number == 1:
                    line = line.removeprefix("\ufeff")
                if not as_json:
                    if what == "ids" and not line.strip():
                        raise DataError("an empty id", path, number)
                    yield (line or None) if what == "texts" else line
                    continue
                if not line.strip():
                    raise DataError(f"a blank line; each line is one row's {what} (null for none)", path, number)
                try:
                    value = json.loads(line)
                except ValueError as exc:
                    raise DataError(f"not JSON ({exc})", path, number) from None
                if what == "metadata" and value is not None and not isinstance(value, dict):
                    raise DataError(f"metadata is a {type(value).__name__}, not an object", path, number)
                if what == "ids" and not _is_id(value):
                    raise DataError(f"the id {value!r} is not a non-empty string or an integer", path, number)
                if what == "texts" and value is not None and not isinstance(value, str):
                    raise DataError(f"the text is a {type(value).__name__}, not a string", path, number)
                yield str(value) if what == "ids" else value
    except UnicodeDecodeError as exc:
        raise DataError(f"not UTF-8 text ({exc.reason} at byte {exc.start})", path) from None
    except (OSError, EOFError) as exc:
        raise DataError(f"cannot read: {exc}", path) from None


def unit(vectors: np.ndarray) -> np.ndarray:
    """Unit rows (float32); a row already unit within float32 rounding is kept bit for bit (export, import)."""
    x = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(x.astype(np.float64), axis=1)
    scaled = (x.astype(np.float64) / np.maximum(norms, 1e-300)[:, None]).astype(np.float32)
    keep = np.abs(norms - 1.0) <= UNIT
    scaled[keep] = x[keep]
    return scaled


@dataclass
class _Rows:
    """One validated chunk, as the store will hold it."""

    first: int
    ids: list[str]
    texts: list[str | None]
    vectors: np.ndarray  # unit rows
    metadata: list[str | None]  # JSON strings
    parsed: list[dict[str, Any] | None]


@dataclass
class Plan:
    """What the validating pass found: rows, dimension, new typed columns, ids stored with other content."""

    rows: int = 0
    dimension: int | None = None
    derived: str = "given"  # where ids came from: given, text or vector
    columns: dict[str, str] = field(default_factory=dict)
    overlap: dict[str, bytes] = field(default_factory=dict)  # a content digest of each id the store holds
    cosine: float | None = None  # the declared model's mean cosine with the vectors (None: not checked)


def _rows(chunk: Chunk, label: str, dimension: int | None) -> _Rows:
    """``chunk`` checked and made into store rows (refusing what a store cannot hold, naming the row)."""
    x = chunk.vectors
    if dimension is not None and x.shape[1] != dimension:
        raise DimensionError(f"{label}: the vectors are {x.shape[1]}-d; {dimension}-d are expected here")
    bad = ~np.isfinite(x).all(axis=1)
    if bad.any():
        raise DimensionError(f"{label}: row {chunk.first + int(np.flatnonzero(bad)[0])} holds NaN or inf")
    norms = np.linalg.norm(x.astype(np.float64), axis=1)
    if not norms.all():
        row = chunk.first + int(np.flatnonzero(norms == 0)[0])
        raise DimensionError(f"{label}: row {row} is a zero vector (it has no direction to search by)")
    vectors = unit(x)
    n = len(x)
    texts: list[str | None] = list(chunk.texts) if chunk.texts is not None else [None] * n
    for i, text in enumerate(texts):
        if text is None:
            continue
        if not isinstance(text, str):
            raise DataError(f"row {chunk.first + i}: the text is a {type(text).__name__}, not a string", label)
        check_unicode(text, f"row {chunk.first + i}: the text", label)
        if not visible(text):
            texts[i] = None  # nothing visible: a row without a text
    parsed: list[dict[str, Any] | None] = list(chunk.metadata) if chunk.metadata is not None else [None] * n
    strings: list[str | None] = []
    for i, meta in enumerate(parsed):
        if meta is not None:
            check_unicode(meta, f"row {chunk.first + i}: the metadata", label)
        columns.check_finite(meta, f"row {chunk.first + i}", label)
        strings.append(None if meta is None else json.dumps(meta, ensure_ascii=False))
    if chunk.ids is not None:
        ids = list(chunk.ids)
        for i, row_id in enumerate(ids):
            check_unicode(row_id, f"row {chunk.first + i}: the id", label)
    elif chunk.texts is not None:
        missing = [i for i, t in enumerate(texts) if t is None]
        if missing:
            raise DataError(
                f"row {chunk.first + missing[0]} has no text to derive its id from: give ids (--ids)", label
            )
        ids = [text_id(t) for t in texts]  # type: ignore[arg-type]
    else:
        ids = [sha256_hex(v.tobytes(), 16) for v in vectors]
    return _Rows(chunk.first, ids, texts, vectors, strings, parsed)


def _digest(text: str | None, meta: str | None, vector: np.ndarray) -> bytes:
    return row_digest(text, meta, np.asarray(vector, dtype=np.float32).tobytes())


def validate(
    source: Source,
    *,
    dimension: int | None,
    stored: set[str],
    known: dict[str, str],
    check_rows: int = CHECK_ROWS,
    encoder: Any = None,
    prompt: str | None = None,
    min_cosine: float = MIN_COSINE,
) -> Plan:
    """The validating pass, nothing written; with ``encoder`` (the declared model), ``check_rows`` texts are
    re-encoded after ``prompt`` and a mean cosine below ``min_cosine`` with their vectors is refused."""
    plan = Plan(dimension=dimension)
    seen: set[str] = set()
    texts: list[str] = []
    vectors: list[np.ndarray] = []
    label = source.label()
    for chunk in source.chunks():
        if chunk.ids is None:
            plan.derived = "text" if chunk.texts is not None else "vector"
        rows = _rows(chunk, label, plan.dimension)
        plan.dimension = rows.vectors.shape[1]
        columns.infer(rows.parsed, known, plan.columns, where=f"{label}: row", first=chunk.first)
        for i, row_id in enumerate(rows.ids):
            if row_id in seen:
                what = {"given": "id", "text": "text (its id)", "vector": "vector (its id)"}[plan.derived]
                raise DataError(
                    f"row {chunk.first + i} repeats the {what} {row_id!r} of an earlier row; ids must be unique", label
                )
            seen.add(row_id)
            if row_id in stored:
                plan.overlap[row_id] = _digest(rows.texts[i], rows.metadata[i], rows.vectors[i])
        for i, text in enumerate(rows.texts):
            if text is not None and len(texts) < check_rows:
                texts.append(text)
                vectors.append(rows.vectors[i])
        plan.rows += len(rows.ids)
    if not plan.rows:
        raise DataError("holds no rows", label)
    if encoder is not None and texts:
        plan.cosine = _check_model(encoder, texts, np.stack(vectors), label, min_cosine, prompt)
    return plan


def changed(store: Store, name: str, overlap: dict[str, bytes]) -> set[str]:
    """The ids of ``overlap`` stored with another text, metadata or vector (read in batches)."""
    if not overlap:
        return set()
    out: set[str] = set()
    dim = store._space(name).model.dimension
    for block in store._table(name).batches(list(columns.BASE), BATCH_ROWS):
        ids = block.column("id").to_pylist()
        wanted = [i for i, row_id in enumerate(ids) if row_id in overlap]
        if not wanted:
            continue
        texts, meta = block.column("text").to_pylist(), block.column("metadata").to_pylist()
        vectors = vectors_of(block.column("vector"), dim)
        for i in wanted:
            if _digest(texts[i], meta[i], vectors[i]) != overlap[ids[i]]:
                out.add(ids[i])
    return out


def _check_model(
    encoder: Any, texts: list[str], vectors: np.ndarray, label: str, min_cosine: float, prompt: str | None
) -> float:
    """The mean cosine of ``vectors`` with their ``texts`` re-encoded; refused if too low."""
    fresh = encode(encoder, texts, prompt, show_progress=None)
    if fresh.shape[1] != vectors.shape[1]:
        raise DimensionError(f"the declared model gives {fresh.shape[1]}-d vectors; these are {vectors.shape[1]}-d")
    cosine = float(np.mean(np.sum(fresh * vectors, axis=1)))
    if cosine < min_cosine:
        raise DataError(
            f"the declared model did not write these vectors: {len(texts)} of their texts re-encoded by it have a "
            f"mean cosine of {cosine:.3f} with them ({min_cosine} at least expected); declare the model that did "
            "(--model), or --foreign LABEL for one this machine cannot run",
            label,
        )
    return cosine


def write_rows(
    store: Store,
    name: str,
    source: Source,
    plan: Plan,
    skip: set[str],
    replace: set[str],
    show_progress: bool,
    *,
    ray: bool | str = False,
    actors: int | None = None,
) -> int:
    """The writing pass, a commit a batch (``ray``: prepared by Ray tasks); returns how many rows went in."""
    written = 0
    dim = store._space(name).model.dimension
    shared = (source.label(), dim, skip, replace)
    if ray:
        scaleout.start(ray)
        prepared = scaleout.prepare_chunks(source.chunks(), store_block, *shared, actors=actors)
    else:
        prepared = (store_block(chunk, *shared) for chunk in source.chunks())

    def blocks() -> Iterator[Any]:
        nonlocal written
        for block in prepared:
            if block is not None:
                written += block.num_rows
                yield block

    todo = plan.rows - len(skip - replace)
    with Progress(
        todo,
        f"store import: writing {todo:,} rows into {store.path.name}",
        unit="row",
        enabled=show_progress and todo > 0,
    ) as bar:
        store._append(name, blocks(), bar, replace=replace)
    return written


def store_block(chunk: Chunk, label: str, dim: int, skip: set[str], replace: set[str]) -> Any:
    """The store rows (an Arrow block) of ``chunk`` to write; None if none is."""
    rows = _rows(chunk, label, dim)
    keep = [i for i, row_id in enumerate(rows.ids) if row_id not in skip or row_id in replace]
    if not keep:
        return None
    return block_of(
        dim,
        [rows.ids[i] for i in keep],
        [rows.texts[i] for i in keep],
        rows.vectors[keep],
        [rows.metadata[i] for i in keep],
    )


def export(
    store: Store, output: str | os.PathLike[str], *, space: str | None = None, batch_rows: int = 65_536
) -> dict[str, Any]:
    """Write every row of ``space`` (default: the active one) to ``output``: ``.parquet``, or ``.npy`` with
    ``<stem>.ids.jsonl``, ``<stem>.texts.jsonl`` and ``<stem>.metadata.jsonl`` beside it; streamed, each file renamed
    into place when whole."""
    out = Path(output)
    name = space or store.manifest.active
    record = store._space(name).model
    suffix = out.suffix.lower()
    if suffix not in (".parquet", ".npy"):
        raise SubspacesError(f"--output {out}: export writes .parquet or .npy")
    check_writable(out, "--output")
    table = store._table(name)
    n = table.count()
    dim = record.dimension

    def batches() -> Iterator[Any]:
        return table.batches(list(columns.BASE), batch_rows)

    if suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        schema = table_schema(dim)
        with atomic_path(out) as tmp:
            writer = pq.ParquetWriter(tmp, schema)
            try:
                for batch in batches():
                    writer.write_table(pa.Table.from_batches([batch]).select(schema.names).cast(schema))
            finally:
                writer.close()
        return {"space": name, "rows": n, "dimension": dim, "files": [str(out)]}
    stem = out.with_suffix("")
    sides = {what: Path(f"{stem}.{what}.jsonl") for what in ("ids", "texts", "metadata")}
    for side in sides.values():
        check_writable(side, "--output's side file")
    with contextlib.ExitStack() as stack:
        array = np.lib.format.open_memmap(
            stack.enter_context(atomic_path(out)), mode="w+", dtype=np.float32, shape=(n, dim)
        )
        handles = [
            stack.enter_context(open(stack.enter_context(atomic_path(side)), "w", encoding="utf-8"))
            for side in sides.values()
        ]
        done = 0
        for batch in batches():
            rows = batch.num_rows
            if done + rows > n:
                raise SubspacesError(f"{store.path}: rows were added during the export; run it again")
            array[done : done + rows] = vectors_of(batch.column("vector"), dim)
            for handle, column in zip(handles, ("id", "text", "metadata"), strict=True):
                values = batch.column(column).to_pylist()  # metadata: JSON already
                lines = values if column == "metadata" else [json.dumps(v, ensure_ascii=False) for v in values]
                handle.write("".join(f"{line if line is not None else 'null'}\n" for line in lines))
            done += rows
        array.flush()
        del array
        if done != n:
            raise SubspacesError(f"{store.path}: rows changed during the export; run it again")
    return {"space": name, "rows": n, "dimension": dim, "files": [str(out), *map(str, sides.values())]}
