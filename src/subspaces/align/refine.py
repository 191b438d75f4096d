"""Step 4 of mini-vec2vec: refine the map. Structural refinement (ours) repairs a weak initial map by seeded k-means
pairs; refine-1 by neighbour means (iterative closest point); refine-2 by matched k-means centroids. Why each is
there: ``benchmarks/notes/align.md``."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from subspaces.align.anchors import kmeans, kmeans_runs, sample_draws
from subspaces.align.matching import swap_local_search
from subspaces.align.neighbours import NeighbourIndex, neighbour_means
from subspaces.align.params import RefineParams, StructureParams
from subspaces.align.preprocess import normalize_rows
from subspaces.align.procrustes import polar_factor, procrustes


@dataclass
class RefineHistory:
    scores: list[float] = field(default_factory=list)  # label-free score after each scored iteration
    iterations: int = 0  # steps taken
    best_iteration: int = -1  # -1: the starting map was never beaten
    best_score: float = float("nan")  # score of the map returned
    stopped_early: bool = False
    average_score: float | None = None  # score of the tail-averaged map, when one was formed
    averaged: bool = False  # the map returned is the tail average


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
    progress: Callable[[], Any] | None,
    score_every: int = 1,
    done: Callable[[], bool] | None = None,
    out_of_time: Callable[[], bool] | None = None,
) -> np.ndarray:
    """Apply ``step`` up to ``n_iter`` times; return the best map by ``score``, stopping after ``patience``
    iterations without a gain of ``tol``, once ``done()`` says so after a scored iteration, or before a step once
    ``out_of_time()`` says so. ``start_score``: the start's, already scored (``-inf``: a start never to return unless
    no step ran). ``score_every``: score only every so many iterations (and the last)."""
    best = matrix
    history.best_score = score(matrix) if start_score is None else start_score
    since_best = 0
    for it in range(n_iter):
        if out_of_time is not None and out_of_time():
            break
        matrix = step(matrix)
        history.iterations = it + 1
        if progress is not None:
            progress()
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
    return polar_factor(mixed) if orthogonalize else mixed


@dataclass(frozen=True)
class NeighbourStep:
    """One refine-1 step with ``params``' settings: sample, map, mean of ``k`` nearest target rows, Procrustes, blend
    (with ``bidirectional``, also target rows mapped back and their source neighbour means; known ``pairs`` join
    every fit as fixed anchors, each weighing ``pair_weight``)."""

    source: np.ndarray
    target: np.ndarray
    rng: np.random.Generator
    params: RefineParams
    target_index: NeighbourIndex | None = None
    source_index: NeighbourIndex | None = None
    pairs: tuple[np.ndarray, np.ndarray] | None = None

    def __call__(self, matrix: np.ndarray) -> np.ndarray:
        source, target, rng, p = self.source, self.target, self.rng, self.params
        batch = source[rng.choice(len(source), min(p.sample, len(source)), replace=False)]
        index = self.target_index or target
        pseudo = normalize_rows(neighbour_means(normalize_rows(batch @ matrix), index, target, p.k))
        if p.bidirectional:
            back = target[rng.choice(len(target), min(p.sample, len(target)), replace=False)]
            pseudo_source = neighbour_means(normalize_rows(back @ matrix.T), self.source_index or source, source, p.k)
            batch = np.concatenate([batch, normalize_rows(pseudo_source)])
            pseudo = np.concatenate([pseudo, back])
        return blend(matrix, _procrustes_with_pairs(batch, pseudo, self.pairs, p.pair_weight), p.alpha, p.orthogonalize)


def _procrustes_with_pairs(x: np.ndarray, y: np.ndarray, pairs, pair_weight: float) -> np.ndarray:
    """Procrustes on the rows ``x`` -> ``y``, known ``pairs`` (if any) joining them as fixed anchors of weight
    ``pair_weight`` each."""
    if pairs is None:
        return procrustes(x, y)
    weights = np.concatenate([np.ones(len(x)), np.full(len(pairs[0]), pair_weight)])
    return procrustes(np.concatenate([x, pairs[0]]), np.concatenate([y, pairs[1]]), weights)


def refine_by_neighbours(
    matrix: np.ndarray,
    step: NeighbourStep,
    params: RefineParams,
    *,
    score: Callable[[np.ndarray], float],
    start_score: float | None = None,
    progress: Callable[[], Any] | None = None,
    out_of_time: Callable[[], bool] | None = None,
) -> tuple[np.ndarray, RefineHistory]:
    """Refine-1: ``step`` up to ``params.n_iter`` times; the best map by ``score`` and the history. With
    ``params.average`` the mean of the last half of the iterates replaces the best one if it scores higher."""
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
        n_iter=params.n_iter,
        patience=params.patience,
        tol=params.tol,
        history=history,
        progress=progress,
        score_every=params.score_every,
        out_of_time=out_of_time,
    )
    if params.average and taken >= 2:
        mean = np.mean(tail, axis=0)
        averaged = polar_factor(mean) if params.orthogonalize else mean.astype(np.float32)
        history.average_score = score(averaged)
        if history.average_score > history.best_score + params.tol:
            best, history.best_score, history.averaged = averaged, history.average_score, True
    return best, history


def refine_by_structure(
    matrix: np.ndarray,
    step: NeighbourStep,
    params: StructureParams,
    *,
    score: Callable[[np.ndarray], float],
    tol: float = 1e-4,
    start_score: float | None = None,
    precision: str = "float32",
    progress: Callable[[], Any] | None = None,
    out_of_time: Callable[[], bool] | None = None,
) -> tuple[np.ndarray, StructureHistory]:
    """Up to ``params.n_iter`` rounds of (structural correction, ``params.steps`` refine-1 ``step``s); the best map
    by ``score``, stopping as :class:`~.params.StructureParams` says."""
    source, target = step.source, step.target
    n_clusters = min(params.n_clusters, len(source) // 4, len(target) // 4)
    history = StructureHistory()

    def round_(matrix: np.ndarray) -> np.ndarray:
        """Seeded k-means pairs, their pairing corrected by a swap search on the two similarity structures,
        Procrustes on them blended in, then the inner refine-1 steps."""
        draws = sample_draws(step.rng, len(source), len(target), params.sample, params.n_runs)
        settings: dict[str, Any] = {"n_iter": params.kmeans_iter, "precision": precision}
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
        new = procrustes(np.concatenate(sources), matched)
        matrix = blend(matrix, new, step.params.alpha, step.params.orthogonalize)
        for _ in range(params.steps):
            matrix = step(matrix)
        return matrix

    def converged() -> bool:
        return params.stop_swap_share is not None and history.swapped[-1] <= params.stop_swap_share

    best = _keep_best(
        matrix,
        round_,
        score=score,
        start_score=start_score,
        n_iter=params.n_iter,
        patience=params.patience,
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
    their images, blended in once; known ``pairs`` join the fit as in refine-1."""
    n_clusters = min(params.centroid_clusters, len(source) // 2, len(target) // 2)
    kmeans_iter = params.centroid_kmeans_iter
    source_centroids = kmeans(source, n_clusters, n_iter=kmeans_iter, seed=seed, precision=precision)
    seeded = normalize_rows(source_centroids @ matrix)
    target_centroids = kmeans(target, n_clusters, n_iter=kmeans_iter, seed=seed, init=seeded, precision=precision)
    new = _procrustes_with_pairs(source_centroids, target_centroids, pairs, params.pair_weight)
    return blend(matrix, new, params.centroid_alpha, params.orthogonalize)
