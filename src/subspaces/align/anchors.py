"""Step 2 of mini-vec2vec: matched anchor pairs from an ensemble of k-means runs on the two unpaired spaces.

Each run clusters an independent subsample of each space, matches the two centroid sets by quadratic
assignment, and contributes its matched centroid pairs as anchors. Runs whose matching is poor (low agreement
between the matched similarity structures, a label-free score) can be dropped before the runs are pooled.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import faiss
import numpy as np

from subspaces.align.matching import gram_factor, match_centroids
from subspaces.align.preprocess import normalize_rows


def kmeans(
    x: np.ndarray,
    n_clusters: int,
    *,
    n_iter: int = 25,
    seed: int = 0,
    init: np.ndarray | None = None,
    n_redo: int = 1,
) -> np.ndarray:
    """Spherical k-means centroids (unit rows) of unit-norm rows ``x``.

    ``init`` seeds the centroids; otherwise ``n_redo`` random starts are run and the lowest-inertia one kept
    (steadier partitions make the two spaces' clusterings more likely to correspond).
    """
    model = faiss.Kmeans(
        x.shape[1],
        n_clusters,
        niter=n_iter,
        seed=int(seed),
        spherical=True,
        verbose=False,
        nredo=1 if init is not None else max(1, int(n_redo)),
        max_points_per_centroid=max(256, int(np.ceil(len(x) / n_clusters))),  # use every point, no silent subsample
        min_points_per_centroid=1,  # the caller checks row counts; faiss would only warn
    )
    model.train(
        np.ascontiguousarray(x, dtype=np.float32),
        init_centroids=None if init is None else np.ascontiguousarray(init, dtype=np.float32),
    )
    return normalize_rows(model.centroids)


def cluster_means(x: np.ndarray, centroids: np.ndarray) -> np.ndarray:
    """Mean of the rows of ``x`` nearest to each centroid, not re-normalised (an empty cluster gives zeros)."""
    labels = (x @ centroids.T).argmax(axis=1)
    # A one-hot product: np.add.at (unbuffered) made up most of the Gram anchor stage's time.
    members = np.zeros((len(centroids), len(x)), dtype=np.float32)
    members[labels, np.arange(len(x))] = 1.0
    counts = members.sum(axis=1, keepdims=True)
    return (members @ x) / np.maximum(counts, 1.0)


@dataclass(frozen=True)
class AnchorSet:
    source: np.ndarray  # (n_anchors, d_source), row i matched to target row i
    target: np.ndarray  # (n_anchors, d_target)
    run: np.ndarray  # (n_anchors,) index of the k-means run each anchor came from
    agreement: np.ndarray  # (n_runs,) similarity-structure agreement of each run's matching
    objective: np.ndarray  # (n_runs,) QAP objective of each run
    kept: np.ndarray  # (n_runs,) bool, runs pooled into the anchors

    @property
    def n_runs(self) -> int:
        return len(self.agreement)

    def runs(self) -> list[np.ndarray]:
        """Row indices of each kept run's anchors."""
        return [np.flatnonzero(self.run == r) for r in np.flatnonzero(self.kept)]


def matched_anchors(
    source: np.ndarray,
    target: np.ndarray,
    *,
    n_runs: int = 30,
    n_clusters: int = 20,
    sample_size: int = 10_000,
    kmeans_iter: int = 25,
    kmeans_redo: int = 1,
    qap_method: str = "faq",
    qap_restarts: int = 30,
    keep_fraction: float = 1.0,
    kernel: str = "cosine",
    rng: np.random.Generator,
    progress=None,
    out_of_time: Callable[[], bool] | None = None,
) -> AnchorSet:
    """Pool the matched centroids of ``n_runs`` k-means runs, keeping the best ``keep_fraction`` by agreement;
    fewer runs once ``out_of_time()`` says so (checked after each run, so at least one runs).

    ``kernel`` is what the quadratic assignment compares: ``"cosine"``, the cosines of the unit centroids, or
    ``"gram"``, the double-centred Gram matrix of the raw cluster means (the paper's notebook).
    """
    if kernel not in ("cosine", "gram"):
        raise ValueError(f"unknown anchor kernel {kernel!r}; use 'cosine' or 'gram'")
    src, tgt, runs, agreements, objectives = [], [], [], [], []
    for run in range(n_runs):
        a = source[rng.choice(len(source), min(sample_size, len(source)), replace=False)]
        b = target[rng.choice(len(target), min(sample_size, len(target)), replace=False)]
        ca = kmeans(a, n_clusters, n_iter=kmeans_iter, seed=int(rng.integers(2**31)), n_redo=kmeans_redo)
        cb = kmeans(b, n_clusters, n_iter=kmeans_iter, seed=int(rng.integers(2**31)), n_redo=kmeans_redo)
        if kernel == "gram":
            match = match_centroids(
                gram_factor(cluster_means(a, ca)),
                gram_factor(cluster_means(b, cb)),
                method=qap_method,
                n_restarts=qap_restarts,
                rng=rng,
            )
        else:
            match = match_centroids(ca, cb, method=qap_method, n_restarts=qap_restarts, rng=rng)
        src.append(ca)
        tgt.append(cb[match.permutation])
        runs.append(np.full(n_clusters, run))
        agreements.append(match.agreement)
        objectives.append(match.objective)
        if progress is not None:
            progress(run + 1, n_runs)
        if out_of_time is not None and out_of_time():
            break
    n_runs = len(agreements)
    agreement = np.asarray(agreements)
    n_keep = max(1, int(round(keep_fraction * n_runs)))
    kept = np.zeros(n_runs, dtype=bool)
    kept[np.argsort(-agreement, kind="stable")[:n_keep]] = True
    run_of = np.concatenate(runs)
    rows = kept[run_of]
    return AnchorSet(
        np.concatenate(src)[rows], np.concatenate(tgt)[rows], run_of[rows], agreement, np.asarray(objectives), kept
    )
