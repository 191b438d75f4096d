"""The store in one command (``subspaces store demo``, what ``make run`` shows): a store of WordNet sentences on
a bundled model, and a few queries answered by exact and by funnel search.

Rerun, it reuses the store (adding only the sentences it lacks, as any ``store add``); a store of another model
in that folder is rebuilt.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from subspaces.errors import SubspacesError

QUERIES = (
    "a large animal that lives in the sea",
    "an instrument for measuring time",
    "to cook food slowly in an oven",
    "a feeling of great happiness",
)


def wordnet_sentences(limit: int) -> list[str]:
    """The first ``limit`` distinct WordNet 3.0 sentences: the definitions, then the examples."""
    from subspaces.config import dataset_dir
    from subspaces.io import read_lines

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
    progress: bool = True,
) -> Demo:
    """Build (or reuse) the store at ``folder`` from ``n`` WordNet sentences and answer ``queries``."""
    from subspaces.models.encoder import encode

    if n < 1:
        raise SubspacesError(f"--n must be at least 1, got {n}")
    path = Path(folder)
    store, rebuilt = _open_or_create(path, model)
    texts = wordnet_sentences(n)
    start = time.perf_counter()
    added = store.add(texts, ids=range(len(texts)), model=store.model(), progress=progress)["added"]
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
    return Demo(path, model, store.count(), added, rebuilt, add_s, dims, shortlist, basis, exact_ms, funnel_ms, results)


def _open_or_create(path: Path, model: str) -> tuple[Any, bool]:
    """The store at ``path`` if it is one of ``model`` (then True: nothing rebuilt), else a new one there. Only a
    folder that is a store (it has a manifest) is ever removed."""
    from subspaces.store import Store
    from subspaces.store.manifest import MANIFEST

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
