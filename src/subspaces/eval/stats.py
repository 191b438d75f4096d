"""The paired bootstrap: a difference between two systems scored on the same resampled rows (so the difficulty
they share cancels out), with its 95 % percentile interval. That interval suits (near-)averages over rows; for other
statistics ``shift`` shows the small-sample bias.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from subspaces.errors import SubspacesError

Metric = Callable[[np.ndarray, np.ndarray], float]


class PairedDifference(NamedTuple):
    diff: float  # metric(a) - metric(b) on every row
    low: float  # 2.5th percentile of the resampled differences
    high: float  # 97.5th percentile
    shift: float = 0.0  # mean of the resampled differences - diff: ~0 for row averages, large for biased statistics

    @property
    def excludes_zero(self) -> bool:
        return self.low > 0 or self.high < 0


def paired_bootstrap(
    a: np.ndarray, b: np.ndarray, metric: Metric, n: int = 1000, seed: int = 0, strata: np.ndarray | None = None
) -> PairedDifference:
    """``metric(a) - metric(b)`` and its 95 % percentile interval over ``n`` resamples of the rows (axis 0) of the
    row-aligned ``a`` and ``b``. ``metric(values, rows)``: ``rows`` are the resampled row indices (to look up gold
    labels). ``strata``: a group label per row (the STS task of each pair); rows are resampled within their group,
    so every group keeps its size."""
    a, b = np.asarray(a), np.asarray(b)
    if len(a) != len(b):
        raise SubspacesError(f"paired bootstrap needs row-aligned inputs; got {len(a)} and {len(b)} rows")
    groups = [np.arange(len(a))] if strata is None else [np.flatnonzero(strata == s) for s in np.unique(strata)]
    rng = np.random.default_rng(seed)
    diffs = np.empty(n)
    for i in range(n):
        pick = np.concatenate([g[rng.integers(0, len(g), len(g))] for g in groups])
        diffs[i] = metric(a[pick], pick) - metric(b[pick], pick)
    every = np.concatenate(groups)
    point = metric(a[every], every) - metric(b[every], every)
    return PairedDifference(
        float(point), float(np.percentile(diffs, 2.5)), float(np.percentile(diffs, 97.5)), float(diffs.mean() - point)
    )
