"""``store shrink DIR --dims 32,64,128``: choose, per prefix size ``d``, whose first ``d`` coordinates a prefix search
reads: ``model`` (raw truncation), ``pca`` (the rows' principal axes) or ``adapter`` (a
:class:`~subspaces.adapt.MatryoshkaAdapter` fitted on the stored vectors, in ``shrink/SPACE/``), by each one's
top-10 overlap with full-size search on held-out rows or given queries; recorded in the space's ``shrink`` entry,
read by ``search(dims=d)``. See docs/store.md ("Shrinking").
"""

from __future__ import annotations

import shutil
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from subspaces import topk
from subspaces.adapt import MatryoshkaAdapter
from subspaces.errors import SubspacesError
from subspaces.fingerprint import json_sha256
from subspaces.numerics import cpu_record
from subspaces.store import search as ops
from subspaces.store.migrate import _read_queries, judged_figures, load_qrels
from subspaces.vectors import resolve_dims, unit_prefix

if TYPE_CHECKING:
    from subspaces.store.core import Store

CANDIDATES = ("model", "pca", "adapter")  # in the order ties go: the simpler first
FOLDER = "shrink"
# chosen on dev retrieval pools only (benchmarks/notes/store.md, "Shrinking")
ADAPTER_DEFAULTS: dict[str, Any] = {
    "basis": "pca",
    "epochs": 20,
    "hidden": 512,
    "batch_size": 512,
    "rank_weight": 3.0,
    "mined": 10,
}
FIT_SAMPLE = 50_000  # rows the candidates are fitted and checked on: enough for 384 dims, bounded at any size


def shrink(
    store: Store,
    dims: str | list[int] | tuple[int, ...],
    *,
    space: str | None = None,
    heldout: int = 500,
    seed: int = 0,
    k: int = 10,
    sample: int = FIT_SAMPLE,
    queries: Any = None,
    qrels: Any = None,
    adapter_params: dict[str, Any] | None = None,
    show_progress: bool = False,
) -> dict[str, Any]:
    """Fit the candidates on a seeded ``sample`` of ``space``'s rows less ``heldout``, measure each at every size of
    ``dims`` on those held out (or on ``queries``: a file or ``{id: text}``; ``qrels`` add Recall@10 and nDCG@10) and
    record the choice. The same options on an unchanged table return the recorded report."""
    name = space or store.manifest.active
    with store._writing("store shrink"):
        record = store._space(name)
        store._searchable(name)
        full = record.model.dimension
        sizes = resolve_dims(dims, full, order="ascending", below_full=True)
        params = ADAPTER_DEFAULTS | dict(adapter_params or {})
        params.pop("dims", None)
        asked = {"dims": sizes, "heldout": heldout, "seed": seed, "k": k, "adapter": _plain(params)}
        if sample != FIT_SAMPLE:
            asked["sample"] = sample
        loaded = store._load_rows(name)
        n = len(loaded)
        previous = record.shrink
        judged = _judged(store, name, queries, qrels)
        if judged is not None:
            asked["judged_by"] = judged["digest"]  # the same queries and judgements again: the same report
        if previous and previous.get("options") == asked and previous.get("version") == loaded.version:
            return dict(previous["report"])
        if heldout < 2:
            raise SubspacesError(f"--heldout must be at least 2 (rows held out as the check's queries), got {heldout}")
        held = min(heldout, n // 5)
        if held < 2 or n - held < k + 1:
            raise SubspacesError(
                f"space {name} holds {n} rows; shrink fits on the rows and measures on a fifth held out: add rows "
                f"(at least {5 * (k + 1)})"
            )
        start = time.perf_counter()
        order = np.random.default_rng(seed).permutation(n)
        test, fit = np.sort(order[:held]), np.sort(order[held : held + max(int(sample), k + 1)])
        x_fit = loaded.floats[fit]  # positional reads where the rows are a vector file
        x_test = loaded.floats[test] if judged is None else judged["vectors"]
        truth = ops.top_rows(x_fit, x_test, k)
        axes = loaded.principal_axes()  # the axes a pca search reads, so the figures are search's
        adapter = MatryoshkaAdapter(dims=sizes, random_state=seed, verbose=show_progress, **params)
        adapter.fit(x_fit)
        fit_rows, fit_queries = adapter.transform(x_fit), adapter.transform(x_test)
        table: dict[str, dict[str, Any]] = {}
        choice: dict[str, str] = {}
        for d in sizes:
            figures = {
                "model": ops.mean_overlap(truth, ops.top_rows(x_fit[:, :d], x_test[:, :d], k)),
                "pca": ops.mean_overlap(truth, ops.top_rows(x_fit @ axes[:, :d], x_test @ axes[:, :d], k)),
                "adapter": ops.mean_overlap(truth, ops.top_rows(fit_rows[:, :d], fit_queries[:, :d], k)),
            }
            best = max(CANDIDATES, key=lambda c: (figures[c], -CANDIDATES.index(c)))
            choice[str(d)] = best
            table[str(d)] = {f"{c}_overlap@{k}": round(figures[c], 4) for c in CANDIDATES} | {"used": best}
        if judged is not None and judged["grades"] is not None:
            report_qrels = _qrels_figures(loaded, judged, sizes, axes, adapter, k)
        folder = f"{FOLDER}/{name}/adapter"
        shutil.rmtree(store.path / folder, ignore_errors=True)
        adapter.save(store.path / folder)  # also when not chosen: --basis adapter reads it
        report = {
            "space": name,
            "model": record.model.label(),
            "rows": n,
            "fitted_rows": len(fit),
            "heldout": int(held),
            "metric": f"overlap@{k}: top-{k} of truncated search vs full-size search, "
            + ("held-out rows as queries" if judged is None else f"{len(x_test)} given queries"),
            "dims": table,
            "adapter_basis": params["basis"],
            "adapter_fit_seconds": round(float(adapter.fit_seconds_), 3),
            "seconds": round(time.perf_counter() - start, 3),
            "fitted_on": cpu_record("float32"),  # principal axes and adapter both fit in float32, on this CPU
        }
        if judged is not None and judged["grades"] is not None:
            report["qrels"] = report_qrels
        record.shrink = {
            "choice": choice,
            "adapter": folder,
            "version": int(loaded.version),
            "rows": n,
            "options": asked,
            "report": report,
        }
        store.manifest.save(store.path)
        store._shrink_adapters.pop(name, None)
        loaded.prefixes.clear()
        return report


def describe(store: Store, name: str) -> dict[str, Any] | None:
    """The space's shrink entry with ``stale``: whether its table changed since the choice was measured."""
    record = store._space(name).shrink
    if not record:
        return None
    table = store._table(name)
    stale = table.version != record.get("version") or table.count() != record.get("rows")
    return dict(record) | {"stale": bool(stale)}


def chosen(store: Store, name: str, dims: int) -> str | None:
    """The basis ``store shrink`` chose for a ``dims`` prefix of space ``name``, or None (not shrunk to it)."""
    record = store._space(name).shrink
    return (record.get("choice") or {}).get(str(dims)) if record else None


def load_adapter(store: Store, name: str) -> Any:
    """The space's shrink adapter, loaded once (its folder hash-checked), or a refusal where there is none."""
    if name not in store._shrink_adapters:
        record = store._space(name).shrink
        if not record or not record.get("adapter"):
            raise SubspacesError(
                f"space {name} has no fitted adapter: run `subspaces store shrink DIR --dims ...` first "
                "(or search with --basis pca)"
            )
        store._shrink_adapters[name] = MatryoshkaAdapter.load(store.path / record["adapter"])
    return store._shrink_adapters[name]


def _judged(store: Store, name: str, queries: Any, qrels: Any) -> dict[str, Any] | None:
    """The given queries' vectors, and with ``qrels`` the judged ones' positions and grades; ``digest``."""
    if queries is None:
        if qrels is not None:
            raise SubspacesError("--qrels needs --queries: the judged queries' texts")
        return None
    if store._space(name).model.foreign:
        raise SubspacesError(
            f"space {name} holds a foreign model's vectors: --queries need the model to encode them here"
        )
    texts = dict(queries) if isinstance(queries, dict) else _read_queries(queries)
    if not texts:
        raise SubspacesError("--queries holds no query")
    qids = list(texts)
    grades = load_qrels(qrels, texts)[1] if qrels is not None else None
    digest = json_sha256([texts, grades])
    out: dict[str, Any] = {"vectors": store.encode([str(texts[q]) for q in qids], "query", name), "digest": digest}
    judged = [i for i, q in enumerate(qids) if grades is not None and q in grades]
    out["judged"] = np.asarray(judged, dtype=np.int64)
    out["grades"] = None if grades is None else [grades[qids[i]] for i in judged]
    return out


def _qrels_figures(
    rows: Any, judged: dict[str, Any], sizes: list[int], axes: np.ndarray, adapter: Any, k: int
) -> dict[str, Any]:
    """Recall@k and nDCG@k of the judged queries over every stored row: full size, and each candidate."""
    queries, grades, ids = judged["vectors"][judged["judged"]], judged["grades"], rows.ids
    bases = {"model": lambda x: x, "pca": lambda x: x @ axes, "adapter": adapter.transform}

    def figures(project: Any, d: int | None) -> dict[str, float]:
        blocks = ((first, unit_prefix(project(block), d, dtype=np.float32)) for first, block in rows.blocks())
        _, top = topk.exact_blocks(blocks, unit_prefix(project(queries), d, dtype=np.float32), k, len(rows))
        return judged_figures(top, ids, grades, k)

    out: dict[str, Any] = {"queries": len(queries), "full": figures(bases["model"], None)}
    for d in sizes:
        out[str(d)] = {candidate: figures(project, d) for candidate, project in bases.items()}
    return out


def _plain(params: dict[str, Any]) -> dict[str, Any]:
    return {key: (list(value) if isinstance(value, tuple) else value) for key, value in sorted(params.items())}
