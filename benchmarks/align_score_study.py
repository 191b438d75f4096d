"""Which label-free statistics see refine-1's drift away from the oracle, and which refinement rules hold it.

An analysis with labels (the held-out pairs of a pool built by ``align_pools.py``), never part of ``fit``. From the
oracle map (Procrustes on the held-out pairs), each refinement rule below runs ``--rounds`` steps on samples of
``--sample`` rows of each training half (blend 0.5, projected back to orthogonal) and its map is kept every 5
steps; with ``--from-fit`` the default ``MiniVec2Vec`` fit is refined by the library's rule the same way. Every map
gets its held-out top-1 and these label-free statistics, computed on two fixed probes of ``--probe`` rows:

* ``nn_similarity``: the library's score (mean cosine to the nearest row of the other space, both directions);
* ``csls``: the same with CSLS's local scaling (10 neighbours), as MUSE scores translations;
* ``mutual_nn`` / ``mutual_csls``: share of mapped source probes whose nearest target probe (by cosine / CSLS) has
  them as its nearest in turn;
* ``coverage``: share of probes of each side chosen as someone's nearest neighbour (low = hubs);
* ``mixing``: share of cross-space rows among the 10 nearest neighbours in the union of both mapped probes.

Rules: ``neighbour_mean`` (the library's bidirectional step, k=50 or ``--k``), ``icp`` (the same with k=1:
hill-climbing on ``nn_similarity`` itself), ``csls_neighbour_mean`` (the 50 neighbours ranked by CSLS instead of
cosine, against 8,192 candidates), ``entropic_ot`` (barycentres of an entropic transport plan with uniform
marginals, ε = 0.05, both directions), ``mutual_csls_pairs`` (MUSE's refinement: Procrustes on mutual CSLS nearest
neighbours) and ``mutual_csls_means`` (those pairs, each side replaced by refine-1's neighbour mean),
``symmetric_smoothing`` (both sides of every pair replaced by the mean of their 50 neighbours in their own space,
self excluded).

With ``--perturb T,...`` the library's rule also starts from the oracle blended with weight T towards a fixed random
orthogonal map (projected back to orthogonal): how good a start must be for refine-1 to climb rather than stall.

With ``--fraction F`` only a share of each training half is kept, which shows how a rule's fixed point depends on
the number of unpaired rows (``--rules neighbour_mean --rounds 40`` in ``BENCHMARKS.md``).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/align_score_study.py --pool tweets --target paraphrase-l3 --from-fit
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from scipy.stats import spearmanr

sys.path.insert(0, str(Path(__file__).parent))

from align_pools import SOURCE_MODEL, load_centered
from subspaces.align import MiniVec2Vec
from subspaces.align.diagnostics import bidirectional_nn_similarity
from subspaces.align.metrics import retrieval_metrics
from subspaces.align.neighbours import NeighbourIndex, mean_of_rows
from subspaces.align.preprocess import normalize_rows
from subspaces.align.procrustes import nearest_orthogonal, procrustes
from subspaces.align.refine import NeighbourStep, blend
from subspaces.io import save_json

RESULTS = Path(__file__).parent / "results"
RULES = (
    "neighbour_mean",
    "icp",
    "csls_neighbour_mean",
    "entropic_ot",
    "mutual_csls_pairs",
    "mutual_csls_means",
    "symmetric_smoothing",
)


def csls(sims: np.ndarray, k: int = 10) -> np.ndarray:
    """CSLS scores of a cross-similarity matrix: 2 cos - mean of each row's and each column's k best."""
    rows = np.sort(sims, axis=1)[:, -k:].mean(1)
    cols = np.sort(sims, axis=0)[-k:, :].mean(0)
    return 2 * sims - rows[:, None] - cols[None, :]


def label_free_statistics(matrix, probe_a, probe_b, index_a, index_b) -> dict[str, float]:
    mapped_a = normalize_rows(probe_a @ matrix)
    sims = mapped_a @ probe_b.T
    scaled = csls(sims)
    nn_ab, nn_ba = sims.argmax(1), sims.argmax(0)
    cs_ab, cs_ba = scaled.argmax(1), scaled.argmax(0)
    union = np.concatenate([mapped_a, probe_b])
    side = np.r_[np.zeros(len(mapped_a)), np.ones(len(probe_b))]
    neighbours = NeighbourIndex(union).search(union, 11)[1][:, 1:]
    rows = np.arange(len(sims))
    return {
        "nn_similarity": bidirectional_nn_similarity(probe_a, probe_b, index_a, index_b, matrix),
        "csls": float((scaled.max(1).mean() + scaled.max(0).mean()) / 2),
        "mutual_nn": float((nn_ba[nn_ab] == rows).mean()),
        "mutual_csls": float((cs_ba[cs_ab] == rows).mean()),
        "coverage": float((len(np.unique(nn_ab)) + len(np.unique(nn_ba))) / (2 * len(sims))),
        "mixing": float((side[neighbours] != side[:, None]).mean()),
    }


class Rules:
    """One refinement step per rule, on fresh samples of both training halves."""

    def __init__(self, a, b, sample: int, k: int = 50) -> None:
        self.a, self.b, self.sample, self.k = a, b, sample, k
        self.index_a, self.index_b = NeighbourIndex(a), NeighbourIndex(b)

    def _means(self, index, values, queries, k, drop_self=False):
        _, ids = index.search(queries, k + 1 if drop_self else k)
        return normalize_rows(mean_of_rows(values, ids[:, 1:] if drop_self else ids))

    def step(self, rule: str, matrix: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        a, b = self.a, self.b
        if rule in ("neighbour_mean", "icp"):  # the library's own refine-1 step
            return NeighbourStep(
                a,
                b,
                rng,
                target_index=self.index_b,
                source_index=self.index_a,
                sample_size=self.sample,
                k=self.k if rule == "neighbour_mean" else 1,
                bidirectional=True,
            )(matrix)
        sa = a[rng.choice(len(a), min(self.sample, len(a)), replace=False)]
        sb = b[rng.choice(len(b), min(self.sample, len(b)), replace=False)]
        if rule == "csls_neighbour_mean":
            cand_a = a[rng.choice(len(a), min(8192, len(a)), replace=False)]
            cand_b = b[rng.choice(len(b), min(8192, len(b)), replace=False)]
            ids_b = np.argsort(-csls(normalize_rows(sa @ matrix) @ cand_b.T), 1)[:, :50]
            ids_a = np.argsort(-csls(normalize_rows(sb @ matrix.T) @ cand_a.T), 1)[:, :50]
            src = np.concatenate([sa, normalize_rows(mean_of_rows(cand_a, ids_a))])
            tgt = np.concatenate([normalize_rows(mean_of_rows(cand_b, ids_b)), sb])
        elif rule == "entropic_ot":
            sims = normalize_rows(sa @ matrix) @ sb.T
            kernel = np.exp((sims - sims.max()) / 0.05).astype(np.float64)
            u, v = np.ones(len(sims)), np.ones(sims.shape[1])
            for _ in range(100):
                u = 1.0 / (kernel @ v)
                v = 1.0 / (kernel.T @ u)
            plan = u[:, None] * kernel * v[None, :]
            src = np.concatenate([sa, normalize_rows(plan.T @ sa).astype(np.float32)])
            tgt = np.concatenate([normalize_rows(plan @ sb).astype(np.float32), sb])
        elif rule in ("mutual_csls_pairs", "mutual_csls_means"):
            scaled = csls(normalize_rows(sa @ matrix) @ sb.T)
            forward, backward = scaled.argmax(1), scaled.argmax(0)
            keep = np.flatnonzero(backward[forward] == np.arange(len(scaled)))
            pa, pb = sa[keep], sb[forward[keep]]
            if rule == "mutual_csls_pairs":
                src, tgt = pa, pb
            else:
                src = np.concatenate([pa, self._means(self.index_a, a, normalize_rows(pb @ matrix.T), 50)])
                tgt = np.concatenate([self._means(self.index_b, b, normalize_rows(pa @ matrix), 50), pb])
        elif rule == "symmetric_smoothing":
            src = np.concatenate(
                [
                    self._means(self.index_a, a, sa, 50, True),
                    self._means(self.index_a, a, normalize_rows(sb @ matrix.T), 50),
                ]
            )
            tgt = np.concatenate(
                [
                    self._means(self.index_b, b, normalize_rows(sa @ matrix), 50),
                    self._means(self.index_b, b, sb, 50, True),
                ]
            )
        else:
            raise ValueError(rule)
        return blend(matrix, procrustes(src, tgt), 0.5, True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pool", choices=["wordnet", "tweets"], required=True)
    parser.add_argument("--size", type=int, default=40_000)
    parser.add_argument("--target", default="paraphrase-l3")
    parser.add_argument("--rules", default=",".join(RULES))
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--sample", type=int, default=4096)
    parser.add_argument("--probe", type=int, default=4096)
    parser.add_argument("--k", type=int, default=50, help="neighbours averaged by the neighbour_mean rule")
    parser.add_argument(
        "--fraction",
        type=float,
        default=1.0,
        help="keep this share of each training half (how the fixed points depend on the unpaired "
        "data); the rows stay centred on the full halves' means",
    )
    parser.add_argument("--from-fit", action="store_true", help="also refine the default MiniVec2Vec fit (seed 0)")
    parser.add_argument(
        "--perturb",
        default="",
        help="comma-separated t in (0, 1]: also start the library's rule from the oracle blended "
        "with weight t towards a fixed random orthogonal map (how wide refine-1's basin is)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--output", type=Path, default=None, help="default: results/align_score_study_<pool>_<target>.json"
    )
    args = parser.parse_args()
    unknown = set(args.rules.split(",")) - set(RULES)
    if unknown:
        parser.error(f"unknown rules {sorted(unknown)}; choose from {', '.join(RULES)}")
    if not 0 < args.fraction <= 1:
        parser.error(f"--fraction must be in (0, 1], got {args.fraction}")
    if args.k < 1:
        parser.error(f"--k must be at least 1, got {args.k}")
    try:
        perturb = [float(t) for t in args.perturb.split(",") if t.strip()]
    except ValueError:
        parser.error(f"--perturb takes comma-separated numbers, got {args.perturb!r}")
    perturb = list(dict.fromkeys(perturb))  # a repeated value would only repeat its start
    if any(not 0 < t <= 1 for t in perturb):
        parser.error(f"--perturb values must lie in (0, 1], got {perturb}")
    if args.fraction < 1 and args.from_fit:
        parser.error("--from-fit fits on the whole halves; run it without --fraction")

    pool = load_centered(args.pool, args.size, args.target)
    a, b, x, y, raw = pool.a, pool.b, pool.x, pool.y, pool.raw
    if args.fraction < 1:
        keep_rng = np.random.default_rng([args.seed, 2000])
        a = a[np.sort(keep_rng.choice(len(a), int(args.fraction * len(a)), replace=False))]
        b = b[np.sort(keep_rng.choice(len(b), int(args.fraction * len(b)), replace=False))]
        needed = max(50, args.k)  # the rules average 50 (neighbour_mean: k) neighbours
        if min(len(a), len(b)) <= needed:
            parser.error(
                f"--fraction {args.fraction} keeps {min(len(a), len(b))} rows of a half; more than {needed} are needed"
            )
    probe_rng = np.random.default_rng([args.seed, 1000])  # apart from the rules' streams
    probe_a = a[probe_rng.choice(len(a), min(args.probe, len(a)), replace=False)]
    probe_b = b[probe_rng.choice(len(b), min(args.probe, len(b)), replace=False)]
    rules = Rules(a, b, args.sample, args.k)

    def record(name: str, matrix: np.ndarray) -> dict:
        row = {
            "map": name,
            "top1": retrieval_metrics(normalize_rows(x @ matrix), y, pool_size=len(x))["top1"],
            **label_free_statistics(matrix, probe_a, probe_b, rules.index_a, rules.index_b),
        }
        print({k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()}, flush=True)
        return row

    oracle = procrustes(x, y)
    rows = [record("oracle", oracle)]
    starts = {"oracle": (oracle, args.rules.split(","))}
    if args.from_fit:
        fitted = MiniVec2Vec(random_state=args.seed).fit(raw[f"{SOURCE_MODEL}.train"], raw[f"{args.target}.train"])
        # the fit centres on the same training means, so its matrix acts on the same rows
        rows.append(record("fit", fitted.matrix_))
        starts["fit"] = (fitted.matrix_, ["neighbour_mean"])
    if perturb:
        # A random (semi-)orthogonal map of the oracle's shape, whichever side is larger.
        side = max(oracle.shape)
        q, _ = np.linalg.qr(np.random.default_rng([args.seed, 3000]).normal(size=(side, side)))
        random_map = q[: oracle.shape[0], : oracle.shape[1]].astype(np.float32)
        for t in perturb:
            start = nearest_orthogonal((1 - t) * oracle + t * random_map)
            rows.append(record(f"oracle~{t}", start))
            starts[f"oracle~{t}"] = (start, ["neighbour_mean"])
    seconds = {}  # refinement steps only, not the scoring of the kept maps
    for start, (matrix0, names) in starts.items():
        for rule in names:
            rng = np.random.default_rng([args.seed, RULES.index(rule)])  # a rule's samples do not depend on the others
            matrix, spent = matrix0, 0.0
            for r in range(1, args.rounds + 1):
                started = time.perf_counter()
                matrix = rules.step(rule, matrix, rng)
                spent += time.perf_counter() - started
                if r % 5 == 0:
                    rows.append(record(f"{start}+{rule}@{r}", matrix))
            seconds[f"{start}+{rule}"] = spent
    statistics = [k for k in rows[0] if k not in ("map", "top1")]
    correlation = {k: float(spearmanr([r["top1"] for r in rows], [r[k] for r in rows]).statistic) for k in statistics}
    print("spearman vs top1:", {k: round(v, 3) for k, v in correlation.items()})
    output = args.output or RESULTS / f"align_score_study_{args.pool}_{args.target}.json"
    save_json(
        output,
        {
            "pool": args.pool,
            "size": args.size,
            "source": SOURCE_MODEL,
            "target": args.target,
            "n_source_train": len(a),
            "n_target_train": len(b),
            "rounds": args.rounds,
            "sample": args.sample,
            "k": args.k,
            "probe": args.probe,
            "seed": args.seed,
            "rules": args.rules.split(","),
            "fraction": args.fraction,
            "from_fit": args.from_fit,
            "perturb": perturb,
            "rows": rows,
            "spearman_vs_top1": correlation,
            "rule_step_seconds": seconds,
        },
    )
    print(f"wrote {output}")


if __name__ == "__main__":
    main()
