"""``Store``, the façade: texts and their vectors in an embedded LanceDB folder, searchable exactly, by ANN and by
funnel. Rows live in the table layer (:mod:`.table`), searches are plans (:mod:`.plans`); migration, import and
export, re-embedding and shrinking are modules of their own. The folder's layout: docs/store.md.
"""

from __future__ import annotations

import os
import shutil
import weakref
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, overload

import numpy as np

from subspaces.errors import DataError, DimensionError, SubspacesError
from subspaces.fingerprint import model_fingerprint
from subspaces.progress import Progress
from subspaces.store import backfill, columns, encoders, plans, quantized, scaleout, transfer
from subspaces.store import migrate as migration
from subspaces.store.encoders import Runtime, check_prompt, choose_prompts, load
from subspaces.store.fingerprint import ModelFingerprint
from subspaces.store.inputs import check_unicode, is_text_id, text_id, unicode_problem, visible
from subspaces.store.lock import WriteLock
from subspaces.store.manifest import MANIFEST, Manifest, Space
from subspaces.store.maps import load_map
from subspaces.store.results import SearchResult
from subspaces.store.shrink import describe as describe_shrink
from subspaces.store.shrink import shrink as shrink_space
from subspaces.store.table import Database, Rows, Table, block_of, metadata_strings
from subspaces.vectors import normalize_rows


class Store:
    """A vector store in folder ``path``. Make one with :meth:`create`, open one with :meth:`open`.

    >>> store = Store.create("my-store", "minilm-l6")
    >>> store.add(["A man plays a guitar.", "A dog runs."], ids=["a", "b"])
    >>> store.search("someone playing music", k=1)  # {"query": ..., "ids": ["a"], "scores": [...], "texts": [...]}

    ``device``, ``backend``, ``precision`` and ``dtype`` say how the store runs every encoder it loads
    (:class:`Runtime`); every ``add`` and ``search`` encodes after the prompts the space recorded (:mod:`.encoders`).
    Every write holds the store's write lock (:mod:`.lock`); reading needs no lock and loads no model until a query
    must be encoded.
    """

    def __init__(self, path: Path, manifest: Manifest, runtime: Runtime | None = None) -> None:
        self.path = path
        self.manifest = manifest
        self.runtime = runtime or Runtime()
        self._database = Database(path)
        self._loaded: dict[str, Rows] = {}
        self._codes: dict[str, Any] = {}  # space -> (its quantized copy's file, the codes read from it)
        self._models: dict[str, Any] = {}  # space -> loaded model
        self._heads: dict[str, Any] = {}  # a condition head's folder -> the loaded tri-encoder
        self._query_maps: dict[tuple[str, str], Any] = {}  # (space, key) -> a loaded query-side map
        self._shrink_adapters: dict[str, Any] = {}  # space -> its loaded shrink adapter (store shrink)
        # a tri-encoder -> (the store weights its encoder was checked against, its head's fingerprint)
        self._checked_heads: weakref.WeakKeyDictionary[Any, tuple[str, str]] = weakref.WeakKeyDictionary()
        self._lock = WriteLock(path)

    @contextmanager
    def _writing(self, what: str) -> Iterator[None]:
        """Hold the write lock for ``what`` (re-entrant); the manifest is re-read once it is taken."""
        first = not self._lock.held
        self._lock.acquire(what)
        try:
            if first:
                self._refresh_manifest()
            yield
        finally:
            self._lock.release()

    def _refresh_manifest(self) -> None:
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
        dtype: str = "float32",
        query_prompt: str | None = None,
        document_prompt: str | None = None,
        query_prompt_name: str | None = None,
        document_prompt_name: str | None = None,
    ) -> Store:
        """A new, empty store for ``model`` (a bundled name, a folder, or a loaded SentenceTransformer, then give
        ``name`` to reload it by), in a new or empty folder. Its prompts: ``query_prompt``/``document_prompt`` (``""``:
        none), or ``*_prompt_name`` (one of the model's), else the folder's own (:func:`.encoders.choose_prompts`)."""
        folder = _new_folder(path)
        runtime = Runtime(device, backend, precision, dtype)
        encoder, fingerprint = load(model, name, runtime)
        prompts = choose_prompts(
            encoder,
            query=query_prompt,
            document=document_prompt,
            query_name=query_prompt_name,
            document_name=document_prompt_name,
        )
        store = cls._make(folder, fingerprint, runtime, prompts)
        store._models["0"] = encoder
        return store

    @classmethod
    def create_foreign(cls, path: str | os.PathLike[str], label: str, dimension: int) -> Store:
        """A new, empty store for vectors of a model this machine cannot run, named ``label``."""
        if dimension < 1:
            raise DimensionError(f"a store's vectors need at least 1 dimension, got {dimension}")
        return cls._make(_new_folder(path), ModelFingerprint.of_foreign(label, dimension), Runtime())

    @classmethod
    def _make(
        cls, folder: Path, fingerprint: ModelFingerprint, runtime: Runtime, prompts: dict[str, str] | None = None
    ) -> Store:
        """The store folder, its table and manifest (written last: until it is there the folder is no store)."""
        folder.mkdir(parents=True, exist_ok=True)
        try:
            Database(folder).create("space_0", fingerprint.dimension)
            space = Space(table="space_0", model=fingerprint, prompts=dict(prompts or {}))
            manifest = Manifest(spaces={"0": space}, active="0")
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
        dtype: str = "float32",
    ) -> Store:
        folder = Path(path)
        runtime = Runtime(device, backend, precision, dtype)  # checked before the folder: a bad option changes nothing
        return cls(folder, Manifest.load(folder), runtime)

    # -- models ---------------------------------------------------------------------------------------------
    def model(self, space: str | None = None) -> Any:
        """The encoder of ``space`` (default: the active one), loaded by its recorded name and checked."""
        name = space or self.manifest.active
        recorded = self._space(name).model
        if name not in self._models and recorded.foreign:
            raise SubspacesError(
                f"space {name} holds vectors of {recorded.name!r}, a foreign model this machine cannot run, so "
                "a text cannot be encoded into it: search it by vector (search_vectors, store search "
                "--query-vectors), or by text once a model that runs here has a map into it (store migrate DIR "
                "--to MODEL --query-side, from the rows' stored texts)"
            )
        return self._recorded_model(recorded, name, "the store's model")

    def _recorded_model(self, recorded: ModelFingerprint, key: str, what: str) -> Any:
        """The model ``recorded`` names, loaded once (kept under ``key``) and checked to be the recorded one."""
        if key not in self._models:
            if not recorded.name:
                raise SubspacesError(f"{what} was built in memory and has no name: pass model=...")
            encoder, fingerprint = self.load_model(recorded.name)
            recorded.check(fingerprint, what=f"the model now at {recorded.name}")
            self._models[key] = encoder
        return self._models[key]

    def prompt(self, role: str, space: str | None = None) -> str | None:
        """The prompt space ``space`` records for ``role`` (None: the model's default applies)."""
        return self._space(space or self.manifest.active).prompts.get(role)

    def encode(self, texts: list[str], role: str, space: str | None = None, **options: Any) -> np.ndarray:
        """Unit vectors of ``texts`` by space ``space``'s model, as that space encodes ``role`` texts (its prompt)."""
        name = space or self.manifest.active
        return encoders.encode(self.model(name), texts, self.prompt(role, name), **options)

    def load_model(self, model: Any, name: str | None = None) -> tuple[Any, ModelFingerprint]:
        """``model`` loaded on the store's device and backend, and its fingerprint (the one place that loads)."""
        return load(model, name, self.runtime)

    def _space_of_loaded(
        self, encoder: Any, fingerprint: ModelFingerprint, space: str | None, *, mapped: bool
    ) -> tuple[str, Any, str | None]:
        """The space of a loaded query model, the model, and (``mapped``) its query-side map's key."""
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
                    return name, encoder, key
        retired = [n for n, s in self.manifest.spaces.items() if s.state == "retired" and s.model.matches(fingerprint)]
        if retired:
            raise SubspacesError(f"{fingerprint.label()} is the store's retired model; search with the active one")
        self._space(candidates[0]).model.check(fingerprint)
        raise AssertionError("unreachable: check() raised")  # pragma: no cover

    def _query_space(self, model: Any | None, space: str | None, *, mapped: bool = True) -> tuple[str, Any, str | None]:
        """Where a text goes: ``(space, encoder, query map's key or None)``, or a refusal. With ``mapped``, a model with
        a query-side map into the space is searched through it, and a foreign space searched without a model through its
        latest one."""
        if model is None:
            name = space or self.manifest.active
            self._searchable(name)
            record = self._space(name)
            if mapped and record.model.foreign and record.query_maps:
                key = list(record.query_maps)[-1]
                recorded = ModelFingerprint.from_dict(record.query_maps[key]["model"])
                encoder = self._recorded_model(recorded, f"query:{recorded.weights}", "the query-side map's model")
                return name, encoder, key
            return name, self.model(name), None
        encoder, fingerprint = self.load_model(model)
        return self._space_of_loaded(encoder, fingerprint, space, mapped=mapped)

    def _query_map_key(self, name: str, fingerprint: ModelFingerprint) -> str | None:
        for key, entry in reversed(list(self._space(name).query_maps.items())):
            if ModelFingerprint.from_dict(entry["model"]).matches(fingerprint):
                return key
        return None

    def _query_map(self, name: str, key: str) -> Any:
        """The query-side map ``key`` of space ``name``, loaded once (its folder hash-checked)."""
        if (name, key) not in self._query_maps:
            self._query_maps[(name, key)] = load_map(self.path / self._space(name).query_maps[key]["map"])
        return self._query_maps[(name, key)]

    # -- reading --------------------------------------------------------------------------------------------
    def _space(self, name: str) -> Space:
        if name not in self.manifest.spaces:
            raise SubspacesError(f"the store has no space {name!r}; it has {', '.join(self.manifest.spaces)}")
        return self.manifest.spaces[name]

    def _searchable(self, name: str) -> None:
        if self._space(name).state == "retired":
            raise SubspacesError(f"space {name!r} was retired by a migration; search the active space")

    def _table(self, name: str) -> Table:
        """Space ``name``'s table (:mod:`.table`); a write that moves its rows marks its quantized copy stale."""
        table = self._space(name).table
        return self._database.open(name, table, on_rewrite=lambda reason: quantized.invalidate(self, name, reason))

    def _ids(self, name: str) -> set[str]:
        return self._table(name).ids()

    def _load_rows(self, name: str, *, refuse_empty: bool = False) -> Rows:
        """Space ``name``'s rows (:class:`.table.Rows`), read again only when its table version changed."""
        table = self._table(name)
        if name not in self._loaded or self._loaded[name].version != table.version:
            self._loaded[name] = table.rows(self._space(name).model.dimension)
        if refuse_empty and not len(self._loaded[name]):
            raise SubspacesError(f"{self.path}: the store is empty; add texts first (subspaces store add)")
        return self._loaded[name]

    def __len__(self) -> int:
        return self.count()

    def count(self, space: str | None = None) -> int:
        return self._table(space or self.manifest.active).count()

    def info(self) -> dict[str, Any]:
        """The manifest and, per space, its rows, table version, index, quantized copy, duplicates, shrink."""
        spaces = {}
        for name, space in self.manifest.spaces.items():
            table = self._table(name)
            indices = table.indices()
            spaces[name] = space.to_dict() | {
                "rows": table.count(),
                "version": table.version,
                "index": indices[0] if indices else None,
                "quantized": quantized.describe(self, name),
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
        show_progress: bool = False,
        ray: bool | str = False,
        actors: int | None = None,
    ) -> dict[str, int]:
        """Encode and append the rows the store lacks, ``write_batch`` a commit, and map them into pending (migration)
        spaces; returns ``{"added": n, "skipped": m}`` (and ``"replaced"`` with ``upsert``; ids: see the class).
        ``ray``: encode on Ray Data, ``True`` (or ``"local"``) on a local runtime, else the cluster at that address,
        with ``actors`` actors (default: one per CPU); see :mod:`.scaleout`."""
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
            active = self.manifest.active
            _, encoder, _ = self._query_space(model, active, mapped=False)  # another model is refused here, first
            stored = self._ids(active)
            todo = [i for i, row_id in enumerate(row_ids) if row_id not in stored]
            changed = self._changed(active, texts, row_ids, meta, derived, stored)
            if changed and not upsert:
                raise _stored_otherwise(len(changed), row_ids[changed[0]], "text or metadata")
            if derived and todo and any(not is_text_id(row_id) for row_id in stored):
                # a text stored under an id of another kind (given, or a line number before ids came from texts)
                have = set(self._table(active).columns(["text"]).column("text").to_pylist())
                todo = [i for i in todo if texts[i] not in have]
            self._table(active).prepare_columns([columns.parsed(meta[i]) for i in todo])  # a mistyped field: refused
            replace = {row_ids[i] for i in changed}
            if replace:
                self._forget(replace, active)
                todo = sorted({*todo, *changed})
            record = self._space(active).model
            prompt = self.prompt("document", active)

            def encoded_here() -> Iterator[Any]:
                for start in range(0, len(todo), write_batch):
                    rows = todo[start : start + write_batch]
                    batch = [texts[i] for i in rows]
                    vectors = encoders.encode(encoder, batch, prompt, batch_size=batch_size)
                    yield block_of(
                        record.dimension, [row_ids[i] for i in rows], batch, vectors, [meta[i] for i in rows]
                    )

            blocks: Iterable[Any] = encoded_here()
            if ray and todo:
                scaleout.start(ray)
                blocks = scaleout.encode_rows(
                    [row_ids[i] for i in todo],
                    [texts[i] for i in todo],
                    metadata_strings([meta[i] for i in todo]),
                    model=scaleout.shippable(model, record, encoder),
                    runtime=self.runtime,
                    expected=record,
                    batch_size=batch_size,
                    block_rows=write_batch,
                    actors=actors,
                    prompt=prompt,
                )
            description = f"store add: encoding {len(todo):,} texts into {self.path.name}"
            with Progress(len(todo), description, unit="text", enabled=show_progress and bool(todo)) as bar:
                self._append(active, blocks, bar, replace=replace)
            for pending in self.manifest.pending():
                self._sync(pending, show_progress=show_progress, ray=ray, actors=actors)
            result = {"added": len(todo) - len(changed), "skipped": len(texts) - len(todo)}
            return (result | {"replaced": len(changed)}) if upsert else result

    def _changed(
        self, name: str, texts: list[str], row_ids: list[str], meta: list[Any], derived: bool, stored: set[str]
    ) -> list[int]:
        """Positions of the rows whose id is stored with another text (or, for given ids, other metadata)."""
        wanted = {row_id for row_id in row_ids if row_id in stored}
        if not wanted:
            return []
        have = self._table(name).stored_rows(wanted, ["text"] if derived else ["text", "metadata"])
        strings = metadata_strings(meta)
        return [
            i
            for i, row_id in enumerate(row_ids)
            if row_id in have and have[row_id] != ((texts[i],) if derived else (texts[i], strings[i]))
        ]

    def _forget(self, ids: set[str], active: str) -> None:
        """Before rows of ``ids`` are replaced in the active space: mark the quantized copies stale, then delete those
        rows from pending spaces (:meth:`_sync` maps them anew) and retired ones, so a run killed at any point leaves
        nothing stale in use."""
        for name in [active, *self.manifest.pending()]:
            quantized.invalidate(self, name, "rows were replaced (add --upsert)")
        # Retired spaces too: a rollback would otherwise bring the replaced rows back; without them it refuses.
        retired = [n for n, s in self.manifest.spaces.items() if s.state == "retired"]
        for name in [*self.manifest.pending(), *retired]:
            self._delete_ids(name, ids)

    def _delete_ids(self, name: str, ids: set[str], reason: str | None = None) -> int:
        """Delete space ``name``'s rows of ``ids`` (``reason``: first mark its quantized copy stale); how many."""
        backfill.forget_native(self, name, ids)
        table = self._table(name)
        addresses = table.row_addresses(ids)
        if addresses and reason is not None:
            quantized.invalidate(self, name, reason)
        table.delete_rows(addresses)
        return len(addresses)

    def _append(self, name: str, blocks: Iterable[Any], bar: Any, replace: set[str] | None = None) -> None:
        """Write ``blocks`` into space ``name`` (:meth:`.table.Table.append`)."""
        self._table(name).append(blocks, bar, replace=replace)

    def _sync(
        self,
        name: str,
        *,
        chunk: int = 16_384,
        show_progress: bool = False,
        ray: bool | str = False,
        actors: int | None = None,
    ) -> int:
        """Map into mapped space ``name`` the rows of its source it lacks (on Ray with ``ray``); how many."""
        with self._writing("store migrate"):
            space = self._space(name)
            if space.mapped_from is None or space.aligner is None:
                raise SubspacesError(f"space {name!r} is not a mapped space")
            source = self._load_rows(space.mapped_from)
            have = self._ids(name)
            missing = np.flatnonzero([row_id not in have for row_id in source.ids])
            if not len(missing):
                return 0
            aligner = load_map(self.path / space.aligner)  # a learned map (map.json) or a mini-vec2vec aligner
            dim = space.model.dimension

            def mapped_here() -> Iterator[Any]:
                for start in range(0, len(missing), chunk):
                    rows = missing[start : start + chunk]
                    mapped = normalize_rows(aligner.transform(source.vectors[rows]), dtype=np.float32)
                    yield block_of(dim, source.ids[rows], source.texts[rows], mapped, source.metadata[rows])

            blocks: Iterable[Any] = mapped_here()
            if ray:
                scaleout.start(ray)
                rows = block_of(
                    source.vectors.shape[1],
                    source.ids[missing],
                    source.texts[missing],
                    source.vectors[missing],
                    source.metadata[missing],
                )
                blocks = scaleout.map_rows(rows, aligner, dim, block_rows=chunk, actors=actors)
            with Progress(
                len(missing), f"store migrate: mapping into space {name}", unit="row", enabled=show_progress
            ) as bar:
                self._append(name, blocks, bar)
            return len(missing)

    def index(
        self, space: str | None = None, *, num_partitions: int | None = None, num_sub_vectors: int | None = None
    ) -> dict[str, Any]:
        """Build (or rebuild) LanceDB's IVF-PQ index on a space's vectors; later rows are searched flat beside it."""
        with self._writing("store index"):
            name = space or self.manifest.active
            n, dim = self.count(name), self._space(name).model.dimension
            if n < 256:
                raise SubspacesError(f"an ANN index needs at least 256 rows (PQ's codebook); the store has {n}")
            partitions = num_partitions or max(1, min(int(np.sqrt(n)), n // 256))
            divisors = [d for d in range(1, dim + 1) if dim % d == 0]  # PQ's default: the one nearest dim / 8
            sub_vectors = num_sub_vectors or min(divisors, key=lambda d: (abs(d - max(dim // 8, 1)), d))
            if dim % sub_vectors:
                raise DimensionError(f"num_sub_vectors ({sub_vectors}) must divide the dimension ({dim})")
            self._table(name).create_index(partitions, sub_vectors)
            return {"space": name, "rows": n, "num_partitions": partitions, "num_sub_vectors": sub_vectors}

    def quantize(
        self, kind: str, space: str | None = None, *, calibration_rows: int = quantized.CALIBRATION_ROWS
    ) -> dict[str, Any]:
        """Write the space's ``int8`` or ``binary`` quantized copy, stale after an ``add`` (:mod:`.quantized`)."""
        with self._writing("store index --quantize"):
            return quantized.write(self, space or self.manifest.active, kind, calibration_rows=calibration_rows)

    def duplicates(self, space: str | None = None) -> int:
        """How many rows of a space repeat an earlier row's id (:meth:`repair` removes them)."""
        ids = self._table(space or self.manifest.active).columns(["id"]).column("id").to_pylist()
        return len(ids) - len(set(ids))

    def repair(self) -> dict[str, dict[str, int]]:
        """Remove, in every space, each row whose id an earlier row already has (one delete commit per 10,000 rows: a
        rerun removes the rest), and make and fill typed metadata columns a killed write left missing or unfilled.
        Returns per space ``{"removed", "ids" (that had doubles), "differing" (doubles of another text), "columns"}``.
        """
        report = {}
        with self._writing("store repair"):
            for name in self.manifest.spaces:
                table = self._table(name)
                data = table.columns(["id", "text"], row_ids=True)
                first: dict[str, str] = {}
                extra: list[int] = []
                doubled, differing = set(), set()
                ids, texts, addresses = (data.column(c).to_pylist() for c in ("id", "text", "_rowid"))
                for row_id, text, address in zip(ids, texts, addresses, strict=True):
                    if row_id in first:
                        extra.append(address)
                        doubled.add(row_id)
                        if text != first[row_id]:
                            differing.add(row_id)
                    first.setdefault(row_id, text)
                if extra:
                    quantized.invalidate(self, name, "duplicate rows were removed (store repair)")
                    table.delete_rows(extra)
                # a store whose metadata was JSON only (before typed columns): its scalar fields become columns
                meta = [columns.parsed(m) for m in table.columns(["metadata"]).column("metadata").to_pylist()]
                typed = len(table.prepare_columns(meta)) + table.complete_columns()
                report[name] = {"removed": len(extra), "ids": len(doubled), "differing": len(differing)}
                report[name]["columns"] = typed
        return report

    def import_vectors(
        self,
        vectors: str | os.PathLike[str],
        *,
        model: Any | None = None,
        foreign: str | None = None,
        dimension: int | None = None,
        upsert: bool = False,
        check_rows: int = transfer.CHECK_ROWS,
        min_cosine: float = transfer.MIN_COSINE,
        show_progress: bool = False,
        ray: bool | str = False,
        actors: int | None = None,
        **source: Any,
    ) -> dict[str, Any]:
        """Add vectors another tool wrote (a file, or ``table`` of a LanceDB database at ``vectors``; ``source``: side
        files and fields, :class:`.transfer.Source`) to the active space without encoding them: validated whole, then
        written (:mod:`.transfer`). ``model`` or ``foreign`` (a label), if given, must be what the space holds;
        ``model`` re-encodes ``check_rows`` texts and refuses a mean cosine below ``min_cosine``. Ids, ``upsert`` and
        ``ray`` as in :meth:`add`. Returns ``{"added", "skipped", "rows", "dimension", "ids"}``, with ``"replaced"`` for
        ``upsert`` and ``"mean_cosine"`` when checked."""
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
        rows = transfer.Source(vectors, **source)
        with self._writing("store import"):
            # the lock re-read the manifest: another writer may have switched the space these vectors were checked for
            if self.manifest.active != active:
                raise SubspacesError(
                    f"{self.path}: the active space changed while this import was being checked (another process "
                    f"committed or rolled back a migration); nothing was written: rerun the import"
                )
            plan = transfer.validate(
                rows,
                dimension=record.dimension,
                stored=self._ids(active),
                known=columns.table_columns(self._table(active).schema),
                check_rows=check_rows,
                encoder=encoder,
                prompt=self.prompt("document", active),
                min_cosine=min_cosine,
            )
            return self._import_planned(rows, plan, upsert=upsert, show_progress=show_progress, ray=ray, actors=actors)

    def _import_planned(
        self,
        source: transfer.Source,
        plan: transfer.Plan,
        *,
        upsert: bool,
        show_progress: bool,
        ray: bool | str = False,
        actors: int | None = None,
    ) -> dict[str, Any]:
        """The writing pass of a validated import (under the write lock)."""
        active = self.manifest.active
        changed = transfer.changed(self, active, plan.overlap)
        if changed and not upsert:
            raise _stored_otherwise(len(changed), sorted(changed)[0], "text, metadata or vector")
        if plan.columns:
            self._table(active).declare_columns(plan.columns)
        if changed:
            self._forget(changed, active)
        skip = set(plan.overlap)
        written = transfer.write_rows(self, active, source, plan, skip, changed, show_progress, ray=ray, actors=actors)
        for pending in self.manifest.pending():
            self._sync(pending, show_progress=show_progress)
        report: dict[str, Any] = {
            "added": written - len(changed),
            "skipped": plan.rows - written,
            "rows": plan.rows,
            "dimension": plan.dimension,
            "ids": plan.derived,
        }
        if upsert:
            report["replaced"] = len(changed)
        if plan.cosine is not None:
            report["mean_cosine"] = round(plan.cosine, 4)
        return report

    def export(self, output: str | os.PathLike[str], *, space: str | None = None) -> dict[str, Any]:
        """Write every row of ``space`` to ``output``, re-importable as is (:func:`.transfer.export`)."""
        return transfer.export(self, output, space=space)

    def delete(self, ids: Iterable[str | int]) -> dict[str, int]:
        """Delete the rows of ``ids`` from every space; ``{"deleted": active rows, "missing": ids not held}``."""
        wanted = {str(i) for i in ids}
        if not wanted:
            raise DataError("nothing to delete: no ids")
        for row_id in wanted:
            check_unicode(row_id, f"id {row_id!r}")
        with self._writing("store delete"):
            found = len(wanted & self._ids(self.manifest.active))
            deleted = 0
            for name in self.manifest.spaces:
                removed = self._delete_ids(name, wanted, "rows were deleted (store delete)")
                if name == self.manifest.active:
                    deleted = removed
        return {"deleted": deleted, "missing": len(wanted) - found}

    # -- migrating ------------------------------------------------------------------------------------------
    def migrate(self, model: Any, **options: Any) -> dict[str, Any]:
        """Map the store into ``model``'s space as a pending space (see :func:`subspaces.store.migrate.migrate`)."""
        return migration.migrate(self, model, **options)

    def commit(self) -> str:
        """Make the pending migration's space the active one (see :func:`subspaces.store.migrate.commit`)."""
        return migration.commit(self)

    def reembed(self, *, budget: int | None = None, seconds: float | None = None, **options: Any) -> dict[str, Any]:
        """Replace mapped rows by true vectors of their model, oldest first (:func:`.backfill.reembed`)."""
        return backfill.reembed(self, budget=budget, seconds=seconds, **options)

    def shrink(self, dims: str | Sequence[int], **options: Any) -> dict[str, Any]:
        """Choose and record, per prefix size, the basis ``dims`` searches read (:func:`.shrink.shrink`)."""
        return shrink_space(self, dims if isinstance(dims, str) else list(dims), **options)

    def rollback(self) -> str:
        """Undo the last :meth:`commit`: the previous space active again (:func:`subspaces.store.migrate.rollback`)."""
        return migration.rollback(self)

    # -- searching ------------------------------------------------------------------------------------------
    @overload
    def search(self, queries: str, k: int = ..., **options: Any) -> SearchResult: ...  # a str: one result

    @overload
    def search(self, queries: Sequence[str], k: int = ..., **options: Any) -> list[SearchResult]: ...

    def search(
        self,
        queries: str | Sequence[str],
        k: int = 10,
        *,
        model: Any | None = None,
        space: str | None = None,
        batch_size: int = 64,
        plan: plans.Plan | None = None,
        query_prompt: str | None = None,
        **options: Any,
    ) -> SearchResult | list[SearchResult]:
        """The ``k`` nearest rows of each query, a :class:`SearchResult` each, in query order (a query with no visible
        character is refused). ``model``: the query encoder (default: the store's), refused unless it matches a
        searchable space or has a query-side map into one. ``options`` choose the plan (:func:`.plans.plan`), or give
        ``plan``: exact by default; ``ann=True`` (``refine_factor``), ``dims=d`` (``basis``, ``shortlist``, ``rerank``),
        ``quantized=True`` (``rescore``), ``condition`` with ``head``; ``where``: a SQL filter applied before the top
        ``k``. ``query_prompt`` replaces the queries' prompt for this call. See docs/store.md ("Search")."""
        single = isinstance(queries, str)
        texts = [queries] if isinstance(queries, str) else list(queries)
        if not texts:
            return []
        for i, text in enumerate(texts):  # a tokenizer's TypeError, else: a traceback
            if not isinstance(text, str):
                raise DataError(f"query {i} is a {type(text).__name__}, not a string")
            check_unicode(text, f"query {i}")
            if not visible(text):  # it would be encoded as something and rank rows for nothing that was asked
                raise DataError(
                    f"query {i} has no visible character (empty, blanks or control characters only): give a text"
                )
        condition, head = options.get("condition"), options.get("head")
        if isinstance(plan, plans.Conditional):
            condition, head = plan.condition, plan.head
        plans.check_condition(condition, head, options.get("ann", False), options.get("dims"))
        if query_prompt is not None:
            check_prompt(query_prompt, "query")
        if condition is not None and model is None:
            # the head's encoder is the store's model (checked): it encodes the queries, loaded once
            name, encoder, key = space or self.manifest.active, self.condition_head(head, space).encoder, None
        else:
            name, encoder, key = self._query_space(model, space)
        query_map = self._query_map(name, key) if key is not None else None
        if query_prompt is None and key is not None:  # the query-side map's model's own prompt
            query_prompt = (self._space(name).query_maps[key].get("prompts") or {}).get("query")
        elif query_prompt is None:
            query_prompt = self.prompt("query", name)
        vectors = encoders.encode(encoder, texts, query_prompt, batch_size=batch_size)
        if query_map is not None:  # a query-side migration: the new model's queries in the stored rows' space
            vectors = query_map.transform(vectors)
        results = self.search_vectors(vectors, k, space=name, plan=plan, **options)
        for text, result in zip(texts, results, strict=True):
            result.query = text
        return results[0] if single else results

    def search_vectors(
        self,
        vectors: np.ndarray,
        k: int = 10,
        *,
        space: str | None = None,
        plan: plans.Plan | None = None,
        **options: Any,
    ) -> list[SearchResult]:
        """:meth:`search` for query vectors in the space's model's coordinates (unit rows)."""
        name = space or self.manifest.active
        self._searchable(name)
        full = self._space(name).model.dimension
        vectors = np.atleast_2d(np.asarray(vectors, dtype=np.float32))
        if vectors.shape[1] != full:
            raise DimensionError(f"query vectors have {vectors.shape[1]} dimensions; the store's space has {full}")
        if not np.isfinite(vectors).all():
            raise DimensionError("query vectors hold NaN or inf")
        if plan is not None and options:
            raise SubspacesError(f"give a plan or its options ({', '.join(options)}), not both")
        return (plan or plans.plan(full, **options)).run(self, name, vectors, k)

    def default_basis(self, space: str | None = None, dims: int | None = None) -> str:
        """Whose first ``dims`` axes a prefix search reads when not told (:func:`.plans.default_basis`)."""
        return plans.default_basis(self, space or self.manifest.active, dims)

    def principal_axes(self, space: str | None = None) -> np.ndarray:
        """The principal axes of a space's rows (``dim x dim``, by variance): the basis a ``"pca"`` prefix reads."""
        return self._load_rows(space or self.manifest.active).principal_axes()

    # -- conditional search ---------------------------------------------------------------------------------
    def condition_head(self, head: Any, space: str | None = None) -> Any:
        """The Hyper-CL tri-encoder ``head`` (a folder, loaded once), checked to sit on the space's model."""
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


def import_vectors(
    path: str | os.PathLike[str],
    vectors: str | os.PathLike[str],
    *,
    model: Any | None = None,
    foreign: str | None = None,
    dimension: int | None = None,
    runtime: Runtime | None = None,
    **options: Any,
) -> tuple[Store, dict[str, Any]]:
    """Import into the store at ``path``, making it first if there is none (for ``model``, or ``foreign`` vectors
    of ``dimension``, default the input's). The store is made only once the input has been validated whole, so a
    refused import leaves no store behind. Returns the store and :meth:`Store.import_vectors`'s report."""
    folder = Path(path)
    runtime = runtime or Runtime()
    if (folder / MANIFEST).is_file():
        store = Store(folder, Manifest.load(folder), runtime)
        return store, store.import_vectors(vectors, model=model, foreign=foreign, dimension=dimension, **options)
    if (model is None) == (foreign is None):
        raise SubspacesError("a new store needs the vectors' model: give model (it runs here) or foreign LABEL")
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise SubspacesError(f"{folder} already exists and is not a store or an empty folder")
    writing = {"show_progress": options.pop("show_progress", False), "ray": options.pop("ray", False)}
    writing["actors"] = options.pop("actors", None)
    check_rows = options.pop("check_rows", transfer.CHECK_ROWS)
    minimum = options.pop("min_cosine", transfer.MIN_COSINE)
    options.pop("upsert", None)  # nothing is stored yet: nothing to replace
    source = transfer.Source(vectors, **options)
    encoder, fingerprint = (None, None) if model is None else load(model, None, runtime)
    expected = fingerprint.dimension if fingerprint is not None else dimension
    prompts = encoders.folder_prompts(encoder) if encoder is not None else {}
    plan = transfer.validate(
        source,
        dimension=expected,
        stored=set(),
        known={},
        check_rows=check_rows,
        encoder=encoder,
        prompt=prompts.get("document"),
        min_cosine=minimum,
    )
    assert plan.dimension is not None
    record = fingerprint if fingerprint is not None else ModelFingerprint.of_foreign(str(foreign), plan.dimension)
    store = Store._make(folder, record, runtime, prompts)
    if encoder is not None:
        store._models[store.manifest.active] = encoder
    # Under the write lock: once the manifest exists, another writer could take the store and append beside this one.
    with store._writing("store import"):
        report = store._import_planned(source, plan, upsert=False, **writing)
    return store, report


def _new_folder(path: str | os.PathLike[str]) -> Path:
    folder = Path(path)
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise SubspacesError(f"{folder} already exists and is not an empty folder; a store is made in a new one")
    return folder


def _stored_otherwise(count: int, first: str, what: str) -> DataError:
    """The refusal of rows whose ids are stored with other content (``what``), unless they are upserted."""
    return DataError(
        f"{count:,} of these ids are already stored with another {what} (first: id {first!r}); nothing was "
        "written: give those rows new ids, or replace the stored rows with --upsert (upsert=True)"
    )


def _check_texts(texts: list[str]) -> None:
    """Refuse a text with nothing visible (it would rank for unrelated queries) or not Unicode."""
    if not texts:
        raise DataError("nothing to add: no texts")
    for i, text in enumerate(texts):
        if not isinstance(text, str) or not visible(text):
            raise DataError(f"text {i} is empty, blank or control characters only, or not a string")
        check_unicode(text, f"text {i}")


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
        columns.check_finite(columns.parsed(metadata[i]), f"row {i} (id {row_id!r})")
