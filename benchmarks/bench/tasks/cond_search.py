"""Conditional search speed (BENCHMARKS §4): ms per query of ``cos(W_c q, W_c d)`` over ``n`` random unit vectors
with a random hypernet head (``rank`` K, or 0: full rank): the condition's view built (the second build), a query
against it (median), in batches of 32, and the explicit baseline with its top-k agreement. Seeds are repeats."""

from __future__ import annotations

import statistics
from typing import Any

import numpy as np

from bench.stats import timed
from bench.tables import grid
from bench.tasks import cell_params

DEFAULTS: dict[str, Any] = {"dim": 384, "rank": 32, "threads": 2, "queries": 64, "explicit_queries": 5, "k": 10}


def _unit_rows(n: int, d: int, seed: int, block: int = 131_072) -> np.ndarray:
    rng = np.random.default_rng(seed)
    out = np.empty((n, d), dtype=np.float32)
    for start in range(0, n, block):  # a block at a time: no float64 copy of a 1M x d matrix
        rows = rng.standard_normal((min(block, n - start), d), dtype=np.float32)
        out[start : start + len(rows)] = rows / np.linalg.norm(rows, axis=1, keepdims=True)
    return out


def run(params: dict[str, Any], seed: int) -> dict[str, Any]:
    import torch
    from torch.nn.functional import normalize

    from subspaces.models.heads import conditional_search, corpus_view, make_head

    p = cell_params(DEFAULTS, params)
    torch.manual_seed(seed)
    head = make_head("hypernet", p["dim"], p["rank"] or None).eval()
    corpus = torch.from_numpy(_unit_rows(p["n"], p["dim"], seed))
    queries = torch.from_numpy(_unit_rows(p["queries"], p["dim"], seed + 1))
    condition = torch.from_numpy(_unit_rows(1, p["dim"], seed + 2))
    k = p["k"]
    with torch.no_grad():
        cparams = head.condition_params(condition)
        corpus_view(head, corpus, cparams)  # the first build also pays for allocation
        view, view_s = timed(corpus_view, head, corpus, cparams)

        def search(q: torch.Tensor) -> Any:
            return conditional_search(head, q, cparams, corpus, k, view=view)

        def explicit(q: torch.Tensor) -> torch.Tensor:  # form W_c, project every row, normalise, rank
            w = head.projection_matrix(condition)[0]
            projected = normalize(q[None] @ w.T, dim=1)[0]
            chunks = [normalize(corpus[i : i + 65_536] @ w.T, dim=1) @ projected for i in range(0, len(corpus), 65_536)]
            return torch.topk(torch.cat(chunks), k).indices

        search(queries[:2])  # warm-up
        single = [timed(search, q[None])[1] for q in queries]
        batched = sum(timed(search, queries[i : i + 32])[1] for i in range(0, len(queries), 32))
        baseline = [(q, *timed(explicit, q)) for q in queries[: p["explicit_queries"]]]  # (query, top k, s)
        agreement = [len(set(search(q[None])[1][0].tolist()) & set(want.tolist())) / k for q, want, _ in baseline]
    return {
        "view_ms": round(1e3 * view_s, 2), "query_ms": round(1e3 * statistics.median(single), 3),
        "batch32_ms_per_query": round(1e3 * batched / len(queries), 3),
        "explicit_ms": round(1e3 * statistics.median([seconds for _, _, seconds in baseline]), 1),
        "topk_agreement": round(min(agreement), 4),
    }  # fmt: skip


def table(summary: dict[str, Any]) -> str:
    rows = [
        f"{pool} | {arm} | {v['query_ms']['mean']:.2f} | {v['batch32_ms_per_query']['mean']:.2f} "
        f"| {v['view_ms']['mean']:.0f} ms | {v['explicit_ms']['mean']:.1f} ms | {v['topk_agreement']['mean']:.3f}"
        for pool, arms in summary["aggregate"].items()
        for arm, v in arms.items()
    ]
    head = "corpus | head | ms / query (view cached) | in batches of 32 | view, once | explicit | top-k agreement"
    return grid(head, rows, left=2)
