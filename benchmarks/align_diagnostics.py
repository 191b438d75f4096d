"""Why cross-architecture alignment is hard: the development measurements behind docs/align.md, reproducible.

Uses the paired held-out rows (and the oracle map fitted on them) of a pool built by ``align_pools.py``, so it is
an analysis with labels, never part of ``fit``:

1. oracle overfitting: Procrustes fitted on one half of the pairs, scored on that half (in-sample) and on the
   other half (unseen);
2. partition mismatch: the similarity-structure correlation of truly corresponding clusters (the held-out texts
   clustered once in the source space, centroids taken in both spaces) against that of the two spaces' own k-means
   centroids paired by the oracle map and paired by the QAP, and the share of QAP pairs that are right, with the
   library's kernel (cosines of the spherical centroids) and with the notebook's (double-centred Gram of the raw
   cluster means);
3. refine-1's fixed point: refine-1 started *at the oracle map*, for several neighbour counts k, and optionally with
   CSLS, exact-assignment and entropic-OT pseudo-targets instead of neighbour means (``--alternatives``, slow).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/align_diagnostics.py --pool wordnet --size 40000 --target wordllama
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from scipy.optimize import linear_sum_assignment

sys.path.insert(0, str(Path(__file__).parent))

from align_pools import SOURCE_MODEL, load_centered
from subspaces.align.anchors import cluster_means, kmeans
from subspaces.align.matching import gram_factor, match_centroids, similarity_agreement
from subspaces.align.metrics import retrieval_metrics
from subspaces.align.neighbours import NeighbourIndex, knn
from subspaces.align.preprocess import normalize_rows
from subspaces.align.procrustes import procrustes
from subspaces.align.refine import NeighbourStep, blend
from subspaces.io import save_json

RESULTS = Path(__file__).parent / "results"


def top1(matrix: np.ndarray, x: np.ndarray, y: np.ndarray) -> float:
    return retrieval_metrics(normalize_rows(x @ matrix), y, pool_size=len(x))["top1"]


def partition_mismatch(a, b, x, y, oracle, n_clusters: int, n_runs: int, rng, gram_rng) -> dict:
    true_corr, oracle_paired, qap_paired, qap_right, gram_right = [], [], [], [], []
    for _ in range(n_runs):
        labels = knn(x, kmeans(x, n_clusters, seed=int(rng.integers(2**31))), 1)[1][:, 0]
        ca = normalize_rows(np.stack([x[labels == c].mean(0) for c in range(n_clusters)]))
        cb = normalize_rows(np.stack([y[labels == c].mean(0) for c in range(n_clusters)]))
        true_corr.append(similarity_agreement(ca @ ca.T, cb @ cb.T))
        sa = a[rng.choice(len(a), min(10_000, len(a)), replace=False)]
        sb = b[rng.choice(len(b), min(10_000, len(b)), replace=False)]
        ka = kmeans(sa, n_clusters, seed=int(rng.integers(2**31)))
        kb = kmeans(sb, n_clusters, seed=int(rng.integers(2**31)))
        _, right = linear_sum_assignment(-(normalize_rows(ka @ oracle) @ kb.T))
        match = match_centroids(ka, kb, n_restarts=10, rng=rng)
        oracle_paired.append(similarity_agreement(ka @ ka.T, (kb @ kb.T)[np.ix_(right, right)]))
        qap_paired.append(match.agreement)
        qap_right.append(float((match.permutation == right).mean()))
        # The notebook's kernel: double-centred Gram of the raw cluster means (same clusters, same solver).
        gram = match_centroids(
            gram_factor(cluster_means(sa, ka)), gram_factor(cluster_means(sb, kb)), n_restarts=10, rng=gram_rng
        )  # own stream: the other figures stay as they were
        gram_right.append(float((gram.permutation == right).mean()))
    return {
        "n_clusters": n_clusters,
        "runs": n_runs,
        "agreement_true_correspondence": float(np.mean(true_corr)),
        "agreement_own_kmeans_oracle_paired": float(np.mean(oracle_paired)),
        "agreement_own_kmeans_qap_paired": float(np.mean(qap_paired)),
        "qap_pairs_right": float(np.mean(qap_right)),
        "qap_pairs_right_notebook_gram_kernel": float(np.mean(gram_right)),
    }


def sinkhorn_targets(sims: np.ndarray, candidates: np.ndarray, eps: float = 0.05, n_iter: int = 100) -> np.ndarray:
    kernel = np.exp((sims - sims.max()) / eps)
    u, v = np.ones(len(sims)), np.ones(sims.shape[1])
    for _ in range(n_iter):
        u = 1.0 / (kernel @ v)
        v = 1.0 / (kernel.T @ u)
    return normalize_rows((u[:, None] * kernel * v[None, :]) @ candidates)


def refine_from_oracle(a, b, x, y, oracle, *, rounds: int, ks: list[int], alternatives: bool, rng) -> dict:
    index, source_index = NeighbourIndex(b), NeighbourIndex(a)
    out = {"rounds": rounds, "oracle_top1": top1(oracle, x, y)}
    for k in ks:
        for name, bidirectional in (("neighbour_mean", False), ("bidirectional_neighbour_mean", True)):
            step = NeighbourStep(
                a,
                b,
                rng,
                target_index=index,
                source_index=source_index,
                sample_size=4096,
                k=k,
                bidirectional=bidirectional,
            )
            matrix = oracle
            for _ in range(rounds):
                matrix = step(matrix)
            out[f"{name}_k{k}"] = top1(matrix, x, y)
    if alternatives:
        for name in ("csls", "assignment", "entropic_ot"):
            matrix = oracle
            for _ in range(rounds):
                sa = a[rng.choice(len(a), 4096, replace=False)]
                sb = b[rng.choice(len(b), 4096, replace=False)]
                sims = normalize_rows(sa @ matrix) @ sb.T
                if name == "csls":
                    ra = np.sort(sims, axis=1)[:, -10:].mean(1)
                    rb = np.sort(sims, axis=0)[-10:, :].mean(0)
                    targets = sb[(2 * sims - ra[:, None] - rb[None, :]).argmax(1)]
                elif name == "assignment":
                    rows, cols = linear_sum_assignment(-sims)
                    sa, targets = sa[rows], sb[cols]
                else:
                    targets = sinkhorn_targets(sims, sb)
                matrix = blend(matrix, procrustes(sa, targets), 0.5, True)
            out[name] = top1(matrix, x, y)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pool", choices=["wordnet", "tweets"], required=True)
    parser.add_argument("--size", type=int, default=40_000)
    parser.add_argument("--target", default="wordllama")
    parser.add_argument("--clusters", type=int, default=20)
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--ks", default="10,50")
    parser.add_argument("--alternatives", action="store_true", help="also CSLS / assignment / entropic OT (slow)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--output", type=Path, default=None, help="default: results/align_diagnostics_<pool>_<target>.json"
    )
    args = parser.parse_args()

    pool = load_centered(args.pool, args.size, args.target)
    a, b, x, y = pool.a, pool.b, pool.x, pool.y
    rng = np.random.default_rng(args.seed)
    oracle = procrustes(x, y)
    half = len(x) // 2
    fitted_on_second = procrustes(x[half:], y[half:])
    report = {
        "pool": args.pool,
        "size": args.size,
        "source": SOURCE_MODEL,
        "target": args.target,
        "oracle_overfitting": {
            "pairs": len(x) - half,
            "in_sample_top1": top1(fitted_on_second, x[half:], y[half:]),
            "unseen_top1": top1(fitted_on_second, x[:half], y[:half]),
        },
        "partition_mismatch": partition_mismatch(
            a, b, x, y, oracle, args.clusters, args.runs, rng, np.random.default_rng([args.seed, 1])
        ),
        "refine1_from_oracle": refine_from_oracle(
            a,
            b,
            x,
            y,
            oracle,
            rounds=args.rounds,
            ks=[int(k) for k in args.ks.split(",")],
            alternatives=args.alternatives,
            rng=rng,
        ),
    }
    output = args.output or RESULTS / f"align_diagnostics_{args.pool}_{args.target}.json"
    save_json(output, report)
    for key in ("oracle_overfitting", "partition_mismatch", "refine1_from_oracle"):
        print(key, {k: round(v, 3) if isinstance(v, float) else v for k, v in report[key].items()})
    print(f"wrote {output}")


if __name__ == "__main__":
    main()
