"""Evaluation on paired held-out vectors: retrieval of each mapped source vector among the true targets, beside the
``identity`` (where the dims agree), the ``oracle`` (Procrustes on the true pairs: the ceiling of an orthogonal map)
and ``oracle_cross_fitted`` (each half mapped by the other half's Procrustes), all in the centred, unit space."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from subspaces.align.preprocess import normalize_rows
from subspaces.align.procrustes import procrustes
from subspaces.errors import DimensionError, SubspacesError
from subspaces.results import JSONResult

POOL_SIZE = 8192  # candidates per retrieval pool, as in the paper
BATCH = 1024  # rows ranked per product


@dataclass
class RetrievalMetrics(JSONResult):
    """:func:`retrieval_metrics`' figures."""

    top1: float
    mean_rank: float  # of the true target, 1-based
    cosine: float


@dataclass
class AlignmentEval(JSONResult):
    """:func:`evaluate_alignment`'s report (``align eval``'s JSON): the fitted map's retrieval, then the baselines'."""

    n_eval: int
    pool_size: int
    top1: float
    mean_rank: float
    cosine: float
    n_pools: int
    identity: RetrievalMetrics | None  # None: the dims differ
    oracle: RetrievalMetrics
    oracle_cross_fitted: RetrievalMetrics


def retrieval_metrics(mapped: np.ndarray, target: np.ndarray, *, pool_size: int = POOL_SIZE) -> RetrievalMetrics:
    """Top-1 accuracy, mean (1-based) rank of the true target, and mean cosine: row i of ``mapped`` ranked against
    every target row of its pool (consecutive rows, ``pool_size`` a pool); a tie with the true target counts against
    it."""
    if mapped.shape != target.shape:
        raise DimensionError(f"mapped {mapped.shape} and target {target.shape} rows must pair up")
    if int(pool_size) < 1:
        raise SubspacesError(f"pool_size must be at least 1, got {pool_size}")
    mapped, target = normalize_rows(mapped), normalize_rows(target)
    ranks = np.empty(len(mapped), dtype=np.int64)
    for start in range(0, len(mapped), pool_size):
        stop = min(start + pool_size, len(mapped))
        pool = target[start:stop]
        for lo in range(start, stop, BATCH):
            hi = min(lo + BATCH, stop)
            sims = mapped[lo:hi] @ pool.T
            true = sims[np.arange(hi - lo), np.arange(lo - start, hi - start)]
            ranks[lo:hi] = (sims >= true[:, None]).sum(axis=1)
    cosine = float(np.einsum("ij,ij->i", mapped, target).mean())
    return RetrievalMetrics(top1=float((ranks == 1).mean()), mean_rank=float(ranks.mean()), cosine=cosine)


def cross_fitted_oracle(source: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Each half of the rows mapped by Procrustes fitted on the other half's true pairs."""
    folds = np.array_split(np.arange(len(source)), 2)
    mapped = np.empty((len(source), target.shape[1]), dtype=np.float32)
    for fold in folds:
        rest = np.setdiff1d(np.arange(len(source)), fold)
        mapped[fold] = source[fold] @ procrustes(source[rest], target[rest])
    return normalize_rows(mapped)


def evaluate_alignment(aligner, source: np.ndarray, target: np.ndarray, *, pool_size: int = POOL_SIZE) -> AlignmentEval:
    """Score a fitted aligner on paired rows (row i of ``source`` and ``target`` embed the same text)."""
    if len(source) != len(target):
        raise DimensionError(f"paired evaluation needs equal row counts, got {len(source)} and {len(target)}")
    a = aligner.preprocess_source(source)
    b = aligner.preprocess_target(target)
    # Pools are consecutive rows; the last one holds the remainder (shuffle paired rows beforehand if ordered).
    mapped = retrieval_metrics(normalize_rows(a @ aligner.matrix_), b, pool_size=pool_size)
    return AlignmentEval(
        n_eval=len(a),
        pool_size=min(pool_size, len(a)),
        top1=mapped.top1,
        mean_rank=mapped.mean_rank,
        cosine=mapped.cosine,
        n_pools=-(-len(a) // pool_size),
        identity=retrieval_metrics(a, b, pool_size=pool_size) if a.shape[1] == b.shape[1] else None,
        oracle=retrieval_metrics(normalize_rows(a @ procrustes(a, b)), b, pool_size=pool_size),
        oracle_cross_fitted=retrieval_metrics(cross_fitted_oracle(a, b), b, pool_size=pool_size),
    )
