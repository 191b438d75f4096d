"""The mini-vec2vec recipe as the author's notebook writes it, with scikit-learn and scipy only.

This is the reference the library's aligner is timed and scored against, not library code. It follows the
notebook (``guy-dar/mini-vec2vec``, ``linear_vec2vec.ipynb``) step by step:

* anchors: 30 runs; each clusters a 10,000-row sample of each space with scikit-learn's ``KMeans(20)`` (k-means++,
  Euclidean on the unit vectors, centroids *not* re-normalised), builds each side's double-centred Gram matrix
  ``H C Cᵀ H`` of the raw centroids, and keeps the best of 30 runs of scipy's 2-opt QAP from random starts;
* relative representations: cosine of every training row to all 600 anchors, then the 50 nearest target rows by
  cosine between relative vectors, averaged (not re-normalised), and ``orthogonal_procrustes``;
* refine-1: 100 rounds of 1,000 sampled source rows, their 50 nearest target rows by cosine, Procrustes,
  ``W ← ½W + ½W_new`` (no re-orthogonalisation, no early stopping);
* refine-2: ``KMeans(500)`` on the source, ``KMeans(500)`` on the target started at the mapped source centroids,
  Procrustes on the raw centroid pairs, one blend.

scipy's Procrustes is square only, so the smaller space is zero-padded (as the issue's reference run did).
"""

from __future__ import annotations

import time

import numpy as np
from scipy.linalg import orthogonal_procrustes
from scipy.optimize import quadratic_assignment
from sklearn.cluster import KMeans
from sklearn.neighbors import NearestNeighbors
from sklearn.preprocessing import normalize


def _pad(x: np.ndarray, dim: int) -> np.ndarray:
    return np.hstack([x, np.zeros((len(x), dim - x.shape[1]), dtype=x.dtype)]) if x.shape[1] < dim else x


def _double_centred_gram(centroids: np.ndarray) -> np.ndarray:
    n = len(centroids)
    h = np.eye(n) - np.full((n, n), 1.0 / n)
    return h @ centroids @ centroids.T @ h


def _matched_centroids(a, b, *, n_clusters: int, sample_size: int, qap_runs: int, rng) -> tuple[np.ndarray, np.ndarray]:
    sa = a[rng.choice(len(a), min(sample_size, len(a)), replace=False)]
    sb = b[rng.choice(len(b), min(sample_size, len(b)), replace=False)]
    ca = KMeans(n_clusters, random_state=int(rng.integers(2**31))).fit(sa).cluster_centers_
    cb = KMeans(n_clusters, random_state=int(rng.integers(2**31))).fit(sb).cluster_centers_
    ka, kb = _double_centred_gram(ca), _double_centred_gram(cb)
    best = None
    # The notebook re-runs 2-opt ("not very good at finding the global optimum"); each run starts from a random
    # permutation (it also passes FAQ's ``P0`` option, which 2-opt ignores).
    for _ in range(qap_runs):
        result = quadratic_assignment(ka, kb, method="2opt", options={"maximize": True, "rng": rng})
        if best is None or result.fun > best.fun:
            best = result
    return ca, cb[best.col_ind]


def fit_paper_recipe(
    source: np.ndarray,
    target: np.ndarray,
    *,
    n_runs: int = 30,
    n_clusters: int = 20,
    sample_size: int = 10_000,
    qap_runs: int = 30,
    k: int = 50,
    refine_iter: int = 100,
    refine_sample: int = 1000,
    alpha: float = 0.5,
    refine2_clusters: int = 500,
    seed: int = 0,
) -> dict:
    """Returns the square map (on zero-padded spaces), the training means and the fit time."""
    start = time.perf_counter()
    rng = np.random.default_rng(seed)
    dim = max(source.shape[1], target.shape[1])
    source_mean, target_mean = source.mean(axis=0), target.mean(axis=0)
    a = _pad(normalize(source - source_mean), dim)
    b = _pad(normalize(target - target_mean), dim)

    pairs = [
        _matched_centroids(a, b, n_clusters=n_clusters, sample_size=sample_size, qap_runs=qap_runs, rng=rng)
        for _ in range(n_runs)
    ]
    anchors_a, anchors_b = np.vstack([p[0] for p in pairs]), np.vstack([p[1] for p in pairs])

    rel_a = normalize(a) @ normalize(anchors_a).T
    rel_b = normalize(b) @ normalize(anchors_b).T
    _, ids = NearestNeighbors(n_neighbors=k, metric="cosine", algorithm="brute").fit(rel_b).kneighbors(rel_a)
    w, _ = orthogonal_procrustes(a, b[ids].mean(axis=1))

    target_nn = NearestNeighbors(n_neighbors=k, metric="cosine", algorithm="brute").fit(b)
    for _ in range(refine_iter):
        rows = rng.choice(len(a), min(refine_sample, len(a)), replace=False)
        _, ids = target_nn.kneighbors(a[rows] @ w)
        w_new, _ = orthogonal_procrustes(a[rows], b[ids].mean(axis=1))
        w = (1 - alpha) * w + alpha * w_new

    ca = KMeans(refine2_clusters, random_state=int(rng.integers(2**31))).fit(a).cluster_centers_
    cb = KMeans(refine2_clusters, init=ca @ w, n_init=1).fit(b).cluster_centers_
    w_new, _ = orthogonal_procrustes(ca, cb)
    w = (1 - alpha) * w + alpha * w_new
    return {
        "matrix": w,
        "source_mean": source_mean,
        "target_mean": target_mean,
        "fit_seconds": time.perf_counter() - start,
    }


def map_paper_recipe(fitted: dict, source: np.ndarray, target_dim: int) -> np.ndarray:
    """Map held-out source rows; the padded coordinates are dropped (they only ever meet target zeros)."""
    dim = fitted["matrix"].shape[0]
    mapped = _pad(normalize(source - fitted["source_mean"]), dim) @ fitted["matrix"]
    return mapped[:, :target_dim]


def score_paper_recipe(a: np.ndarray, b: np.ndarray, x: np.ndarray, y: np.ndarray, *, seed: int, **settings) -> dict:
    """Fit the recipe on the unpaired halves ``a``, ``b`` (``settings``: :func:`fit_paper_recipe`'s) and score it
    on the held-out pairs ``x``, ``y`` as the library's aligner is scored, with its fit seconds."""
    from subspaces.align import retrieval_metrics
    from subspaces.align.preprocess import center_normalize

    fitted = fit_paper_recipe(a, b, seed=seed, **settings)
    mapped = map_paper_recipe(fitted, x, y.shape[1])
    scored = retrieval_metrics(mapped, center_normalize(y, fitted["target_mean"]), pool_size=len(x))
    return scored | {"fit_seconds": fitted["fit_seconds"]}
