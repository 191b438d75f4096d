"""Fixed work for timing two versions of the aligner's code: 30 bidirectional refine-1 steps, 4 structural rounds'
k-means (``structure_step``), 10 label-free scores from one saved map, and one default anchor stage, on one pool.
A whole fit is no A/B when a change moves bits: the two versions then take different paths (restarts, search
passes, rounds), as the eleventh session found.

    for tree in /tmp/before/src /tmp/after/src; do
      PYTHONPATH=$tree OMP_NUM_THREADS=2 .venv/bin/python benchmarks/align_fixed_work.py POOL_FOLDER MAP.npy
    done

POOL_FOLDER holds ``minilm-l6.train.npy`` and ``paraphrase-l3.train.npy`` (an ``align_protocol.py`` pool); MAP.npy a
fitted map on the aligner's preprocessing (``align_profile.py --save``). No numpy BLAS call may run before the timed
work: its thread pool would spin beside torch's (steps were 2.3x slower when a QR ran first).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

from subspaces.align.anchors import matched_anchors
from subspaces.align.diagnostics import bidirectional_nn_similarity
from subspaces.align.neighbours import NeighbourIndex
from subspaces.align.preprocess import center_normalize
from subspaces.align.refine import NeighbourStep, structure_step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("pool", type=Path)
    parser.add_argument("map", type=Path)
    args = parser.parse_args()
    a = np.load(args.pool / "minilm-l6.train.npy")
    b = np.load(args.pool / "paraphrase-l3.train.npy")
    a, b = center_normalize(a, a.mean(axis=0)), center_normalize(b, b.mean(axis=0))
    matrix = np.load(args.map)
    with threadpool_limits(limits=1, user_api="blas"):  # as fit does
        index_a, index_b = NeighbourIndex(a, precision="auto"), NeighbourIndex(b, precision="auto")
        step = NeighbourStep(a, b, np.random.default_rng(1), index_b, index_a, bidirectional=True)
        start = time.perf_counter()
        for _ in range(30):
            matrix = step(matrix)
        steps = time.perf_counter() - start
        start = time.perf_counter()
        for seed in range(4):
            rng = np.random.default_rng(seed)
            structure_step(
                a, b, matrix, n_clusters=50, n_runs=4, sample_size=10_000, kmeans_iter=25, rng=rng, precision="auto"
            )
        rounds = time.perf_counter() - start
        start = time.perf_counter()
        score = [bidirectional_nn_similarity(a[:2048], b[:2048], index_a, index_b, matrix) for _ in range(10)]
        scores = time.perf_counter() - start
        start = time.perf_counter()
        matched_anchors(a, b, rng=np.random.default_rng(0), precision="auto")  # the default anchor stage
        anchors = time.perf_counter() - start
    print(
        f"30 refine-1 steps {steps:.2f} s; 4 structural k-means rounds {rounds:.2f} s; 10 scores {scores:.2f} s "
        f"({score[0]:.4f}); anchor stage {anchors:.2f} s"
    )


if __name__ == "__main__":
    main()
