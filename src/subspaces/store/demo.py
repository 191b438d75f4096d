"""The store in one command (``subspaces store demo``, what ``make run`` shows): a store of WordNet sentences on
a bundled model, a few queries by exact and funnel search; then (``to``) migrated query-side and by rewrite to
another model, and (``shrink_dims``) shrunk, each with its report and the first query's hits. Rerun, it reuses the
store (a store of another model in that folder is rebuilt).
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from subspaces.config import dataset_dir
from subspaces.errors import SubspacesError
from subspaces.io import read_lines
from subspaces.store.core import Store
from subspaces.store.manifest import MANIFEST

QUERIES = (
    "a large animal that lives in the sea",
    "an instrument for measuring time",
    "to cook food slowly in an oven",
    "a feeling of great happiness",
)


def wordnet_sentences(limit: int) -> list[str]:
    """The first ``limit`` distinct WordNet 3.0 sentences: the definitions, then the examples."""
    folder = dataset_dir("wordnet_sentences")
    seen: dict[str, None] = {}
    for name in ("wordnet30_definitions.txt.gz", "wordnet30_examples.txt.gz"):
        for text in read_lines(folder / name):
            seen.setdefault(text, None)
            if len(seen) >= limit:
                return list(seen)
    return list(seen)


@dataclass
class Demo:
    path: Path
    model: str
    rows: int
    added: int
    rebuilt: bool
    add_seconds: float
    dims: int
    shortlist: int
    basis: str
    exact_ms: float  # per query, search alone (queries encoded once)
    funnel_ms: float
    results: list[dict[str, Any]] = field(default_factory=list)  # per query: exact and funnel hits, overlap
    # the steps after: {"query", "report", "hits", "seconds"} each (None: not run)
    query_side: dict[str, Any] | None = None  # store migrate --to TO --query-side
    rewrite: dict[str, Any] | None = None  # store migrate --to TO (a pending space)
    shrink: dict[str, Any] | None = None  # store shrink --dims SHRINK_DIMS, then search --dims SHRINK_DIMS


def run(
    folder: str | Path,
    *,
    model: str = "minilm-l6",
    n: int = 3000,
    queries: tuple[str, ...] | list[str] = QUERIES,
    k: int = 5,
    dims: int = 128,
    shortlist: int = 10,
    basis: str = "pca",
    show_progress: bool = True,
    to: str | None = "paraphrase-l3",
    pairs: int = 300,
    heldout: int = 300,
    shrink_dims: int | None = 64,
) -> Demo:
    """Build (or reuse) a store of ``n`` WordNet sentences, search it, then migrate (``to``; None: not) and shrink it
    (``shrink_dims``; None: not), as ``store demo`` does."""
    from subspaces.models.encoder import encode

    if n < 1:
        raise SubspacesError(f"--n must be at least 1, got {n}")
    path = Path(folder)
    store, rebuilt = _open_or_create(path, model)
    texts = wordnet_sentences(n)
    start = time.perf_counter()
    added = store.add(texts, ids=range(len(texts)), model=store.model(), show_progress=show_progress)["added"]
    add_s = time.perf_counter() - start
    vectors = encode(store.model(), list(queries), normalize=True)

    store.search_vectors(vectors[:1], k)  # builds the in-memory index once, as a long-lived reader would have it
    start = time.perf_counter()
    exact = store.search_vectors(vectors, k)
    exact_ms = 1e3 * (time.perf_counter() - start) / len(queries)
    store.search_vectors(vectors[:1], k, dims=dims, shortlist=shortlist, basis=basis)  # builds the prefix index once
    start = time.perf_counter()
    funnel = store.search_vectors(vectors, k, dims=dims, shortlist=shortlist, basis=basis)
    funnel_ms = 1e3 * (time.perf_counter() - start) / len(queries)
    results = [
        {"query": q, "exact": e, "funnel": f, "overlap": len(set(e["ids"]) & set(f["ids"])) / len(e["ids"])}
        for q, e, f in zip(queries, exact, funnel, strict=True)
    ]
    demo = Demo(path, model, store.count(), added, rebuilt, add_s, dims, shortlist, basis, exact_ms, funnel_ms, results)
    query = queries[0]
    if to is not None:
        active = store.manifest.active
        start = time.perf_counter()
        report = store.migrate(to, pairs=pairs, heldout=heldout, query_side=True, show_progress=show_progress)
        # the active space named: a pending rewrite of the same model (a rerun) would answer instead
        hits = store.search(query, k, model=to, space=active)
        demo.query_side = _step(start, to=to, query=query, report=report, hits=hits)
        start = time.perf_counter()
        report = store.migrate(to, pairs=pairs, heldout=heldout, show_progress=show_progress)
        hits = store.search(query, k, model=to)  # the pending space of rewritten rows
        demo.rewrite = _step(start, to=to, query=query, report=report, hits=hits)
    if shrink_dims is not None:
        start = time.perf_counter()
        report = store.shrink([shrink_dims], heldout=heldout, show_progress=show_progress)
        hits = store.search(query, k, dims=shrink_dims)  # reads the basis the shrink chose
        demo.shrink = _step(start, query=query, report=report, hits=hits)
    return demo


def _step(start: float, **fields: Any) -> dict[str, Any]:
    """A step's record: ``fields`` and the seconds since ``start``."""
    return fields | {"seconds": time.perf_counter() - start}


def _open_or_create(path: Path, model: str) -> tuple[Any, bool]:
    """The store at ``path`` if it is one of ``model``, else a new one (a store there is removed)."""
    if (path / MANIFEST).is_file():
        try:
            store = Store.open(path)
            encoder, fingerprint = store.load_model(model)
            if store.manifest.spaces[store.manifest.active].model.matches(fingerprint):
                store._models[store.manifest.active] = encoder
                store.count()  # a corrupted table fails here, and is rebuilt below
                return store, False
        except SubspacesError:
            pass
        shutil.rmtree(path)
        return Store.create(path, model), True
    return Store.create(path, model), False
