"""Match two sets of cluster centroids by the shape of their similarity structure (a quadratic assignment).

The two spaces share no coordinates, but if they embed the same kind of text their clusters sit in similar
configurations. The permutation ``P`` that maximises ``trace(S_a P S_b P^T)`` (``S`` = centroid cosine matrices)
lines the configurations up. scipy solves it approximately (FAQ or 2-opt); restarts from random starting points
keep the best objective, since both are local searches.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import quadratic_assignment


@dataclass(frozen=True)
class CentroidMatch:
    permutation: np.ndarray  # source centroid i <-> target centroid permutation[i]
    objective: float  # trace(S_a P S_b P^T), the quantity the solver maximises
    agreement: float  # Pearson r of the off-diagonal similarities after matching: a scale-free quality score


def similarity_agreement(sim_a: np.ndarray, sim_b: np.ndarray) -> float:
    """Correlation of the off-diagonal entries of two equally ordered similarity matrices (1 = same shape)."""
    mask = ~np.eye(len(sim_a), dtype=bool)
    a, b = sim_a[mask], sim_b[mask]
    if a.std() == 0 or b.std() == 0:
        return 0.0
    return float(np.corrcoef(a, b)[0, 1])


def match_centroids(
    centroids_a: np.ndarray,
    centroids_b: np.ndarray,
    *,
    method: str = "faq",
    n_restarts: int = 10,
    polish: bool = True,
    rng: np.random.Generator | None = None,
) -> CentroidMatch:
    """The best of ``n_restarts`` quadratic-assignment solutions between two equal-sized centroid sets.

    With ``polish``, the best solution is then improved by 2-opt swaps from where it stands (FAQ relaxes the
    problem to doubly stochastic matrices and rounds at the end, which often leaves easy swaps on the table).
    """
    if len(centroids_a) != len(centroids_b):
        raise ValueError(f"centroid sets differ in size: {len(centroids_a)} vs {len(centroids_b)}")
    if method not in ("faq", "2opt"):
        raise ValueError(f"unknown QAP method {method!r}; use 'faq' or '2opt'")
    rng = rng if rng is not None else np.random.default_rng()
    sim_a = (centroids_a @ centroids_a.T).astype(np.float64)
    sim_b = (centroids_b @ centroids_b.T).astype(np.float64)
    best = None
    for restart in range(max(1, n_restarts)):
        options: dict = {"maximize": True, "rng": rng}
        if method == "faq":
            # The first start is FAQ's default barycentre; later ones are random doubly stochastic matrices.
            options["P0"] = "barycenter" if restart == 0 else "randomized"
        result = quadratic_assignment(sim_a, sim_b, method=method, options=options)
        if best is None or result.fun > best.fun:
            best = result
    if polish:
        guess = np.column_stack([np.arange(len(sim_a)), best.col_ind])
        result = quadratic_assignment(
            sim_a, sim_b, method="2opt", options={"maximize": True, "rng": rng, "partial_guess": guess}
        )
        if result.fun > best.fun:
            best = result
    perm = np.asarray(best.col_ind)
    return CentroidMatch(perm, float(best.fun), similarity_agreement(sim_a, sim_b[np.ix_(perm, perm)]))
