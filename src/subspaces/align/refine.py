"""Step 4 of mini-vec2vec: refine the map, first by neighbour means, then by matched k-means centroids.

Refine-1 is an iterative closest-point scheme: map a sample of source vectors, replace each by the mean of its
k nearest target vectors, solve Procrustes, and blend the new map into the old one (``W <- (1-a) W + a W_new``).
A blend of two orthogonal maps is not orthogonal; with ``orthogonalize`` it is projected back (the paper's
notebook lets it drift, which lets a map shrink onto dense regions and fool the neighbour-similarity score).
Each iteration is scored with a label-free diagnostic on a fixed probe set; the best-scoring map is kept and
refinement stops after ``patience`` iterations without improvement.

Refine-2 clusters the source, seeds k-means on the target with the mapped source centroids (so cluster i of the
target starts where cluster i of the source lands), and fits Procrustes on the centroid pairs: a map fitted on
many well-populated cluster means rather than on individual noisy neighbours.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from subspaces.align.anchors import kmeans
from subspaces.align.neighbours import NeighbourIndex, neighbour_means
from subspaces.align.preprocess import normalize_rows
from subspaces.align.procrustes import nearest_orthogonal, procrustes


@dataclass
class RefineHistory:
    scores: list[float] = field(default_factory=list)  # label-free score after each iteration
    best_iteration: int = -1  # -1: the starting map was never beaten
    stopped_early: bool = False


def refine_by_neighbours(
    source: np.ndarray,
    target: np.ndarray,
    matrix: np.ndarray,
    *,
    score: Callable[[np.ndarray], float],
    target_index: NeighbourIndex | None = None,
    n_iter: int = 100,
    sample_size: int = 4096,
    k: int = 50,
    alpha: float = 0.5,
    patience: int = 10,
    tol: float = 1e-4,
    orthogonalize: bool = True,
    rng: np.random.Generator,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[np.ndarray, RefineHistory]:
    """Refine-1. Returns the best map by ``score`` (higher is better) and the score history."""
    history = RefineHistory()
    best, best_score = matrix, score(matrix)
    since_best = 0
    for it in range(n_iter):
        rows = rng.choice(len(source), min(sample_size, len(source)), replace=False)
        batch = source[rows]
        pseudo = neighbour_means(normalize_rows(batch @ matrix), target_index or target, target, k)
        matrix = (1 - alpha) * matrix + alpha * procrustes(batch, normalize_rows(pseudo))
        if orthogonalize:
            matrix = nearest_orthogonal(matrix)
        current = score(matrix)
        history.scores.append(current)
        if progress is not None:
            progress(it + 1, n_iter)
        if current > best_score + tol:
            best, best_score, since_best = matrix, current, 0
            history.best_iteration = it
        else:
            since_best += 1
            if since_best >= patience:
                history.stopped_early = True
                break
    return best, history


def refine_by_centroids(
    source: np.ndarray,
    target: np.ndarray,
    matrix: np.ndarray,
    *,
    n_clusters: int = 500,
    kmeans_iter: int = 25,
    alpha: float = 0.5,
    orthogonalize: bool = True,
    seed: int = 0,
) -> np.ndarray:
    """Refine-2: Procrustes on source centroids and the target centroids seeded at their images; one blend."""
    n_clusters = min(n_clusters, len(source) // 2, len(target) // 2)
    source_centroids = kmeans(source, n_clusters, n_iter=kmeans_iter, seed=seed)
    seeded = normalize_rows(source_centroids @ matrix)
    target_centroids = kmeans(target, n_clusters, n_iter=kmeans_iter, seed=seed, init=seeded)
    matrix = (1 - alpha) * matrix + alpha * procrustes(source_centroids, target_centroids)
    return nearest_orthogonal(matrix) if orthogonalize else matrix
