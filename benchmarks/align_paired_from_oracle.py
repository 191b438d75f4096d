"""Where do known pairs hold the best map? A diagnosis with labels (issue 24), never part of ``fit``.

``align_from_oracle.py`` showed that the unpaired stages carry the oracle down to where unpaired fits end. This asks
the same of a fit *with* known pairs: does ``pair_weight`` hold a map started at the oracle, and at which weight?

The scored pairs of a protocol pool are split in two halves: Procrustes on the first half is the cross-fitted oracle,
scored on the second. ``N`` known pairs are drawn from the first half. Arms, each scored on the second half:

* ``pairs fit``: the library's fit with the N pairs (its own start: the pairs' Procrustes), at each weight;
* ``then heavier``: the weight-1 pairs fit, continued by a fit at the weight from the map it kept (the same
  rotation trick as the next arm): does a map placed by the unpaired rows let heavier pairs pin it?
* ``from the oracle``: the same fit started at the oracle. The source side (unpaired rows and pairs) is multiplied
  by the oracle map R first and fitted with ``init="identity"``: centring and normalising commute with R, so that
  pass starts exactly at the oracle and every later stage (structure, refine-1 with the pairs, refine-2) runs as
  in a paired fit. Equal dims only: with a wider target the rotated source is wider too, and the blends would be
  projected onto the orthogonal matrices of the target's dims, another path than the fit's.

If every weight that holds the oracle loses from the library's own start, the pairs' shortfall is the paired
objective's, not the start's. Refine-1 keeps its best iterate by the *unpaired* neighbour score, which can veto every
move the pairs ask for; ``--last-iterate`` replaces that selection (diagnosis only) by the last iterate and the tail
average, so the arms show where the weighted iteration itself goes.

    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/align_paired_from_oracle.py DOMAIN SAMPLE SIZE \
        [--target paraphrase-l3] [--pairs 200] [--weights 1,4,16] [--arms fit,then,oracle] [--last-iterate] \
        [--output FILE.json]
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

from align_from_oracle import stage_top1
from align_protocol import load_pool
from subspaces.align import MiniVec2Vec
from subspaces.align.metrics import retrieval_metrics
from subspaces.align.preprocess import center_normalize
from subspaces.align.procrustes import procrustes
from subspaces.io import save_json


def scored_fit(a, b, known, x, y, weight: float, init: str, seed: int, keep: list | None = None) -> dict:
    """Fit with ``known`` pairs at ``weight``; top-1 of the second half's true targets after each stage."""
    params = {"refine": {"pair_weight": weight}}
    aligner = MiniVec2Vec.from_params(params, init=init, n_restarts=1, random_state=seed)
    clock = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        aligner.fit(a, b, pairs=known)
    out = stage_top1(aligner, x, y)
    if keep is not None:
        keep.append(aligner.matrix_)
    return out | {
        "kept": retrieval_metrics(aligner.transform(x, centered=True), aligner.preprocess_target(y))["top1"],
        "seconds": time.perf_counter() - clock,
    }


def last_iterate(
    matrix,
    step,
    *,
    score,
    start_score,
    n_iter,
    patience,
    tol,
    history,
    progress,
    score_every=1,
    done=None,
    out_of_time=None,
):
    """``refine._keep_best`` without its selection: every step taken, the last iterate returned (the structural
    stage's stopping rule, ``done``, still read after scored steps)."""
    history.best_score = float("-inf")  # so refine-1's tail average is always taken
    for it in range(n_iter):
        if out_of_time is not None and out_of_time():
            break
        matrix = step(matrix)
        history.iterations = it + 1
        if done is not None and (it + 1) % score_every == 0:
            history.scores.append(score(matrix))
            if done():
                break
    return matrix


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("domain")
    parser.add_argument("sample", type=int)
    parser.add_argument("size", type=int)
    parser.add_argument("--target", default="paraphrase-l3")
    parser.add_argument("--pairs", type=int, default=200)
    parser.add_argument("--weights", default="1,4,16")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--arms", default="fit,then,oracle", help="of fit, then, oracle")
    parser.add_argument("--last-iterate", action="store_true", help="no iterate selection by the unpaired score")
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    if args.last_iterate:
        import subspaces.align.refine as refine

        refine._keep_best = last_iterate
    pool = load_pool(args.domain, args.sample, args.size, args.target)
    a, b, x, y = pool["a"], pool["b"], pool["x"], pool["y"]
    half = len(x) // 2
    ma, mb = a.mean(axis=0), b.mean(axis=0)
    oracle = procrustes(center_normalize(x[:half], ma), center_normalize(y[:half], mb))
    second = (x[half:], y[half:])
    rng = np.random.default_rng(args.seed)
    rows = rng.choice(half, args.pairs, replace=False)
    known = (x[rows], y[rows])
    oracle_top1 = retrieval_metrics(center_normalize(second[0], ma) @ oracle, center_normalize(second[1], mb))["top1"]
    print(
        f"{args.domain} s{args.sample} -> {args.target}: {len(a)} rows a side, oracle on {half} pairs, scored on "
        f"{len(second[0])}: oracle top-1 {oracle_top1:.3f}; {args.pairs} known pairs",
        flush=True,
    )
    report: dict = {
        "domain": args.domain,
        "sample": args.sample,
        "target": args.target,
        "pairs": args.pairs,
        "oracle_top1": oracle_top1,
        "scored": len(second[0]),
        "last_iterate": args.last_iterate,
        "arms": {},
    }
    first: list = []  # the weight-1 fit's kept map
    arms = args.arms.split(",")
    if a.shape[1] != b.shape[1] and {"then", "oracle"} & set(arms):
        sys.exit(f"the then/oracle arms need equal dims, got {a.shape[1]} and {b.shape[1]}: use --arms fit")
    for weight in (float(w) for w in args.weights.split(",")):
        for arm in arms:
            if arm == "fit":
                result = scored_fit(a, b, known, *second, weight, "anchors", args.seed, first if weight == 1 else None)
            else:  # the source side rotated by a map, then a pass from the identity = from that map
                if arm == "then" and not first:
                    scored_fit(a, b, known, *second, 1.0, "anchors", args.seed, first)
                start = oracle if arm == "oracle" else first[-1]
                rotated = (known[0] @ start, known[1])
                result = scored_fit(a @ start, b, rotated, second[0] @ start, second[1], weight, "identity", args.seed)
            arm = {"fit": "pairs fit", "then": "then heavier", "oracle": "from the oracle"}[arm]
            report["arms"][f"{arm}, weight {weight:g}"] = result
            stages = "  ".join(f"{k} {v:.3f}" for k, v in result.items() if k != "seconds")
            print(f"  {arm:16s} weight {weight:>4g}: {stages}  ({result['seconds']:.0f} s)", flush=True)
    if args.output:
        save_json(args.output, report)


if __name__ == "__main__":
    main()
