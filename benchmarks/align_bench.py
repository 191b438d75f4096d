"""Alignment benchmark: mini-vec2vec (library) vs the paper's scikit-learn + scipy recipe, beside identity and oracle.

Protocol (the paper's): a shuffled text pool; the last ``n_eval`` texts are held out as pairs; the rest is cut
into disjoint halves, the first embedded by the source model, the second by the target model. Both aligners fit
on those unpaired halves and are scored on the held-out pairs (top-1 / mean rank in pools of ``n_eval``, cosine).
Embeddings come from ``align_pools.py`` (cached under ``cache_dir()/align_bench``).

    OMP_NUM_THREADS=2 nice -n 5 .venv/bin/python benchmarks/align_bench.py --pool wordnet --size 40000 --n-eval 8192
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

from align_paper_recipe import score_paper_recipe
from align_pools import SOURCE_MODEL, embed_pool
from subspaces.align import MiniVec2Vec, evaluate_alignment
from subspaces.io import save_json

RESULTS = Path(__file__).parent / "results"


def _aligner(params: dict, **overrides) -> MiniVec2Vec:
    """Stage-grouped parameters (``{"refine": {"n_iter": 200}}``; older BENCHMARKS.md commands' flat names are
    refused with the valid ones)."""
    return MiniVec2Vec.from_params(params, **overrides)


def run_pair(folder: Path, target: str, *, seed: int, paper: bool, params: dict) -> dict:
    a = np.load(folder / f"{SOURCE_MODEL}.train.npy")
    b = np.load(folder / f"{target}.train.npy")
    x = np.load(folder / f"{SOURCE_MODEL}.eval.npy")
    y = np.load(folder / f"{target}.eval.npy")
    aligner = _aligner(params, random_state=seed, verbose=True).fit(a, b)
    report = {"source": SOURCE_MODEL, "target": target, "n_source_train": len(a), "n_target_train": len(b)}
    report |= evaluate_alignment(aligner, x, y, pool_size=len(x))
    report["fit_seconds"] = aligner.fit_seconds_
    diag = aligner.diagnostics_
    report["diagnostics"] = {
        "chosen_restart": diag["chosen_restart"],
        "nn_similarity": diag["nn_similarity"],
        "restart_final_nn_similarity": [r["nn_similarity"]["final"] for r in diag["restarts"]],
        "restart_qap_agreement": [r["qap_agreement"] for r in diag["restarts"]],
        "restart_structure_swapped": [r.get("structure_swapped") for r in diag["restarts"]],
        "anchor_consistency": diag["anchor_consistency"],
        "orthogonality_gap": diag["orthogonality_gap"],
        "stage_seconds": diag["restarts"][diag["chosen_restart"]].get("stage_seconds"),
        "refine1_iterations": diag["restarts"][diag["chosen_restart"]].get("refine1_iterations"),
        "refine1_averaged": diag["restarts"][diag["chosen_restart"]].get("refine1_averaged"),
    }
    if paper:
        report["paper_recipe"] = score_paper_recipe(a, b, x, y, seed=seed)
        report["speedup_vs_paper_recipe"] = report["paper_recipe"]["fit_seconds"] / aligner.fit_seconds_
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pool", choices=["wordnet", "tweets"], required=True)
    parser.add_argument("--size", type=int, default=40_000)
    parser.add_argument("--n-eval", type=int, default=8192)
    parser.add_argument("--targets", default="paraphrase-l3,wordllama")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-paper", action="store_true", help="skip the scikit-learn + scipy reference recipe")
    parser.add_argument(
        "--params",
        default="{}",
        help="JSON of MiniVec2Vec parameters to override, grouped by stage (flat format-1 names are read too)",
    )
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args()

    targets = args.targets.split(",")
    folder = embed_pool(args.pool, args.size, 0, args.n_eval, [SOURCE_MODEL, *targets])
    params = json.loads(args.params)
    results = {
        "pool": args.pool,
        "size": args.size,
        "n_eval": args.n_eval,
        "seed": args.seed,
        "params": params,
        "machine": (
            f"{platform.machine()}, {os.cpu_count()} cores (shared), "
            f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}"
        ),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "pairs": [],
    }
    output = args.output or RESULTS / f"align_{args.pool}.json"
    for target in targets:
        report = run_pair(folder, target, seed=args.seed, paper=not args.no_paper, params=params)
        results["pairs"].append(report)
        save_json(output, results)  # after every pair, so a long run keeps what it has
        line = f"{args.pool} {SOURCE_MODEL}->{target}: top1 {report['top1']:.4f}"
        line += f" (oracle {report['oracle']['top1']:.4f}"
        if report["identity"] is not None:
            line += f", identity {report['identity']['top1']:.4f}"
        line += f") in {report['fit_seconds']:.0f}s"
        if "paper_recipe" in report:
            p = report["paper_recipe"]
            line += f"; paper recipe top1 {p['top1']:.4f} in {p['fit_seconds']:.0f}s"
            line += f" ({report['speedup_vs_paper_recipe']:.1f}x)"
        print(line, flush=True)
    print(f"wrote {output}")


if __name__ == "__main__":
    main()
