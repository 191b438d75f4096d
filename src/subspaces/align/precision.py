"""The float type of the aligner's two hot products, neighbour search and k-means (:mod:`subspaces.numerics`'
setting). Both only rank; the values kept are recomputed in float32. The float32 search product runs in fixed blocks
of :data:`BLOCK_ROWS` rows on one BLAS thread each, so its bits do not depend on the thread count."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from typing import Any

import numpy as np

from subspaces.numerics import resolve


def torch_dtype(precision: str | None):
    import torch

    return torch.bfloat16 if resolve(precision) == "bfloat16" else torch.float32


BLOCK_ROWS = 256  # rows of one float32 block: fixed, so a product's bits do not depend on how many threads run it


@cache
def _workers(threads: int, pid: int) -> ThreadPoolExecutor:
    """One pool per thread count and process: a forked child has the parent's pool object but not its threads."""
    return ThreadPoolExecutor(threads, thread_name_prefix="subspaces-product")


def blocked_product(rows: np.ndarray, columns: np.ndarray) -> np.ndarray:
    """``rows @ columns`` (float32) in blocks of :data:`BLOCK_ROWS` rows, side by side on torch's thread count."""
    import torch

    out = np.empty((rows.shape[0], columns.shape[1]), dtype=np.float32)
    starts = range(0, rows.shape[0], BLOCK_ROWS)

    def block(start: int) -> None:
        np.matmul(rows[start : start + BLOCK_ROWS], columns, out=out[start : start + BLOCK_ROWS])

    threads = torch.get_num_threads()
    if threads == 1 or len(starts) == 1:
        for start in starts:
            block(start)
    else:
        list(_workers(threads, os.getpid()).map(block, starts))
    return out


def rank_columns(rows: np.ndarray, precision: str | None) -> Any:
    """``rows`` (n x d) as the contiguous d x n columns :func:`rank_product` takes: numpy float32 or torch bfloat16."""
    rows = np.ascontiguousarray(rows, dtype=np.float32)
    if resolve(precision) == "float32":
        return np.ascontiguousarray(rows.T)
    import torch

    return torch.from_numpy(rows).to(torch.bfloat16).T.contiguous()


def rank_product(queries: np.ndarray, columns: Any) -> Any:
    """``queries`` (float32, contiguous) times :func:`rank_columns`' ``columns``, as a torch tensor for ranking."""
    import torch

    if isinstance(columns, np.ndarray):
        return torch.from_numpy(blocked_product(queries, columns))
    return torch.from_numpy(queries).to(torch.bfloat16) @ columns
