"""The leaf of vector maths: unit rows, Matryoshka prefixes, prefix sizes, paired cosines, principal axes, checks.

Rows are the last axis: ``x[..., :dim]`` is a prefix. NumPy arrays keep their float type; torch tensors are
normalised by torch itself, as the encoder always has (its reduction order differs from NumPy's in the last bit).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any, Literal

import numpy as np

from subspaces.errors import DimensionError

ZERO_NORM = 1e-12  # a row shorter than this has no direction: it is divided by this, so a zero row stays zero

Order = Literal["given", "increasing", "ascending", "descending"]


def _is_tensor(x: Any) -> bool:
    torch = sys.modules.get("torch")  # a tensor exists only once torch is imported
    return torch is not None and isinstance(x, torch.Tensor)


def normalize_rows(x: Any, *, eps: float = ZERO_NORM, dtype: Any = None) -> Any:
    """Each row (last axis) divided by ``max(its L2 norm, eps)``; same array type and float type as ``x``, or
    NumPy rows (an array, a list) converted to ``dtype`` first (a tensor keeps its own)."""
    if _is_tensor(x):
        import torch

        return torch.nn.functional.normalize(x, dim=-1, eps=eps)
    x = x if dtype is None else np.asarray(x, dtype=dtype)
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), eps)


def truncate(x: Any, dim: int | None) -> Any:
    """The first ``dim`` coordinates of each row (``None``: all of them); a :class:`DimensionError` if a row has
    fewer, or ``dim`` is not positive."""
    if dim is not None and not 0 < dim <= x.shape[-1]:
        raise DimensionError(f"truncate dim {dim} is outside 1..{x.shape[-1]}")
    return x if dim is None else x[..., :dim]


def unit_prefix(x: Any, dim: int | None = None, *, dtype: Any = None) -> Any:
    """The first ``dim`` coordinates of each row (``None``: all), L2-normalised again: a Matryoshka prefix
    (``dtype``: as :func:`normalize_rows`)."""
    x = x if dtype is None or _is_tensor(x) else np.asarray(x, dtype=dtype)
    return normalize_rows(truncate(x, dim))


def cosine_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The cosine of each row of ``a`` with the same row of ``b`` (a zero row gives 0)."""
    return (normalize_rows(a) * normalize_rows(b)).sum(-1)


def parse_dims(text: str) -> list[int | None]:
    """``"16,32,full"`` -> ``[16, 32, None]`` (``None``: the full size), in the order given, repeats kept."""
    dims: list[int | None] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        try:
            value = None if part == "full" else int(part)
        except ValueError:
            raise DimensionError(f"bad dimension {part!r} in {text!r}: use integers or 'full'") from None
        if value is not None and value <= 0:
            raise DimensionError(f"dimension must be positive, got {value}")
        dims.append(value)
    if not dims:
        raise DimensionError("no dimensions given")
    return dims


def resolve_dims(
    dims: str | Iterable[int | None], full: int, *, order: Order, what: str = "dims", below_full: bool = False
) -> list[int]:
    """Prefix sizes of ``full``-sized rows (a string as :func:`parse_dims` reads it): ``None`` becomes ``full``,
    repeats go, each is checked to be in 1..full (1..full-1 with ``below_full``: a part of the rows, not all); in
    the ``order`` asked for (``given``: as listed, first occurrence kept; ``increasing``: as listed, which must
    rise strictly)."""
    given = parse_dims(dims) if isinstance(dims, str) else list(dims)
    try:
        values = [full if d is None else int(d) for d in given]
    except (TypeError, ValueError):
        raise DimensionError(f"{what} must be integers or 'full', got {given!r}") from None
    if order == "increasing" and any(b <= a for a, b in zip(values, values[1:], strict=False)):
        raise DimensionError(f"{what} {values} must be strictly increasing")
    resolved = list(dict.fromkeys(values))
    if order in ("ascending", "descending"):
        resolved.sort(reverse=order == "descending")
    if not resolved:
        raise DimensionError(f"no {what} given")
    top = full - 1 if below_full else full
    bad = [d for d in resolved if not 0 < d <= top]
    if bad:
        raise DimensionError(f"{what} {bad} are outside 1..{top} (the vectors have {full} dimensions)")
    return resolved


def principal_axes(vectors: np.ndarray, *, sample: int = 20_000, seed: int = 0) -> np.ndarray:
    """The rows' principal axes (``dim x dim``, orthonormal columns, largest variance first) from a seeded sample
    of at most ``sample`` rows: a rotation that keeps every inner product and puts the most variance first."""
    if len(vectors) > sample:  # sample before the float64 copy: a store's rows can be many
        vectors = vectors[np.sort(np.random.default_rng(seed).choice(len(vectors), sample, replace=False))]
    x = np.asarray(vectors, dtype=np.float64)
    x = x - x.mean(axis=0)
    _, axes = np.linalg.eigh(x.T @ x)  # ascending eigenvalues
    return np.ascontiguousarray(axes[:, ::-1], dtype=np.float32)


def check_finite(x: Any, what: str = "embeddings") -> None:
    """A :class:`DimensionError` counting the rows of ``x`` (an array or a tensor) that hold NaN or inf."""
    bad = ~(sys.modules["torch"].isfinite(x) if _is_tensor(x) else np.isfinite(x))
    if bad.any():
        rows = int(bad.any(axis=1).sum()) if bad.ndim == 2 else int(bad.sum())
        raise DimensionError(f"{what}: {rows} row(s) hold NaN or inf")


def check_rows(
    x: Any, what: str, *, dim: int | None = None, fitted: str | None = None, row_offset: int = 0, eps: float = 1e-8
) -> np.ndarray:
    """``x`` as a non-empty 2-D float32 C-contiguous array, or a :class:`DimensionError` naming the first bad row
    (NaN or inf, or a norm below ``eps``; numbered from ``row_offset``) or a width other than ``dim`` (the one
    ``fitted``, e.g. "the adapter", was fitted on)."""
    x = np.asarray(x)
    if x.ndim != 2 or x.shape[0] == 0:
        raise DimensionError(f"{what}: expected a non-empty 2-D array (rows x dims), got shape {x.shape}")
    if dim is not None and x.shape[1] != dim:
        expected = f"{fitted} was fitted on {dim}" if fitted else f"expected {dim}"
        raise DimensionError(f"{what}: has {x.shape[1]} dimensions, {expected}")
    x = np.ascontiguousarray(x, dtype=np.float32)
    bad = ~np.isfinite(x).all(axis=1)
    if bad.any():
        rows = np.flatnonzero(bad)
        raise DimensionError(f"{what}: {len(rows)} row(s) hold NaN or inf (first: row {row_offset + rows[0]})")
    zero = np.linalg.norm(x, axis=1) < eps
    if zero.any():
        rows = np.flatnonzero(zero)
        raise DimensionError(
            f"{what}: {len(rows)} row(s) are zero vectors (first: row {row_offset + rows[0]}), e.g. empty texts"
        )
    return x
