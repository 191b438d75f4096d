"""Can more rounds lift a half-right map? A diagnosis with labels (issue 24), never part of ``fit``.

Fits the default ``MiniVec2Vec`` (seed ``SEED``) on a protocol pool, then continues from its kept map with
``CYCLES`` more cycles of the fit's own later stages (structural refinement, then refine-1), each with a fresh
stream, and prints after every cycle the top-1 on the pool's scored pairs (labels, for diagnosis only) and the fit's
label-free score on its own probes. Optional ``PARAMS`` (JSON, ``{"structure": {...}, "refine": {...}}``) change the
continued stages only.

    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/align_continue.py DOMAIN SAMPLE SIZE SEED CYCLES [PARAMS]
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

from align_protocol import load_pool
from subspaces.align import MiniVec2Vec
from subspaces.align.diagnostics import bidirectional_nn_similarity
from subspaces.align.metrics import retrieval_metrics
from subspaces.align.neighbours import NeighbourIndex
from subspaces.align.preprocess import normalize_rows
from subspaces.align.refine import NeighbourStep, refine_by_neighbours, refine_by_structure


def main() -> None:
    domain, sample, size, seed, cycles = sys.argv[1], *map(int, sys.argv[2:6])
    changes = json.loads(sys.argv[6]) if len(sys.argv) > 6 else {}
    pool = load_pool(domain, sample, size, "paraphrase-l3")
    fitted = MiniVec2Vec(random_state=seed)
    clock = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fitted.fit(pool["a"], pool["b"])
    print(f"{domain} s{sample} seed {seed}: fit {time.perf_counter() - clock:.0f}s, continued with {changes}")
    sp = dataclasses.replace(fitted.structure, **changes.get("structure", {}))
    rp = dataclasses.replace(fitted.refine, **changes.get("refine", {}))
    a, b = fitted.preprocess_source(pool["a"]), fitted.preprocess_target(pool["b"])
    x, y = fitted.preprocess_source(pool["x"]), fitted.preprocess_target(pool["y"])
    rng = np.random.default_rng(1000 + seed)
    probe_a = a[rng.choice(len(a), min(2048, len(a)), replace=False)]
    probe_b = b[rng.choice(len(b), min(2048, len(b)), replace=False)]
    index_a, index_b = NeighbourIndex(a), NeighbourIndex(b)

    def score(matrix: np.ndarray) -> float:
        return bidirectional_nn_similarity(probe_a, probe_b, index_a, index_b, matrix)

    def report(name: str, matrix: np.ndarray) -> None:
        top1 = retrieval_metrics(normalize_rows(x @ matrix), y)["top1"]
        print(f"  {name:12s} top-1 {top1:.3f}  score {score(matrix):.4f}", flush=True)

    matrix = fitted.matrix_
    report("fit", matrix)
    for cycle in range(cycles):
        step = NeighbourStep(
            a, b, np.random.default_rng([seed, cycle]), target_index=index_b, source_index=index_a,
            sample_size=rp.sample, k=rp.k, alpha=rp.alpha, orthogonalize=rp.orthogonalize,
            bidirectional=rp.bidirectional,
        )  # fmt: skip
        matrix, history = refine_by_structure(
            matrix, step, score=score, n_iter=sp.n_iter, n_clusters=sp.n_clusters, n_runs=sp.n_runs,
            sample_size=sp.sample, kmeans_iter=sp.kmeans_iter, inner_steps=sp.steps, patience=sp.patience,
            stop_swap_share=sp.stop_swap_share, tol=rp.tol,
        )  # fmt: skip
        report(f"{cycle} struct", matrix)
        print("     swapped", [round(v, 3) for v in history.swapped])
        matrix, _ = refine_by_neighbours(
            matrix, step, score=score, n_iter=rp.n_iter, patience=rp.patience, tol=rp.tol,
            average=rp.average, score_every=rp.score_every,
        )  # fmt: skip
        report(f"{cycle} refine1", matrix)


if __name__ == "__main__":
    main()
