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

Search keeps the codes in memory as they are (int8 stays int8), read once per copy, and scores them a block at a
time (:func:`search_codes`); it reads from the table only what it must: the ids and texts of the hits and, for
binary codes rescored, the float vectors of the shortlisted rows. int8 is rescored against its dequantized codes
(their error is half a calibration step); binary against the floats, since ±1 per dimension is too coarse to re-rank by.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from subspaces import topk
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
    dequantize,
    load_codes,
    quantize,
    save_codes,
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
    if not len(loaded):
        raise SubspacesError(f"{store.path}: the store is empty; add texts first (subspaces store add)")
    cal, sampled = None, None
    if kind == "int8":
        sample = calibration_sample(loaded.vectors, calibration_rows)
        cal, sampled = calibrate_int8(sample), len(sample)
    width = loaded.dim if kind == "int8" else -(-loaded.dim // 8)
    codes = np.empty((len(loaded), width), dtype=np.int8 if kind == "int8" else np.uint8)
    for start, block in loaded.blocks():  # row by row as quantize() codes them, a block of floats at a time
        codes[start : start + len(block)] = quantize(block, kind, cal)
    folder = _folder(store, space)
    name = f"{kind}-v{loaded.version}-{secrets.token_hex(4)}.npy"  # never overwrites the file a reader may be using
    save_codes(folder / name, codes, kind, loaded.dim, cal)
    copy = Copy(kind, name, loaded.version, len(loaded), codes.shape[1], sampled, fitted_on=cpu_record("float32"))
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
    held = store._codes.get(space)
    if held is None or held[0] != copy.codes:  # read once per copy, kept as the codes (int8 stays int8)
        loaded = load_codes(_folder(store, space) / copy.codes)
        if len(loaded[0]) != copy.rows:
            raise DataError(f"holds {len(loaded[0])} rows, its record {copy.rows}", _folder(store, space) / copy.codes)
        held = store._codes[space] = (copy.codes, loaded)
    return held[1]


class _TableVectors:
    """The float vectors of a table, read only at the rows asked for (what :func:`subspaces.quantize.search`
    reads its ``corpus`` rescoring rows through)."""

    def __init__(self, table: Table, rows: int, dim: int) -> None:
        self.table, self.shape = table, (rows, dim)

    def __getitem__(self, rows: np.ndarray) -> np.ndarray:
        return vectors_of(self.table.take(rows, ["vector"]).column("vector"), self.shape[1])


def search_copy(
    store: Store, space: str, vectors: np.ndarray, k: int, rescore: int | None, *, where: str | None = None
) -> list[SearchResult]:
    """The top ``k`` rows of each query vector by the space's quantized copy, rescored over ``rescore * k``
    candidates (None: ranked by the quantized scores alone), as :meth:`Store.search_vectors` returns them.
    ``where``: only the rows that filter admits are ranked (their codes are taken before the top k)."""
    codes, kind, dim, cal = _current(store, space)
    table = store._table(space)
    # the rescore reads its corpus only as corpus.shape and corpus[rows]: the table serves just the shortlist
    floats: Any = _TableVectors(table, len(codes), dim) if kind == "binary" and rescore is not None else None
    admitted = None if where is None else table.matching(where)
    if admitted is not None and not len(admitted):
        return [hits(*(np.empty(0, dtype=object),) * 3, np.empty(0), np.empty(0, np.int64)) for _ in vectors]
    with lance_errors(table.label):
        scores, rows = search_codes(
            vectors, codes, kind=kind, k=k, calibration=cal, rescore=rescore, corpus=floats, subset=admitted
        )
    found = table.take(rows.ravel(), ["id", "text", "metadata"])
    ids = np.asarray(found.column("id").to_pylist(), dtype=object).reshape(rows.shape)
    texts = np.asarray(found.column("text").to_pylist(), dtype=object).reshape(rows.shape)
    metadata = np.asarray(found.column("metadata").to_pylist(), dtype=object).reshape(rows.shape)
    positions = np.arange(rows.shape[1])
    return [hits(i, t, m, s, positions) for i, t, m, s in zip(ids, texts, metadata, scores, strict=True)]


CODE_BLOCK_BYTES = 16 * 2**20  # codes scored at a time: a block's scores and widened codes stay a few MiB


def search_codes(
    queries: np.ndarray,
    codes: np.ndarray,
    *,
    kind: Kind,
    k: int,
    calibration: Int8Calibration | None,
    rescore: int | None,
    corpus: Any = None,
    subset: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`subspaces.quantize.search`'s scores and rows, the same ones, from the codes a block at a time (the
    first ranking never widens or scores every code at once, nor sorts every row); ``subset``: only these rows
    (ascending) are ranked, and the rows returned are row numbers of ``codes``."""
    queries = np.asarray(queries, dtype=np.float32)
    n = len(codes) if subset is None else len(subset)
    k = min(k, n)
    wide = quantize(queries, "int8", calibration).astype(np.int32) if kind == "int8" else quantize(queries, kind)
    best = topk.Best(len(queries), k if rescore is None else min(n, rescore * k))
    size = max(1024, CODE_BLOCK_BYTES // (4 * codes.shape[1] * max(1, min(len(queries), 64))))
    for start in range(0, len(codes), size):
        if subset is None:
            rows = np.arange(start, min(start + size, len(codes)))
            block = codes[start : start + size]
        else:
            rows = subset[np.searchsorted(subset, start) : np.searchsorted(subset, start + size)]
            if not len(rows):
                continue
            block = codes[rows]
        best.add(_scores(wide, block, kind), rows)
    first, shortlist = best.result()
    if rescore is None:
        return first, shortlist
    d = len(calibration.low) if calibration is not None else queries.shape[1]
    scores = np.empty(shortlist.shape, dtype=np.float32)
    for i, rows in enumerate(shortlist):  # per query: only its shortlisted rows are read, in file order
        inv = np.argsort(rows)
        order = rows[inv]
        floats = (
            np.asarray(corpus[order], dtype=np.float32)
            if corpus is not None
            else dequantize(codes[order], kind, d, calibration)
        )
        scores[i, inv] = floats @ queries[i]
    top, positions = topk.largest(scores, np.broadcast_to(np.arange(shortlist.shape[1]), shortlist.shape), k)
    return top, np.take_along_axis(shortlist, positions, axis=1)


def _scores(queries: np.ndarray, block: np.ndarray, kind: Kind) -> np.ndarray:
    """The first ranking's scores of coded ``queries`` against a block of codes: exact integer dot products
    (int8), or matching bits (binary)."""
    if kind == "int8":
        return (queries @ block.astype(np.int32).T).astype(np.float32)
    bits = block.shape[1] * 8
    out = np.empty((len(queries), len(block)), dtype=np.float32)
    for s in range(0, len(queries), 64):
        out[s : s + 64] = bits - np.bitwise_count(queries[s : s + 64, None, :] ^ block[None]).sum(-1)
    return out
