"""The table layer, the only code that talks to LanceDB: one table per space, rows ``(id, text, vector, metadata)``
plus a typed column per scalar metadata field (:mod:`.columns`). Every write is one LanceDB commit of one batch.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from subspaces.errors import DataError, SubspacesError
from subspaces.store import columns, vectorfile
from subspaces.store.vectorfile import VectorFile
from subspaces.vectors import principal_axes

DB = "lance"


@contextmanager
def lance_errors(what: str) -> Iterator[None]:
    """LanceDB's errors on a damaged or missing table, as one user-facing message."""
    import pyarrow as pa

    try:
        yield
    except (OSError, RuntimeError, ValueError, pa.ArrowException) as exc:
        if isinstance(exc, SubspacesError):
            raise
        raise SubspacesError(f"{what}: the table is missing or corrupted ({first_line(exc)})") from exc


def check_filter(where: str) -> None:
    """Refuse a ``where=`` filter that is no single expression: a ``;`` outside a quoted string or name (LanceDB's
    parser reads the first statement and drops the rest, so ``"year > 3000; garbage"`` ran as ``year > 3000``)."""
    if not isinstance(where, str):
        raise SubspacesError(f"the filter must be a string (a SQL expression), not {type(where).__name__}")
    quote = None
    for ch in where:
        if quote is not None:
            if ch == quote:  # a doubled quote ('it''s') closes and reopens: the same state after both
                quote = None
        elif ch in "'\"`":
            quote = ch
        elif ch == ";":
            raise SubspacesError(
                f"the filter {where!r} holds a ';' outside a quoted string: a filter is one SQL expression "
                "(join conditions with AND / OR)"
            )


@contextmanager
def filter_errors(where: str) -> Iterator[None]:
    """LanceDB's refusal of a ``where=`` filter as one line naming it (after :func:`check_filter`)."""
    import pyarrow as pa

    check_filter(where)
    try:
        yield
    except (OSError, RuntimeError, ValueError, pa.ArrowException) as exc:
        raise SubspacesError(f"the filter {where!r} cannot be applied: {first_line(exc)}") from exc


def first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def schema(dim: int) -> Any:
    import pyarrow as pa

    return pa.schema(
        [
            pa.field("id", pa.string(), nullable=False),
            pa.field("text", pa.string()),  # null: a row imported without its text (tables before: not null)
            pa.field("vector", pa.list_(pa.float32(), dim)),
            pa.field("metadata", pa.string()),  # a JSON object, or null
        ]
    )


def block_of(
    dim: int,
    ids: Sequence[str] | np.ndarray,
    texts: Sequence[str | None] | np.ndarray,
    vectors: np.ndarray,
    metadata: Sequence[Any] | np.ndarray,
) -> Any:
    """One block of rows in the base schema, as :meth:`Table.append` writes it."""
    import pyarrow as pa

    flat = pa.array(np.ascontiguousarray(vectors, dtype=np.float32).ravel(), type=pa.float32())
    return pa.table(
        {
            "id": pa.array(list(ids), pa.string()),
            "text": pa.array(list(texts), pa.string()),
            "vector": pa.FixedSizeListArray.from_arrays(flat, dim),
            "metadata": pa.array(metadata_strings(metadata), pa.string()),
        },
        schema=schema(dim),
    )


def metadata_strings(metadata: Sequence[Any] | np.ndarray) -> list[str | None]:
    return [m if m is None or isinstance(m, str) else json.dumps(m, ensure_ascii=False) for m in metadata]


def vectors_of(column: Any, dim: int) -> np.ndarray:
    """An Arrow vector column (a table's, or a batch's) as a float32 ``n x dim`` array."""
    whole = column.combine_chunks() if hasattr(column, "combine_chunks") else column
    values = whole.flatten().to_numpy(zero_copy_only=False)
    return np.asarray(values, dtype=np.float32).reshape(-1, dim)


class Rows:
    """A table version's rows as searches read them (in memory, or a vector ``file``) and what they derive."""

    def __init__(self, table: Table, version: int, vectors: np.ndarray, file: VectorFile | None = None) -> None:
        self.table, self.version, self.vectors, self.file = table, version, vectors, file
        self.index: Any = None  # exact search's faiss index (vectors in memory)
        self.prefixes: dict[tuple[str, int, bool], Any] = {}  # (basis, dims, int8 codes) -> faiss index
        self._axes: np.ndarray | None = None  # the rows' principal axes, fitted when first asked for
        self.conditioned: Any = None  # ConditionalCorpus views of the rows: (head, condition) -> view, an LRUCache
        self.corpora: dict[str, Any] = {}  # a head's fingerprint -> its ConditionalCorpus
        self.matches: dict[str, np.ndarray] = {}  # a where= filter -> the rows it admits

    def __len__(self) -> int:
        return len(self.vectors)

    @property
    def dim(self) -> int:
        return int(self.vectors.shape[1])

    def principal_axes(self) -> np.ndarray:
        """The rows' principal axes, fitted once per table version (what a "pca" prefix reads)."""
        if self._axes is None:
            self._axes = principal_axes(self.floats)
        return self._axes

    @property
    def floats(self) -> Any:
        """The float vectors as searches read a few rows: in memory, or the vector file's positional reads."""
        return self.file if self.file is not None else self.vectors

    def blocks(self) -> Iterator[tuple[int, np.ndarray]]:
        """``(first row, rows)`` of the float vectors, a block at a time."""
        size = vectorfile.block_rows(self.dim)
        if self.file is not None:
            return self.file.blocks(size)
        return ((start, self.vectors[start : start + size]) for start in range(0, len(self.vectors), size))

    @cached_property
    def ids(self) -> np.ndarray:
        return column_objects(self.table.columns(["id"]), "id")

    @cached_property
    def texts(self) -> np.ndarray:
        return column_objects(self.table.columns(["text"]), "text")

    @cached_property
    def metadata(self) -> np.ndarray:
        """Each row's metadata JSON string (or None)."""
        return column_objects(self.table.columns(["metadata"]), "metadata")

    @cached_property
    def rowids(self) -> np.ndarray:
        """LanceDB's row addresses, to map a ``where=`` filter's matches onto these rows."""
        return self.table.columns(["id"], row_ids=True).column("_rowid").to_numpy()

    def take(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The ids, texts and metadata of the rows at positions ``rows`` (any shape; -1, no row: None)."""
        rows = np.asarray(rows, dtype=np.int64)
        found = rows >= 0
        out = [np.full(rows.shape, None, dtype=object) for _ in range(3)]
        if self.file is None or "ids" in self.__dict__:  # held in memory
            for column, values in zip(out, (self.ids, self.texts, self.metadata), strict=True):
                column[found] = values[rows[found]]
        elif found.any():
            data = self.table.take(rows[found], list(BASE_TEXT))
            for column, name in zip(out, BASE_TEXT, strict=True):
                column[found] = column_objects(data, name)
        return out[0], out[1], out[2]


BASE_TEXT = ("id", "text", "metadata")


def column_objects(data: Any, column: str) -> np.ndarray:
    return np.asarray(data.column(column).to_pylist(), dtype=object)


class Database:
    """The LanceDB database of a store folder."""

    def __init__(self, folder: Path) -> None:
        import lancedb

        self.folder = folder
        self._db = lancedb.connect(str(folder / DB))

    def create(self, table: str, dim: int) -> None:
        with lance_errors(str(self.folder)):
            self._db.create_table(table, schema=schema(dim))

    def drop(self, table: str) -> None:
        vectorfile.drop(self.folder, table)  # first: a table made again under this name restarts its versions
        if table in self._db.table_names():
            self._db.drop_table(table)

    def open(self, space: str, table: str, on_rewrite: Callable[[str], None] | None = None) -> Table:
        """Space ``space``'s table ``table``."""
        return Table(self._db, table, space, self.folder, on_rewrite)


class Table:
    """Space ``space``'s table ``name``; ``on_rewrite(reason)`` runs before a write that moves stored rows."""

    def __init__(
        self, db: Any, name: str, space: str, folder: Path, on_rewrite: Callable[[str], None] | None = None
    ) -> None:
        self._db, self.name, self.space, self.on_rewrite = db, name, space, on_rewrite
        self.folder = folder  # the store folder, where the table's vector files live (:mod:`.vectorfile`)
        self.label = f"{folder}, space {space}"
        self._open()

    def _open(self) -> None:
        with lance_errors(self.label):
            self.handle = self._db.open_table(self.name)

    @property
    def version(self) -> int:
        with lance_errors(self.label):
            return int(self.handle.version)

    @property
    def schema(self) -> Any:
        return self.handle.schema

    def count(self) -> int:
        with lance_errors(self.label):
            return int(self.handle.count_rows())

    def indices(self) -> list[str]:
        with lance_errors(self.label):
            return [str(i.index_type) for i in self.handle.list_indices()]

    # -- reading ----------------------------------------------------------------------------------------------
    def columns(self, names: list[str], *, row_ids: bool = False, where: str | None = None) -> Any:
        """Some columns, in table order (``where``: only the rows that filter admits)."""
        query = self.handle.search().select(names).with_row_id(row_ids).limit(None)
        if where is None:
            with lance_errors(self.label):
                return query.to_arrow()
        with filter_errors(where):
            return query.where(where).to_arrow()

    def batches(self, names: list[str], size: int) -> Iterator[Any]:
        """Some columns, streamed in Arrow record batches of ``size`` rows, in table order."""
        with lance_errors(self.label):
            yield from self.handle.search().select(names).limit(None).to_batches(size)

    def vector_blocks(self, dim: int, size: int) -> Iterator[np.ndarray]:
        """The vector column as float32 arrays of ``size`` rows, in table order."""
        for batch in self.batches(["vector"], size):
            yield vectors_of(batch.column("vector"), dim)

    def ids(self) -> set[str]:
        return set(self.columns(["id"]).column("id").to_pylist())

    def rows(self, dim: int) -> Rows:
        """The rows as searches read them (:class:`Rows`)."""
        version = self.version
        if self.count() * dim * 4 > vectorfile.IN_MEMORY_BYTES:
            file = vectorfile.current(self.folder, self, dim)
            return Rows(self, version, file.array, file)
        data = self.columns(list(columns.BASE), row_ids=True)
        rows = Rows(self, version, vectors_of(data.column("vector"), dim))
        for name, column in (("ids", "id"), ("texts", "text"), ("metadata", "metadata")):
            rows.__dict__[name] = column_objects(data, column)  # what the cached properties would read again
        rows.__dict__["rowids"] = data.column("_rowid").to_numpy()
        return rows

    def matching(self, where: str, rowids: np.ndarray | None = None) -> np.ndarray:
        """Positions of the rows filter ``where`` admits (``rowids``: the row addresses, if read)."""
        if rowids is None:
            rowids = self.columns(["id"], row_ids=True).column("_rowid").to_numpy()
        admitted = self.columns(["id"], row_ids=True, where=where).column("_rowid").to_numpy()
        return np.flatnonzero(np.isin(rowids, admitted))

    def row_addresses(self, ids: set[str]) -> list[int]:
        """LanceDB's row addresses (``_rowid``) of every row whose id is in ``ids``."""
        data = self.columns(["id"], row_ids=True)
        addresses = data.column("_rowid").to_pylist()
        return [addresses[i] for i, row_id in enumerate(data.column("id").to_pylist()) if row_id in ids]

    def stored_rows(self, wanted: set[str], names: list[str]) -> dict[str, tuple[Any, ...]]:
        """``names`` columns of the stored rows whose id is in ``wanted`` (the first row of an id stored twice)."""
        data = self.columns(["id", *names])
        out: dict[str, tuple[Any, ...]] = {}
        values = [data.column(c).to_pylist() for c in names]
        for i, row_id in enumerate(data.column("id").to_pylist()):
            if row_id in wanted and row_id not in out:
                out[row_id] = tuple(v[i] for v in values)
        return out

    def take(self, rows: np.ndarray, names: list[str]) -> Any:
        """Rows at offsets ``rows``, in that order (LanceDB returns them in offset order)."""
        unique, back = np.unique(np.asarray(rows, dtype=np.int64), return_inverse=True)
        with lance_errors(self.label):
            data = self.handle.take_offsets(unique.tolist()).select(names).to_arrow()
        return data.take(back.ravel())

    def nearest(self, vector: np.ndarray, k: int, nprobes: int, refine_factor: int | None, where: str | None) -> Any:
        """The ANN index's ``k`` candidates for one query (``where`` applied before the top k)."""
        query = self.handle.search(vector, vector_column_name="vector").distance_type("cosine").nprobes(nprobes)
        if refine_factor is not None:
            query = query.refine_factor(refine_factor)
        if where is not None:
            query = query.where(where, prefilter=True)  # before the top k: k rows when k rows pass
        query = query.limit(k).select(["id", "text", "vector", "metadata", "_distance"])
        with filter_errors(where) if where is not None else lance_errors(self.label):
            return query.to_arrow()

    # -- writing ----------------------------------------------------------------------------------------------
    def create_index(self, num_partitions: int, num_sub_vectors: int) -> None:
        from lancedb.index import IvfPq

        with lance_errors(self.label):
            self.handle.create_index(
                "vector",
                config=IvfPq(distance_type="cosine", num_partitions=num_partitions, num_sub_vectors=num_sub_vectors),
                replace=True,
            )

    def delete_rows(self, addresses: list[int], chunk: int = 10_000) -> None:
        """Delete rows by address (integers, so no user text is spliced into the predicate)."""
        for start in range(0, len(addresses), chunk):
            part = ", ".join(str(int(a)) for a in addresses[start : start + chunk])
            with lance_errors(self.label):
                self.handle.delete(f"_rowid IN ({part})")

    def append(self, blocks: Iterable[Any], bar: Any, replace: set[str] | None = None) -> None:
        """Commit each block as one LanceDB write; an id this call already wrote is dropped from a later block (a
        retried Ray task adds nothing), and a block holding an id of ``replace`` is written by ``merge_insert`` on
        ``id``."""
        written: set[str] = set()
        for block in blocks:
            ids = block.column("id").to_pylist()
            fresh = [i for i, row_id in enumerate(ids) if row_id not in written]
            block = self._typed(block if len(fresh) == len(ids) else block.take(fresh))
            written.update(ids)
            if block.num_rows:
                with lance_errors(self.label):
                    if replace and not replace.isdisjoint(block.column("id").to_pylist()):
                        merge = self.handle.merge_insert("id").when_matched_update_all()
                        merge.when_not_matched_insert_all().execute(block)
                    else:
                        self.handle.add(block)
            bar.update(block.num_rows)

    def _typed(self, block: Any) -> Any:
        """``block`` cast to the table's schema, its typed metadata columns filled (made where missing)."""
        import pyarrow as pa

        meta = [columns.parsed(m) for m in block.column("metadata").to_pylist()]
        self.prepare_columns(meta)
        schema = self.schema
        arrays = {n: block.column(n) for n in columns.BASE}
        for field_ in schema:
            if field_.name not in arrays:
                arrays[field_.name] = columns.column_values(meta, field_.name, str(field_.type))
        if schema.field("text").nullable is False and block.column("text").null_count:
            raise DataError(
                f"space {self.space}'s table was made before rows could lack a text; import these rows with their "
                "texts (--texts), or into a new store"
            )
        return pa.table({f.name: arrays[f.name] for f in schema}).cast(schema)

    def prepare_columns(self, meta: Sequence[dict[str, Any] | None]) -> dict[str, str]:
        """Give the table a typed column for each scalar field of ``meta`` it lacks; the new ones."""
        new = columns.infer(meta, columns.table_columns(self.schema))
        if new:
            self.declare_columns(new)
        return new

    def declare_columns(self, kinds: dict[str, str]) -> None:
        """Add the typed columns ``kinds`` the table lacks, filled from the stored rows' metadata."""
        import pyarrow as pa

        known = columns.table_columns(self.schema)
        new = {n: kind for n, kind in kinds.items() if n not in known}
        if not new:
            return
        data = self.columns(["id", "metadata"])
        stored = [columns.parsed(m) for m in data.column("metadata").to_pylist()]
        rows = [i for i, m in enumerate(stored) if m and any(m.get(n) is not None for n in new)]
        columns.infer([stored[i] for i in rows], known, new, where="stored row")
        with lance_errors(self.label):
            self.handle.add_columns([pa.field(n, columns.arrow_type(kind)) for n, kind in new.items()])
        self._open()  # a handle whose schema has the new columns
        if rows:
            self.backfill(data.column("id").take(pa.array(rows)), [stored[i] for i in rows], new)

    def complete_columns(self) -> int:
        """Fill the typed columns a killed write left null; returns how many were completed."""
        import pyarrow as pa

        known = columns.table_columns(self.schema)
        if not known:
            return 0
        data = self.columns(["id", "metadata", *known])
        stored = [columns.parsed(m) for m in data.column("metadata").to_pylist()]
        incomplete, rows = {}, set()
        for name, kind in known.items():
            held = data.column(name).to_pylist()
            empty = [i for i, (m, v) in enumerate(zip(stored, held, strict=True)) if v is None and m and name in m]
            columns.infer([{name: stored[i][name]} for i in empty], {name: kind}, where="stored row")  # type: ignore[index]
            values = columns.column_values([stored[i] for i in empty], name, kind).to_pylist()
            missing = [i for i, value in zip(empty, values, strict=True) if value is not None]
            if missing:
                incomplete[name] = kind
                rows.update(missing)
        if incomplete:
            order = sorted(rows)
            self.backfill(data.column("id").take(pa.array(order)), [stored[i] for i in order], incomplete)
        return len(incomplete)

    def backfill(self, ids: Any, meta: list[dict[str, Any] | None], kinds: dict[str, str]) -> None:
        """Fill typed columns ``kinds`` of the stored rows ``ids`` from ``meta`` (``merge_insert``: they move)."""
        import pyarrow as pa

        if self.on_rewrite is not None:
            self.on_rewrite("typed metadata columns were filled in")
        update = pa.table({"id": ids} | {n: columns.column_values(meta, n, kind) for n, kind in kinds.items()})
        with lance_errors(self.label):
            self.handle.merge_insert("id").when_matched_update_all().execute(update)
