"""``Store``: texts and their vectors in an embedded LanceDB folder, searchable exactly, by ANN and by funnel.

Layout of a store folder::

    store.json      the manifest (:mod:`.manifest`): model fingerprints, spaces, the active one
    lance/          the LanceDB database: one table per space, rows (id, text, vector, metadata)
    aligners/N/     the fitted aligner of a mapped space N (a migration)
    quantized/N/    space N's quantized copy (:mod:`.quantized`)
    write.lock      the write lock (:mod:`.lock`): one writer at a time

Every write is one LanceDB commit of one batch, atomic for readers (they see a table version, never part of a
batch), and rows already in the table are skipped, so an interrupted ``add`` rerun adds exactly what is missing.
Vectors are unit length (cosine = inner product). One writer at a time, enforced: every write holds the store's
write lock, and a second writer is refused (two ``add`` runs that each read the ids and then appended stored
every row twice; :meth:`Store.repair` removes such doubles).
"""

from __future__ import annotations

import json
import os
import shutil
import weakref
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, overload

import numpy as np

from subspaces.errors import DataError, DimensionError, SubspacesError
from subspaces.store import columns
from subspaces.store import search as ops
from subspaces.store.encoders import Runtime, load
from subspaces.store.fingerprint import ModelFingerprint
from subspaces.store.inputs import is_text_id, text_id, unicode_problem, visible
from subspaces.store.lock import WriteLock
from subspaces.store.manifest import Manifest, Space
from subspaces.store.results import SearchResult

DB = "lance"
RERANK = ("full", "none")
ANN_REFINE = 4  # an ANN search re-ranks k x this many of the index's candidates by their full vectors


@contextmanager
def _lance_errors(what: str) -> Iterator[None]:
    """LanceDB's errors on a damaged or missing table, as one user-facing message."""
    import pyarrow as pa

    try:
        yield
    except (OSError, RuntimeError, ValueError, pa.ArrowException) as exc:
        if isinstance(exc, SubspacesError):
            raise
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise SubspacesError(f"{what}: the table is missing or corrupted ({first})") from exc


@contextmanager
def _filter_errors(where: str) -> Iterator[None]:
    """LanceDB's refusal of a ``where=`` filter, as one line naming it."""
    import pyarrow as pa

    try:
        yield
    except (OSError, RuntimeError, ValueError, pa.ArrowException) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise SubspacesError(f"the filter {where!r} cannot be applied: {first}") from exc


@dataclass
class _Loaded:
    """One space's rows in memory, for exact and funnel search; valid for one table version."""

    version: int
    ids: np.ndarray
    texts: np.ndarray
    vectors: np.ndarray
    metadata: np.ndarray  # each row's metadata JSON string (or None)
    rowids: np.ndarray  # LanceDB's row addresses, to map a where= filter's matches onto these rows
    index: Any = None
    prefixes: dict[tuple[str, int, bool], Any] = field(default_factory=dict)  # (basis, dims, int8 codes) -> faiss
    axes: np.ndarray | None = None  # the rows' principal axes, fitted when a "pca" prefix is first searched
    adapted: np.ndarray | None = None  # the rows through the space's shrink adapter (an "adapter" prefix)
    conditioned: Any = None  # an LRUCache: (head, condition) -> the rows' view under it (heads.corpus_view)
    matches: dict[str, np.ndarray] = field(default_factory=dict)  # a where= filter -> the rows it admits


def _schema(dim: int):
    import pyarrow as pa

    return pa.schema(
        [
            pa.field("id", pa.string(), nullable=False),
            pa.field("text", pa.string()),  # null: a row imported without its text (tables before: not null)
            pa.field("vector", pa.list_(pa.float32(), dim)),
            pa.field("metadata", pa.string()),  # a JSON object, or null
        ]
    )


def _batch(
    dim: int,
    ids: Sequence[str] | np.ndarray,
    texts: Sequence[str | None] | np.ndarray,
    vectors: np.ndarray,
    metadata: Sequence[Any],
):
    import pyarrow as pa

    flat = pa.array(np.ascontiguousarray(vectors, dtype=np.float32).ravel(), type=pa.float32())
    return pa.table(
        {
            "id": pa.array(list(ids), pa.string()),
            "text": pa.array(list(texts), pa.string()),
            "vector": pa.FixedSizeListArray.from_arrays(flat, dim),
            "metadata": pa.array(_metadata_strings(metadata), pa.string()),
        },
        schema=_schema(dim),
    )


def _metadata_strings(metadata: Sequence[Any]) -> list[str | None]:
    return [m if m is None or isinstance(m, str) else json.dumps(m, ensure_ascii=False) for m in metadata]


def _vectors(column, dim: int) -> np.ndarray:
    whole = column.combine_chunks() if hasattr(column, "combine_chunks") else column  # a table's, or a batch's
    values = whole.flatten().to_numpy(zero_copy_only=False)
    return np.asarray(values, dtype=np.float32).reshape(-1, dim)


class Store:
    """A vector store in folder ``path``. Make one with :meth:`create`, open one with :meth:`open`.

    >>> store = Store.create("my-store", "minilm-l6")
    >>> store.add(["A man plays a guitar.", "A dog runs."], ids=["a", "b"])
    >>> store.search("someone playing music", k=1)  # {"query": ..., "ids": ["a"], "scores": [...], "texts": [...]}

    ``device``, ``backend`` and ``precision`` say how the store runs every encoder it loads (:class:`Runtime`).

    **Ids.** A row is its id, text and metadata. Ids given (``ids=``, a JSON id field, a CSV id column) are the
    caller's; without them an id is derived from the text (:func:`~subspaces.store.inputs.text_id`, 16 hex digits
    of its SHA-256), never from a position: line numbers repeat across files, so a second file's rows collided
    with the first's and were skipped as "already stored" (issue 58). Adding a row whose id is stored with the
    same text (and, for given ids, the same metadata) adds nothing: that is what makes an interrupted ``add``,
    rerun, add exactly what is missing. An id stored with *another* text is never skipped silently: ``add``
    refuses the whole call before writing anything, naming how many ids differ and the first, unless
    ``upsert=True``, which replaces those rows (LanceDB ``merge_insert`` on ``id``, one commit per batch). Refusal
    is the default because a colliding id is far more often a mistake (reused numbering, another file) than an
    edit, and a replacement cannot be undone. With derived ids a text already stored under any id is skipped, so
    a store filled when ``.txt`` ids were line numbers is not doubled by re-adding its file.

    **Writers.** Every write (``add``, ``import_vectors``, ``delete``, ``migrate``, ``commit``, ``index``,
    ``quantize``, ``repair``) holds the
    store's write lock (:mod:`.lock`, an ``flock`` the kernel drops when the writer dies); a second writer is
    refused in one line. Reading needs no lock and loads no model until a query must be encoded.
    """

    def __init__(self, path: Path, manifest: Manifest, runtime: Runtime | None = None) -> None:
        import lancedb

        self.path = path
        self.manifest = manifest
        self.runtime = runtime or Runtime()
        self._db = lancedb.connect(str(path / DB))
        self._loaded: dict[str, _Loaded] = {}
        self._models: dict[str, Any] = {}  # space -> loaded model
        self._heads: dict[str, Any] = {}  # a condition head's folder -> the loaded tri-encoder
        self._query_maps: dict[tuple[str, str], Any] = {}  # (space, key) -> a loaded query-side map
        self._shrink_adapters: dict[str, Any] = {}  # space -> its loaded shrink adapter (store shrink)
        # a tri-encoder -> (the store weights its encoder was checked against, its head's fingerprint)
        self._checked_heads: weakref.WeakKeyDictionary[Any, tuple[str, str]] = weakref.WeakKeyDictionary()
        self._lock = WriteLock(path)

    @contextmanager
    def _writing(self, what: str) -> Iterator[None]:
        """Hold the store's write lock for ``what`` (re-entrant: ``add`` maps into pending spaces under its own).
        The manifest is re-read once the lock is taken: another writer may have changed it since :meth:`open`."""
        first = not self._lock.held
        self._lock.acquire(what)
        try:
            if first:
                self._refresh_manifest()
            yield
        finally:
            self._lock.release()

    def _refresh_manifest(self) -> None:
        from subspaces.store.manifest import MANIFEST

        if (self.path / MANIFEST).is_file():
            self.manifest = Manifest.load(self.path)

    # -- creating and opening ------------------------------------------------------------------------------
    @classmethod
    def create(
        cls,
        path: str | os.PathLike[str],
        model: Any,
        *,
        name: str | None = None,
        device: str | None = "cpu",
        backend: str = "torch",
        precision: str = "fp32",
    ) -> Store:
        """A new, empty store for ``model`` (a bundled name, a folder, or a loaded SentenceTransformer, then
        give ``name`` to reload it by). Refuses a folder that exists and is not empty."""
        folder = Path(path)
        if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
            raise SubspacesError(f"{folder} already exists and is not an empty folder; a store is made in a new one")
        runtime = Runtime(device, backend, precision)
        encoder, fingerprint = load(model, name, runtime)
        store = cls._make(folder, fingerprint, runtime)
        store._models["0"] = encoder
        return store

    @classmethod
    def create_foreign(cls, path: str | os.PathLike[str], label: str, dimension: int) -> Store:
        """A new, empty store for vectors of a model this machine cannot run, named ``label`` (fill it with
        :meth:`import_vectors`): searchable by vector (:meth:`search_vectors`), not by text."""
        from subspaces.store.fingerprint import ModelFingerprint

        if dimension < 1:
            raise DimensionError(f"a store's vectors need at least 1 dimension, got {dimension}")
        return cls._make(Path(path), ModelFingerprint.of_foreign(label, dimension), Runtime())

    @classmethod
    def _make(cls, folder: Path, fingerprint: ModelFingerprint, runtime: Runtime) -> Store:
        """The store folder, its table and manifest (written last: until it is there the folder is no store)."""
        import lancedb

        if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
            raise SubspacesError(f"{folder} already exists and is not an empty folder; a store is made in a new one")
        folder.mkdir(parents=True, exist_ok=True)
        try:
            with _lance_errors(str(folder)):
                lancedb.connect(str(folder / DB)).create_table("space_0", schema=_schema(fingerprint.dimension))
            manifest = Manifest(spaces={"0": Space(table="space_0", model=fingerprint)}, active="0")
            manifest.save(folder)
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        return cls(folder, manifest, runtime)

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        device: str | None = "cpu",
        backend: str = "torch",
        precision: str = "fp32",
    ) -> Store:
        folder = Path(path)
        runtime = Runtime(device, backend, precision)  # checked before the folder: a bad option changes nothing
        return cls(folder, Manifest.load(folder), runtime)

    # -- models ---------------------------------------------------------------------------------------------
    def model(self, space: str | None = None) -> Any:
        """The encoder of ``space`` (default: the active one), loaded by its recorded name and checked."""
        name = space or self.manifest.active
        if name not in self._models:
            recorded = self._space(name).model
            if recorded.foreign:
                raise SubspacesError(
                    f"space {name} holds vectors of {recorded.name!r}, a foreign model this machine cannot run, so "
                    "a text cannot be encoded into it: search it by vector (search_vectors, store search "
                    "--query-vectors), or by text once a model that runs here has a map into it (store migrate DIR "
                    "--to MODEL --query-side, from the rows' stored texts)"
                )
            if not recorded.name:
                raise SubspacesError("the store's model was built in memory and has no name: pass model=...")
            encoder, fingerprint = self.load_model(recorded.name)
            recorded.check(fingerprint, what=f"the model now at {recorded.name}")
            self._models[name] = encoder
        return self._models[name]

    def load_model(self, model: Any, name: str | None = None) -> tuple[Any, ModelFingerprint]:
        """``model`` loaded on the store's device and backend, and its fingerprint (the one place that loads)."""
        return load(model, name, self.runtime)

    def _space_of(self, model: Any | None, space: str | None) -> tuple[str, Any]:
        """The space a query model's vectors belong to (and that model), or a refusal."""
        if model is None:
            name = space or self.manifest.active
            self._searchable(name)
            return name, self.model(name)
        encoder, fingerprint = self.load_model(model)
        return self._space_of_loaded(encoder, fingerprint, space, mapped=False)[:2]

    def _space_of_loaded(
        self, encoder: Any, fingerprint: ModelFingerprint, space: str | None, *, mapped: bool
    ) -> tuple[str, Any, Any]:
        """The space of a loaded query model, that model, and (``mapped``) the query-side map that takes its
        vectors into the space when the space holds another model's (None when its own)."""
        candidates = [space] if space else [self.manifest.active, *self.manifest.pending()]
        for name in candidates:
            if self._space(name).model.matches(fingerprint):
                self._searchable(name)
                return name, encoder, None
        if mapped:
            for name in candidates:
                key = self._query_map_key(name, fingerprint)
                if key is not None:
                    self._searchable(name)
                    return name, encoder, self._query_map(name, key)
        retired = [n for n, s in self.manifest.spaces.items() if s.state == "retired" and s.model.matches(fingerprint)]
        if retired:
            raise SubspacesError(f"{fingerprint.label()} is the store's retired model; search with the active one")
        self._space(candidates[0]).model.check(fingerprint)
        raise AssertionError("unreachable: check() raised")  # pragma: no cover

    def _query_space(self, model: Any | None, space: str | None) -> tuple[str, Any, Any]:
        """Where a text query goes: ``(space, encoder, query map or None)``. A model with a query-side map into
        the space (``store migrate --query-side``) is searched through it; a foreign space searched without a
        model uses its latest query-side map's model."""
        if model is None:
            name = space or self.manifest.active
            self._searchable(name)
            record = self._space(name)
            if record.model.foreign and record.query_maps:
                key = list(record.query_maps)[-1]
                return name, self._query_model(name, key), self._query_map(name, key)
            return name, self.model(name), None
        encoder, fingerprint = self.load_model(model)
        return self._space_of_loaded(encoder, fingerprint, space, mapped=True)

    def _query_map_key(self, name: str, fingerprint: ModelFingerprint) -> str | None:
        for key, entry in reversed(list(self._space(name).query_maps.items())):
            if ModelFingerprint.from_dict(entry["model"]).matches(fingerprint):
                return key
        return None

    def _query_map(self, name: str, key: str) -> Any:
        """The query-side map ``key`` of space ``name``, loaded once (its folder hash-checked)."""
        if (name, key) not in self._query_maps:
            from subspaces.store.maps import load_map

            self._query_maps[(name, key)] = load_map(self.path / self._space(name).query_maps[key]["map"])
        return self._query_maps[(name, key)]

    def _query_model(self, name: str, key: str) -> Any:
        """The model of query-side map ``key``, loaded by its recorded name and checked."""
        recorded = ModelFingerprint.from_dict(self._space(name).query_maps[key]["model"])
        cached = f"query:{recorded.weights}"
        if cached not in self._models:
            if not recorded.name:
                raise SubspacesError("the query-side map's model was built in memory and has no name: pass model=...")
            encoder, fingerprint = self.load_model(recorded.name)
            recorded.check(fingerprint, what=f"the model now at {recorded.name}")
            self._models[cached] = encoder
        return self._models[cached]

    # -- reading --------------------------------------------------------------------------------------------
    def _space(self, name: str) -> Space:
        if name not in self.manifest.spaces:
            raise SubspacesError(f"the store has no space {name!r}; it has {', '.join(self.manifest.spaces)}")
        return self.manifest.spaces[name]

    def _searchable(self, name: str) -> None:
        if self._space(name).state == "retired":
            raise SubspacesError(f"space {name!r} was retired by a migration; search the active space")

    def _table(self, name: str) -> Any:
        with _lance_errors(f"{self.path}, space {name}"):
            return self._db.open_table(self._space(name).table)

    def _ids(self, name: str) -> set[str]:
        return set(self._columns(name, ["id"]).column("id").to_pylist())

    def _load_rows(self, name: str) -> _Loaded:
        table = self._table(name)
        with _lance_errors(f"{self.path}, space {name}"):
            version = table.version
            if name in self._loaded and self._loaded[name].version == version:
                return self._loaded[name]
        data = self._columns(name, list(columns.BASE), row_ids=True)
        dim = self._space(name).model.dimension
        loaded = _Loaded(
            version=version,
            ids=np.asarray(data.column("id").to_pylist(), dtype=object),
            texts=np.asarray(data.column("text").to_pylist(), dtype=object),
            vectors=_vectors(data.column("vector"), dim),
            metadata=np.asarray(data.column("metadata").to_pylist(), dtype=object),
            rowids=data.column("_rowid").to_numpy(),
        )
        self._loaded[name] = loaded
        return loaded

    def __len__(self) -> int:
        return self.count()

    def count(self, space: str | None = None) -> int:
        table = self._table(space or self.manifest.active)
        with _lance_errors(str(self.path)):
            return int(table.count_rows())

    def info(self) -> dict[str, Any]:
        """The manifest and, per space, its row count, table version, ANN index, quantized copy and the rows
        that repeat an id (``duplicates``: :meth:`repair` removes them)."""
        from subspaces.store.quantized import describe as describe_copy
        from subspaces.store.shrink import describe as describe_shrink

        spaces = {}
        for name, space in self.manifest.spaces.items():
            table = self._table(name)
            with _lance_errors(f"{self.path}, space {name}"):
                indices = [str(i.index_type) for i in table.list_indices()]
                spaces[name] = space.to_dict() | {
                    "rows": int(table.count_rows()),
                    "version": int(table.version),
                    "index": indices[0] if indices else None,
                    "quantized": describe_copy(self, name),
                    "duplicates": self.duplicates(name),
                    "shrink": describe_shrink(self, name),
                }
        return {"path": str(self.path), "active": self.manifest.active, "spaces": spaces}

    # -- writing --------------------------------------------------------------------------------------------
    def add(
        self,
        texts: Sequence[str],
        ids: Sequence[str | int] | None = None,
        metadata: Sequence[dict[str, Any] | None] | None = None,
        *,
        model: Any | None = None,
        upsert: bool = False,
        batch_size: int = 64,
        write_batch: int = 1024,
        progress: bool = False,
        ray: bool | str = False,
        actors: int | None = None,
    ) -> dict[str, int]:
        """Encode and append the rows the store lacks; returns ``{"added": n, "skipped": m}`` (and ``"replaced"``
        with ``upsert``).

        ``ids`` default to a hash of each text (:func:`~subspaces.store.inputs.text_id`: adding the same texts
        twice adds them once, and a text already stored under another id is skipped). A given id already stored
        with the same text (and metadata) is skipped; one stored with another text or metadata is refused, for
        the whole call and before anything is written, unless ``upsert=True`` replaces those rows (see the class
        docstring). Rows are written ``write_batch`` at a time, each batch one atomic commit: an interrupted
        call, rerun, adds the rest. Pending (migration) spaces get the new rows mapped by their aligner.

        ``ray``: encode on Ray Data, ``True`` (or ``"local"``) on a local runtime, else the cluster at that
        address, with ``actors`` actors (default: one per CPU of the cluster); see :mod:`.scaleout`.
        """
        from subspaces.models.encoder import check_batch_size

        if isinstance(texts, str):
            raise TypeError("texts must be a sequence of strings, not one string")
        texts = list(texts)
        meta = list(metadata) if metadata is not None else [None] * len(texts)
        _check_texts(texts)
        derived = ids is None
        row_ids = [str(i) for i in ids] if ids is not None else [text_id(t) for t in texts]
        _check_rows(texts, row_ids, meta)
        check_batch_size(write_batch, "write batch")
        with self._writing("store add"):  # before the model loads: a second writer is refused at once
            return self._add_locked(
                texts, row_ids, meta, derived, model, upsert, batch_size, write_batch, progress, ray, actors
            )

    def _add_locked(
        self,
        texts: list[str],
        row_ids: list[str],
        meta: list[Any],
        derived: bool,
        model: Any | None,
        upsert: bool,
        batch_size: int,
        write_batch: int,
        progress: bool,
        ray: bool | str,
        actors: int | None,
    ) -> dict[str, int]:
        from subspaces.models.encoder import encode
        from subspaces.progress import Progress

        active = self.manifest.active
        _, encoder = self._space_of(model, active)  # a model that is not the store's is refused here, first
        stored = self._ids(active)
        todo = [i for i, row_id in enumerate(row_ids) if row_id not in stored]
        changed = self._changed(active, texts, row_ids, meta, derived, stored)
        if changed and not upsert:
            first = row_ids[changed[0]]
            raise DataError(
                f"{len(changed):,} of these ids are already stored with another text or metadata (first: id "
                f"{first!r}); nothing was written: give those rows new ids, or replace the stored rows with "
                "--upsert (upsert=True)"
            )
        if derived and todo and any(not is_text_id(row_id) for row_id in stored):
            todo = self._unstored_texts(active, texts, todo)
        self._prepare_columns(active, [columns.parsed(meta[i]) for i in todo])  # refuses a mistyped field first
        replace = {row_ids[i] for i in changed}
        if replace:
            self._forget(replace, active)
            todo = sorted({*todo, *changed})
        record = self._space(active).model

        def encoded_here() -> Iterator[Any]:
            for start in range(0, len(todo), write_batch):
                rows = todo[start : start + write_batch]
                vectors = encode(encoder, [texts[i] for i in rows], batch_size=batch_size, normalize=True)
                yield _batch(
                    record.dimension,
                    [row_ids[i] for i in rows],
                    [texts[i] for i in rows],
                    vectors,
                    [meta[i] for i in rows],
                )

        blocks: Iterable[Any] = encoded_here()
        if ray and todo:
            from subspaces.store import scaleout

            scaleout.start(ray)
            blocks = scaleout.encode_rows(
                [row_ids[i] for i in todo],
                [texts[i] for i in todo],
                _metadata_strings([meta[i] for i in todo]),
                model=_shippable(model, record, encoder),
                runtime=self.runtime,
                expected=record,
                batch_size=batch_size,
                block_rows=write_batch,
                actors=actors,
            )
        description = f"store add: encoding {len(todo):,} texts into {self.path.name}"
        with Progress(len(todo), description, unit="text", enabled=progress and bool(todo)) as bar:
            self._append(active, blocks, bar, replace=replace)
        for pending in self.manifest.pending():
            self._sync(pending, progress=progress, ray=ray, actors=actors)
        result = {"added": len(todo) - len(changed), "skipped": len(texts) - len(todo)}
        return (result | {"replaced": len(changed)}) if upsert else result

    def _changed(
        self, name: str, texts: list[str], row_ids: list[str], meta: list[Any], derived: bool, stored: set[str]
    ) -> list[int]:
        """Positions of the rows whose id is stored with another text (or, for given ids, other metadata)."""
        wanted = {row_id for row_id in row_ids if row_id in stored}
        if not wanted:
            return []
        have = self._stored_rows(name, wanted, ["text"] if derived else ["text", "metadata"])
        strings = _metadata_strings(meta)
        return [
            i
            for i, row_id in enumerate(row_ids)
            if row_id in have and have[row_id] != ((texts[i],) if derived else (texts[i], strings[i]))
        ]

    def _stored_rows(self, name: str, wanted: set[str], columns: list[str]) -> dict[str, tuple[Any, ...]]:
        """``columns`` of the stored rows whose id is in ``wanted`` (the first row of an id stored twice)."""
        data = self._columns(name, ["id", *columns])
        out: dict[str, tuple[Any, ...]] = {}
        values = [data.column(c).to_pylist() for c in columns]
        for i, row_id in enumerate(data.column("id").to_pylist()):
            if row_id in wanted and row_id not in out:
                out[row_id] = tuple(v[i] for v in values)
        return out

    def _unstored_texts(self, name: str, texts: list[str], todo: list[int]) -> list[int]:
        """``todo`` less the rows whose text is stored under another id (ids given before, or line numbers)."""
        have = set(self._columns(name, ["text"]).column("text").to_pylist())
        return [i for i in todo if texts[i] not in have]

    def _forget(self, ids: set[str], active: str) -> None:
        """Before rows of ``ids`` are replaced in the active space: mark the quantized copies stale (their row
        offsets will move) and delete those rows from pending spaces, which :meth:`_sync` then maps anew from
        the replaced rows, and from retired ones (a rollback then refuses rather than restore the old rows). In
        this order a run killed at any point leaves nothing stale in use."""
        from subspaces.store.quantized import invalidate

        for name in [active, *self.manifest.pending()]:
            invalidate(self, name, "rows were replaced (add --upsert)")
        # Retired spaces too: a rollback would otherwise bring the replaced rows back; without them it refuses.
        retired = [n for n, s in self.manifest.spaces.items() if s.state == "retired"]
        for name in [*self.manifest.pending(), *retired]:
            self._delete_rows(name, self._row_addresses(name, ids))

    def _columns(self, name: str, names: list[str], *, row_ids: bool = False, where: str | None = None) -> Any:
        """Some columns of a space's table, in table order (``where``: only the rows that filter admits)."""
        table = self._table(name)
        query = table.search().select(names).with_row_id(row_ids).limit(None)
        if where is None:
            with _lance_errors(f"{self.path}, space {name}"):
                return query.to_arrow()
        with _filter_errors(where):
            return query.where(where).to_arrow()

    def _matching(self, name: str, where: str, rowids: np.ndarray | None = None) -> np.ndarray:
        """The positions (table order, ascending) of the rows that SQL filter ``where`` admits; ``rowids``: the
        table's row addresses in order, if already read."""
        if rowids is None:
            rowids = self._columns(name, ["id"], row_ids=True).column("_rowid").to_numpy()
        admitted = self._columns(name, ["id"], row_ids=True, where=where).column("_rowid").to_numpy()
        return np.flatnonzero(np.isin(rowids, admitted))

    def _row_addresses(self, name: str, ids: set[str]) -> list[int]:
        """LanceDB's row addresses (``_rowid``) of every row whose id is in ``ids``."""
        data = self._columns(name, ["id"], row_ids=True)
        addresses = data.column("_rowid").to_pylist()
        return [addresses[i] for i, row_id in enumerate(data.column("id").to_pylist()) if row_id in ids]

    def _delete_rows(self, name: str, addresses: list[int], chunk: int = 10_000) -> None:
        """Delete rows by address (integers, so no user text is spliced into the predicate)."""
        table = self._table(name)
        for start in range(0, len(addresses), chunk):
            part = ", ".join(str(int(a)) for a in addresses[start : start + chunk])
            with _lance_errors(f"{self.path}, space {name}"):
                table.delete(f"_rowid IN ({part})")

    def _append(self, name: str, blocks: Iterable[Any], bar: Any, replace: set[str] | None = None) -> None:
        """Commit each block as one LanceDB write (readers see it whole or not at all). An id this call already
        wrote is dropped from a later block, so a block handed over twice (a retried Ray task) adds nothing.
        A block holding an id of ``replace`` is written by ``merge_insert`` on ``id``: its stored row is replaced."""
        written: set[str] = set()
        for block in blocks:
            ids = block.column("id").to_pylist()
            fresh = [i for i, row_id in enumerate(ids) if row_id not in written]
            block = self._typed(name, block if len(fresh) == len(ids) else block.take(fresh))
            table = self._table(name)  # after _typed: a column it added is in this handle's schema
            written.update(ids)
            if block.num_rows:
                with _lance_errors(f"{self.path}, space {name}"):
                    if replace and not replace.isdisjoint(block.column("id").to_pylist()):
                        (
                            table.merge_insert("id")
                            .when_matched_update_all()
                            .when_not_matched_insert_all()
                            .execute(block)
                        )
                    else:
                        table.add(block)
            bar.update(block.num_rows)

    def _typed(self, name: str, block: Any) -> Any:
        """``block`` (id, text, vector, metadata) with the table's typed metadata columns filled from its metadata,
        cast to the table's schema. A field without a column gets one (:meth:`_prepare_columns`)."""
        import pyarrow as pa

        meta = [columns.parsed(m) for m in block.column("metadata").to_pylist()]
        self._prepare_columns(name, meta)
        schema = self._table(name).schema
        arrays = {n: block.column(n) for n in columns.BASE}
        for field_ in schema:
            if field_.name not in arrays:
                arrays[field_.name] = columns.column_values(meta, field_.name, str(field_.type))
        if schema.field("text").nullable is False and block.column("text").null_count:
            raise DataError(
                f"space {name}'s table was made before rows could lack a text; import these rows with their texts "
                "(--texts), or into a new store"
            )
        return pa.table({f.name: arrays[f.name] for f in schema}).cast(schema)

    def _prepare_columns(self, name: str, meta: Sequence[dict[str, Any] | None]) -> dict[str, str]:
        """Give the table a typed column for each scalar metadata field of ``meta`` it lacks (:meth:`_declare_columns`).
        A value that fits no column is refused before the table changes. Returns the new columns."""
        new = columns.infer(meta, columns.table_columns(self._table(name).schema))
        if new:
            self._declare_columns(name, new)
        return new

    def _backfill(self, name: str, ids: Any, meta: list[dict[str, Any] | None], new: dict[str, str]) -> None:
        """Fill new typed columns ``new`` of the stored rows ``ids`` from their metadata ``meta`` (a store whose
        metadata was JSON only, or rows written before a field first came with a value), by ``merge_insert`` on
        ``id``, which moves those rows: the quantized copy is marked stale first."""
        import pyarrow as pa

        from subspaces.store.quantized import invalidate

        invalidate(self, name, "typed metadata columns were filled in")
        update = pa.table({"id": ids} | {n: columns.column_values(meta, n, kind) for n, kind in new.items()})
        table = self._table(name)
        with _lance_errors(f"{self.path}, space {name}"):
            table.merge_insert("id").when_matched_update_all().execute(update)

    def _sync(
        self,
        name: str,
        *,
        chunk: int = 16_384,
        progress: bool = False,
        ray: bool | str = False,
        actors: int | None = None,
    ) -> int:
        """Map into mapped space ``name`` every row of its source space it lacks; returns how many. ``ray``: map
        on Ray Data (as in :meth:`add`)."""
        with self._writing("store migrate"):
            return self._sync_locked(name, chunk, progress, ray, actors)

    def _sync_locked(self, name: str, chunk: int, progress: bool, ray: bool | str, actors: int | None) -> int:
        from subspaces.progress import Progress
        from subspaces.store.maps import load_map

        space = self._space(name)
        if space.mapped_from is None or space.aligner is None:
            raise SubspacesError(f"space {name!r} is not a mapped space")
        source = self._load_rows(space.mapped_from)
        have = self._ids(name)
        missing = np.flatnonzero([row_id not in have for row_id in source.ids])
        if not len(missing):
            return 0
        aligner = load_map(self.path / space.aligner)  # a learned map (map.json) or a mini-vec2vec aligner
        src_table = self._table(space.mapped_from)
        with _lance_errors(f"{self.path}, space {space.mapped_from}"):
            meta = src_table.to_arrow().column("metadata").to_pylist()
        dim = space.model.dimension

        def mapped_here() -> Iterator[Any]:
            for start in range(0, len(missing), chunk):
                rows = missing[start : start + chunk]
                mapped = ops.unit_prefix(aligner.transform(source.vectors[rows]))
                yield _batch(dim, source.ids[rows], source.texts[rows], mapped, [meta[i] for i in rows])

        blocks: Iterable[Any] = mapped_here()
        if ray:
            from subspaces.store import scaleout

            scaleout.start(ray)
            rows = _batch(
                source.vectors.shape[1],
                source.ids[missing],
                source.texts[missing],
                source.vectors[missing],
                [meta[i] for i in missing],
            )
            blocks = scaleout.map_rows(rows, aligner, dim, block_rows=chunk, actors=actors)
        with Progress(len(missing), f"store migrate: mapping into space {name}", unit="row", enabled=progress) as bar:
            self._append(name, blocks, bar)
        return len(missing)

    def index(
        self, space: str | None = None, *, num_partitions: int | None = None, num_sub_vectors: int | None = None
    ) -> dict[str, Any]:
        """Build (or rebuild) LanceDB's IVF-PQ index on a space's vectors (cosine); rows added later are still
        found, searched flat beside the index until the next ``index``. ANN scores are exact cosines either way
        (:meth:`_search_ann`)."""
        with self._writing("store index"):
            return self._index_locked(space, num_partitions, num_sub_vectors)

    def _index_locked(
        self, space: str | None, num_partitions: int | None, num_sub_vectors: int | None
    ) -> dict[str, Any]:
        from lancedb.index import IvfPq

        name = space or self.manifest.active
        n, dim = self.count(name), self._space(name).model.dimension
        if n < 256:
            raise SubspacesError(f"an ANN index needs at least 256 rows (PQ's codebook); the store has {n}")
        partitions = num_partitions or max(1, min(int(np.sqrt(n)), n // 256))
        sub_vectors = num_sub_vectors or _divisor_near(dim, dim // 8)
        if dim % sub_vectors:
            raise DimensionError(f"num_sub_vectors ({sub_vectors}) must divide the dimension ({dim})")
        table = self._table(name)
        with _lance_errors(f"{self.path}, space {name}"):
            table.create_index(
                "vector",
                config=IvfPq(distance_type="cosine", num_partitions=partitions, num_sub_vectors=sub_vectors),
                replace=True,
            )
        return {"space": name, "rows": n, "num_partitions": partitions, "num_sub_vectors": sub_vectors}

    def quantize(self, kind: str, space: str | None = None, *, calibration_rows: int = 10_000) -> dict[str, Any]:
        """Write the space's quantized copy: ``int8`` codes (ranges calibrated on a seeded sample of
        ``calibration_rows`` rows) or ``binary``; search it with ``search(..., quantized=True)``. An ``add``
        afterwards makes it stale until the next ``quantize`` (see :mod:`.quantized`)."""
        from subspaces.store.quantized import write

        with self._writing("store index --quantize"):
            return write(self, space or self.manifest.active, kind, calibration_rows=calibration_rows)

    def duplicates(self, space: str | None = None) -> int:
        """How many rows of a space repeat an id of an earlier row (0 in a store only ever written under the
        write lock; two unlocked writers could store every row twice). :meth:`repair` removes them."""
        ids = self._columns(space or self.manifest.active, ["id"]).column("id").to_pylist()
        return len(ids) - len(set(ids))

    def repair(self) -> dict[str, dict[str, int]]:
        """Remove, in every space, each row whose id an earlier row already has, keeping the first written;
        returns per space ``{"removed": rows, "ids": ids that had doubles, "differing": those whose doubles held
        another text, "columns": typed metadata columns made}``. One delete commit (per 10,000 rows): a rerun after
        an interruption removes the rest. A store written before typed metadata columns gets them here, from each
        row's metadata JSON (what ``where=`` filters read)."""
        from subspaces.store.quantized import invalidate

        report = {}
        with self._writing("store repair"):
            for name in self.manifest.spaces:
                data = self._columns(name, ["id", "text"], row_ids=True)
                first: dict[str, str] = {}
                extra: list[int] = []
                doubled, differing = set(), set()
                addresses = data.column("_rowid").to_pylist()
                for row_id, text, address in zip(
                    data.column("id").to_pylist(), data.column("text").to_pylist(), addresses, strict=True
                ):
                    if row_id not in first:
                        first[row_id] = text
                        continue
                    extra.append(address)
                    doubled.add(row_id)
                    if text != first[row_id]:
                        differing.add(row_id)
                if extra:
                    invalidate(self, name, "duplicate rows were removed (store repair)")
                    self._delete_rows(name, extra)
                # a store whose metadata was JSON only (before typed columns): its scalar fields become columns
                meta = [columns.parsed(m) for m in self._columns(name, ["metadata"]).column("metadata").to_pylist()]
                typed = self._prepare_columns(name, meta)
                report[name] = {"removed": len(extra), "ids": len(doubled), "differing": len(differing)}
                report[name]["columns"] = len(typed)
        return report

    def import_vectors(
        self,
        vectors: str | os.PathLike[str],
        *,
        model: Any | None = None,
        foreign: str | None = None,
        dimension: int | None = None,
        table: str | None = None,
        ids: str | os.PathLike[str] | None = None,
        texts: str | os.PathLike[str] | None = None,
        metadata: str | os.PathLike[str] | None = None,
        vector_field: str | None = None,
        id_field: str | None = None,
        text_field: str | None = None,
        upsert: bool = False,
        batch_rows: int = 4096,
        check_rows: int = 64,
        min_cosine: float = 0.95,
        progress: bool = False,
    ) -> dict[str, Any]:
        """Add vectors another tool wrote (a file, or ``table`` of a LanceDB database at ``vectors``) to the active
        space, without encoding them; see :mod:`.transfer` for the formats and the two passes (validate all,
        then write). ``model`` or ``foreign`` (a label), if given, must be what the space holds; ``model`` with
        texts re-encodes ``check_rows`` of them and refuses a mean cosine below ``min_cosine``. Returns
        ``{"added", "skipped", "rows", "dimension"}``, with ``"replaced"`` for ``upsert`` and ``"mean_cosine"``
        when checked. A rerun adds only what is missing; an id stored with other content is refused unless
        ``upsert``."""
        from subspaces.store import transfer

        active = self.manifest.active
        record = self._space(active).model
        encoder = None
        if foreign is not None and (not record.foreign or record.name != foreign):
            raise SubspacesError(
                f"the store holds vectors of {record.label()}; these are declared as the foreign model {foreign!r}"
            )
        if dimension is not None and dimension != record.dimension:
            raise DimensionError(f"--dim {dimension}: the store holds {record.dimension}-d vectors of {record.label()}")
        if model is not None:
            if record.foreign:
                raise SubspacesError(f"the store holds vectors of the foreign model {record.name!r}: declare --foreign")
            encoder, fingerprint = self.load_model(model)
            record.check(fingerprint, what="the declared model")
        options = {
            "table": table,
            "ids": ids,
            "texts": texts,
            "metadata": metadata,
            "vector_field": vector_field,
            "id_field": id_field,
            "text_field": text_field,
            "batch_rows": batch_rows,
        }
        source = transfer._source(vectors, options)
        with self._writing("store import"):
            # The checks above read the manifest as opened; the lock re-read it. Another writer may have switched
            # the active space since (a committed migration): these vectors were checked against the old one.
            if self.manifest.active != active:
                raise SubspacesError(
                    f"{self.path}: the active space changed while this import was being checked (another process "
                    f"committed or rolled back a migration); nothing was written: rerun the import"
                )
            stored = self._ids(active)
            plan, overlap = transfer.validate(
                source,
                dimension=record.dimension,
                stored=stored,
                known=columns.table_columns(self._table(active).schema),
                check_rows=check_rows,
            )
            cosine = None if encoder is None else transfer.check_model(encoder, plan, source.label(), min_cosine)
            return self._import_planned(source, plan, overlap, cosine, upsert=upsert, progress=progress, stored=stored)

    def _import_planned(
        self,
        source: Any,
        plan: Any,
        overlap: Any,
        cosine: float | None,
        *,
        upsert: bool,
        progress: bool,
        stored: set[str] | None = None,
    ) -> dict[str, Any]:
        """The writing pass of a validated import (under the write lock): refuse changed rows unless ``upsert``,
        give the table its typed columns, write, keep pending spaces in step."""
        from subspaces.store import transfer

        active = self.manifest.active
        changed = transfer.changed(self, active, overlap) if overlap else set()
        if changed and not upsert:
            first = sorted(changed)[0]
            raise DataError(
                f"{len(changed):,} of these ids are already stored with another text, metadata or vector (first: id "
                f"{first!r}); nothing was written: give those rows new ids, or replace the stored rows with "
                "--upsert (upsert=True)"
            )
        skip = set(overlap) if overlap else set()
        if plan.columns:
            self._declare_columns(active, plan.columns)
        if changed:
            self._forget(changed, active)
        written = transfer.write_rows(self, active, source, plan, skip, changed, progress)
        for pending in self.manifest.pending():
            self._sync(pending, progress=progress)
        report = {
            "added": written - len(changed),
            "skipped": plan.rows - written,
            "rows": plan.rows,
            "dimension": plan.dimension,
            "ids": plan.derived,
        }
        if upsert:
            report["replaced"] = len(changed)
        if cosine is not None:
            report["mean_cosine"] = round(cosine, 4)
        return report

    def _declare_columns(self, name: str, kinds: dict[str, str]) -> None:
        """Give the table the typed columns ``kinds`` (name -> type) it lacks, and fill them for the stored rows
        whose metadata JSON holds those fields (refusing, before the table changes, a stored value of another
        type; an int widens a new column to float)."""
        import pyarrow as pa

        table = self._table(name)
        known = columns.table_columns(table.schema)
        new = {n: kind for n, kind in kinds.items() if n not in known}
        if not new:
            return
        data = self._columns(name, ["id", "metadata"])
        stored = [columns.parsed(m) for m in data.column("metadata").to_pylist()]
        rows = [i for i, m in enumerate(stored) if m and any(m.get(n) is not None for n in new)]
        columns.infer([stored[i] for i in rows], known, new, where="stored row")
        with _lance_errors(f"{self.path}, space {name}"):
            table.add_columns([pa.field(n, columns.arrow_type(kind)) for n, kind in new.items()])
        if rows:
            self._backfill(name, data.column("id").take(pa.array(rows)), [stored[i] for i in rows], new)

    def export(self, output: str | os.PathLike[str], *, space: str | None = None) -> dict[str, Any]:
        """Write every row of ``space`` (default: the active one) to ``output`` (``.parquet``, or ``.npy`` with
        side files): ids, texts, metadata and vectors, re-importable as they are (:func:`.transfer.export`)."""
        from subspaces.store.transfer import export

        return export(self, output, space=space)

    def delete(self, ids: Iterable[str | int]) -> dict[str, int]:
        """Delete the rows of ``ids`` from every space (the active one, a pending migration's, retired ones: a
        deleted row is gone from the store); returns ``{"deleted": rows of the active space, "missing": ids it
        did not hold}``. Each space's quantized copy is marked stale first; an ANN index drops the rows itself,
        and the principal axes and in-memory indexes are rebuilt for the new table version. Deleting by row
        address (integers) puts no user text into LanceDB's predicate. Ids not stored are counted, not refused."""
        from subspaces.store.quantized import invalidate

        wanted = {str(i) for i in ids}
        if not wanted:
            raise DataError("nothing to delete: no ids")
        for row_id in wanted:
            problem = unicode_problem(row_id)
            if problem is not None:
                raise DataError(f"id {row_id!r} holds {problem}")
        with self._writing("store delete"):
            found = len(wanted & self._ids(self.manifest.active))
            deleted = 0
            for name in self.manifest.spaces:
                addresses = self._row_addresses(name, wanted)
                if not addresses:
                    continue
                invalidate(self, name, "rows were deleted (store delete)")
                self._delete_rows(name, addresses)
                if name == self.manifest.active:
                    deleted = len(addresses)
        return {"deleted": deleted, "missing": len(wanted) - found}

    # -- migrating ------------------------------------------------------------------------------------------
    def migrate(self, model: Any, **options: Any) -> dict[str, Any]:
        """Map the store into ``model``'s space as a pending space (see :func:`subspaces.store.migrate.migrate`)."""
        from subspaces.store.migrate import migrate

        return migrate(self, model, **options)

    def commit(self) -> str:
        """Make the pending migration's space the active one (see :func:`subspaces.store.migrate.commit`)."""
        from subspaces.store.migrate import commit

        return commit(self)

    def reembed(self, *, budget: int | None = None, seconds: float | None = None, **options: Any) -> dict[str, Any]:
        """Replace mapped rows by true vectors of their model, oldest first (:func:`.backfill.reembed`)."""
        from subspaces.store.backfill import reembed

        return reembed(self, budget=budget, seconds=seconds, **options)

    def shrink(self, dims: str | Sequence[int], **options: Any) -> dict[str, Any]:
        """Choose, per prefix size, the basis a ``dims`` search reads (raw, principal axes or a fitted Matryoshka
        adapter) by a held-out check, and record it (:func:`.shrink.shrink`); returns the report."""
        from subspaces.store.shrink import shrink

        return shrink(self, dims if isinstance(dims, str) else list(dims), **options)

    def rollback(self) -> str:
        """Undo the last :meth:`commit`: the previous space active again (:func:`subspaces.store.migrate.rollback`)."""
        from subspaces.store.migrate import rollback

        return rollback(self)

    # -- searching ------------------------------------------------------------------------------------------
    @overload
    def search(  # type: ignore[overload-overlap]  # a str is also a Sequence[str]: one query, one result
        self,
        queries: str,
        k: int = ...,
        *,
        model: Any | None = ...,
        space: str | None = ...,
        dims: int | None = ...,
        rerank: str = ...,
        shortlist: int | None = ...,
        basis: str | None = ...,
        ann: bool = ...,
        nprobes: int = ...,
        refine_factor: int | None = ...,
        where: str | None = ...,
        condition: str | None = ...,
        head: Any | None = ...,
        quantized: bool = ...,
        rescore: int | None = ...,
        batch_size: int = ...,
    ) -> SearchResult: ...

    @overload
    def search(
        self,
        queries: Sequence[str],
        k: int = ...,
        *,
        model: Any | None = ...,
        space: str | None = ...,
        dims: int | None = ...,
        rerank: str = ...,
        shortlist: int | None = ...,
        basis: str | None = ...,
        ann: bool = ...,
        nprobes: int = ...,
        refine_factor: int | None = ...,
        where: str | None = ...,
        condition: str | None = ...,
        head: Any | None = ...,
        quantized: bool = ...,
        rescore: int | None = ...,
        batch_size: int = ...,
    ) -> list[SearchResult]: ...

    def search(
        self,
        queries: str | Sequence[str],
        k: int = 10,
        *,
        model: Any | None = None,
        space: str | None = None,
        dims: int | None = None,
        rerank: str = "full",
        shortlist: int | None = None,
        basis: str | None = None,
        ann: bool = False,
        nprobes: int = 20,
        refine_factor: int | None = ANN_REFINE,
        where: str | None = None,
        condition: str | None = None,
        head: Any | None = None,
        quantized: bool = False,
        rescore: int | None = 4,
        batch_size: int = 64,
    ) -> SearchResult | list[SearchResult]:
        """The ``k`` nearest rows of each query, a :class:`SearchResult` each (ids, scores, texts, metadata,
        query), in query order.

        ``model`` is the query encoder (default: the store's); one whose fingerprint matches no searchable space
        is refused. Exact search by default; ``ann=True`` reads the LanceDB index (:meth:`index`), re-ranking
        ``refine_factor * k`` of its candidates by their full vectors (None: its own order); ``dims=d``
        searches the first ``d`` coordinates, and with ``rerank="full"`` (funnel) re-ranks a shortlist of
        ``shortlist * k`` candidates (default ``10 * k``) by the full vectors. ``basis="pca"`` reads the first ``d``
        of the store's principal axes instead of the model's own coordinates: for a model not trained for
        truncation, a far better shortlist, with the same full-dimension scores; the default (None) is ``"pca"``
        unless the space's model was trained for truncation (:func:`.matryoshka.trained`), then ``"model"``.
        ``where`` is a SQL filter on the rows (``"lang = 'en'"``, over the typed metadata columns, ``id`` and
        ``text``; as LanceDB reads it), applied before the top ``k`` in every mode: ``k`` rows come back when
        ``k`` rows pass it. ``condition`` with ``head`` (a Hyper-CL tri-encoder's folder, or the loaded model)
        ranks by similarity under that condition: queries and rows projected by the condition's matrix
        (:meth:`search_vectors`). ``quantized=True`` searches the space's quantized copy (:meth:`quantize`) and
        rescores ``rescore * k`` candidates (None: no rescoring).
        """
        from subspaces.models.encoder import encode

        single = isinstance(queries, str)
        texts = [queries] if isinstance(queries, str) else list(queries)
        if not texts:
            return []
        for i, text in enumerate(texts):  # a tokenizer's TypeError, else: a traceback
            if not isinstance(text, str):
                raise DataError(f"query {i} is a {type(text).__name__}, not a string")
            problem = unicode_problem(text)
            if problem is not None:
                raise DataError(f"query {i} holds {problem}")
        _check_condition(condition, head, ann, dims)
        if condition is not None and model is None:
            # the head's encoder is the store's model (checked): it encodes the queries, loaded once
            name, encoder = space or self.manifest.active, self.condition_head(head, space).encoder
            query_map = None
        else:
            name, encoder, query_map = self._query_space(model, space)
        vectors = encode(encoder, texts, batch_size=batch_size, normalize=True)
        if query_map is not None:  # a query-side migration: the new model's queries in the stored rows' space
            vectors = query_map.transform(vectors)
        results = self.search_vectors(
            vectors,
            k,
            space=name,
            dims=dims,
            rerank=rerank,
            shortlist=shortlist,
            basis=basis,
            ann=ann,
            nprobes=nprobes,
            refine_factor=refine_factor,
            where=where,
            condition=condition,
            head=head,
            quantized=quantized,
            rescore=rescore,
        )
        for text, result in zip(texts, results, strict=True):
            result.query = text
        return results[0] if single else results

    def search_vectors(
        self,
        vectors: np.ndarray,
        k: int = 10,
        *,
        space: str | None = None,
        dims: int | None = None,
        rerank: str = "full",
        shortlist: int | None = None,
        basis: str | None = None,
        ann: bool = False,
        nprobes: int = 20,
        refine_factor: int | None = ANN_REFINE,
        where: str | None = None,
        condition: str | None = None,
        head: Any | None = None,
        quantized: bool = False,
        rescore: int | None = 4,
    ) -> list[SearchResult]:
        """:meth:`search` for query vectors already in the space's model's coordinates (unit rows); the only
        search of a space whose model this machine cannot run (an import with ``foreign=``).

        ``shortlist`` is a multiple of ``k`` (at least 1; a shortlist longer than the store is the whole store).
        With ``condition``, rows and queries are both projected by the head under it and ranked by cosine,
        exactly; the head's condition matrices come from its own cache, and the projected rows of the last few
        conditions are kept (per table version) so a repeated condition costs one search.
        """
        name = space or self.manifest.active
        self._searchable(name)
        full = self._space(name).model.dimension
        vectors = np.atleast_2d(np.asarray(vectors, dtype=np.float32))
        if vectors.shape[1] != full:
            raise DimensionError(f"query vectors have {vectors.shape[1]} dimensions; the store's space has {full}")
        if not np.isfinite(vectors).all():
            raise DimensionError("query vectors hold NaN or inf")
        if rerank not in RERANK:
            raise SubspacesError(f"rerank must be one of {', '.join(RERANK)}, got {rerank!r}")
        if basis is not None and basis not in ops.BASES:
            raise SubspacesError(f"basis must be one of {', '.join(ops.BASES)}, got {basis!r}")
        if basis not in (None, "model") and (dims is None or dims == full):
            raise SubspacesError(f"basis {basis!r} says whose prefix to read: give dims below {full}")
        if dims is not None and not 0 < dims <= full:
            raise DimensionError(f"dims {dims} is outside 1..{full}")
        if shortlist is not None and shortlist < 1:
            raise SubspacesError(f"shortlist is a multiple of k and must be at least 1, got {shortlist}")
        if refine_factor is not None and refine_factor < 1:
            raise SubspacesError(f"refine_factor must be at least 1 (None: no re-ranking), got {refine_factor}")
        _check_condition(condition, head, ann, dims)
        if quantized:
            from subspaces.store.quantized import search_copy

            if ann or dims is not None or condition is not None:
                raise SubspacesError("quantized search reads the quantized copy alone: drop ann, dims and condition")
            return search_copy(self, name, vectors, k, rescore, where=where)
        if ann:
            if dims is not None:
                raise SubspacesError("the ANN index reads full vectors: give either ann or dims, not both")
            return self._search_ann(name, vectors, k, nprobes, refine_factor, where)
        loaded = self._load_rows(name)
        if not len(loaded.ids):
            raise SubspacesError(f"{self.path}: the store is empty; add texts first (subspaces store add)")
        subset = self._admitted(name, loaded, where)
        if condition is not None:
            scores, rows = self._conditioned(name, loaded, head, condition, vectors, k, subset)
        elif dims is None or dims == full:
            if loaded.index is None:
                loaded.index = ops.flat_index(loaded.vectors)
            scores, rows = ops.exact(loaded.index, vectors, k, subset=subset)
        else:
            basis = basis or self.default_basis(name, dims)
            if basis == "adapter":  # rows and queries through the same fitted map, then truncated
                from subspaces.store.shrink import load_adapter

                adapter = load_adapter(self, name)
                if loaded.adapted is None:
                    loaded.adapted = adapter.transform(loaded.vectors)
                rows_in, axes = loaded.adapted, None
                prefix_queries = ops.unit_prefix(adapter.transform(vectors), dims)
            else:
                rows_in, axes = loaded.vectors, self._prefix_basis(loaded, basis)
                prefix_queries = ops.prefix_rows(vectors, dims, axes)
            # the prefix ranking alone is scored exactly; a funnel's shortlist index is chosen by its size
            codes = rerank == "full" and ops.scans_codes(len(loaded.ids), len(vectors))
            key = (basis, dims, codes)
            if key not in loaded.prefixes:
                in_basis = ops.prefix_rows(rows_in, dims, axes)
                loaded.prefixes[key] = ops.int8_index(in_basis) if codes else ops.flat_index(in_basis)
            index = loaded.prefixes[key]
            if rerank == "none":
                scores, rows = ops.exact(index, prefix_queries, k, subset=subset)
            else:
                admitted = len(loaded.ids) if subset is None else len(subset)
                size = ops.check_k(k, max(admitted, 1)) * (shortlist if shortlist is not None else 10)
                scores, rows = ops.funnel(
                    index, loaded.vectors, vectors, k, size, prefix_queries=prefix_queries, subset=subset
                )
        return [_result(loaded.ids, loaded.texts, loaded.metadata, s, r) for s, r in zip(scores, rows, strict=True)]

    def _admitted(self, name: str, loaded: _Loaded, where: str | None) -> np.ndarray | None:
        """The rows of ``loaded`` that filter ``where`` admits (None: no filter), kept per table version."""
        if where is None:
            return None
        if where not in loaded.matches:
            if len(loaded.matches) >= 16:
                loaded.matches.pop(next(iter(loaded.matches)))
            loaded.matches[where] = self._matching(name, where, loaded.rowids)
        return loaded.matches[where]

    def default_basis(self, space: str | None = None, dims: int | None = None) -> str:
        """Whose first ``dims`` axes a prefix search reads when not told: the basis ``store shrink`` chose for
        that size (:mod:`.shrink`), else ``"model"`` for a model trained for truncation (Matryoshka), else
        ``"pca"``, the store's principal axes (issue 52: on hidden data the model's own prefix kept 0.971 of
        exact Recall@10 at 64 dims, the principal axes more)."""
        from subspaces.store.matryoshka import trained
        from subspaces.store.shrink import chosen

        name = space or self.manifest.active
        picked = chosen(self, name, dims) if dims is not None else None
        if picked is not None:
            return picked
        return "model" if trained(self._space(name).model) else "pca"

    @staticmethod
    def _prefix_basis(loaded: _Loaded, basis: str) -> np.ndarray | None:
        """The prefix basis's axes (``dim x dim``); None for the model's own coordinates."""
        if basis == "model":
            return None
        if loaded.axes is None:
            from subspaces.adapt.basis import principal_axes

            loaded.axes = principal_axes(loaded.vectors)
        return loaded.axes

    # -- conditional search ---------------------------------------------------------------------------------
    def condition_head(self, head: Any, space: str | None = None) -> Any:
        """The Hyper-CL tri-encoder ``head`` (a folder, loaded once on the store's device, or a loaded model),
        checked to sit on the space's model: its projections read the space's vectors."""
        from subspaces.models.triencoder import TriEncoder

        name = space or self.manifest.active
        if isinstance(head, (str, os.PathLike)):
            key = str(Path(head).resolve())
            if key not in self._heads:
                from subspaces.models.conditional import load_model

                loaded = load_model(Path(head), task="cond", device=self.runtime.device or "cpu")
                if not isinstance(loaded, TriEncoder):
                    raise SubspacesError(
                        f"{head} is a bi-encoder: it reads the condition with each text, so stored vectors cannot "
                        "be projected; conditional store search needs a tri-encoder head (cond train --arch tri)"
                    )
                self._heads[key] = loaded
            tri = self._heads[key]
        elif isinstance(head, TriEncoder):
            tri = head
        else:
            raise SubspacesError(f"head must be a tri-encoder folder or a TriEncoder, not {type(head).__name__}")
        record = self._space(name).model
        if self._checked_heads.get(tri, ("",))[0] != record.weights:
            from subspaces.models.store import model_fingerprint

            fingerprint = ModelFingerprint.of(tri.encoder, tri.encoder_name or "")
            record.check(fingerprint, what="the condition head's encoder")
            if tri.head.kind == "concat" and "Normalize" not in record.pooler:
                # ReLU(W [x; c] + b) is not scale-invariant, and the store keeps only unit vectors
                raise SubspacesError(
                    "a concat head reads the unnormalised embedding, which the store does not keep (its model does "
                    "not normalise); use a hypernet or hadamard head, whose cosine does not depend on length"
                )
            self._checked_heads[tri] = (record.weights, model_fingerprint(tri.head))
        return tri

    def _conditioned(
        self,
        name: str,
        loaded: _Loaded,
        head: Any,
        condition: str,
        queries: np.ndarray,
        k: int,
        subset: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Scores and rows of the ``k`` best rows by cosine under ``condition``: the head's view of the space's rows
        (:func:`subspaces.models.heads.corpus_view`, N×K for a low-rank hypernet) is kept for a few conditions."""
        import warnings

        import torch

        from subspaces.cache import LRUCache
        from subspaces.models.heads import conditional_cosines, conditional_search, corpus_view

        tri = self.condition_head(head, name)
        was_training = tri.training
        tri.eval()  # as its own similarity(): no dropout, and the condition-matrix cache in use
        try:
            with torch.no_grad():
                params, _ = tri.condition_params([condition])  # from the tri-encoder's condition-matrix cache
            with warnings.catch_warnings():  # the rows are read-only, and nothing writes to them: no copy
                warnings.simplefilter("ignore", UserWarning)
                corpus = torch.from_numpy(np.ascontiguousarray(loaded.vectors, dtype=np.float32))
            if loaded.conditioned is None:
                loaded.conditioned = LRUCache(max_bytes=None, max_items=4, name="conditioned rows")
            key = (self._checked_heads[tri][1], condition)
            view = loaded.conditioned.get(key)
            if view is None:
                view = corpus_view(tri.head, corpus, params)
                loaded.conditioned.put(key, view)
            queries = np.ascontiguousarray(queries, dtype=np.float32)
            if subset is None:
                return conditional_search(tri.head, torch.from_numpy(queries), params, corpus, k, view=view)
            # a filter: every admitted row's conditional cosine, the others out of the top k
            ops.check_k(k, 1)
            cosines = conditional_cosines(tri.head, torch.from_numpy(queries), params, view, corpus)
            admitted = torch.from_numpy(np.asarray(subset, dtype=np.int64))
            scores, best = torch.topk(cosines[:, admitted], min(k, len(subset)), dim=1)
            return scores.cpu().numpy(), admitted[best].cpu().numpy()
        finally:
            tri.train(was_training)

    def _search_ann(
        self,
        name: str,
        vectors: np.ndarray,
        k: int,
        nprobes: int,
        refine_factor: int | None,
        where: str | None,
    ) -> list[SearchResult]:
        table = self._table(name)
        ops.check_k(k, 1)
        with _lance_errors(f"{self.path}, space {name}"):
            if not table.list_indices():
                raise SubspacesError(f"{self.path}: no ANN index yet; build it with `subspaces store index`")
        out = []
        for vector in vectors:
            query = table.search(vector, vector_column_name="vector").distance_type("cosine").nprobes(nprobes)
            if refine_factor is not None:
                query = query.refine_factor(refine_factor)
            if where is not None:
                query = query.where(where, prefilter=True)  # before the top k: k rows when k rows pass
            query = query.limit(k).select(["id", "text", "vector", "metadata", "_distance"])
            with _filter_errors(where) if where is not None else _lance_errors(f"{self.path}, space {name}"):
                hits = query.to_arrow()
            # The score is the row's cosine, computed here from its stored vector, as exact search scores it.
            # LanceDB's `_distance` is no cosine distance to convert: from the IVF-PQ index it is a PQ
            # approximation of the squared L2 distance of the unit vectors (2 - 2 cos, so 1 - d was 2 cos - 1),
            # while rows added since the index are scanned flat and give 1 - cos: one row scored differently
            # by the index's state (issue 58). The refine step re-ranks the candidates by full vectors.
            scores = _vectors(hits.column("vector"), vectors.shape[1]) @ vector
            order = np.argsort(-scores, kind="stable")
            out.append(
                _result(
                    np.asarray(hits.column("id").to_pylist(), dtype=object),
                    np.asarray(hits.column("text").to_pylist(), dtype=object),
                    np.asarray(hits.column("metadata").to_pylist(), dtype=object),
                    scores[order],
                    order,
                )
            )
        return out


def _result(
    ids: np.ndarray, texts: np.ndarray, metadata: np.ndarray, scores: np.ndarray, rows: np.ndarray
) -> SearchResult:
    """One query's hits: ``rows`` index ``ids``/``texts``/``metadata`` (a -1, no row, is dropped)."""
    keep = np.asarray(rows) >= 0
    rows, scores = np.asarray(rows)[keep].astype(np.int64), np.asarray(scores)[keep]
    return SearchResult(
        ids=ids[rows].tolist(),
        scores=scores.astype(float).tolist(),
        texts=texts[rows].tolist(),
        metadata=[columns.parsed(m) for m in metadata[rows]],
    )


def _shippable(model: Any | None, record: ModelFingerprint, loaded: Any) -> Any:
    """What a Ray worker loads its encoder from: the name given or recorded (each worker loads its own copy),
    else the loaded model itself (shipped through Ray's object store)."""
    if isinstance(model, (str, os.PathLike)):
        return str(model)
    if model is None and record.name:
        return record.name
    return loaded


def _check_condition(condition: str | None, head: Any, ann: bool, dims: int | None) -> None:
    if (condition is None) != (head is None):
        raise SubspacesError("conditional search needs both a condition and a head (--condition with --head)")
    if condition is not None and (ann or dims is not None):
        raise SubspacesError("conditional search is exact over the projected rows: drop --ann and --dims")


def _check_texts(texts: list[str]) -> None:
    """Refuse what is not a storable text: a text with nothing visible (a line of NULs would be embedded as
    something and rank first for unrelated queries) or one that is not Unicode (a lone surrogate)."""
    if not texts:
        raise DataError("nothing to add: no texts")
    for i, text in enumerate(texts):
        if not isinstance(text, str) or not visible(text):
            raise DataError(f"text {i} is empty, blank or control characters only, or not a string")
        problem = unicode_problem(text)
        if problem is not None:
            raise DataError(f"text {i} holds {problem}")


def _check_rows(texts: list[str], ids: list[str], metadata: list[Any]) -> None:
    if len(ids) != len(texts) or len(metadata) != len(texts):
        raise DataError(f"{len(texts)} texts, {len(ids)} ids and {len(metadata)} metadata entries: give one each")
    seen: dict[str, int] = {}
    for i, row_id in enumerate(ids):
        if row_id in seen:
            raise DataError(f"id {row_id!r} is given twice (rows {seen[row_id]} and {i}); ids must be unique")
        seen[row_id] = i
        problem = unicode_problem(row_id) or (unicode_problem(metadata[i]) if metadata[i] is not None else None)
        if problem is not None:
            raise DataError(f"row {i} (id {row_id!r}) holds {problem} in its id or metadata")


def _divisor_near(n: int, target: int) -> int:
    """The divisor of ``n`` closest to ``target`` (at least 1)."""
    divisors = [d for d in range(1, n + 1) if n % d == 0]
    return min(divisors, key=lambda d: (abs(d - max(target, 1)), d))
