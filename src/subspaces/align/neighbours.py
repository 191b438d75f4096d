"""Inner-product nearest neighbours (faiss) and the neighbour-mean pseudo-targets built from them."""

from __future__ import annotations

import faiss
import numpy as np


class NeighbourIndex:
    """A faiss index over unit rows: exact (``n_lists=0``) or inverted-file (IVF) for repeated searches.

    Refinement searches the same target set a hundred times; an IVF index with ``n_probe`` of ``n_lists`` cells
    visits about ``n_probe / n_lists`` of it per query, which makes every iteration cheaper. It is not free:
    with 8 of 128 cells about half of the 50 true neighbours are missed, and neighbour means built from such
    lists cost the aligner up to 3 points of top-1 (BENCHMARKS.md section 2), so it searches exactly by default.
    """

    def __init__(self, base: np.ndarray, *, n_lists: int = 0, n_probe: int = 8, seed: int = 0) -> None:
        base = np.ascontiguousarray(base, dtype=np.float32)
        dim = base.shape[1]
        # faiss wants ~39 points per list to train; fall back to exact search on small sets.
        if n_lists > 0 and len(base) >= 39 * n_lists:
            quantizer = faiss.IndexFlatIP(dim)
            index = faiss.IndexIVFFlat(quantizer, dim, n_lists, faiss.METRIC_INNER_PRODUCT)
            index.cp.seed = int(seed)
            index.train(base)
            index.nprobe = min(n_probe, n_lists)
        else:
            index = faiss.IndexFlatIP(dim)
        index.add(base)
        self.index = index
        self.n = len(base)

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        sims, ids = self.index.search(np.ascontiguousarray(queries, dtype=np.float32), min(k, self.n))
        missing = ids < 0  # an IVF probe can find fewer than k rows; repeat the best one in their place
        if missing.any():
            ids = np.where(missing, ids[:, :1], ids)
            sims = np.where(missing, sims[:, :1], sims)
        return sims, ids


def knn(queries: np.ndarray, base: np.ndarray | NeighbourIndex, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Similarities and indices of the ``k`` rows of ``base`` with the largest inner product with each query."""
    index = base if isinstance(base, NeighbourIndex) else NeighbourIndex(base)
    return index.search(queries, k)


def neighbour_means(
    queries: np.ndarray, search_base: np.ndarray | NeighbourIndex, values: np.ndarray, k: int
) -> np.ndarray:
    """For each query, the mean of ``values`` over its ``k`` nearest rows of ``search_base`` (same row order).

    Averaging many neighbours instead of taking the single nearest one is mini-vec2vec's pseudo-pair: the mean
    of a small neighbourhood is a much less noisy estimate of the true counterpart than any one neighbour.
    """
    _, ids = knn(queries, search_base, k)
    return mean_of_rows(values, ids)


def mean_of_rows(values: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Row i is the mean of ``values[ids[i]]``.

    Summed one neighbour rank at a time rather than as ``values[ids].mean(1)``, which materialises n x k x d
    floats first: the same sums, without the large temporary (1.2-1.3x faster on the benchmark's neighbour lists,
    ``benchmarks/align_search_speed.py``).
    """
    total = values[ids[:, 0]].astype(np.float32, copy=True)
    for rank in range(1, ids.shape[1]):
        total += values[ids[:, rank]]
    return total / ids.shape[1]
