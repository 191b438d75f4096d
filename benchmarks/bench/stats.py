"""What the summaries report: the paired bootstrap over rows (the library's), the STS average's paired difference,
a t-interval over seeds, and a call's seconds."""

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
    a2 = np.asarray(a, dtype=float).reshape(len(a), -1).mean(axis=1)
    b2 = np.asarray(b, dtype=float).reshape(len(b), -1).mean(axis=1)
    return paired_bootstrap(a2, b2, lambda v, _: float(np.mean(v)), n=n, seed=seed)


def paired_avg_difference(
    a: dict[str, np.ndarray], b: dict[str, np.ndarray], gold: dict[str, np.ndarray], n: int = 1000, seed: int = 0
) -> PairedDifference:
    """STS avg (Spearman x 100, mean over the tasks of ``gold``) of ``a`` minus that of ``b``, with its paired
    bootstrap 95 % interval: the same pairs, resampled within each task, score both.

    ``a[task]``, ``b[task]``: each pair's cosine, ``(pairs,)`` or ``(pairs, seeds)``; with seeds, each side's
    score is the mean over its seeds on every resample.
    """
    from scipy.stats import rankdata

    tasks = list(gold)

    def stack(side: dict[str, np.ndarray]) -> np.ndarray:
        return np.concatenate([np.asarray(side[t], dtype=float).reshape(len(gold[t]), -1) for t in tasks])

    strata = np.repeat(np.arange(len(tasks)), [len(gold[t]) for t in tasks])
    every_gold = np.concatenate([np.asarray(gold[t], dtype=float) for t in tasks])

    def metric(values: np.ndarray, rows: np.ndarray) -> float:
        per_task = []
        for t in range(len(tasks)):
            here = strata[rows] == t
            g, v = rankdata(every_gold[rows][here]), rankdata(values[here], axis=0)
            g, v = g - g.mean(), v - v.mean(axis=0)
            per_task.append((v * g[:, None]).sum(0) / np.sqrt((v * v).sum(0) * (g * g).sum()))
        return float(100 * np.mean(per_task))

    return paired_bootstrap(stack(a), stack(b), metric, n=n, seed=seed, strata=strata)
