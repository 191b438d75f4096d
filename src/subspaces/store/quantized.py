"""A store space's quantized copy: int8 or binary codes of its vectors, searched with rescoring.

Layout, inside the store folder::

    quantized/<space>/copy.json                     which codes, and the table version and row count they encode
    quantized/<space>/<kind>-v<version>-<tag>.npy   the codes, and beside them their .quant.json (kind, int8 ranges)

The codes are written first (:func:`subspaces.quantize.save_codes`) and ``copy.json`` last, atomically: it is the
commit, so an interrupted write leaves the old copy in use (or none). Rows are only ever appended to a store table,
so a copy is current while the table holds as many rows as it encoded; an ``add`` since makes it stale, and a stale
copy is refused rather than searched (a row missing from the codes could never be found). A new table version with
the same rows (an ANN index build) keeps it current. The writes that move or remove rows (``add --upsert``, ``store
delete``, ``store repair``, an import's upsert, typed metadata columns filled in) mark the copy stale first
(:func:`invalidate`), since they can leave the row count as it was.

Search reads the codes, and from the table only what it must: the ids and texts of the hits and, for binary codes
rescored, the float vectors of the shortlisted rows. int8 is rescored against its dequantized codes (their error is
half a calibration step); binary against the floats, since ±1 per dimension is too coarse to re-rank by.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from subspaces.errors import DataError, SubspacesError
from subspaces.io import save_json
from subspaces.numerics import cpu_record
from subspaces.quantize import (
    CALIBRATION_ROWS,
    KINDS,
    Int8Calibration,
    Kind,
    calibrate_int8,
    calibration_sample,
    load_codes,
    quantize,
    save_codes,
    search,
)
from subspaces.store.results import SearchResult, hits
from subspaces.store.table import Table, lance_errors, vectors_of

if TYPE_CHECKING:
    from subspaces.store.core import Store

FOLDER = "quantized"
POINTER = "copy.json"


@dataclass(frozen=True)
class Copy:
    """What ``copy.json`` records of a space's quantized copy."""

    kind: Kind
    codes: str  # file name inside the space's folder
    version: int  # the table version it was written from
    rows: int
    bytes_per_vector: int
    calibration_rows: int | None
    invalid: str | None = None  # why the copy no longer matches its table, though the row count may (invalidate)
    fitted_on: dict[str, Any] | None = None  # the precision (float32) and CPU it was made on (numerics.cpu_record)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _folder(store: Store, space: str) -> Path:
    return store.path / FOLDER / space


def write(store: Store, space: str, kind: str, *, calibration_rows: int = CALIBRATION_ROWS) -> dict[str, Any]:
    """Quantize every row of ``space`` (int8: ranges calibrated on a seeded sample) and make it the space's copy."""
    if kind not in KINDS:
        raise SubspacesError(f"unknown quantization {kind!r}; choose one of {', '.join(KINDS)}")
    loaded = store._load_rows(space)
    if not len(loaded.ids):
        raise SubspacesError(f"{store.path}: the store is empty; add texts first (subspaces store add)")
    cal, sampled = None, None
    if kind == "int8":
        sample = calibration_sample(loaded.vectors, calibration_rows)
        cal, sampled = calibrate_int8(sample), len(sample)
    codes = quantize(loaded.vectors, kind, cal)
    folder = _folder(store, space)
    name = f"{kind}-v{loaded.version}-{secrets.token_hex(4)}.npy"  # never overwrites the file a reader may be using
    save_codes(folder / name, codes, kind, loaded.vectors.shape[1], cal)
    copy = Copy(kind, name, loaded.version, len(loaded.ids), codes.shape[1], sampled, fitted_on=cpu_record("float32"))
    save_json(folder / POINTER, copy.to_dict())
    for old in folder.glob("*.npy*"):  # earlier copies, now unreferenced
        if not old.name.startswith(name):
            old.unlink(missing_ok=True)
    return {"space": space} | copy.to_dict()


def read(store: Store, space: str) -> Copy | None:
    """The space's recorded copy, or None if it has none."""
    pointer = _folder(store, space) / POINTER
    if not pointer.exists():
        return None
    try:
        return Copy(**json.loads(pointer.read_text()))
    except (OSError, ValueError, TypeError) as exc:
        raise DataError(f"cannot read the quantized copy's record ({exc})", pointer) from None


def invalidate(store: Store, space: str, reason: str) -> None:
    """Mark the space's copy stale before a write that moves or replaces rows (an upsert, a repair): the copy
    addresses rows by their offset in the table, which such a write changes while the row count may not. Done
    before that write, so a run killed in between leaves a copy refused, never one read at shifted offsets."""
    from dataclasses import replace

    copy = read(store, space)
    if copy is not None and copy.invalid is None:
        save_json(_folder(store, space) / POINTER, replace(copy, invalid=reason).to_dict())


def describe(store: Store, space: str) -> dict[str, Any] | None:
    """``store info``'s view of the copy: its record and whether rows were added since (``stale``)."""
    copy = read(store, space)
    if copy is None:
        return None
    return copy.to_dict() | {"stale": copy.invalid is not None or _rows_now(store, space, copy) != copy.rows}


def _rows_now(store: Store, space: str, copy: Copy) -> int:
    """The table's row count (the copy's own while the table is at the copy's version)."""
    table = store._table(space)
    return copy.rows if table.version == copy.version else table.count()


def _current(store: Store, space: str) -> tuple[np.ndarray, Kind, int, Int8Calibration | None]:
    copy = read(store, space)
    if copy is None:
        raise SubspacesError(
            f"{store.path}: space {space} has no quantized copy; build one with "
            "`subspaces store index DIR --quantize int8` (or binary)"
        )
    if copy.invalid is not None:
        raise SubspacesError(
            f"{store.path}: the {copy.kind} copy of space {space} is stale ({copy.invalid}); run "
            f"`subspaces store index DIR --quantize {copy.kind}` again"
        )
    rows = _rows_now(store, space, copy)
    if rows != copy.rows:
        raise SubspacesError(
            f"{store.path}: the {copy.kind} copy of space {space} is stale (the table holds {rows:,} rows, the copy "
            f"{copy.rows:,} from table version {copy.version}); run `subspaces store index DIR --quantize {copy.kind}` "
            "again"
        )
    codes, kind, dim, cal = load_codes(_folder(store, space) / copy.codes)
    if len(codes) != copy.rows:
        raise DataError(f"holds {len(codes)} rows, its record {copy.rows}", _folder(store, space) / copy.codes)
    return codes, kind, dim, cal


class _TableVectors:
    """The float vectors of a table, read only at the rows asked for (what :func:`subspaces.quantize.search`
    reads its ``corpus`` rescoring rows through)."""

    def __init__(self, table: Table, rows: int, dim: int) -> None:
        self.table, self.shape = table, (rows, dim)

    def __getitem__(self, rows: np.ndarray) -> np.ndarray:
        return vectors_of(self.table.take(rows, ["vector"]).column("vector"), self.shape[1])


class _Rows:
    """``corpus`` rows at positions ``rows`` (a filter's matches): what the search of a subset of codes reads its
    rescoring rows through."""

    def __init__(self, corpus: Any, rows: np.ndarray) -> None:
        self.corpus, self.rows, self.shape = corpus, rows, (len(rows), corpus.shape[1])

    def __getitem__(self, rows: np.ndarray) -> np.ndarray:
        return self.corpus[self.rows[rows]]


def search_copy(
    store: Store, space: str, vectors: np.ndarray, k: int, rescore: int | None, *, where: str | None = None
) -> list[SearchResult]:
    """The top ``k`` rows of each query vector by the space's quantized copy, rescored over ``rescore * k``
    candidates (None: ranked by the quantized scores alone), as :meth:`Store.search_vectors` returns them.
    ``where``: only the rows that filter admits are ranked (their codes are taken before the top k)."""
    codes, kind, dim, cal = _current(store, space)
    table = store._table(space)
    # search reads its corpus only as corpus.shape and corpus[rows]: the table serves just the shortlist
    floats: Any = _TableVectors(table, len(codes), dim) if kind == "binary" and rescore is not None else None
    admitted = None if where is None else table.matching(where)
    if admitted is not None:
        if not len(admitted):
            return [hits(*(np.empty(0, dtype=object),) * 3, np.empty(0), np.empty(0, np.int64)) for _ in vectors]
        codes = codes[admitted]
        floats = None if floats is None else _Rows(floats, admitted)
    with lance_errors(table.label):
        scores, rows = search(vectors, codes, kind=kind, k=k, calibration=cal, rescore=rescore, corpus=floats, dim=dim)
    if admitted is not None:
        rows = admitted[rows]
    found = table.take(rows.ravel(), ["id", "text", "metadata"])
    ids = np.asarray(found.column("id").to_pylist(), dtype=object).reshape(rows.shape)
    texts = np.asarray(found.column("text").to_pylist(), dtype=object).reshape(rows.shape)
    metadata = np.asarray(found.column("metadata").to_pylist(), dtype=object).reshape(rows.shape)
    positions = np.arange(rows.shape[1])
    return [hits(i, t, m, s, positions) for i, t, m, s in zip(ids, texts, metadata, scores, strict=True)]
