"""Intervals the summaries report: the paired bootstrap over rows (the library's) and a t-interval over seeds."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from subspaces.eval.stats import PairedDifference, paired_bootstrap

__all__ = ["PairedDifference", "paired_bootstrap", "paired_mean_difference", "seed_interval"]


def seed_interval(values: Sequence[float]) -> dict[str, float | int]:
    """Mean, sample std and the 95 % t-interval's half-width over seeds (0 for a single seed)."""
    from scipy.stats import t

    x = np.asarray(values, dtype=float)
    std = float(x.std(ddof=1)) if len(x) > 1 else 0.0
    half = float(t.ppf(0.975, len(x) - 1) * std / np.sqrt(len(x))) if len(x) > 1 else 0.0
    return {"mean": float(x.mean()), "std": std, "half_width": half, "seeds": len(x)}


def paired_mean_difference(a: np.ndarray, b: np.ndarray, n: int = 1000, seed: int = 0) -> PairedDifference:
    """mean(a) - mean(b) over row-aligned per-row values; a 2-d input's columns (seeds) are averaged first."""
    a2 = np.asarray(a, dtype=float).reshape(len(a), -1).mean(axis=1)
    b2 = np.asarray(b, dtype=float).reshape(len(b), -1).mean(axis=1)
    return paired_bootstrap(a2, b2, lambda v, _: float(np.mean(v)), n=n, seed=seed)
