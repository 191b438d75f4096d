"""Where does the fit's own pipeline take the best map? A diagnosis with labels (issue 24), never part of ``fit``.

The scored pairs of a protocol pool are split in two halves: Procrustes on the first half is the (cross-fitted)
oracle, scored on the second. A pass is then started *at* that oracle: the first half is given to ``fit`` as known
pairs with ``pair_weight=0``, so they only set the initial map and every later stage (structure, refine-1,
refine-2) runs on the unpaired rows alone, as in an unpaired fit. Printed per stage: top-1 on the second half and
the label-free neighbour-similarity score. If the stages carry the oracle down to where unpaired fits end, the
shortfall is the objective's (the label-free optimum sits below the oracle), not the anchors' basin.

    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/align_from_oracle.py DOMAIN SAMPLE SIZE [PARAMS]
"""

from __future__ import annotations

import json
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from align_protocol import load_pool
from subspaces.align import MiniVec2Vec
from subspaces.align.metrics import retrieval_metrics
from subspaces.align.preprocess import normalize_rows
from subspaces.align.procrustes import procrustes


def main() -> None:
    domain, sample, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    params = json.loads(sys.argv[4]) if len(sys.argv) > 4 else {}
    params.setdefault("refine", {})["pair_weight"] = 0.0
    pool = load_pool(domain, sample, size, "paraphrase-l3")
    half = len(pool["x"]) // 2
    known = (pool["x"][:half], pool["y"][:half])
    aligner = MiniVec2Vec.from_params(params, n_restarts=1, random_state=0)
    clock = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        aligner.fit(pool["a"], pool["b"], pairs=known)
    x, y = aligner.preprocess_source(pool["x"][half:]), aligner.preprocess_target(pool["y"][half:])
    kx, ky = aligner.preprocess_source(known[0]), aligner.preprocess_target(known[1])
    oracle = aligner.diagnostics_["restarts"][0]
    print(f"{domain} s{sample} n={len(pool['a'])} scored {len(x)} fit {time.perf_counter() - clock:.0f}s {params}")
    maps = {"oracle (initial)": procrustes(kx, ky), **aligner.pass_maps_[0]}
    for stage, matrix in maps.items():
        print(f"  {stage:18s} top-1 {retrieval_metrics(normalize_rows(x @ matrix), y)['top1']:.3f}")
    scores = {k: None if v is None else round(v, 4) for k, v in oracle["nn_similarity"].items()}
    print("  nn-similarity by stage", scores)
    print("  structure swapped", [round(v, 3) for v in oracle["structure_swapped"]])


if __name__ == "__main__":
    main()
