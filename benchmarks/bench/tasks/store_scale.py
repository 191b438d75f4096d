"""The store at scale (issue 52 item 3; store_1m.toml, docs/store.md): :func:`write_corpus`'s parquet imported, then
searched in every mode, each stage in its own process, its result kept in ``work`` (where ``--resume`` starts)."""

from __future__ import annotations

import datetime
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.environment import cpu
from bench.stats import timed
from bench.tables import grid
from bench.tasks.store import latencies, recall
from subspaces.io import atomic_path, save_json

LANGS = (("en", 0.6), ("de", 0.15), ("fr", 0.15), ("ja", 0.1))
YEARS = (1990, 2025)
DEFAULTS: dict[str, Any] = {
    "n": 20_000,
    "real": None,  # real WordNet vectors in the corpus (None: every one not held out as a query)
    "queries": 200, "k": 10, "model": "minilm-l6", "dtype": "bfloat16", "clusters": 1024, "dims": 128, "shortlist": 10,
    "shrink_dims": [32, 64],  # `store shrink --dims 32,64`, then searched at each (alone and as a funnel)
    "rescore": 4, "nprobes": 20,
    "filter_lang": "de",  # the filtered search: lang = this AND year >= filter_year
    "filter_year": 2015, "mutations": 1000, "threads": 2, "batch_rows": 4096, "work": None,
}  # fmt: skip


def cache_root() -> Path:
    from subspaces.config import cache_dir

    return cache_dir() / "store_scale"  # ~/.cache/subspaces/store_scale ($SUBSPACES_CACHE where set)


def real_vectors(model: str, dtype: str, need: int, part: int = 10_000) -> tuple[np.ndarray, int]:
    """minilm-l6 vectors of the first ``need`` WordNet sentences in a seeded shuffle, and how many there are; encoded
    ``part`` at a time, once (cached: a larger run encodes only the parts it lacks)."""
    from subspaces.store.demo import wordnet_sentences

    texts = wordnet_sentences(10**7)
    order = np.random.default_rng(0).permutation(len(texts))
    folder = cache_root() / f"wordnet-{model}-{dtype}-{len(texts)}"
    parts, encoder = [], None
    for first in range(0, min(need, len(texts)), part):
        path = folder / f"part-{first // part:03d}.npy"
        if not path.is_file():
            from subspaces.io import save_npy
            from subspaces.models.encoder import encode, load_encoder

            encoder = encoder or load_encoder(model, dtype=dtype)
            batch = [texts[i] for i in order[first : first + part]]
            vectors, seconds = timed(encode, encoder, batch, batch_size=128, normalize=True)
            print(f"encoded {len(batch):,} WordNet texts in {seconds:.0f} s", flush=True)
            save_npy(path, np.asarray(vectors, dtype=np.float32))
        parts.append(np.load(path))
    return np.concatenate(parts)[:need], len(texts)


def rows_table(ids: list[str], vectors: np.ndarray, lang: Any, year: Any) -> Any:
    """The columns of a corpus parquet as a pyarrow table: id, vector (float32, fixed size), lang, year."""
    import pyarrow as pa

    vector = pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel(), pa.float32()), vectors.shape[1])
    return pa.table(
        {"id": pa.array(ids, pa.string()), "vector": vector, "lang": lang, "year": pa.array(year, pa.int64())}
    )


def write_corpus(p: dict[str, Any], work: Path) -> dict[str, Any]:
    """The corpus parquet (``n`` rows: ids, vectors, lang, year) and the held-out queries' vectors."""
    import faiss
    import pyarrow as pa
    import pyarrow.parquet as pq

    q = p["queries"]
    vectors, total = real_vectors(p["model"], p["dtype"], q + min(p["real"] or p["n"], p["n"]))
    rng = np.random.default_rng(0)
    np.save(work / "queries.npy", vectors[:q])  # the first texts of the shuffle are the queries, held out
    fitted = vectors[q:]
    real, dim = fitted.shape
    clusters = min(p["clusters"], max(1, len(fitted) // 40))
    kmeans = faiss.Kmeans(dim, clusters, niter=20, seed=0, spherical=True)
    kmeans.train(fitted)
    centroids = np.asarray(kmeans.centroids, dtype=np.float32)
    _, label = kmeans.index.search(fitted, 1)
    label = label.ravel()
    residual = fitted - centroids[label]
    counts = np.bincount(label, minlength=clusters)
    # noise ~ N(0, a_c * C): C the pooled within-cluster covariance, a_c the cluster's share of its variance
    covariance = (residual.T.astype(np.float64) @ residual) / len(residual)
    shape = np.linalg.cholesky(covariance + 1e-9 * np.eye(len(covariance))).astype(np.float32)
    per_row = np.bincount(label, (residual**2).sum(1), minlength=clusters) / np.maximum(counts, 1)
    spread = np.sqrt(per_row / np.trace(covariance))
    weights = counts / counts.sum()
    schema = rows_table([], np.empty((0, dim), np.float32), pa.array([], pa.string()), []).schema
    path = work / "corpus.parquet"
    langs, shares = [lang for lang, _ in LANGS], [share for _, share in LANGS]
    with atomic_path(path) as tmp, pq.ParquetWriter(tmp, schema) as writer:
        for start in range(0, p["n"], 50_000):
            rows = min(50_000, p["n"] - start)
            block = np.empty((rows, dim), dtype=np.float32)
            from_real = max(0, min(rows, real - start))
            block[:from_real] = fitted[start : start + from_real]
            synthetic = rows - from_real
            if synthetic:
                picked = rng.choice(clusters, synthetic, p=weights)
                noise = rng.standard_normal((synthetic, dim)).astype(np.float32)
                x = centroids[picked] + (noise @ shape.T) * spread[picked, None].astype(np.float32)
                block[from_real:] = x / np.linalg.norm(x, axis=1, keepdims=True)
            ids = [f"row-{i}" for i in range(start, start + rows)]
            writer.write_table(rows_table(ids, block, rng.choice(langs, rows, p=shares), rng.integers(*YEARS, rows)))
    return {
        "wordnet_texts": int(total), "real_rows": int(real), "synthetic_rows": int(p["n"] - real),
        "clusters": int(clusters), "queries": int(q), "parquet_bytes": path.stat().st_size,
    }  # fmt: skip


def child(stage: str, args: dict[str, Any]) -> dict[str, Any]:
    """One stage, in this process; returns its measurements (with this process's peak RSS)."""
    from subspaces.config import set_threads
    from subspaces.store import Store
    from subspaces.store.core import import_vectors

    set_threads(args["threads"])
    start = time.perf_counter()
    if stage == "import":
        _, report = import_vectors(args["store"], args["parquet"], foreign=args["model"], batch_rows=args["batch_rows"])
        out: dict[str, Any] = {"report": report}
    elif stage in ("quantize", "index", "shrink"):  # the Store method of that name
        arguments = {"quantize": ["int8"], "index": [], "shrink": [args["shrink_dims"]]}[stage]
        out = {"report": getattr(Store.open(args["store"]), stage)(*arguments)}
    elif stage == "mutate":
        out = mutate(Store.open(args["store"]), args)
    elif stage == "export":
        target = Path(args["work"]) / "export.parquet"
        out = {"report": Store.open(args["store"]).export(target), "bytes": target.stat().st_size}
        target.unlink()
    else:
        out = search(stage, args)
    # this process's peak resident memory, VmHWM (Linux): ru_maxrss would count the parent's, carried across exec
    status = Path("/proc/self/status").read_text()
    peak = round(int(status.split("VmHWM:")[1].split()[0]) / 1024, 1)
    return out | {"seconds": round(time.perf_counter() - start, 2), "peak_rss_mib": peak}


def search(mode: str, args: dict[str, Any]) -> dict[str, Any]:
    from subspaces.store import Store

    options = args["modes"][mode]
    store = Store.open(args["store"])
    queries = np.load(Path(args["work"]) / "queries.npy")
    k = args["k"]
    _, first_s = timed(store.search_vectors, queries[:1], k, **options)  # builds the vector file, index, codes
    timing, ids = latencies(store, queries, k, **options)
    lang, year = args["filter_lang"], int(args["filter_year"])
    where = f"lang = '{lang}' AND year >= {year}"
    (filtered,), filtered_s = timed(store.search_vectors, queries[:1], k, where=where, **options)
    matching = all(m is not None and m["lang"] == lang and m["year"] >= year for m in filtered.metadata)
    return {
        "first_search_seconds": round(first_s, 2), "p50_ms": round(timing["p50_ms"], 3),
        "p99_ms": round(timing["p99_ms"], 3), "qps": round(timing["qps"], 1),
        "filtered": {"ms": round(filtered_s * 1e3, 2), "results": len(filtered.ids), "k": k, "all_match": matching},
        "ids": ids,
    }  # fmt: skip


def mutate(store: Any, args: dict[str, Any]) -> dict[str, Any]:
    """Delete ``mutations`` rows, then upsert as many (stored ids, new vectors): seconds each."""
    import pyarrow.parquet as pq

    m, n = args["mutations"], args["n"]
    rng = np.random.default_rng(1)
    picked = rng.choice(n, 2 * m, replace=False)
    deleted, delete_s = timed(store.delete, [f"row-{i}" for i in picked[:m]])
    x = rng.standard_normal((m, store._space(store.manifest.active).model.dimension)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    path = Path(args["work"]) / "upsert.parquet"
    pq.write_table(rows_table([f"row-{i}" for i in picked[m:]], x, ["en"] * m, [2000] * m), path)
    upserted, upsert_s = timed(store.import_vectors, str(path), upsert=True)
    return {
        "delete": {"seconds": round(delete_s, 2)} | deleted,
        "upsert": {"seconds": round(upsert_s, 2), "replaced": upserted.get("replaced")},
    }  # fmt: skip


def run_stage(stage: str, args: dict[str, Any], work: Path) -> dict[str, Any]:
    """``stage`` in a subprocess, or its recorded result if a run before finished it."""
    done = work / "stages" / f"{stage}.json"
    if done.is_file():
        return json.loads(done.read_text())
    mutated = stage != "export" and (work / "stages" / "mutate.json").is_file()  # searched after its changes
    if stage != "import" and (mutated or not Path(args["store"]).is_dir()):
        raise SystemExit(f"{work} holds a finished (or removed) run: move it away to measure stage {stage} afresh")
    print(f"[store_scale] {stage}", flush=True)
    env = os.environ | {"OMP_NUM_THREADS": str(args["threads"]), "PYTHONPATH": str(Path(__file__).parents[2])}
    command = [sys.executable, __file__, stage, json.dumps(args)]
    proc = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"stage {stage} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    save_json(done, result)
    return result


def run(params: dict[str, Any], seed: int) -> dict[str, Any]:
    """The whole benchmark for one ``n``; ``seed`` is unused (the sampling is seeded)."""
    p = DEFAULTS | params
    work = Path(p["work"]) if p["work"] else cache_root() / f"n{p['n']}"
    work.mkdir(parents=True, exist_ok=True)
    corpus_record = work / "stages" / "corpus.json"
    if not corpus_record.is_file():
        print(f"[store_scale] corpus of {p['n']:,} rows", flush=True)
        save_json(corpus_record, write_corpus(p, work))
    corpus = json.loads(corpus_record.read_text())
    modes = {
        "exact": {},
        f"funnel_pca_{p['dims']}_x{p['shortlist']}": {"dims": p["dims"], "basis": "pca", "shortlist": p["shortlist"]},
        f"int8_rescore{p['rescore']}": {"quantized": True, "rescore": p["rescore"]},
        "ann_refine_default": {"ann": True, "nprobes": p["nprobes"]},
        "ann_refine_none": {"ann": True, "nprobes": p["nprobes"], "refine_factor": None},
    }  # fmt: skip
    for d in p["shrink_dims"]:  # after `store shrink`: the basis it chose, alone and as a funnel's first stage
        modes[f"shrunk_{d}_alone"] = {"dims": d, "rerank": "none"}
        modes[f"shrunk_{d}_funnel_x{p['shortlist']}"] = {"dims": d, "shortlist": p["shortlist"]}
    args = p | {  # what each stage's process reads
        "store": str(work / "store"), "parquet": str(work / "corpus.parquet"), "work": str(work), "modes": modes,
    }  # fmt: skip
    stages = {name: run_stage(name, args, work) for name in ("import", "quantize", "index", "shrink")}
    searches = {name: run_stage(name, args, work) for name in modes}
    truth = searches["exact"]["ids"]
    for result in searches.values():
        result["recall@10"] = round(recall(result.pop("ids"), truth), 4)
    after = {name: run_stage(name, args, work) for name in ("mutate", "export")}
    shutil.rmtree(work / "store", ignore_errors=True)  # every stage is recorded: the store and parquet can go
    (work / "corpus.parquet").unlink(missing_ok=True)
    what = (
        f"{p['n']:,} x 384 rows: {corpus['real_rows']:,} real {p['model']} vectors ({p['dtype']}) of WordNet 3.0 "
        f"definitions and examples, {corpus['synthetic_rows']:,} synthetic rows drawn from a {corpus['clusters']}-"
        "centroid k-means mixture fitted to them (centroid + Gaussian noise of the pooled within-cluster "
        f"covariance, scaled per cluster, renormalised); {corpus['queries']} queries: held-out real WordNet vectors, "
        "one at a time"
    )
    return {
        "what": what, "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": " ".join(sys.argv), "cpu": cpu()["model"], "threads": p["threads"], "corpus": corpus,
        "stages": stages, "search": searches, "after": after,
    }  # fmt: skip


def table(summary: dict[str, Any]) -> str:
    out = []
    for cell in summary["cells"]:
        r = cell["result"]
        stages = [f"{name} | {s['seconds']} | {s['peak_rss_mib']}" for name, s in {**r["stages"], **r["after"]}.items()]
        searches = []
        for name, s in r["search"].items():
            f = s["filtered"]
            searches.append(
                f"{name} | {s['p50_ms']} | {s['p99_ms']} | {s['recall@10']:.3f} | {s['peak_rss_mib']} | "
                f"{f['results']}/{f['k']}{'' if f['all_match'] else ' (a row off the filter!)'}"
            )
        out += [f"#### store_scale: {cell['cell']} ({r['corpus']['real_rows']:,} real rows)\n\n"]
        out += [grid("stage | seconds | peak RSS MiB", stages), "\n"]
        out.append(grid("search | p50 ms | p99 ms | Recall@10 | peak RSS MiB | filtered k", searches))
    return "".join(out)


if __name__ == "__main__":
    print(json.dumps(child(sys.argv[1], json.loads(sys.argv[2]))))
