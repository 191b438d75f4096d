"""Match two sets of cluster centroids by the shape of their similarity structure: the permutation ``P`` that
maximises ``trace(S_a P S_b P^T)`` (``S``: centroid cosine matrices), a quadratic assignment."""

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


def gram_factor(vectors: np.ndarray) -> np.ndarray:
    """Rows ``F`` with ``F Fᵀ = H V Vᵀ H`` (``H`` the centring matrix): matching ``F`` matches the double-centred
    Gram matrix of ``V``, the paper notebook's kernel."""
    gram = vectors.astype(np.float64) @ vectors.T.astype(np.float64)
    h = np.eye(len(gram)) - np.full(gram.shape, 1.0 / len(gram))
    gram = h @ gram @ h
    values, vecs = np.linalg.eigh((gram + gram.T) / 2)
    return vecs * np.sqrt(np.clip(values, 0.0, None))


def swap_local_search(sim_a: np.ndarray, sim_b: np.ndarray, perm: np.ndarray, max_steps: int = 10_000) -> np.ndarray:
    """Best-improvement pairwise-swap (2-opt) ascent of ``sum_ij sim_a[i, j] * sim_b[p(i), p(j)]`` from ``perm``,
    every swap's gain from one matrix product per step."""
    perm = perm.copy()
    n = len(perm)
    diag_a = np.diag(sim_a)
    for _ in range(max_steps):
        b = sim_b[np.ix_(perm, perm)]
        c = sim_a @ b
        cd = np.diag(c)
        # sum_k (A_ik - A_jk)(B_jk - B_ik) over all k, then remove k in {i, j} (handled exactly below).
        cross = c + c.T - cd[:, None] - cd[None, :]
        diag_b = np.diag(b)
        k_is_i = (diag_a[:, None] - sim_a.T) * (b.T - diag_b[:, None])  # (A_ii - A_ji)(B_ji - B_ii)
        k_is_j = (sim_a - diag_a[None, :]) * (diag_b[None, :] - b)  # (A_ij - A_jj)(B_jj - B_ij)
        gain = 2 * (cross - k_is_i - k_is_j) + (diag_a[:, None] - diag_a[None, :]) * (diag_b[None, :] - diag_b[:, None])
        np.fill_diagonal(gain, 0.0)
        i, j = np.unravel_index(np.argmax(gain), gain.shape)
        if gain[i, j] <= 1e-12 * max(1.0, n):
            break
        perm[i], perm[j] = perm[j], perm[i]
    return perm


def match_centroids(
    centroids_a: np.ndarray,
    centroids_b: np.ndarray,
    *,
    rng: np.random.Generator,
    method: str = "faq",
    n_restarts: int = 30,
) -> CentroidMatch:
    """The best of ``n_restarts`` runs of scipy's quadratic-assignment solver (FAQ from its barycentre, then from
    random starts; or 2-opt), each polished by :func:`swap_local_search`."""
    if len(centroids_a) != len(centroids_b):
        raise ValueError(f"centroid sets differ in size: {len(centroids_a)} vs {len(centroids_b)}")
    sim_a = (centroids_a @ centroids_a.T).astype(np.float64)
    sim_b = (centroids_b @ centroids_b.T).astype(np.float64)

    def objective(p: np.ndarray) -> float:
        return float((sim_a * sim_b[np.ix_(p, p)]).sum())

    best, best_value = None, -np.inf
    for restart in range(n_restarts):
        options: dict = {"maximize": True, "rng": rng}
        if method == "faq":
            options["P0"] = "barycenter" if restart == 0 else "randomized"
        start = np.asarray(quadratic_assignment(sim_a, sim_b, method=method, options=options).col_ind)
        perm = swap_local_search(sim_a, sim_b, start)
        value = objective(perm)
        if value > best_value:
            best, best_value = perm, value
    return CentroidMatch(best, best_value, similarity_agreement(sim_a, sim_b[np.ix_(best, best)]))
