"""The mini-vec2vec recipe as the paper's notebook writes it, with scikit-learn and scipy only.

This is the reference the library's aligner is timed and scored against, not library code: scikit-learn
k-means (k-means++ init), scipy's FAQ quadratic assignment with default options, scikit-learn brute-force
cosine neighbours, scipy's ``orthogonal_procrustes`` (square only, so the smaller space is zero-padded, as the
issue's reference run did), refine-1 blending without re-orthogonalisation and without early stopping, and one
refine-2 step. Sizes default to the paper's constants and to the library's defaults where the paper gives none.
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


def fit_paper_recipe(
    source: np.ndarray,
    target: np.ndarray,
    *,
    n_runs: int = 30,
    n_clusters: int = 20,
    sample_size: int = 10_000,
    n_pseudo_pairs: int = 10_000,
    k: int = 50,
    refine_iter: int = 100,
    refine_sample: int = 4096,
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

    anchors_a, anchors_b = [], []
    for _ in range(n_runs):
        sa = a[rng.choice(len(a), min(sample_size, len(a)), replace=False)]
        sb = b[rng.choice(len(b), min(sample_size, len(b)), replace=False)]
        ca = normalize(KMeans(n_clusters, random_state=int(rng.integers(2**31))).fit(sa).cluster_centers_)
        cb = normalize(KMeans(n_clusters, random_state=int(rng.integers(2**31))).fit(sb).cluster_centers_)
        match = quadratic_assignment(ca @ ca.T, cb @ cb.T, options={"maximize": True})
        anchors_a.append(ca)
        anchors_b.append(cb[match.col_ind])
    anchors_a, anchors_b = np.vstack(anchors_a), np.vstack(anchors_b)

    rows = rng.choice(len(a), min(n_pseudo_pairs, len(a)), replace=False)
    rel_a = a[rows] @ anchors_a.T
    rel_b = b @ anchors_b.T
    _, ids = NearestNeighbors(n_neighbors=k, metric="cosine", algorithm="brute").fit(rel_b).kneighbors(rel_a)
    w, _ = orthogonal_procrustes(a[rows], b[ids].mean(axis=1))

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
    return {"matrix": w, "source_mean": source_mean, "target_mean": target_mean, "fit_seconds": time.perf_counter() - start}


def map_paper_recipe(fitted: dict, source: np.ndarray, target_dim: int) -> np.ndarray:
    """Map held-out source rows; the padded coordinates are dropped (they only ever meet target zeros)."""
    dim = fitted["matrix"].shape[0]
    mapped = _pad(normalize(source - fitted["source_mean"]), dim) @ fitted["matrix"]
    return mapped[:, :target_dim]
