"""What the summaries report: the paired bootstrap over rows (the library's), a t-interval over seeds, and a call's
seconds."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np

from subspaces.eval.stats import PairedDifference, paired_bootstrap

T = TypeVar("T")


def timed(fn: Callable[..., T], *args: Any, **kwargs: Any) -> tuple[T, float]:
    """``fn(*args, **kwargs)`` and the seconds it took."""
    start = time.perf_counter()
    return fn(*args, **kwargs), time.perf_counter() - start


def seed_interval(values: Sequence[float]) -> dict[str, float | int]:
    """Mean, sample std and the 95 % t-interval's half-width over seeds (0 for a single seed)."""
    from scipy.stats import t

    x = np.asarray(values, dtype=float)
    std = float(x.std(ddof=1)) if len(x) > 1 else 0.0
    half = float(t.ppf(0.975, len(x) - 1) * std / np.sqrt(len(x))) if len(x) > 1 else 0.0
    return {"mean": float(x.mean()), "std": std, "half_width": half, "seeds": len(x)}


def paired_mean_difference(a: np.ndarray, b: np.ndarray, n: int = 1000, seed: int = 0) -> PairedDifference:
    """mean(a) - mean(b) over row-aligned per-row values; a 2-d input's columns (seeds) are averaged first."""
    a2, b2 = (np.asarray(x, dtype=float).reshape(len(x), -1).mean(axis=1) for x in (a, b))
    return paired_bootstrap(a2, b2, lambda v, _: float(np.mean(v)), n=n, seed=seed)
