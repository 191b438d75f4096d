"""Steps 2 and 3 of mini-vec2vec: matched anchor pairs, then the first map. Each k-means run clusters a subsample of
each space and matches the two centroid sets by quadratic assignment (:mod:`.matching`); the runs' matched centroids
are pooled. The first map comes from relative representations (cosines to each space's own matched anchors;
Moschella et al., 2023), in which the two spaces share coordinates."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse

from subspaces.align.matching import gram_factor, match_centroids
from subspaces.align.neighbours import neighbour_means
from subspaces.align.params import AnchorParams
from subspaces.align.precision import torch_dtype
from subspaces.align.preprocess import normalize_rows
from subspaces.align.procrustes import procrustes

ROW_CHUNK = 32_768  # rows per k-means product: bounds the similarity block (rows x all runs' centroids)


def kmeans(
    x: np.ndarray,
    n_clusters: int,
    *,
    n_iter: int = 25,
    seed: int = 0,
    init: np.ndarray | None = None,
    precision: str = "float32",
) -> np.ndarray:
    """Spherical k-means centroids (unit rows) of unit-norm rows ``x``: :func:`kmeans_runs` with one run."""
    inits = None if init is None else [init]
    return kmeans_runs(
        x, [np.arange(len(x))], n_clusters, n_iter=n_iter, seeds=[seed], inits=inits, precision=precision
    )[0]


def kmeans_runs(
    x: np.ndarray,
    samples: list[np.ndarray],
    n_clusters: int,
    *,
    n_iter: int = 25,
    seeds: list[int],
    inits: list[np.ndarray] | None = None,
    n_redo: int = 1,
    precision: str = "float32",
) -> list[np.ndarray]:
    """Spherical k-means of several row samples of ``x`` at once (one product with all runs' centroids per
    iteration, in ``precision``): the float32 unit centroids of each ``x[samples[r]]``, started at ``inits[r]`` or at
    ``n_clusters`` of its rows drawn with ``seeds[r]``; ``n_redo`` starts a run (without ``inits``), the tightest kept.
    """
    import torch

    dtype = torch_dtype(precision)
    if inits is not None:
        n_redo = 1
    rows = np.unique(np.concatenate(samples))  # only the rows some run clusters
    positions = [np.searchsorted(rows, s) for s in samples]
    n_runs, k = len(samples) * n_redo, n_clusters
    full = torch.from_numpy(np.ascontiguousarray(x[rows], dtype=np.float32))
    low = full.to(dtype)
    members = torch.zeros(len(rows), n_runs, dtype=torch.bool)  # row i is clustered by run j
    starts = []
    for r, where in enumerate(positions):
        draw = np.random.default_rng(seeds[r])
        for redo in range(n_redo):
            members[torch.from_numpy(where), r * n_redo + redo] = True
            if inits is not None:
                starts.append(torch.from_numpy(normalize_rows(inits[r])))
            else:
                starts.append(full[torch.from_numpy(where[draw.choice(len(where), k, replace=False)])])
    centroids = torch.cat(starts)  # (runs·K, d)
    offsets = torch.arange(n_runs) * k
    unused = n_runs * k  # the label of a row a run does not cluster: a spare one-hot row, dropped

    def step(centroids: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Assign every run's rows to its nearest centroid, return the unit means and each run's closeness."""
        sums = torch.zeros(n_runs * k, values.shape[1], dtype=torch.float32)
        counts = torch.zeros(n_runs * k + 1, dtype=torch.int64)
        closeness = torch.zeros(n_runs, dtype=torch.float64)
        # Contiguous columns, as the search's (neighbours.py).
        columns = centroids.to(dtype).T.contiguous()
        for begin in range(0, len(rows), ROW_CHUNK):
            end = min(begin + ROW_CHUNK, len(rows))
            sims = (low[begin:end] @ columns).view(end - begin, n_runs, k)
            best, label = sims.max(dim=2)
            inside = members[begin:end]
            label = torch.where(inside, label + offsets, unused)
            closeness += (best.double() * inside).sum(dim=0)
            counts += torch.bincount(label.flatten(), minlength=n_runs * k + 1)
            if values.dtype == torch.bfloat16:  # a one-hot product: bfloat16's gave the same bits at 1 and 2 threads
                onehot = torch.zeros((n_runs * k + 1) * (end - begin), dtype=values.dtype)
                onehot[label * (end - begin) + torch.arange(end - begin)[:, None]] = 1  # 8x scatter_'s speed
                sums += (onehot.view(n_runs * k + 1, end - begin)[:-1] @ values[begin:end]).float()
            else:  # float32 products split the long inner sum across threads (other bits); scipy's sums in order
                i, j = inside.nonzero(as_tuple=True)
                onehot = scipy.sparse.csr_matrix(
                    (np.ones(len(i), dtype=np.float32), (label[i, j].numpy(), i.numpy())),
                    shape=(n_runs * k, end - begin),
                )
                sums += torch.from_numpy(onehot @ values[begin:end].numpy())
        means = _split_into_empty(sums, counts[:-1].view(n_runs, k))
        return normalize_rows(means), closeness

    for _ in range(n_iter - 1):
        centroids, _ = step(centroids, low)
    centroids, closeness = step(centroids, full)  # the last: the float32 means of its members
    per_run = centroids.view(len(samples), n_redo, k, -1)
    best_redo = closeness.view(len(samples), n_redo).argmax(dim=1)
    return [per_run[r, best_redo[r]].numpy().copy() for r in range(len(samples))]


def _split_into_empty(sums, counts):
    """Give each empty cluster half of the largest one, as faiss does (the two centroids its centroid nudged apart),
    so a centroid seeded where no row lies comes back among the rows."""
    import torch

    empty = (counts == 0).nonzero(as_tuple=False)
    if len(empty) == 0:
        return sums
    means = sums / counts.reshape(-1, 1).clamp_min(1)
    counts = counts.clone()
    k = counts.shape[1]
    nudge = torch.ones(sums.shape[1])
    nudge[1::2] = -1
    nudge /= 1024
    for run, cluster in empty.tolist():
        largest = int(counts[run].argmax())
        big, new = run * k + largest, run * k + cluster
        centre = means[big].clone()
        means[new], means[big] = centre * (1 + nudge), centre * (1 - nudge)
        counts[run, cluster] = counts[run, largest] // 2
        counts[run, largest] -= counts[run, cluster]
    return means


def cluster_means(x: np.ndarray, centroids: np.ndarray) -> np.ndarray:
    """Mean of the rows of ``x`` nearest to each centroid, not re-normalised (an empty cluster gives zeros)."""
    labels = (x @ centroids.T).argmax(axis=1)
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


def sample_draws(
    rng: np.random.Generator, n_source: int, n_target: int, sample_size: int, n_runs: int
) -> list[tuple[np.ndarray, np.ndarray, int, int]]:
    """Each k-means run's sampled source rows, target rows and two seeds, drawn from ``rng`` in this order."""
    return [
        (
            rng.choice(n_source, min(sample_size, n_source), replace=False),
            rng.choice(n_target, min(sample_size, n_target), replace=False),
            int(rng.integers(2**31)),
            int(rng.integers(2**31)),
        )
        for _ in range(n_runs)
    ]


def matched_anchors(
    source: np.ndarray,
    target: np.ndarray,
    params: AnchorParams,
    *,
    rng: np.random.Generator,
    precision: str = "float32",
    progress: Callable[[], Any] | None = None,
    out_of_time: Callable[[], bool] | None = None,
) -> AnchorSet:
    """Pool the matched centroids of ``params.n_runs`` k-means runs, the best ``params.keep`` fraction by agreement;
    fewer once ``out_of_time()`` says so (asked after each run's matching, so at least one is matched)."""
    n_runs, n_clusters = params.n_runs, params.n_clusters
    src, tgt, runs, agreements, objectives = [], [], [], [], []
    draws = sample_draws(rng, len(source), len(target), params.sample, n_runs)
    settings: dict[str, Any] = {"n_iter": params.kmeans_iter, "n_redo": params.kmeans_redo, "precision": precision}
    source_centroids = kmeans_runs(source, [d[0] for d in draws], n_clusters, seeds=[d[2] for d in draws], **settings)
    target_centroids = kmeans_runs(target, [d[1] for d in draws], n_clusters, seeds=[d[3] for d in draws], **settings)
    for run, ((rows_a, rows_b, _, _), ca, cb) in enumerate(zip(draws, source_centroids, target_centroids, strict=True)):
        shapes = (ca, cb)
        if params.kernel == "gram":
            shapes = (gram_factor(cluster_means(source[rows_a], ca)), gram_factor(cluster_means(target[rows_b], cb)))
        match = match_centroids(*shapes, method=params.qap_method, n_restarts=params.qap_restarts, rng=rng)
        src.append(ca)
        tgt.append(cb[match.permutation])
        runs.append(np.full(n_clusters, run))
        agreements.append(match.agreement)
        objectives.append(match.objective)
        if progress is not None:
            progress()
        if out_of_time is not None and out_of_time():
            break
    n_runs = len(agreements)
    agreement = np.asarray(agreements)
    n_keep = max(1, int(round(params.keep * n_runs)))
    kept = np.zeros(n_runs, dtype=bool)
    kept[np.argsort(-agreement, kind="stable")[:n_keep]] = True
    run_of = np.concatenate(runs)
    rows = kept[run_of]
    return AnchorSet(
        np.concatenate(src)[rows], np.concatenate(tgt)[rows], run_of[rows], agreement, np.asarray(objectives), kept
    )


def relative_representation(x: np.ndarray, anchors: np.ndarray) -> np.ndarray:
    """Cosines to the anchors, centred per anchor (each model's baseline similarity level differs) and
    L2-normalised per row."""
    rel = x @ anchors.T
    return normalize_rows(rel - rel.mean(axis=0, keepdims=True))


def initial_map(
    source: np.ndarray,
    target: np.ndarray,
    source_anchors: np.ndarray,
    target_anchors: np.ndarray,
    *,
    k: int = 50,
    precision: str = "float32",
) -> np.ndarray:
    """Orthogonal Procrustes from the source rows to their pseudo-pairs: the mean of each one's ``k`` nearest target
    rows in the shared relative space (searched in ``precision``)."""
    rel_source = relative_representation(source, source_anchors)
    rel_target = relative_representation(target, target_anchors)
    pseudo = neighbour_means(rel_source, rel_target, target, k, precision=precision)
    return procrustes(source, normalize_rows(pseudo))
