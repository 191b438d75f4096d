"""Where ``MiniVec2Vec.fit`` spends its time: per-stage seconds of every pass, and optionally a cProfile summary.

On a synthetic clustered pair (the target a random rotation of the source's distribution plus noise; different
rows on each side, so no pairs), or on two ``.npy`` files:

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/align_profile.py --rows 4000 --dim 128 --profile
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/align_profile.py source.npy target.npy --params '{"n_restarts": 1}'

``--save`` writes the fitted map (``.npy``), so two versions of the code can be compared on the same pool.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import time
import warnings

import numpy as np

from subspaces.align import MiniVec2Vec


def clustered_pair(rows: int, dim: int, clusters: int, noise: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Two unpaired samples of one anisotropic cluster mixture, the second rotated (plus noise) and shifted."""
    rng = np.random.default_rng(seed)
    scale = np.geomspace(4, 0.5, dim)
    centers = rng.normal(size=(clusters, dim)) * scale
    weights = rng.dirichlet(np.full(clusters, 2.0))

    def sample(n: int) -> np.ndarray:
        labels = rng.choice(clusters, n, p=weights)
        return centers[labels] + 0.5 * rng.normal(size=(n, dim)) * scale

    q, r = np.linalg.qr(rng.normal(size=(dim, dim)))
    q *= np.sign(np.diag(r))
    source = sample(rows)
    target = sample(rows) @ q + noise * rng.normal(size=(rows, dim)) + 1.0
    return source.astype(np.float32), target.astype(np.float32)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="*", help="source.npy target.npy (default: a synthetic pair)")
    parser.add_argument("--rows", type=int, default=4000, help="synthetic rows per side")
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--clusters", type=int, default=40)
    parser.add_argument("--noise", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--params", default="{}", help="MiniVec2Vec.from_params JSON overrides")
    parser.add_argument("--profile", action="store_true", help="print cProfile's top 25 by cumulative time")
    parser.add_argument("--save", help="write the fitted matrix here (.npy)")
    args = parser.parse_args()

    if args.files:
        if len(args.files) != 2:
            parser.error("give two files (source.npy target.npy) or none")
        source, target = (np.load(path) for path in args.files)
    else:
        source, target = clustered_pair(args.rows, args.dim, args.clusters, args.noise, args.seed)
    aligner = MiniVec2Vec.from_params(json.loads(args.params) | {"random_state": 0})

    profiler = cProfile.Profile() if args.profile else None
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # convergence warnings are not what this measures
        if profiler is not None:
            profiler.enable()
        aligner.fit(source, target)
        if profiler is not None:
            profiler.disable()
    total = time.perf_counter() - start

    print(f"rows {len(source)} x {source.shape[1]} -> {len(target)} x {target.shape[1]}; fit {total:.2f} s")
    for i, restart in enumerate(aligner.diagnostics_["restarts"]):
        stages = ", ".join(f"{stage} {sec:.2f}" for stage, sec in restart["stage_seconds"].items())
        final = restart["nn_similarity"]["final"]
        swapped = restart["structure_swapped"][-1] if restart["structure_swapped"] else float("nan")
        outcome = f"final score {final:.4f}" if final is not None else "not refined (a later pass converged)"
        print(f"pass {i}: {stages}; last swap share {swapped:.3f}; {outcome}")
    print(f"outside the passes (setup, trivial maps, trust check): {total - _passes(aligner):.2f} s")
    if args.save:
        np.save(args.save, aligner.matrix_)
    if profiler is not None:
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(25)
        print(out.getvalue())


def _passes(aligner: MiniVec2Vec) -> float:
    return sum(sum(r["stage_seconds"].values()) for r in aligner.diagnostics_["restarts"])


if __name__ == "__main__":
    main()
