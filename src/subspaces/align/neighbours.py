"""Inner-product nearest neighbours (faiss) and the neighbour-mean pseudo-targets built from them."""

from __future__ import annotations

import faiss
import numpy as np

from subspaces.align.params import SearchParams
from subspaces.align.precision import rank_columns, rank_product
from subspaces.topk import flat_index, funnel
from subspaces.vectors import principal_axes

QUERY_CHUNK = 4096  # queries per ranking product: bounds the similarity block (4,096 x n) held at once

MIN_SHORTLIST = 32  # the fewest candidates a shortlist re-ranks (the score's k=1 searches would keep a handful)


class NeighbourIndex:
    """Nearest-neighbour search over unit rows, as ``search`` says (:class:`~.params.SearchParams`): exact (the
    default, ranked in ``precision``), inverted-file (``ann_lists`` > 0) or shortlisted (``shortlist_dims`` > 0: the
    rows are scanned on their top principal axes, a query's ``shortlist_factor * k`` best, at least
    :data:`MIN_SHORTLIST`, re-ranked exactly).
    """

    def __init__(
        self, base: np.ndarray, search: SearchParams = SearchParams(), *, seed: int = 0, precision: str = "float32"
    ) -> None:
        n_lists, shortlist_dims = search.ann_lists, search.shortlist_dims
        base = np.ascontiguousarray(base, dtype=np.float32)
        dim = base.shape[1]
        self.n = len(base)
        self.axes: np.ndarray | None = None  # the shortlist's projection (dim x shortlist_dims), if any
        self.base, self.shortlist_factor = base, search.shortlist_factor
        # The exact search's rows as contiguous columns (d x n; :func:`rank_columns`): half the time in bfloat16.
        self.columns = None
        if n_lists == 0 and not 0 < shortlist_dims < dim:
            self.columns = rank_columns(base, precision)
            return
        if 0 < shortlist_dims < dim:
            self.axes = np.ascontiguousarray(principal_axes(base, seed=seed)[:, :shortlist_dims])
            self.index = flat_index(base @ self.axes)
            return
        # faiss wants ~39 points per list to train; fall back to exact search on small sets.
        index: faiss.Index
        if n_lists > 0 and len(base) >= 39 * n_lists:
            quantizer = faiss.IndexFlatIP(dim)
            index = faiss.IndexIVFFlat(quantizer, dim, n_lists, faiss.METRIC_INNER_PRODUCT)
            index.cp.seed = int(seed)
            index.train(base)
            index.nprobe = min(search.ann_probe, n_lists)
        else:
            index = faiss.IndexFlatIP(dim)
        index.add(base)
        self.index = index

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Similarities (descending) and row ids of each query's ``k`` nearest rows."""
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        k = min(k, self.n)
        if self.columns is not None:
            ids = self.neighbours(queries, k)
            sims = np.einsum("qd,qkd->qk", queries, self.base[ids])  # the float32 values of the rows found
            order = np.argsort(-sims, axis=1, kind="stable")
            return np.take_along_axis(sims, order, axis=1), np.take_along_axis(ids, order, axis=1)
        if self.axes is not None:
            shortlist = min(max(self.shortlist_factor * k, MIN_SHORTLIST), self.n)
            return funnel(self.index, self.base, queries, k, shortlist, prefix_queries=queries @ self.axes)
        sims, ids = self.index.search(queries, k)
        missing = ids < 0  # an IVF probe can find fewer than k rows; repeat the best one in their place
        if missing.any():
            ids = np.where(missing, ids[:, :1], ids)
            sims = np.where(missing, sims[:, :1], sims)
        return sims, ids

    def neighbours(self, queries: np.ndarray, k: int) -> np.ndarray:
        """Row ids of each query's ``k`` nearest rows, in no set order (no float32 similarities are formed)."""
        if self.columns is None:
            return self.search(queries, k)[1]
        import torch

        k = min(k, self.n)
        rows = np.ascontiguousarray(queries, dtype=np.float32)
        found = []
        for start in range(0, len(rows), QUERY_CHUNK):
            sims = rank_product(rows[start : start + QUERY_CHUNK], self.columns)
            # max is a single pass (and twice as fast as argmax); topk keeps a heap per row
            found.append(sims.max(dim=1, keepdim=True).indices if k == 1 else sims.topk(k, dim=1, sorted=False).indices)
        return torch.cat(found).numpy()


def neighbour_means(
    queries: np.ndarray,
    search_base: np.ndarray | NeighbourIndex,
    values: np.ndarray,
    k: int,
    *,
    precision: str = "float32",
) -> np.ndarray:
    """For each query, the mean of ``values`` over its ``k`` nearest rows of ``search_base`` (same row order)."""
    index = search_base if isinstance(search_base, NeighbourIndex) else NeighbourIndex(search_base, precision=precision)
    return mean_of_rows(values, index.neighbours(queries, k))


def mean_of_rows(values: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Row i is the mean of ``values[ids[i]]`` (torch's ``embedding_bag``: no n x k x d block)."""
    import torch

    table = torch.from_numpy(np.ascontiguousarray(values, dtype=np.float32))
    bags = torch.from_numpy(np.ascontiguousarray(ids, dtype=np.int64))
    return torch.nn.functional.embedding_bag(bags, table, mode="mean").numpy()
