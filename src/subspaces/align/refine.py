"""Step 4 of mini-vec2vec: refine the map, first by neighbour means, then by matched k-means centroids.

Refine-1 (iterative closest point): map a sample of source vectors, replace each by the mean of its k nearest target
vectors, solve Procrustes, blend the new map in (``W <- (1-a) W + a W_new``; with ``orthogonalize`` projected back
to orthogonal), keep the best map by a label-free score, stop after ``patience`` iterations without a gain; with
``average`` the tail average of the iterates is scored too.

Structural refinement (ours, before refine-1) repairs a weak initial map: the target k-means is *seeded at the
mapped source centroids*, the seeded pairing is corrected by a pairwise-swap search on the two centroid similarity
structures, and Procrustes is fitted on the corrected pairs.

Refine-2 fits Procrustes on source centroids and the target centroids of a k-means seeded at their images. Why each
step is there, with its measurements: docs/align.md.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from subspaces.align.anchors import kmeans, kmeans_runs, sample_draws
from subspaces.align.matching import swap_local_search
from subspaces.align.neighbours import NeighbourIndex, neighbour_means
from subspaces.align.params import RefineParams
from subspaces.align.preprocess import normalize_rows
from subspaces.align.procrustes import nearest_orthogonal, procrustes


@dataclass
class RefineHistory:
    scores: list[float] = field(default_factory=list)  # label-free score after each scored iteration
    iterations: int = 0  # steps taken
    best_iteration: int = -1  # -1: the starting map was never beaten
    best_score: float = float("nan")  # score of the map returned
    stopped_early: bool = False
    average_score: float | None = None  # score of the tail-averaged map, when one was formed
    averaged: bool = False  # the map returned is the tail average
    out_of_time: bool = False  # ended by the fit's time budget


@dataclass
class StructureHistory(RefineHistory):
    swapped: list[float] = field(default_factory=list)  # share of seeded pairs the structure search changed


def _keep_best(
    matrix: np.ndarray,
    step: Callable[[np.ndarray], np.ndarray],
    *,
    score: Callable[[np.ndarray], float],
    start_score: float | None,
    n_iter: int,
    patience: int,
    tol: float,
    history: RefineHistory,
    progress: Callable[[int, int], None] | None,
    score_every: int = 1,
    done: Callable[[], bool] | None = None,
    out_of_time: Callable[[], bool] | None = None,
) -> np.ndarray:
    """Apply ``step`` up to ``n_iter`` times; return the best map by ``score``, stopping after ``patience``
    iterations without a gain of ``tol``, or once ``done()`` says so after a scored iteration, or before any
    step once ``out_of_time()`` says so (the best map scored so far is returned). ``start_score`` spares scoring
    a map the caller already scored; ``-inf`` makes the start a map to move away from, never one to return (unless
    no step ran): patience then counts among the iterates. ``score_every`` scores only every so many iterations (and
    the last): a score costs about as much as a step."""
    best = matrix
    history.best_score = score(matrix) if start_score is None else start_score
    since_best = 0
    for it in range(n_iter):
        if out_of_time is not None and out_of_time():
            history.out_of_time = True
            break
        matrix = step(matrix)
        history.iterations = it + 1
        if progress is not None:
            progress(it + 1, n_iter)
        if (it + 1) % score_every and it + 1 < n_iter:
            continue
        current = score(matrix)
        history.scores.append(current)
        if current > history.best_score + tol:
            best, history.best_score, history.best_iteration, since_best = matrix, current, it, 0
        else:
            since_best += score_every
            if since_best >= patience:
                history.stopped_early = True
                break
        if done is not None and done():
            break
    return best


def blend(matrix: np.ndarray, new: np.ndarray, alpha: float, orthogonalize: bool) -> np.ndarray:
    """``(1 - alpha) W + alpha W_new``, projected back onto the (semi-)orthogonal matrices if ``orthogonalize``."""
    mixed = (1 - alpha) * matrix + alpha * new
    return nearest_orthogonal(mixed) if orthogonalize else mixed


@dataclass(frozen=True)
class NeighbourStep:
    """One refine-1 step, with its settings: sample, map, mean of ``k`` nearest target rows, Procrustes, blend.

    With ``bidirectional`` a target sample is also mapped back (``W^T``) and paired with its source neighbour means,
    both sets fitted at once. Known ``pairs`` join every fit as fixed anchors, each weighing ``pair_weight``.
    """

    source: np.ndarray
    target: np.ndarray
    rng: np.random.Generator
    target_index: NeighbourIndex | None = None
    source_index: NeighbourIndex | None = None
    sample_size: int = 1024
    k: int = 50
    alpha: float = 0.5
    orthogonalize: bool = True
    bidirectional: bool = False
    pairs: tuple[np.ndarray, np.ndarray] | None = None
    pair_weight: float = 1.0

    def __call__(self, matrix: np.ndarray) -> np.ndarray:
        source, target, rng, k = self.source, self.target, self.rng, self.k
        batch = source[rng.choice(len(source), min(self.sample_size, len(source)), replace=False)]
        pseudo = normalize_rows(neighbour_means(normalize_rows(batch @ matrix), self.target_index or target, target, k))
        if self.bidirectional:
            back = target[rng.choice(len(target), min(self.sample_size, len(target)), replace=False)]
            pseudo_source = neighbour_means(normalize_rows(back @ matrix.T), self.source_index or source, source, k)
            batch = np.concatenate([batch, normalize_rows(pseudo_source)])
            pseudo = np.concatenate([pseudo, back])
        weights = None
        if self.pairs is not None:
            weights = np.concatenate([np.ones(len(batch)), np.full(len(self.pairs[0]), self.pair_weight)])
            batch, pseudo = np.concatenate([batch, self.pairs[0]]), np.concatenate([pseudo, self.pairs[1]])
        return blend(matrix, procrustes(batch, pseudo, weights), self.alpha, self.orthogonalize)


def refine_by_neighbours(
    matrix: np.ndarray,
    step: NeighbourStep,
    *,
    score: Callable[[np.ndarray], float],
    n_iter: int = 100,
    patience: int = 30,
    tol: float = 1e-4,
    start_score: float | None = None,
    average: bool = True,
    score_every: int = 5,
    progress: Callable[[int, int], None] | None = None,
    out_of_time: Callable[[], bool] | None = None,
) -> tuple[np.ndarray, RefineHistory]:
    """Refine-1: ``step`` up to ``n_iter`` times; the best map by ``score`` and the score history. With
    ``average`` the mean of the last half of the iterates (orthogonalised when the step is) replaces the best single
    iterate if it scores higher: late iterates scatter around the fixed point.
    """
    history = RefineHistory()
    tail: deque[np.ndarray] = deque()  # the last ceil(t / 2) of the t iterates so far: older ones are never averaged
    taken = 0

    def recorded(current: np.ndarray) -> np.ndarray:
        nonlocal taken
        tail.append(step(current))
        taken += 1
        while len(tail) > taken - taken // 2:
            tail.popleft()
        return tail[-1]

    best = _keep_best(
        matrix,
        recorded,
        score=score,
        start_score=start_score,
        n_iter=n_iter,
        patience=patience,
        tol=tol,
        history=history,
        progress=progress,
        score_every=score_every,
        out_of_time=out_of_time,
    )
    if average and taken >= 2:
        mean = np.mean(tail, axis=0)
        averaged = nearest_orthogonal(mean) if step.orthogonalize else mean.astype(np.float32)
        history.average_score = score(averaged)
        if history.average_score > history.best_score + tol:
            best, history.best_score, history.averaged = averaged, history.average_score, True
    return best, history


def refine_by_structure(
    matrix: np.ndarray,
    step: NeighbourStep,
    *,
    score: Callable[[np.ndarray], float],
    n_iter: int = 10,
    n_clusters: int = 50,
    n_runs: int = 4,
    sample_size: int = 10_000,
    kmeans_iter: int = 25,
    inner_steps: int = 5,
    patience: int = 2,
    stop_swap_share: float | None = None,
    tol: float = 1e-4,
    start_score: float | None = None,
    precision: str = "float32",
    progress: Callable[[int, int], None] | None = None,
    out_of_time: Callable[[], bool] | None = None,
) -> tuple[np.ndarray, StructureHistory]:
    """Up to ``n_iter`` rounds of (structural correction, ``inner_steps`` refine-1 ``step``s); the best map by
    ``score``. Stops after ``patience`` rounds without a better score, or after the first round that swapped at most
    ``stop_swap_share`` of the seeded pairs (the map agrees with both spaces' cluster structure).
    """
    source, target = step.source, step.target
    n_clusters = min(n_clusters, len(source) // 4, len(target) // 4)
    history = StructureHistory()

    def round_(matrix: np.ndarray) -> np.ndarray:
        """Seeded k-means pairs, their pairing corrected by a swap search on the two similarity structures,
        Procrustes on them blended in, then the inner refine-1 steps."""
        draws = sample_draws(step.rng, len(source), len(target), sample_size, n_runs)
        settings: dict[str, Any] = {"n_iter": kmeans_iter, "precision": precision}
        sources = kmeans_runs(source, [d[0] for d in draws], n_clusters, seeds=[d[2] for d in draws], **settings)
        seeded = [normalize_rows(ca @ matrix) for ca in sources]
        targets = kmeans_runs(
            target, [d[1] for d in draws], n_clusters, seeds=[d[3] for d in draws], inits=seeded, **settings
        )
        identity = np.arange(n_clusters)
        perms = [
            swap_local_search((ca @ ca.T).astype(np.float64), (cb @ cb.T).astype(np.float64), identity)
            for ca, cb in zip(sources, targets, strict=True)
        ]
        history.swapped.append(float(np.mean([float((perm != identity).mean()) for perm in perms])))
        matched = np.concatenate([cb[perm] for cb, perm in zip(targets, perms, strict=True)])
        matrix = blend(matrix, procrustes(np.concatenate(sources), matched), step.alpha, step.orthogonalize)
        for _ in range(inner_steps):
            matrix = step(matrix)
        return matrix

    def converged() -> bool:
        return stop_swap_share is not None and history.swapped[-1] <= stop_swap_share

    best = _keep_best(
        matrix,
        round_,
        score=score,
        start_score=start_score,
        n_iter=n_iter,
        patience=patience,
        tol=tol,
        history=history,
        progress=progress,
        done=converged,
        out_of_time=out_of_time,
    )
    return best, history


def refine_by_centroids(
    source: np.ndarray,
    target: np.ndarray,
    matrix: np.ndarray,
    params: RefineParams,
    *,
    seed: int = 0,
    precision: str = "float32",
    pairs: tuple[np.ndarray, np.ndarray] | None = None,
) -> np.ndarray:
    """Refine-2: Procrustes on ``params.centroid_clusters`` source centroids and the target centroids seeded at
    their images; one blend. Known ``pairs`` join the fit as in refine-1, each weighing ``params.pair_weight``
    centroid pairs (without them a nearly shapeless space's centroid pairs could pull a map the pairs had fixed)."""
    n_clusters = min(params.centroid_clusters, len(source) // 2, len(target) // 2)
    kmeans_iter = params.centroid_kmeans_iter
    source_centroids = kmeans(source, n_clusters, n_iter=kmeans_iter, seed=seed, precision=precision)
    seeded = normalize_rows(source_centroids @ matrix)
    target_centroids = kmeans(target, n_clusters, n_iter=kmeans_iter, seed=seed, init=seeded, precision=precision)
    weights = None
    if pairs is not None:
        weights = np.concatenate([np.ones(n_clusters), np.full(len(pairs[0]), params.pair_weight)])
        source_centroids = np.concatenate([source_centroids, pairs[0]])
        target_centroids = np.concatenate([target_centroids, pairs[1]])
    new = procrustes(source_centroids, target_centroids, weights)
    return blend(matrix, new, params.centroid_alpha, params.orthogonalize)
