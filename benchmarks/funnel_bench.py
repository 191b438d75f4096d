"""Funnel search (prefix shortlist, full re-rank) vs full-dimension exact search: Recall@10 and queries/s.

Corpus: ``--corpus`` WordNet sentences (100k by default) encoded with ``minilm-l6`` (cached under
``$SUBSPACES_CACHE/bench-vectors``); queries: ``--queries`` other WordNet sentences (disjoint from the corpus).
Grid: shortlist dims {16, 32, 64, 128} x shortlist sizes {2, 5, 10, 20} x k, for

- ``raw``: the model's vectors as they are (float prefix scan);
- ``model_int8``, ``pca_flat``, ``pca_int8``: the same vectors, the shortlist read from the model's own
  coordinates or the corpus's principal axes (``subspaces.vectors.principal_axes``; an orthogonal rotation, so the full
  re-rank is unchanged), scanned as floats or 8-bit codes (as the store's funnel does from 50k rows);
- ``adapter``: the vectors after a :class:`subspaces.adapt.MatryoshkaAdapter` fitted on the corpus vectors only.

Queries are searched as one batch (faiss's matrix-product path): the exact search is at its most efficient
there, so the funnel's speed-up is lower than one query at a time (the store's latencies, ``experiments/store.toml``).

Recall@10 is against full-dimension exact search on the **raw** vectors (the answer a user wants), and for the
adapter arm also against exact search on the adapted vectors. The exact search's queries/s is measured in the
same run with the same threads (faiss flat inner product; best of ``--repeats``); the funnel's includes the
shortlist search and the re-rank, not the index build. JSON to ``benchmarks/results/matryoshka/funnel.json``.

    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/funnel_bench.py
    .venv/bin/python benchmarks/funnel_bench.py --smoke          # seconds once cached; writes under runs/

Full run: encoding 101k texts (~25 min at the ~65 texts/s measured on this shared 2-core machine; cached), the
adapter fit ~2-4 min on 100k x 384, the grid well under a minute.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from matryoshka_adapter import cached_vectors

RESULTS = Path(__file__).resolve().parent / "results" / "matryoshka" / "funnel.json"
SMOKE_OUT = Path(__file__).resolve().parents[1] / "runs" / "funnel_bench_smoke.json"


def best_time(fn, repeats: int) -> tuple[float, object]:
    best, result = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def recall(rows: np.ndarray, truth: np.ndarray) -> float:
    k = truth.shape[1]
    return float(np.mean([len(set(a) & set(b)) / k for a, b in zip(rows, truth, strict=True)]))


def grid(
    corpus: np.ndarray,
    queries: np.ndarray,
    truths: dict[str, np.ndarray],
    args,
    basis: str = "model",
    scan: str = "flat",
) -> dict:
    """Exact search's qps, then every (dims, factor) cell's qps and Recall@k against each truth. ``basis``: the
    prefix of the vectors' own coordinates or of the corpus's principal axes; ``scan``: the shortlist index reads
    float or 8-bit prefixes (the store's funnel from 50k rows)."""
    from subspaces.store.search import prefix_rows, unit_prefix
    from subspaces.topk import exact, flat_index, funnel, int8_index
    from subspaces.vectors import principal_axes

    corpus, queries = unit_prefix(corpus), unit_prefix(queries)
    full = flat_index(corpus)
    exact(full, queries, args.k)  # warm-up: the first search of a process pays for faiss's and BLAS's set-up
    seconds, (_, own_truth) = best_time(lambda: exact(full, queries, args.k), args.repeats)
    result = {"basis": basis, "scan": scan, "exact": {"qps": len(queries) / seconds}, "funnel": []}
    truths = {**truths, "self": own_truth}
    axes = principal_axes(corpus) if basis == "pca" else None
    build = int8_index if scan == "int8" else flat_index
    for dims in args.dims:
        index = build(prefix_rows(corpus, dims, axes))
        prefix_queries = prefix_rows(queries, dims, axes)
        for factor in args.factors:
            shortlist = factor * args.k

            def search(index=index, shortlist=shortlist, prefix_queries=prefix_queries):
                return funnel(index, corpus, queries, args.k, shortlist, prefix_queries=prefix_queries)

            seconds, (_, rows) = best_time(search, args.repeats)
            cell = {"dims": dims, "shortlist": shortlist, "factor": factor, "qps": len(queries) / seconds}
            cell["speedup"] = cell["qps"] / result["exact"]["qps"]
            cell |= {f"recall@{args.k}_vs_{name}": recall(rows, truth) for name, truth in truths.items()}
            result["funnel"].append(cell)
            print(
                f"dims {dims:4d} shortlist {shortlist:4d}: "
                + ", ".join(f"{k} {v:.4f}" for k, v in cell.items() if k.startswith("recall"))
                + f", {cell['qps']:.0f} q/s ({cell['speedup']:.1f}x exact)"
            )
    return result


def main() -> None:
    from subspaces.adapt import MatryoshkaAdapter
    from subspaces.config import set_threads
    from subspaces.data.text import wordnet_sentences
    from subspaces.io import save_json
    from subspaces.store.search import unit_prefix
    from subspaces.topk import exact, flat_index

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="minilm-l6")
    parser.add_argument("--corpus", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=1_000)
    parser.add_argument("-k", type=int, default=10)
    parser.add_argument("--dims", default="16,32,64,128")
    parser.add_argument("--factors", default="2,5,10,20")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--adapter-epochs", type=int, default=20)
    parser.add_argument("--no-adapter", action="store_true", help="Only the raw vectors.")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--smoke", action="store_true", help="2,000-row corpus, 50 queries, 2 adapter epochs.")
    args = parser.parse_args()
    if args.smoke:
        args.corpus, args.queries, args.adapter_epochs, args.repeats = 2_000, 50, 2, 1
    args.out = args.out or (SMOKE_OUT if args.smoke else RESULTS)
    args.dims = [int(d) for d in args.dims.split(",")]
    args.factors = [int(f) for f in args.factors.split(",")]
    threads = set_threads(args.threads)

    texts = wordnet_sentences()
    order = np.random.default_rng(args.seed).permutation(len(texts))
    corpus_texts = [texts[i] for i in order[: args.corpus]]
    query_texts = [texts[i] for i in order[args.corpus : args.corpus + args.queries]]
    corpus, queries = cached_vectors(args.model, corpus_texts), cached_vectors(args.model, query_texts)
    _, raw_truth = exact(flat_index(unit_prefix(corpus)), unit_prefix(queries), args.k)
    report = {
        "model": args.model,
        "corpus": len(corpus),
        "queries": len(queries),
        "k": args.k,
        "threads": threads,
        "repeats": args.repeats,
        "raw": grid(corpus, queries, {"raw_exact": raw_truth}, args),
    }
    for basis, scan in (("model", "int8"), ("pca", "flat"), ("pca", "int8")):
        print(f"-- basis {basis}, {scan} scan")
        report[f"{basis}_{scan}"] = grid(corpus, queries, {"raw_exact": raw_truth}, args, basis=basis, scan=scan)
    if not args.no_adapter:
        adapter = MatryoshkaAdapter(
            dims=args.dims, epochs=args.adapter_epochs, random_state=args.seed, verbose=True
        ).fit(corpus)
        report["adapter"] = {
            "settings": {"dims": args.dims, "epochs": args.adapter_epochs, "random_state": args.seed},
            "fit_seconds": adapter.fit_seconds_,
            **grid(adapter.transform(corpus), adapter.transform(queries), {"raw_exact": raw_truth}, args),
        }
    save_json(args.out, report)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
