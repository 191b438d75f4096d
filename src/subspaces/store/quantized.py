"""A store space's quantized copy: int8 or binary codes of its vectors, searched with rescoring.

``quantized/<space>/copy.json`` (which codes, the table version and rows they encode) is written last, atomically,
beside the codes ``<kind>-v<version>-<tag>.npy`` and their ``.quant.json``. Rows are only appended, so a copy is
current while the table holds as many rows as it encoded; writes that move or remove rows mark it stale first
(:func:`invalidate`), and a stale copy is refused. See docs/store.md ("Quantized copy").
"""

from __future__ import annotations

import json
import secrets
from dataclasses import asdict, dataclass, replace
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
    quantize,
    rescore_shortlist,
    save_codes,
    sidecar,
)
from subspaces.store.results import SearchResult, hits
from subspaces.store.table import Table, column_objects, lance_errors, vectors_of
from subspaces.store.vectorfile import VectorFile

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


def _folder(store: Store, space: str) -> Path:
    return store.path / FOLDER / space


def write(store: Store, space: str, kind: str, *, calibration_rows: int = CALIBRATION_ROWS) -> dict[str, Any]:
    """Quantize every row of ``space`` (int8: ranges calibrated on a seeded sample) and make it the space's copy."""
    if kind not in KINDS:
        raise SubspacesError(f"unknown quantization {kind!r}; choose one of {', '.join(KINDS)}")
    loaded = store._load_rows(space, refuse_empty=True)
    cal, sampled = None, None
    if kind == "int8":
        sample = calibration_sample(loaded.floats, calibration_rows)
        cal, sampled = calibrate_int8(sample), len(sample)
    width = loaded.dim if kind == "int8" else -(-loaded.dim // 8)
    codes = np.empty((len(loaded), width), dtype=np.int8 if kind == "int8" else np.uint8)
    for start, block in loaded.blocks():  # row by row as quantize() codes them, a block of floats at a time
        codes[start : start + len(block)] = quantize(block, kind, cal)
    folder = _folder(store, space)
    name = f"{kind}-v{loaded.version}-{secrets.token_hex(4)}.npy"  # never overwrites the file a reader may be using
    save_codes(folder / name, codes, kind, loaded.dim, cal)
    copy = Copy(kind, name, loaded.version, len(loaded), codes.shape[1], sampled, fitted_on=cpu_record("float32"))
    save_json(folder / POINTER, asdict(copy))
    for old in folder.glob("*.npy*"):  # earlier copies, now unreferenced
        if not old.name.startswith(name):
            old.unlink(missing_ok=True)
    return {"space": space} | asdict(copy)


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
    """Mark the space's copy stale before a write that moves or replaces rows (it addresses rows by their offset, which
    such a write changes): a run killed in between leaves a copy refused, never one read at shifted offsets."""
    copy = read(store, space)
    if copy is not None and copy.invalid is None:
        save_json(_folder(store, space) / POINTER, asdict(replace(copy, invalid=reason)))


def describe(store: Store, space: str) -> dict[str, Any] | None:
    """``store info``'s view of the copy: its record and whether rows were added since (``stale``)."""
    copy = read(store, space)
    if copy is None:
        return None
    return asdict(copy) | {"stale": copy.invalid is not None or _rows_now(store, space, copy) != copy.rows}


def _rows_now(store: Store, space: str, copy: Copy) -> int:
    """The table's row count (the copy's own while the table is at the copy's version)."""
    table = store._table(space)
    return copy.rows if table.version == copy.version else table.count()


def _current(store: Store, space: str) -> Codes:
    copy = read(store, space)
    if copy is None:
        raise SubspacesError(
            f"{store.path}: space {space} has no quantized copy; build one with "
            "`subspaces store index DIR --quantize int8` (or binary)"
        )
    stale = copy.invalid
    if stale is None and (rows := _rows_now(store, space, copy)) != copy.rows:
        stale = f"the table holds {rows:,} rows, the copy {copy.rows:,} from table version {copy.version}"
    if stale is not None:
        raise SubspacesError(
            f"{store.path}: the {copy.kind} copy of space {space} is stale ({stale}); run "
            f"`subspaces store index DIR --quantize {copy.kind}` again"
        )
    held = store._codes.get(space)
    if held is None or held[0] != copy.codes:  # opened once per copy
        codes = Codes.open(_folder(store, space) / copy.codes)
        if len(codes.codes) != copy.rows:
            raise DataError(f"holds {len(codes.codes)} rows, its record {copy.rows}", codes.path)
        held = store._codes[space] = (copy.codes, codes)
    return held[1]


@dataclass
class Codes:
    """A quantized copy as search holds it: the codes file (binary codes scanned in blocks) and, for int8, a faiss index
    over the same codes (``QT_8bit_direct_signed``: exact integer dot products with an int8-coded query)."""

    path: Path
    codes: np.ndarray | VectorFile
    kind: Kind
    dim: int
    calibration: Int8Calibration | None
    index: Any = None

    @classmethod
    def open(cls, path: Path) -> Codes:
        try:
            meta = json.loads(sidecar(path).read_text())
            kind, dim = meta["kind"], int(meta["dim"])
            cal = None
            if kind == "int8":
                cal = Int8Calibration(np.asarray(meta["low"], np.float32), np.asarray(meta["high"], np.float32))
            codes = np.load(path, mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise DataError(f"cannot read the quantized copy ({exc})", path) from None
        if kind not in KINDS:
            raise DataError(f"unknown quantization {kind!r}", sidecar(path))
        held = cls(path, codes, kind, dim, cal)
        if kind == "int8":
            held.index = _int8_index(path, codes)
            held.codes = VectorFile(path)
        return held


def _int8_index(path: Path, codes: np.ndarray) -> Any:
    """A faiss index holding ``codes`` (int8, the .npy at ``path``), filled in place a block at a time by positional
    reads (``QT_8bit_direct_signed`` stores code ``c`` as the byte ``c + 128``; growing it by ``add`` would hold two
    buffers at once)."""
    import faiss

    n, width = codes.shape
    index = faiss.IndexScalarQuantizer(width, faiss.ScalarQuantizer.QT_8bit_direct_signed, faiss.METRIC_INNER_PRODUCT)
    index.codes.resize(n * width)
    stored = faiss.rev_swig_ptr(index.codes.data(), n * width) if n else np.empty(0, np.uint8)
    offset = int(codes.offset)  # type: ignore[attr-defined]
    size = max(1, CODE_BLOCK_BYTES // width)
    for start in range(0, n, size):
        rows = min(size, n - start)
        block = np.fromfile(path, dtype=np.int8, count=rows * width, offset=offset + start * width)
        stored[start * width : (start + rows) * width] = block.view(np.uint8) ^ np.uint8(0x80)  # c + 128, as a byte
    index.ntotal = n
    return index


class _TableVectors:
    """A table's float vectors, read only at the rows asked for (a rescore's ``corpus``)."""

    def __init__(self, table: Table, rows: int, dim: int) -> None:
        self.table, self.shape = table, (rows, dim)

    def __getitem__(self, rows: np.ndarray) -> np.ndarray:
        return vectors_of(self.table.take(rows, ["vector"]).column("vector"), self.shape[1])


def search_copy(
    store: Store, space: str, vectors: np.ndarray, k: int, rescore: int | None, *, where: str | None = None
) -> list[SearchResult]:
    """The top ``k`` rows of each query vector by the space's quantized copy (``where``: admitted rows only)."""
    held = _current(store, space)
    codes, kind, dim = held.codes, held.kind, held.dim
    table = store._table(space)
    # the rescore reads its corpus only as corpus.shape and corpus[rows]: the table serves just the shortlist
    floats: Any = _TableVectors(table, len(codes), dim) if kind == "binary" and rescore is not None else None
    admitted = None if where is None else table.matching(where)
    if admitted is not None and not len(admitted):
        return [hits(*(np.empty(0, dtype=object),) * 3, np.empty(0), np.empty(0, np.int64)) for _ in vectors]
    with lance_errors(table.label):
        scores, rows = search_codes(
            vectors,
            codes,
            kind=kind,
            k=k,
            calibration=held.calibration,
            rescore=rescore,
            corpus=floats,
            subset=admitted,
            index=held.index,
        )
    found = table.take(rows.ravel(), ["id", "text", "metadata"])
    ids, texts, metadata = (column_objects(found, c).reshape(rows.shape) for c in ("id", "text", "metadata"))
    positions = np.arange(rows.shape[1])
    return [hits(i, t, m, s, positions) for i, t, m, s in zip(ids, texts, metadata, scores, strict=True)]


CODE_BLOCK_BYTES = 16 * 2**20  # codes scored at a time: a block's scores and widened codes stay a few MiB


def search_codes(
    queries: np.ndarray,
    codes: np.ndarray | VectorFile,
    *,
    kind: Kind,
    k: int,
    calibration: Int8Calibration | None,
    rescore: int | None,
    corpus: Any = None,
    subset: np.ndarray | None = None,
    index: Any = None,
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`subspaces.quantize.search`'s scores and rows, the same ones, from the codes a block at a time; ``subset``:
    only these rows (ascending) are ranked; ``index``: int8 codes' faiss index, which ranks first."""
    queries = np.asarray(queries, dtype=np.float32)
    n = len(codes) if subset is None else len(subset)
    k = min(k, n)
    wide = quantize(queries, "int8", calibration).astype(np.int32) if kind == "int8" else quantize(queries, kind)
    shortlist_size = k if rescore is None else min(n, rescore * k)
    if index is not None:
        first, shortlist = _int8_first(index, wide.astype(np.float32), shortlist_size, subset)
    else:
        first, shortlist = _first_blocks(codes, wide, kind, shortlist_size, subset)
    if rescore is None:
        return first, shortlist
    d = len(calibration.low) if calibration is not None else queries.shape[1]
    scores = rescore_shortlist(queries, shortlist, codes, kind, d, calibration, corpus)
    top, positions = topk.largest(scores, np.broadcast_to(np.arange(shortlist.shape[1]), shortlist.shape), k)
    return top, np.take_along_axis(shortlist, positions, axis=1)


def _first_blocks(
    codes: np.ndarray | VectorFile, queries: np.ndarray, kind: Kind, m: int, subset: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    """The first ranking's best ``m`` per query, scoring the codes a block at a time."""
    best = topk.Best(len(queries), m)
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
        best.add(_scores(queries, block, kind), rows)
    return best.result()


TIE_MARGIN = 64  # extra rows asked of faiss, to see every row tied with the m-th best without a second scan


def _int8_first(index: Any, queries: np.ndarray, m: int, subset: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """The first ranking's best ``m`` per query from int8 codes' faiss index, ties by lower row as the block scan
    gives them: faiss orders tied rows its own way, so every row scoring at least the ``m``-th best is gathered
    (integer scores: those above it minus one half) and ordered here."""
    params = topk.selector(subset)
    available = index.ntotal if subset is None else len(subset)
    wanted = min(available, m + TIE_MARGIN)
    scores, rows = index.search(queries, wanted, params=params) if params else index.search(queries, wanted)
    out_scores, out_rows = np.empty((len(queries), m), np.float32), np.empty((len(queries), m), np.int64)
    for i in range(len(queries)):
        kth = scores[i, m - 1]
        if wanted == available or scores[i, wanted - 1] < kth:  # every row tied with the m-th was returned
            tied_scores, tied_rows = scores[i : i + 1], rows[i : i + 1]
        else:
            extra = {"params": params} if params else {}
            _, tied_scores, tied_rows = index.range_search(queries[i : i + 1], float(kth) - 0.5, **extra)
            tied_scores, tied_rows = tied_scores[None], tied_rows[None].astype(np.int64)
        best_scores, best_rows = topk.largest(tied_scores, tied_rows, m)
        out_scores[i], out_rows[i] = best_scores[0], best_rows[0]
    return out_scores, out_rows


def _scores(queries: np.ndarray, block: np.ndarray, kind: Kind) -> np.ndarray:
    """Coded ``queries``' scores against a block of codes: integer dot products, or matching bits."""
    if kind == "int8":
        return (queries @ block.astype(np.int32).T).astype(np.float32)
    bits = block.shape[1] * 8
    out = np.empty((len(queries), len(block)), dtype=np.float32)
    for s in range(0, len(queries), 64):
        out[s : s + 64] = bits - np.bitwise_count(queries[s : s + 64, None, :] ^ block[None]).sum(-1)
    return out
