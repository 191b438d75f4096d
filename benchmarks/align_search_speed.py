"""Micro-benchmark behind the aligner's search defaults: exact vs IVF faiss search (time, recall), neighbour means.

On a pool built by ``align_pools.py`` (centred, normalised ``minilm-l6`` training rows as queries mapped by a
random rotation, ``paraphrase-l3`` training rows as the base), one thread:

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/align_search_speed.py --pool wordnet --size 40000
"""

from __future__ import annotations

import argparse
import sys
import time
from functools import partial
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

from align_pools import SOURCE_MODEL, pool_folder
from subspaces.align.neighbours import NeighbourIndex, mean_of_rows
from subspaces.align.preprocess import center_normalize, normalize_rows


def seconds(fn, repeats: int = 3) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pool", choices=["wordnet", "tweets"], default="wordnet")
    parser.add_argument("--size", type=int, default=40_000)
    parser.add_argument("--target", default="paraphrase-l3")
    args = parser.parse_args()
    folder = pool_folder(args.pool, args.size, 0)
    a = np.load(folder / f"{SOURCE_MODEL}.train.npy")
    b = np.load(folder / f"{args.target}.train.npy")
    a, b = center_normalize(a, a.mean(0)), center_normalize(b, b.mean(0))
    rng = np.random.default_rng(0)
    rotation = np.linalg.qr(rng.standard_normal((a.shape[1], b.shape[1])))[0].astype(np.float32)
    print(f"base {b.shape[0]} x {b.shape[1]}")
    indexes = {
        "exact": NeighbourIndex(b),
        "ivf 64x8": NeighbourIndex(b, n_lists=64, n_probe=8),
        "ivf 128x8": NeighbourIndex(b, n_lists=128, n_probe=8),
        "ivf 128x4": NeighbourIndex(b, n_lists=128, n_probe=4),
    }
    for n in (4096, 2048):
        queries = normalize_rows(a[:n] @ rotation)
        for k in (1, 50):
            row = {name: seconds(partial(idx.search, queries, k)) for name, idx in indexes.items()}
            print(f"{n} queries, k={k}: " + ", ".join(f"{name} {s:.3f} s" for name, s in row.items()))
    queries = normalize_rows(a[:4096] @ rotation)
    _, ids = indexes["exact"].search(queries, 50)
    for name, idx in indexes.items():  # how many of the 50 true neighbours each IVF index returns
        if name == "exact":
            continue
        _, found = idx.search(queries, 50)
        recall = np.mean([len(np.intersect1d(f, t)) / 50 for f, t in zip(found, ids, strict=True)])
        print(f"{name}: recall of the 50 nearest {recall:.2f}")
    fancy = seconds(lambda: b[ids].mean(axis=1))
    summed = seconds(lambda: mean_of_rows(b, ids))
    print(f"neighbour means of 4096 x 50 rows: values[ids].mean(1) {fancy:.3f} s, rank by rank {summed:.3f} s")


if __name__ == "__main__":
    main()
