"""Dev study (issue 24, fourteenth session): does averaging two agreeing refined maps beat keeping the better one?

Two right passes of one fit agree at a mean cosine of only 0.59-0.90 on the mapped rows, and trusted seeds of one
entities pool spread 0.80-0.88 top-1: the passes' maps carry much of their own noise. If that noise is independent
between passes, the orthogonal average of two agreeing maps (the polar factor of their sum) is nearer the best map
than either. The fit today keeps the better of two agreeing maps by final neighbour similarity.

Per pool and seed, one fit with ``PASSES`` passes, each refined (no convergence stop, no agreement check), then for
every pair of passes whose final maps agree (the fit's label-free rule: mean cosine >= 0.55): top-1 on the held-out
pairs of (a) the pass the fit's rule keeps (higher final neighbour similarity), (b) the polar average of the two,
and of the average of every pass that agrees with that pair's kept pass. Labels only score; nothing here chooses
by them. Dev pools only. One JSON per pool and seed (a file already there is skipped: the run resumes).

    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/align_average_study.py run --pools tweets:40000,wordnet:40000
    .venv/bin/python benchmarks/align_average_study.py table
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

from align_protocol import DOMAINS, load_pool, n_eval_for
from subspaces.align import MiniVec2Vec
from subspaces.align.metrics import cross_fitted_oracle, retrieval_metrics
from subspaces.align.preprocess import normalize_rows
from subspaces.align.procrustes import polar_factor
from subspaces.align.verify import map_agreement
from subspaces.io import save_json

RESULTS = Path(__file__).parent / "results" / "align_average_dev"
PASSES = 3
THRESHOLD = MiniVec2Vec().agreement_threshold  # the fit's own rule for two agreeing maps


def study(domain: str, size: int, seed: int, target: str) -> dict:
    pool = load_pool(domain, 0, size, target)
    aligner = MiniVec2Vec(n_restarts=PASSES, converged_swap_share=None, agreement_threshold=None, random_state=seed)
    clock = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        aligner.fit(pool["a"], pool["b"])
    seconds = time.perf_counter() - clock
    x, y = aligner.preprocess_source(pool["x"]), aligner.preprocess_target(pool["y"])

    def top1(matrix: np.ndarray) -> float:
        return retrieval_metrics(normalize_rows(x @ matrix), y)["top1"]

    # 4,096 rows of the unpaired source half (the fit's own agreement rows are not kept; any such rows serve).
    a = aligner.preprocess_source(pool["a"])
    rows = a[np.random.default_rng(0).choice(len(a), min(4096, len(a)), replace=False)]
    maps = [m["final"] for m in aligner.pass_maps_]
    records = aligner.diagnostics_["restarts"]
    nn = [r["nn_similarity"]["final"] for r in records]
    passes = [
        {"top1": top1(m), "nn_final": nn[i], "swapped_last": records[i]["structure_swapped"][-1]}
        for i, m in enumerate(maps)
    ]
    agreement = {(i, j): map_agreement(rows, maps[i], maps[j]) for i, j in itertools.combinations(range(len(maps)), 2)}
    pairs = []
    for (i, j), value in agreement.items():
        if value < THRESHOLD:
            continue
        kept = i if nn[i] >= nn[j] else j
        group = [k for k in range(len(maps)) if k == kept or agreement[tuple(sorted((k, kept)))] >= THRESHOLD]
        pairs.append(
            {
                "passes": [i, j],
                "agreement": value,
                "kept": kept,
                "kept_top1": passes[kept]["top1"],
                "average_top1": top1(polar_factor(maps[i] + maps[j])),
                "group": group,
                "group_average_top1": top1(polar_factor(sum(maps[k] for k in group))),
            }
        )
    return {
        "domain": domain,
        "size": size,
        "target": target,
        "seed": seed,
        "fit_seconds": seconds,
        "oracle_cross_fitted": retrieval_metrics(cross_fitted_oracle(x, y), y)["top1"],
        "n_eval": len(x),
        "n_eval_for": n_eval_for(size),
        "passes": passes,
        "agreement": [[i, j, v] for (i, j), v in agreement.items()],
        "agreeing_pairs": pairs,
    }


def run(args: argparse.Namespace) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    for spec in args.pools.split(","):
        domain, size = spec.split(":")
        if DOMAINS.get(domain, ("",))[0] != "dev":
            dev = [name for name, (role, _) in DOMAINS.items() if role == "dev"]
            raise SystemExit(f"{domain} is not a dev domain ({', '.join(dev)}): this study chooses a default")
        for seed in map(int, args.seeds.split(",")):
            out = RESULTS / f"{domain}-{size}-{args.target}-seed{seed}.json"
            if out.exists():
                continue
            report = study(domain, int(size), seed, args.target)
            save_json(out, report)
            print(out.name, json.dumps(report["agreeing_pairs"]), [p["top1"] for p in report["passes"]], flush=True)


def table(_: argparse.Namespace) -> None:
    print("| pool | seed | passes' top-1 | agreeing pair: kept (rule) / average / group average | oracle |")
    print("|---|---|---|---|---|")
    gains = []
    for path in sorted(RESULTS.glob("*.json")):
        r = json.loads(path.read_text())
        cells = "; ".join(
            f"{p['passes']}: {p['kept_top1']:.3f} / {p['average_top1']:.3f} / {p['group_average_top1']:.3f}"
            for p in r["agreeing_pairs"]
        )
        gains += [p["average_top1"] - p["kept_top1"] for p in r["agreeing_pairs"]]
        tops = " / ".join(f"{p['top1']:.3f}" for p in r["passes"])
        print(
            f"| {r['domain']} {r['size']} → {r['target']} | {r['seed']} | {tops} | {cells or '-'} | "
            f"{r['oracle_cross_fitted']:.3f} |"
        )
    if gains:
        print(
            f"\naverage - kept over {len(gains)} agreeing pairs: mean {np.mean(gains):+.4f}, "
            f"min {min(gains):+.4f}, max {max(gains):+.4f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    go = sub.add_parser("run")
    go.add_argument("--pools", default="tweets:40000,wordnet:40000")
    go.add_argument("--seeds", default="0,1,2")
    go.add_argument("--target", default="paraphrase-l3")
    go.set_defaults(func=run)
    sub.add_parser("table").set_defaults(func=table)
    args = parser.parse_args()
    args.func(args)


if __name__ == "__main__":
    main()
