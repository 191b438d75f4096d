"""Vector-store benchmark: add throughput (one process, and Ray Data on a local runtime), then search latency
(p50/p99) and Recall@10 against exact full-dim search, for exact, ANN (LanceDB IVF-PQ) and funnel search
(a prefix shortlist of --shortlists x k, full re-rank) at several prefixes of the model's coordinates and of the
store's principal axes (--bases), and a migration.

A store of the first N distinct WordNet sentences (definitions, then examples) is built in a temporary folder
(or --store DIR); the queries are Q other WordNet sentences, encoded once, so the latencies are search alone
(one query at a time, as a user's request); the encoding rate is reported apart. --ray-n texts are added again
into a second store through Ray Data (--actors actors on a local runtime of that many CPUs), for the throughput
comparison. A migration to --migrate-to MODEL is timed and measured on the store (recall fraction vs a
re-embedded held-out sample, and its time against re-embedding every row at the new model's measured rate).

    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/store_bench.py --n 100000 --model minilm-l6 --migrate-to paraphrase-l3
    .venv/bin/python benchmarks/store_bench.py --smoke   # seconds: 2,000 texts, 50 queries, Ray on 500, no migration
    .venv/bin/python benchmarks/store_bench.py table     # BENCHMARKS.md's rows from the JSON
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).parent / "results" / "store_bench.json"


def latencies(store, vectors: np.ndarray, k: int, **options) -> tuple[dict[str, float], list[list[str]]]:
    store.search_vectors(vectors[:1], k, **options)  # builds the in-memory index of this setting once
    times, ids = [], []
    for vector in vectors:
        start = time.perf_counter()
        hit = store.search_vectors(vector[None], k, **options)[0]
        times.append(time.perf_counter() - start)
        ids.append(hit["ids"])
    ms = np.asarray(times) * 1e3
    return {
        "p50_ms": float(np.percentile(ms, 50)),
        "p99_ms": float(np.percentile(ms, 99)),
        "qps": float(1e3 / ms.mean()),
    }, ids


def recall(found: list[list[str]], truth: list[list[str]]) -> float:
    return float(np.mean([len(set(a) & set(b)) / len(b) for a, b in zip(found, truth, strict=True)]))


def ray_add(texts: list[str], model: str, folder: Path, actors: int) -> dict:
    """Texts/s of an add through Ray Data on a local runtime, start-up (runtime and actors) included and apart."""
    from subspaces.store import Store, scaleout

    start = time.perf_counter()
    scaleout.start("local", num_cpus=actors)
    startup_s = time.perf_counter() - start
    store = Store.create(folder, model)
    start = time.perf_counter()
    store.add(texts, ids=range(len(texts)), ray=True, actors=actors)
    add_s = time.perf_counter() - start
    return {
        "n": len(texts),
        "actors": actors,
        "runtime_start_seconds": round(startup_s, 2),
        "seconds": round(add_s, 2),  # includes the actors' start and model load
        "texts_per_s": round(len(texts) / add_s, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=100_000, help="store size (WordNet sentences)")
    parser.add_argument("--queries", type=int, default=1_000)
    parser.add_argument("--model", default="minilm-l6")
    parser.add_argument("--dims", default="32,64,128", help="funnel prefixes")
    parser.add_argument("--shortlists", default="5,10,20", help="funnel shortlists, multiples of k")
    parser.add_argument("--bases", default="model,pca", help="funnel prefix bases (see Store.search basis=)")
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--nprobes", type=int, default=20)
    parser.add_argument("--migrate-to", default=None, help="also time a migration to this model")
    parser.add_argument("--pairs", type=int, default=None, help="migration sample (default: the store's)")
    parser.add_argument("--anchors", default="paired", choices=("paired", "unpaired"))
    parser.add_argument("--store", type=Path, default=None, help="build the store here (default: a temporary folder)")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--ray-n", type=int, default=20_000, help="texts added through Ray Data (0: skip)")
    parser.add_argument("--actors", type=int, default=2, help="Ray actors (and local runtime CPUs)")
    parser.add_argument(
        "--search-only", action="store_true", help="re-time the searches on --store (an earlier run's), keep the rest"
    )
    parser.add_argument("--smoke", action="store_true", help="a quick run of every path on small inputs")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    if args.smoke:
        args.n, args.queries, args.dims, args.ray_n, args.migrate_to = 2_000, 50, "32,128", 500, None
        if args.out == RESULTS:
            args.out = RESULTS.with_name("store_bench_smoke.json")

    from subspaces.config import set_threads
    from subspaces.models.encoder import encode
    from subspaces.store import Store
    from subspaces.store.demo import wordnet_sentences

    threads = set_threads(args.threads)
    texts = wordnet_sentences(args.n + args.queries)
    corpus, queries = texts[: args.n], texts[args.n : args.n + args.queries]
    if len(queries) < args.queries:
        raise SystemExit(f"only {len(texts)} WordNet sentences: lower --n or --queries")
    folder = args.store or Path(tempfile.mkdtemp(prefix="store-bench-")) / "store"
    if args.search_only:  # the searches again on the store an earlier run built; its other figures are kept
        if args.store is None or not args.out.is_file():
            raise SystemExit("--search-only needs --store DIR of an earlier run and that run's --out JSON")
        store = Store.open(folder)
        if store.count("0") != len(corpus):
            raise SystemExit(f"{folder} holds {store.count('0')} rows, not --n {len(corpus)}")
        results = json.loads(args.out.read_text()) | {"search": {}, "threads": threads}
        results["search_remeasured"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        args.ray_n, args.migrate_to = 0, None
        query_vectors = encode(store.model("0"), queries, normalize=True)
    else:
        store = Store.create(folder, args.model)
        start = time.perf_counter()
        store.add(corpus, ids=range(len(corpus)), progress=True)
        add_s = time.perf_counter() - start
        start = time.perf_counter()
        query_vectors = encode(store.model(), queries, normalize=True)
        encode_q_s = time.perf_counter() - start
        results = {
            "n": len(corpus),
            "queries": len(queries),
            "model": args.model,
            "threads": threads,
            "machine": platform.processor() or platform.machine(),
            "add": {"seconds": round(add_s, 2), "texts_per_s": round(len(corpus) / add_s, 1)},
            "query_encoding_ms": round(1e3 * encode_q_s / len(queries), 3),
            "search": {},
        }
    timing, truth = latencies(store, query_vectors, args.k)
    results["search"]["exact"] = timing | {"recall@10": 1.0}
    for basis in args.bases.split(","):
        for dims in (int(d) for d in args.dims.split(",")):
            for shortlist in (int(s) for s in args.shortlists.split(",")):
                timing, found = latencies(store, query_vectors, args.k, dims=dims, shortlist=shortlist, basis=basis)
                results["search"][f"funnel_{basis}_{dims}_x{shortlist}"] = timing | {"recall@10": recall(found, truth)}
            timing, found = latencies(store, query_vectors, args.k, dims=dims, rerank="none", basis=basis)
            results["search"][f"prefix_{basis}_{dims}"] = timing | {"recall@10": recall(found, truth)}
    if len(corpus) >= 256:
        start = time.perf_counter()
        built = store.index()
        timing, found = latencies(store, query_vectors, args.k, ann=True, nprobes=args.nprobes)
        results["search"]["ann_ivfpq"] = (
            timing | {"recall@10": recall(found, truth), "index_seconds": round(time.perf_counter() - start, 2)} | built
        )
    exact_qps = results["search"]["exact"]["qps"]
    for row in results["search"].values():
        row["speedup_vs_exact"] = round(row["qps"] / exact_qps, 2)
    if args.ray_n:
        results["add_ray_local"] = ray_add(corpus[: args.ray_n], args.model, folder.parent / "ray-store", args.actors)
    if args.migrate_to:
        pairs = min(args.pairs, len(corpus) // 2) if args.pairs else None
        results["migration"] = store.migrate(args.migrate_to, pairs=pairs, anchors=args.anchors, progress=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


def table(path: Path = RESULTS) -> None:
    """The Markdown tables of BENCHMARKS.md from the JSON of a run."""
    results = json.loads(path.read_text())
    print("| search | p50 ms | p99 ms | queries/s | × exact | Recall@10 |\n|---|---:|---:|---:|---:|---:|")
    for name, row in results["search"].items():
        print(
            f"| {name} | {row['p50_ms']:.2f} | {row['p99_ms']:.2f} | {row['qps']:.0f} | "
            f"{row['speedup_vs_exact']:.2f} | {row['recall@10']:.3f} |"
        )
    print(f"\nadd: {results['add']['texts_per_s']} texts/s ({results['add']['seconds']} s)")
    if "add_ray_local" in results:
        ray = results["add_ray_local"]
        print(f"add --ray: {ray['texts_per_s']} texts/s on {ray['n']} texts, start {ray['runtime_start_seconds']} s")
    if "migration" in results:
        m = results["migration"]
        ratio = m["migrate_seconds"] / m["reembed_seconds_estimate"]
        print(f"migration: {json.dumps(m)}\n  time / re-embedding: {ratio:.3f}")


if __name__ == "__main__":
    import sys

    if sys.argv[1:2] == ["table"]:
        table(Path(sys.argv[2]) if len(sys.argv) > 2 else RESULTS)
    else:
        main()
