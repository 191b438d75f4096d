"""How well does an orthogonal map fitted on *other* true pairs score on the held-out pairs? (analysis with labels)

The issue's oracle is Procrustes fitted on the 8,192 scored pairs themselves. Where the two spaces agree less, it
fits ``d_a x d_b`` parameters to those very rows and overfits, so it can stand above what any map fitted without
them reaches. Here the source model's training half of a pool (built by ``align_pools.py``) is also embedded by the
target model (cached beside the pool as ``<target>.source_train.npy``), giving up to ~36k true pairs disjoint from
the held-out ones; Procrustes fitted on the first N of them is scored on the held-out pairs, as is a general
least-squares linear map (is the orthogonal class the limit?). Both spaces are centred on their training halves'
means, as the aligner sees them.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/align_supervised_ceiling.py --pool wordnet --size 80000 \
        --target wordllama
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

from align_pools import SOURCE_MODEL, add_pool_arguments, load_centered, pool_folder, pool_texts, split
from subspaces.align.metrics import cross_fitted_oracle, oracle_procrustes, retrieval_metrics
from subspaces.align.preprocess import center_normalize, normalize_rows
from subspaces.align.procrustes import procrustes
from subspaces.io import save_json, save_npy

RESULTS = Path(__file__).parent / "results"


def target_on_source_half(pool: str, size: int, seed: int, n_eval: int, target: str) -> np.ndarray:
    """The target model's embeddings of the source model's training texts (embedded once, cached)."""
    path = pool_folder(pool, size, seed) / f"{target}.source_train.npy"
    if not path.is_file():
        from subspaces.models.encoder import encode, load_encoder

        texts = pool_texts(pool, size, seed)[split(size, n_eval).source_train]
        emb = encode(load_encoder(target), texts, batch_size=64, show_progress=True)
        save_npy(path, emb.astype(np.float32))
    return np.load(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_pool_arguments(parser)
    parser.add_argument("--target", required=True)
    parser.add_argument(
        "--pairs",
        default="1024,2048,4096,8192,16384,all",
        help="numbers of training pairs to fit on (more than the pool holds are skipped)",
    )
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()

    pool = load_centered(args.pool, args.size, args.target, args.seed)
    a = pool.a  # source model, source half, centred on its own mean
    b = center_normalize(
        target_on_source_half(args.pool, args.size, args.seed, args.n_eval, args.target),
        pool.raw[f"{args.target}.train"].mean(0),
    )  # target model, same texts, target half's mean
    if len(pool.x) != args.n_eval:
        parser.error(f"the cached pool holds {len(pool.x)} held-out pairs, not --n-eval {args.n_eval}")
    sizes = [len(a) if s == "all" else int(s) for s in args.pairs.split(",")]
    if any(n < a.shape[1] for n in sizes):
        parser.error(f"--pairs below the dimension ({a.shape[1]}) leave Procrustes underdetermined")
    skipped = [n for n in sizes if n > len(a)]
    sizes = sorted({n for n in sizes if n <= len(a)})
    if skipped:
        print(f"skipping --pairs {skipped}: the pool has only {len(a)} training rows", flush=True)

    def score(matrix: np.ndarray) -> dict:
        return retrieval_metrics(normalize_rows(pool.x @ matrix), pool.y, pool_size=len(pool.x))

    rows = []
    for n in sizes:
        start = time.perf_counter()
        orthogonal = procrustes(a[:n], b[:n])
        linear = np.linalg.lstsq(a[:n].astype(np.float64), b[:n].astype(np.float64), rcond=None)[0].astype(np.float32)
        rows.append(
            {
                "pairs": n,
                "procrustes": score(orthogonal),
                "least_squares": score(linear),
                "seconds": time.perf_counter() - start,
            }
        )
        print(
            f"{n:>6} pairs: Procrustes top-1 {rows[-1]['procrustes']['top1']:.4f}, "
            f"least squares {rows[-1]['least_squares']['top1']:.4f}",
            flush=True,
        )
    report = {
        "pool": args.pool,
        "size": args.size,
        "seed": args.seed,
        "source": SOURCE_MODEL,
        "target": args.target,
        "n_eval": len(pool.x),
        "n_train_pairs": len(a),
        "oracle_in_sample": score(oracle_procrustes(pool.x, pool.y)),
        "oracle_cross_fitted": retrieval_metrics(cross_fitted_oracle(pool.x, pool.y), pool.y, pool_size=len(pool.x)),
        "fitted_on_other_pairs": rows,
        "machine": platform.platform(),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    print(
        f"in-sample oracle {report['oracle_in_sample']['top1']:.4f}, "
        f"cross-fitted {report['oracle_cross_fitted']['top1']:.4f}"
    )
    output = args.output or RESULTS / f"align_supervised_ceiling_{args.pool}_{args.size // 1000}k_{args.target}.json"
    save_json(output, report)
    print(f"-> {output}")


if __name__ == "__main__":
    main()
