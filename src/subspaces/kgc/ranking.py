"""Filtered rank evaluation of link prediction against every entity (SimKGC's protocol).

For a query ``(h, r, ?)`` with answer ``t`` every entity is scored and the other known answers (in any split) are
filtered out; the head stays a candidate. Ties rank ``1 + #better + #tied / 2`` ("realistic", as PyKEEN),
``optimistic`` without the tied term, ``pessimistic`` with it in full. ``average`` is the mean of the forward and
backward (inverse relation) directions, as SimKGC reports.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import torch

from subspaces.kgc.graph import KnownTails, LinkGraph
from subspaces.kgc.recipes import KGCTrainConfig, Ties
from subspaces.vectors import normalize_rows

HITS_AT = (1, 3, 10)
TIED_SHARE = {"realistic": 0.5, "optimistic": 0.0, "pessimistic": 1.0}  # of the tied entities ranked above


def filtered_ranks(
    scores: torch.Tensor,
    targets: Sequence[int] | np.ndarray,
    filtered: Sequence[Iterable[int]],
    ties: Ties = "realistic",
) -> np.ndarray:
    """Rank (1 = best) of ``targets[i]`` in row ``i`` of ``scores`` once ``filtered[i]`` (the target kept if
    there) are removed; ``scores`` are not modified."""
    if ties not in TIED_SHARE:
        raise ValueError(f"ties must be realistic, optimistic or pessimistic, got {ties!r}")
    scores = scores.detach().float().clone()
    target_index = torch.as_tensor(list(targets), dtype=torch.long)
    rows = torch.arange(len(scores))
    target_scores = scores[rows, target_index]
    if not torch.isfinite(target_scores).all():
        raise ValueError("a target scored NaN or inf; the model's outputs are broken")
    _filter(scores, target_index.tolist(), filtered)
    scores[rows, target_index] = -torch.inf  # count the others only
    better = (scores > target_scores[:, None]).sum(dim=1).double()
    tied = (scores == target_scores[:, None]).sum(dim=1).double()
    return (1 + better + TIED_SHARE[ties] * tied).numpy()


def _filter(scores: torch.Tensor, targets: Sequence[int], filtered: Sequence[Iterable[int]]) -> None:
    """Score -inf, in place, every entity of ``filtered[i]`` but ``targets[i]``."""
    for i, others in enumerate(filtered):
        drop = [e for e in others if e != targets[i]]
        if drop:
            scores[i, drop] = -torch.inf


def rank_metrics(ranks: np.ndarray) -> dict[str, float]:
    ranks = np.asarray(ranks, dtype=np.float64)
    if ranks.size == 0:
        raise ValueError("no ranks to summarise")
    metrics = {"mrr": float(np.mean(1.0 / ranks)), "mr": float(np.mean(ranks))}
    for k in HITS_AT:
        metrics[f"hits@{k}"] = float(np.mean(ranks <= k))
    return metrics


def average_metrics(forward: dict[str, float], backward: dict[str, float]) -> dict[str, float]:
    return {k: (forward[k] + backward[k]) / 2 for k in forward}


def rerank_by_graph(
    scores: torch.Tensor, heads: Sequence[int] | np.ndarray, graph: LinkGraph, n_hop: int, weight: float
) -> torch.Tensor:
    """SimKGC's optional re-ranking (``rerank.py``; ``scripts/eval.sh``: 5 hops, weight 0.05 on WN18RR): add
    ``weight`` to every entity within ``n_hop`` training hops of the head, the head included."""
    scores = scores.clone()
    for i, head in enumerate(heads):
        near = graph.n_hop(int(head), n_hop)
        if near:
            scores[i, near] += weight
    return scores


def rank_queries(
    query_vectors: torch.Tensor,
    entity_vectors: torch.Tensor,
    queries: np.ndarray,
    known: KnownTails,
    *,
    ties: Ties = "realistic",
    top_k: int = 10,
    graph: LinkGraph | None = None,
    n_hop: int = 0,
    neighbour_weight: float = KGCTrainConfig.neighbour_weight,
    normalize_queries: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """Ranks of ``queries[:, 2]`` for the queries ``(h, r, t)`` by cosine (``normalize_queries=False``: the raw
    query vectors against unit entity vectors, as Hyper-CL's evaluation), and each query's filtered top-k."""
    q = normalize_rows(query_vectors.float()) if normalize_queries else query_vectors.float()
    e = normalize_rows(entity_vectors.float())
    ranks: list[np.ndarray] = []
    tops: list[np.ndarray] = []
    for start in range(0, len(queries), 256):
        batch = queries[start : start + 256]
        scores = q[start : start + 256] @ e.T
        if graph is not None and n_hop > 0:
            scores = rerank_by_graph(scores, batch[:, 0], graph, n_hop, neighbour_weight)
        filtered = [known(int(h), int(r)) for h, r, _t in batch.tolist()]
        ranks.append(filtered_ranks(scores, batch[:, 2], filtered, ties))
        _filter(scores, batch[:, 2].tolist(), filtered)
        tops.append(scores.topk(min(top_k, scores.shape[1]), dim=1).indices.numpy())
    return np.concatenate(ranks), np.concatenate(tops)
