"""Per-pass diagnostics of one fit (issue 24): every restart refined, none stopped by convergence or the check.

Prints per pass the top-1 of its structured and final maps (labels, for diagnosis only), its nearest-neighbour
similarity at each stage, the structural swap shares, and the pairwise agreement (mean cosine of 2,048 source rows
mapped by each) of the structured and the final maps. Logs of its runs: ``benchmarks/notes/align_pass_diagnostics/``.

    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/align_pass_diagnostics.py DOMAIN SAMPLE SIZE PASSES SEED [PARAMS]
"""

from __future__ import annotations

import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

from align_protocol import load_pool
from subspaces.align import MiniVec2Vec
from subspaces.align.metrics import cross_fitted_oracle, retrieval_metrics
from subspaces.align.preprocess import normalize_rows
from subspaces.align.verify import map_agreement


def main() -> None:
    domain, sample, size, passes, seed = sys.argv[1], *map(int, sys.argv[2:6])
    params = json.loads(sys.argv[6]) if len(sys.argv) > 6 else {}
    pool = load_pool(domain, sample, size, "paraphrase-l3")
    aligner = MiniVec2Vec.from_params(
        params, n_restarts=passes, converged_swap_share=None, agreement_threshold=None, random_state=seed
    )
    clock = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        aligner.fit(pool["a"], pool["b"])
    print(f"{domain} s{sample} n={len(pool['a'])} K={passes} seed={seed} fit {time.perf_counter() - clock:.0f}s")
    x, y = aligner.preprocess_source(pool["x"]), aligner.preprocess_target(pool["y"])
    print("oracle cf", round(retrieval_metrics(cross_fitted_oracle(x, y), y)["top1"], 3))
    a = aligner.preprocess_source(pool["a"])
    rows = a[np.random.default_rng(0).choice(len(a), 2048, replace=False)]
    maps = aligner.pass_maps_  # every pass is refined here (no convergence stop, no check), so none is None
    for i, record in enumerate(aligner.diagnostics_["restarts"]):
        top1 = {kind: round(retrieval_metrics(normalize_rows(x @ m), y)["top1"], 3) for kind, m in maps[i].items()}
        nn = {stage: None if v is None else round(v, 4) for stage, v in record["nn_similarity"].items()}
        print(i, top1, nn, "swapped", [round(v, 2) for v in record["structure_swapped"]])

    for first, second in (("structured", "structured"), ("final", "final"), ("final", "structured")):
        print(f"{first} (row) vs {second} (column) agreement")
        for i in range(passes):
            print("  ", " ".join(f"{map_agreement(rows, maps[i][first], maps[j][second]):.2f}" for j in range(passes)))


if __name__ == "__main__":
    main()
