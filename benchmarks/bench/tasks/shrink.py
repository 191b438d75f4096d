"""Shrinking stored vectors (issue 53 item 5): Recall@10 of searches at 32/64/128 dimensions after ``store shrink``,
on retrieval pools of 20,000 documents with one relevant document a query (the store's own search, no re-rank).

Pools (``data``): :mod:`bench.tasks.migrate`'s (dev ``snli``, ``sick``; test ``snli-test``, ``sts``) and two more
dev pools with WN18RR's WordNet glosses (the definition part) as documents: ``wn-names`` (queries: a lemma whose
name occurs once, "labial artery", relevant to its own definition) and ``wn-examples`` (queries: a usage example of
the sense, "she was eating a banana"). Arms (``arm``): ``raw`` (the model's first d coordinates), ``pca`` (the
principal axes), ``adapter`` (the ``MatryoshkaAdapter`` that ``Store.shrink`` fits with ``adapter`` parameters over
its defaults, ``seed`` its seed) and ``chosen`` (after the same shrink, the basis it chose per size: what ``search
--dims d`` reads). Vectors: the migrate task's cache. Per-query values go under ``rows``."""

from __future__ import annotations

import random
import re
from collections import Counter
from functools import cache
from typing import Any

import numpy as np

from bench.tasks import cell_params, migrate

DEFAULTS: dict[str, Any] = migrate.DEFAULTS | {"model": "minilm-l6", "dims": [32, 64, 128], "adapter": {}}


@cache
def wordnet(kind: str, n_docs: int, n_queries: int = 3000) -> tuple[tuple[str, ...], tuple[str, ...], tuple[int, ...]]:
    """``(documents, queries, each query's relevant document)`` of a WordNet pool (``names`` or ``examples``)."""
    path = migrate.DATA / "wn18rr" / "wordnet-mlj12-definitions.txt"
    senses = []
    for line in path.read_text(encoding="utf-8").splitlines():
        _, name, gloss = line.split("\t")
        definition, _, rest = gloss.partition('; "')
        examples = [e for e in re.findall(r'"([^"]+)"', '"' + rest) if len(e.split()) >= 4] if rest else []
        lemma = re.sub(r"^__|_[A-Z]{2}_\d+$", "", name).replace("_", " ").strip()
        senses.append((lemma, definition.strip(), examples))
    random.Random(53).shuffle(senses)
    count = Counter(lemma for lemma, _, _ in senses)
    docs: dict[str, None] = {}  # ordered and without repeats: a definition's position is its document's
    pairs: list[tuple[str, int]] = []
    for lemma, definition, examples in senses:
        if len(docs) >= n_docs or not definition or definition in docs:
            continue
        docs[definition] = None
        query = examples[0] if kind == "examples" and examples else None
        query = (lemma if count[lemma] == 1 else None) if kind == "names" else query
        if query is not None and len(pairs) < n_queries:
            pairs.append((query, len(docs) - 1))
    kept = [(q, r) for q, r in pairs if q not in docs]
    return tuple(docs), tuple(q for q, _ in kept), tuple(r for _, r in kept)


def run(params: dict[str, Any], seed: int) -> dict[str, Any]:
    """One cell: an arm's Recall@10 at each size of ``dims`` on a pool."""
    p = cell_params(DEFAULTS, params)
    data, n_docs = p["data"], int(p["n_docs"])
    docs, queries, relevant = wordnet(data[3:], n_docs) if data.startswith("wn-") else migrate.dataset(data, n_docs)
    doc_vectors, query_vectors = migrate.vectors(p["model"], docs, p), migrate.vectors(p["model"], queries, p)
    store = migrate.store_of(p | {"old": p["model"]}, docs, doc_vectors)
    result: dict[str, Any] = {"docs": len(docs), "queries": len(queries)}
    if p["arm"] in ("adapter", "chosen"):
        report = store.shrink(p["dims"], seed=seed, adapter_params=p["adapter"])
        result["shrink"] = {"used": {d: v["used"] for d, v in report["dims"].items()}, "seconds": report["seconds"]}
    elif p["arm"] not in ("raw", "pca"):
        raise ValueError(f"unknown arm {p['arm']!r}: raw, pca, adapter or chosen")
    basis = {"raw": "model", "pca": "pca", "adapter": "adapter", "chosen": None}[p["arm"]]
    target = np.asarray([f"d{r}" for r in relevant])
    metrics, rows = {}, {}
    for d in p["dims"]:
        hits = store.search_vectors(query_vectors, migrate.K, dims=d, basis=basis, rerank="none")
        found = np.asarray([t in h.ids for t, h in zip(target, hits, strict=True)], dtype=float)
        metrics[f"recall@10/{d}"] = round(float(found.mean()), 4)
        rows[f"recall@10/{d}"] = found.tolist()
    return result | {"metrics": metrics, "rows": rows}


def table(summary: dict[str, Any], dims: tuple[int, ...] = (32, 64)) -> str:
    """Per size: each arm's Recall@10 (mean over seeds) per pool, and the adapter's and the chosen basis's gain
    over raw truncation and over the principal axes, in % of theirs [paired bootstrap 95 % interval]."""
    lines = []
    head = "| pool | raw | pca | paper's terms | adapter | chosen | adapter vs raw | adapter vs pca | chosen vs pca |"
    for d in dims:
        name = f"recall@10/{d}"
        lines += [f"### Recall@10 at {d} dims", "", head, "|---|---:|---:|---:|---:|---:|---|---|---|"]
        for pool, arms in summary["aggregate"].items():
            mean = {arm: values.get(f"metrics/{name}", {}).get("mean", float("nan")) for arm, values in arms.items()}
            cells = [f"{mean.get(a, float('nan')):.3f}" for a in ("raw", "pca", "adapter-paper", "adapter", "chosen")]
            for a, b in (("adapter", "raw"), ("adapter", "pca"), ("chosen", "pca")):
                got = summary.get("paired", {}).get(pool, {}).get(f"{a} - {b}", {}).get(name)
                base = mean.get(b, float("nan"))
                low, high = (100 * got[k] / base for k in ("low", "high")) if got else (0, 0)
                cells.append(f"{100 * got['diff'] / base:+.1f} % [{low:+.1f}, {high:+.1f}]" if got else "-")
            lines.append(f"| {pool} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)
