"""The vector-store benchmark (BENCHMARKS §9's 100k rows; the result has ``benchmarks/results/store_bench.json``'s
schema): add ``n`` WordNet sentences (one process, then ``ray_n`` through Ray Data), search ``queries`` other ones
one at a time (p50/p99, Recall@10 against exact) in every mode, then migrate to ``migrate_to``."""

from __future__ import annotations

import json
import platform
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from bench.stats import timed


def latencies(store, vectors: np.ndarray, k: int, **options) -> tuple[dict[str, float], list[list[str]]]:
    """p50/p99 ms and queries/s of searching ``vectors`` one at a time (as a user's requests), and each one's ids."""
    store.search_vectors(vectors[:1], k, **options)  # builds the in-memory index of this setting once
    searches = [timed(store.search_vectors, vector[None], k, **options) for vector in vectors]
    ms = np.asarray([seconds for _, seconds in searches]) * 1e3
    p50, p99 = np.percentile(ms, [50, 99])
    timing = {"p50_ms": float(p50), "p99_ms": float(p99), "qps": float(1e3 / ms.mean())}
    return timing, [hits[0]["ids"] for hits, _ in searches]


def recall(found: Iterable[Any], truth: Iterable[Any]) -> float:
    """The mean share of each row of ``truth`` (ids, or positions) that its row of ``found`` holds."""
    return float(np.mean([len(set(a) & set(b)) / len(b) for a, b in zip(found, truth, strict=True)]))


def ray_add(texts: list[str], model: str, folder: Path, actors: int) -> dict:
    """Texts/s of an add through Ray Data on a local runtime, start-up (runtime and actors) included and apart."""
    from subspaces.store import Store, scaleout

    _, startup_s = timed(scaleout.start, "local", num_cpus=actors)
    _, add_s = timed(Store.create(folder, model).add, texts, ids=range(len(texts)), ray=True, actors=actors)
    return {
        "n": len(texts), "actors": actors, "runtime_start_seconds": round(startup_s, 2),
        "seconds": round(add_s, 2),  # includes the actors' start and model load
        "texts_per_s": round(len(texts) / add_s, 1),
    }  # fmt: skip


def run(params: dict[str, Any], seed: int) -> dict[str, Any]:
    """One store built, searched in every setting, added to through Ray, migrated; ``seed`` is unused."""
    from subspaces.config import set_threads
    from subspaces.models.encoder import encode
    from subspaces.store import Store
    from subspaces.store.demo import wordnet_sentences

    p: dict[str, Any] = {
        "n": 100_000, "queries": 1_000, "model": "minilm-l6", "dims": [32, 64, 128], "shortlists": [5, 10, 20],
        "bases": ["model", "pca"], "k": 10, "nprobes": 20, "migrate_to": None, "threads": None, "ray_n": 20_000,
        "actors": 2,
    } | params  # fmt: skip
    threads = set_threads(p["threads"])
    n, k = int(p["n"]), int(p["k"])
    texts = wordnet_sentences(n + int(p["queries"]))
    corpus, queries = texts[:n], texts[n : n + int(p["queries"])]
    if len(queries) < int(p["queries"]):
        raise SystemExit(f"only {len(texts)} WordNet sentences: lower n or queries")
    folder = Path(tempfile.mkdtemp(prefix="store-bench-")) / "store"
    store = Store.create(folder, p["model"])
    _, add_s = timed(store.add, corpus, ids=range(len(corpus)), show_progress=True)
    query_vectors, encode_q_s = timed(encode, store.model(), queries, normalize=True)
    results: dict[str, Any] = {
        "n": len(corpus), "queries": len(queries), "model": p["model"], "threads": threads,
        "machine": platform.processor() or platform.machine(),
        "add": {"seconds": round(add_s, 2), "texts_per_s": round(len(corpus) / add_s, 1)},
        "query_encoding_ms": round(1e3 * encode_q_s / len(queries), 3), "search": {},
    }  # fmt: skip
    timing, truth = latencies(store, query_vectors, k)
    results["search"]["exact"] = timing | {"recall@10": 1.0}
    for basis in p["bases"]:
        for dims in p["dims"]:
            for shortlist in p["shortlists"]:
                timing, found = latencies(store, query_vectors, k, dims=dims, shortlist=shortlist, basis=basis)
                results["search"][f"funnel_{basis}_{dims}_x{shortlist}"] = timing | {"recall@10": recall(found, truth)}
            timing, found = latencies(store, query_vectors, k, dims=dims, rerank="none", basis=basis)
            results["search"][f"prefix_{basis}_{dims}"] = timing | {"recall@10": recall(found, truth)}
    if len(corpus) >= 256:
        start = time.perf_counter()
        built = store.index()
        timing, found = latencies(store, query_vectors, k, ann=True, nprobes=p["nprobes"])
        index_s = round(time.perf_counter() - start, 2)  # the index and its searches, as recorded
        results["search"]["ann_ivfpq"] = timing | {"recall@10": recall(found, truth), "index_seconds": index_s} | built
    exact_qps = results["search"]["exact"]["qps"]
    for row in results["search"].values():
        row["speedup_vs_exact"] = round(row["qps"] / exact_qps, 2)
    if p["ray_n"]:
        results["add_ray_local"] = ray_add(corpus[: p["ray_n"]], p["model"], folder.parent / "ray-store", p["actors"])
    if p["migrate_to"]:
        results["migration"] = store.migrate(p["migrate_to"], show_progress=True)
    return results


def table(summary: dict[str, Any]) -> str:
    """BENCHMARKS.md's store rows, from every cell of a runner summary."""
    return "\n".join(render(cell["result"], title=cell["cell"]) for cell in summary["cells"])


def render(results: dict[str, Any], title: str = "") -> str:
    """The Markdown rows of one store result (a cell's, or ``benchmarks/results/store_bench.json``)."""
    lines = [f"#### store: {title}", ""] if title else []
    lines.append("| search | p50 ms | p99 ms | queries/s | × exact | Recall@10 |\n|---|---:|---:|---:|---:|---:|")
    lines += [f"| {name} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | {r['qps']:.0f} | {r['speedup_vs_exact']:.2f} | "
              f"{r['recall@10']:.3f} |" for name, r in results["search"].items()]  # fmt: skip
    lines.append(f"\nadd: {results['add']['texts_per_s']} texts/s ({results['add']['seconds']} s)")
    if "add_ray_local" in results:
        ray = results["add_ray_local"]
        lines.append(
            f"add --ray: {ray['texts_per_s']} texts/s on {ray['n']} texts, start {ray['runtime_start_seconds']} s"
        )
    if "migration" in results:
        m = results["migration"]
        ratio = m["migrate_seconds"] / m["reembed_seconds_estimate"]
        lines.append(f"migration: {json.dumps(m)}\n  time / re-embedding: {ratio:.3f}")
    return "\n".join(lines) + "\n"
