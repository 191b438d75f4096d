"""Quantized embeddings for storage: calibrated int8 (4x smaller) and packed binary (32x), searched with rescoring.

int8 maps each dimension's range, read once from a calibration sample and saved, onto 256 levels, so every later
query is coded alike. Search ranks by dot product: a shortlist in the quantized space (int8 x int8, or Hamming),
re-ranked by the float query against the float corpus rows when given, else against the dequantized codes.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from subspaces.errors import DataError, DimensionError, SubspacesError
from subspaces.io import atomic_open, save_npy

Kind = Literal["int8", "binary"]
KINDS: tuple[Kind, ...] = ("int8", "binary")


@dataclass(frozen=True)
class Int8Calibration:
    """Per-dimension ranges: value ``low`` -> code -128, ``high`` -> 127."""

    low: np.ndarray
    high: np.ndarray

    @property
    def dim(self) -> int:
        return int(self.low.shape[0])

    def step(self) -> np.ndarray:
        # A dimension constant over the sample still gets a usable (tiny) step instead of a division by zero.
        return np.maximum(self.high - self.low, 1e-12) / 255.0


CALIBRATION_ROWS = 10_000


def calibration_sample(vectors: np.ndarray, rows: int = CALIBRATION_ROWS, seed: int = 0) -> np.ndarray:
    """Up to ``rows`` rows of ``vectors``, a seeded sample in file order: the same vectors always get the same
    int8 ranges (``model encode --quantize``, ``vectors search --quantize`` and the store's quantized copy)."""
    if rows < 2:
        raise SubspacesError(f"calibration rows must be at least 2, got {rows}")
    picked = np.random.default_rng(seed).permutation(len(vectors))[:rows]
    return vectors[np.sort(picked)]


def calibrate_int8(sample: np.ndarray) -> Int8Calibration:
    """Ranges from a calibration ``sample`` (rows, dims): each dimension's min and max."""
    sample = _matrix(sample, "calibration sample")
    if len(sample) < 2:
        raise DataError(f"int8 calibration needs at least 2 rows, got {len(sample)}")
    return Int8Calibration(sample.min(axis=0), sample.max(axis=0))


def quantize(embeddings: np.ndarray, kind: Kind, calibration: Int8Calibration | None = None) -> np.ndarray:
    """int8 codes (rows, dims) with ``calibration``, or binary codes (rows, ceil(dims / 8)) uint8: bit = value > 0."""
    embeddings = _matrix(embeddings, "embeddings")
    if kind == "binary":
        return np.packbits(embeddings > 0, axis=1)
    if kind != "int8":
        raise SubspacesError(f"unknown quantization {kind!r}; choose one of {', '.join(KINDS)}")
    cal = _needs(calibration, embeddings.shape[1])
    codes = np.rint((embeddings - cal.low) / cal.step()) - 128.0
    return np.clip(codes, -128, 127).astype(np.int8)


def rescore_shortlist(
    queries: np.ndarray,
    shortlist: np.ndarray,
    codes: Any,  # an array, or rows read on demand (`codes[rows]`)
    kind: Kind,
    d: int,
    calibration: Int8Calibration | None,
    corpus: Any = None,
) -> np.ndarray:
    """Each query's scores against its ``shortlist`` rows: by the ``corpus`` rows' float vectors, or (None) by the
    dequantized ``codes``. Per query only its shortlisted rows are read, in file order (what a memory map serves
    best); the scores come back in shortlist order."""
    scores = np.empty(shortlist.shape, dtype=np.float32)
    for i, rows in enumerate(shortlist):
        inv = np.argsort(rows)
        order = rows[inv]
        vectors = (
            np.asarray(corpus[order], dtype=np.float32)
            if corpus is not None
            else dequantize(codes[order], kind, d, calibration)
        )
        scores[i, inv] = vectors @ queries[i]
    return scores


def dequantize(codes: np.ndarray, kind: Kind, dim: int, calibration: Int8Calibration | None = None) -> np.ndarray:
    """Back to float32: int8 to the centre of each code's interval; binary to -1/+1 per bit."""
    if kind == "binary":
        return np.unpackbits(codes, axis=1, count=dim).astype(np.float32) * 2.0 - 1.0
    cal = _needs(calibration, dim)
    return (codes.astype(np.float32) + 128.0) * cal.step() + cal.low


def search(
    queries: np.ndarray,
    codes: np.ndarray,
    *,
    kind: Kind,
    k: int = 10,
    calibration: Int8Calibration | None = None,
    rescore: int | None = 4,
    corpus: np.ndarray | None = None,
    dim: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Top-``k`` rows of ``codes`` for each float query: (scores, ids), both (queries, k), best first. ``rescore``:
    shortlist ``rescore * k`` rows on the codes, re-ranked by dot product with ``corpus`` (float rows in the codes'
    order) or else the dequantized codes; None ranks by the quantized scores alone (Hamming for binary)."""
    queries = _matrix(queries, "queries")
    d = queries.shape[1] if dim is None else dim
    n = len(codes)
    if codes.ndim != 2 or (kind == "int8" and codes.shape[1] != d) or (kind == "binary" and codes.shape[1] * 8 < d):
        raise DimensionError(f"codes of shape {codes.shape} do not fit {d}-d {kind} embeddings")
    if queries.shape[1] != d:
        raise DimensionError(f"queries are {queries.shape[1]}-d, the codes {d}-d")
    if corpus is not None and corpus.shape != (n, d):
        raise DimensionError(f"corpus is {corpus.shape}, the codes hold {n} rows of {d} dims")
    if k < 1 or (rescore is not None and rescore < 1):
        raise SubspacesError(f"k and rescore must be at least 1, got k={k}, rescore={rescore}")
    k = min(k, n)
    first = _quantized_scores(queries, codes, kind, calibration)
    if rescore is None:
        return _top(first, k)
    _, shortlist = _top(first, min(n, rescore * k))
    top_scores, pos = _top(rescore_shortlist(queries, shortlist, codes, kind, d, calibration, corpus), k)
    return top_scores, np.take_along_axis(shortlist, pos, axis=1)


def _quantized_scores(queries: np.ndarray, codes: np.ndarray, kind: Kind, cal: Int8Calibration | None) -> np.ndarray:
    if kind == "binary":
        q = quantize(queries, "binary")
        bits = codes.shape[1] * 8
        # Hamming similarity: matching bits (in chunks of queries, to bound the (q, n, bytes) XOR array).
        out = np.empty((len(q), len(codes)), dtype=np.float32)
        for s in range(0, len(q), 64):
            out[s : s + 64] = bits - np.bitwise_count(q[s : s + 64, None, :] ^ codes[None]).sum(-1)
        return out
    q = quantize(queries, "int8", cal).astype(np.int32)  # exact integer dot products, then float for ranking
    return (q @ codes.astype(np.int32).T).astype(np.float32)


def _top(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` highest per row, best first (ties by lower index, so results are deterministic)."""
    idx = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(scores, idx, axis=1), idx


def _matrix(x: np.ndarray, what: str) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    if x.ndim != 2 or x.shape[1] == 0:
        raise DimensionError(f"{what} must be a (rows, dims) matrix, got shape {x.shape}")
    if not np.isfinite(x).all():
        raise DimensionError(f"{what} hold NaN or inf")
    return x


def _needs(cal: Int8Calibration | None, dim: int) -> Int8Calibration:
    if cal is None:
        raise SubspacesError("int8 needs calibration ranges (calibrate_int8 on a sample of the embeddings)")
    if cal.dim != dim:
        raise DimensionError(f"the calibration is {cal.dim}-d, the embeddings {dim}-d")
    return cal


def sidecar(path: str | os.PathLike[str]) -> Path:
    """Where the description of a codes file lives: ``codes.npy`` -> ``codes.npy.quant.json``."""
    return Path(f"{path}.quant.json")


def save_codes(
    path: str | os.PathLike[str], codes: np.ndarray, kind: Kind, dim: int, calibration: Int8Calibration | None
) -> None:
    """Write ``codes`` (.npy) and, beside them, their kind, dimension and int8 ranges (each file atomically)."""
    meta: dict = {"kind": kind, "dim": dim}
    if calibration is not None:
        meta |= {"low": calibration.low.tolist(), "high": calibration.high.tolist()}
    save_npy(path, codes)
    with atomic_open(sidecar(path)) as fh:
        json.dump(meta, fh)


def load_codes(path: str | os.PathLike[str]) -> tuple[np.ndarray, Kind, int, Int8Calibration | None]:
    """Read what :func:`save_codes` wrote: (codes, kind, dim, calibration or None)."""
    try:
        meta = json.loads(sidecar(path).read_text())
        kind, dim = meta["kind"], int(meta["dim"])
        cal = None
        if kind == "int8":
            cal = Int8Calibration(np.asarray(meta["low"], np.float32), np.asarray(meta["high"], np.float32))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise DataError(f"cannot read its quantization description ({exc})", sidecar(path)) from None
    if kind not in KINDS:
        raise DataError(f"unknown quantization {kind!r}", sidecar(path))
    return np.load(path), kind, dim, cal
