"""Move a store to a new model without re-embedding it: fit mini-vec2vec from the store's vectors and a sample of
its texts embedded by the new model, map every row into a new space beside the old one (pending, searchable
with the new model), and switch the active space only on :func:`commit`.

The fit sees a sample; a held-out sample (rows outside it) measures the result on the store itself: new-model
queries of the held-out texts against their mapped vectors vs against their re-embedded vectors (the row's own
vector among the top 10, and the top-10 overlap), and the time of the migration against re-embedding every row.
"""

from __future__ import annotations

import shutil
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from subspaces.errors import SubspacesError
from subspaces.store import search as ops
from subspaces.store.manifest import Space

if TYPE_CHECKING:
    from subspaces.store.core import Store


def migrate(
    store: Store,
    model: Any,
    *,
    name: str | None = None,
    pairs: int | None = None,
    anchors: str = "paired",
    heldout: int = 1_000,
    params: dict[str, Any] | None = None,
    seed: int = 0,
    batch_size: int = 64,
    progress: bool = False,
    ray: bool | str = False,
    actors: int | None = None,
) -> dict[str, Any]:
    """Fit, map and add a pending space for ``model``; returns its report. Rerun after an interruption, it
    finishes the mapping (the fitted aligner is kept) instead of starting again. ``ray``: embed the fit sample
    and map the rows on Ray Data (see :meth:`Store.add`); the held-out measurement runs here.

    ``anchors``: ``"paired"`` (default): the ``pairs`` sampled rows (default 2,000, or 4 per dimension of the
    wider space if more), re-embedded by the new model,
    are known pairs (each row's stored vector and its new vector) and the map is their orthogonal Procrustes
    (:meth:`MiniVec2Vec.fit` ``pairs=``, its unpaired stages off unless ``params`` turns them on: every new-model
    vector there is is one of the pairs, so they have nothing to add; on 7,000 WordNet sentences,
    ``minilm-l6 -> paraphrase-l3``, 2,000 pairs gave held-out top-10 overlap 0.615 with or without them, in
    0.7 s against 17 s; the aligner's ``confidence_`` is then the pairs' in-sample top-1, on up to 4,096 of
    them). ``"unpaired"``: mini-vec2vec as without parallel data (the two sides' rows are not
    matched up; default 20,000 rows), the method's own setting.

    A pending migration to the same model fitted with the same options is finished; one fitted with other
    options (``pairs`` given and different, or another ``anchors``, ``heldout``, ``seed`` or ``params``) is
    replaced by a new fit with these: its space and aligner are dropped first (issue 58: a new ``--pairs`` was
    ignored). ``pairs=None`` means whatever the pending fit used."""
    with store._writing("store migrate"):  # first: a second writer is refused before a model loads
        return _migrate(store, model, name, pairs, anchors, heldout, params, seed, batch_size, progress, ray, actors)


def _migrate(
    store: Store,
    model: Any,
    name: str | None,
    pairs: int | None,
    anchors: str,
    heldout: int,
    params: dict[str, Any] | None,
    seed: int,
    batch_size: int,
    progress: bool,
    ray: bool | str,
    actors: int | None,
) -> dict[str, Any]:
    from subspaces.align import MiniVec2Vec
    from subspaces.models.encoder import encode

    if anchors not in ("paired", "unpaired"):
        raise SubspacesError(f"anchors must be 'paired' or 'unpaired', got {anchors!r}")
    if pairs is not None and pairs < 1:
        raise SubspacesError(f"--pairs must be at least 1, got {pairs}")
    encoder, fingerprint = store.load_model(model, name)
    manifest = store.manifest
    asked = {"anchors": anchors, "heldout": heldout, "seed": seed, "params": _plain(params)}
    replaced = None
    for space_name in manifest.pending():
        space = manifest.spaces[space_name]
        if not space.model.matches(fingerprint):
            raise SubspacesError(
                f"a migration to {space.model.label()} is pending; commit it (store migrate --commit) first"
            )
        differs = _differs(space.options, asked, pairs)
        if not differs:  # an interrupted migration to this model, or a rerun: finish its mapping
            store._models[space_name] = encoder
            store._sync(space_name, progress=progress, ray=ray, actors=actors)
            return space.report
        was = space.options or space.report
        replaced = "the pending fit with " + ", ".join(f"{key} {was.get(key, '?')}" for key in differs)
        _discard(store, space_name)
    if manifest.spaces[manifest.active].model.matches(fingerprint):
        raise SubspacesError(f"{fingerprint.label()} is already the store's model: nothing to migrate")
    source_name = manifest.active
    rows = store._load_rows(source_name)
    n = len(rows.ids)
    held = min(heldout, n // 5)
    if pairs is None:  # Procrustes needs several pairs per dimension to be well posed (4096-d LLM embedders too)
        dim = max(fingerprint.dimension, manifest.spaces[source_name].model.dimension)
        pairs = max(2_000, 4 * dim) if anchors == "paired" else 20_000
    order = np.random.default_rng(seed).permutation(n)
    test, fit_rows = order[:held], order[held : held + pairs]

    start = time.perf_counter()
    fit_texts = rows.texts[fit_rows].tolist()
    if ray:
        from subspaces.store import scaleout
        from subspaces.store.core import _shippable

        scaleout.start(ray)
        target = scaleout.encode_texts(
            fit_texts,
            model=_shippable(model, fingerprint, encoder),
            runtime=store.runtime,
            expected=fingerprint,
            batch_size=batch_size,
            block_rows=1024,
            actors=actors,
        )
    else:
        target = encode(encoder, fit_texts, batch_size=batch_size, normalize=True, show_progress=progress)
    encode_s = time.perf_counter() - start
    aligner = MiniVec2Vec.from_params(_with_defaults(params, anchors), random_state=seed, verbose=progress)
    source = rows.vectors[fit_rows]
    aligner.fit(source, target, pairs=(source, target) if anchors == "paired" else None)

    new_name = str(1 + max(int(k) for k in manifest.spaces))
    table, aligner_dir = f"space_{new_name}", f"aligners/{new_name}"
    # Leftovers of a run killed before its manifest was written are not part of the store: replace them.
    shutil.rmtree(store.path / aligner_dir, ignore_errors=True)
    if table in store._db.table_names():
        store._db.drop_table(table)
    from subspaces.store.core import _lance_errors, _schema

    with _lance_errors(str(store.path)):
        store._db.create_table(table, schema=_schema(fingerprint.dimension))
    aligner.save(store.path / aligner_dir)
    report = _measure(aligner, encoder, rows, test, batch_size)
    manifest.spaces[new_name] = Space(
        table=table,
        model=fingerprint,
        source="mapped",
        mapped_from=source_name,
        aligner=aligner_dir,
        state="pending",
        report=report,
        options=asked | {"pairs": pairs},
    )
    manifest.save(store.path)
    store._models[new_name] = encoder
    store._sync(new_name, progress=progress, ray=ray, actors=actors)
    migrate_s = time.perf_counter() - start
    per_text = encode_s / max(len(fit_rows), 1)
    report |= {
        "rows": n,
        "pairs": int(len(fit_rows)),
        "anchors": anchors,
        "migrate_seconds": round(migrate_s, 3),
        "reembed_seconds_estimate": round(per_text * n, 3),  # the new model's own rate on the fit sample
    }
    manifest.save(store.path)
    return report | ({"replaced": replaced} if replaced else {})


def _plain(params: dict[str, Any] | None) -> dict[str, Any] | None:
    """``params`` as the manifest's JSON keeps them (so a rerun's compare equal to the recorded ones)."""
    import json

    return json.loads(json.dumps(params, default=str)) if params else None


def _differs(recorded: dict[str, Any], asked: dict[str, Any], pairs: int | None) -> list[str]:
    """The fit options in which this run differs from a pending migration's (recorded when it was fitted; a
    migration begun before they were recorded has none, and is finished unless ``pairs`` is given)."""
    if not recorded:
        return ["pairs"] if pairs is not None else []
    wanted = asked | ({"pairs": pairs} if pairs is not None else {})
    return [key for key, value in wanted.items() if recorded.get(key) != value]


def _discard(store: Store, name: str) -> None:
    """Drop pending space ``name``: out of the manifest first (then the folder is a store without it, whatever
    stops this), then its table, aligner and quantized copy, leftovers a new migration would replace anyway."""
    from subspaces.store.core import _lance_errors
    from subspaces.store.quantized import FOLDER

    space = store.manifest.spaces.pop(name)
    store.manifest.save(store.path)
    store._models.pop(name, None)
    store._loaded.pop(name, None)
    with _lance_errors(str(store.path)):
        if space.table in store._db.table_names():
            store._db.drop_table(space.table)
    if space.aligner:
        shutil.rmtree(store.path / space.aligner, ignore_errors=True)
    shutil.rmtree(store.path / FOLDER / name, ignore_errors=True)


PAIRED_DEFAULTS = {"structure": {"n_iter": 0}, "refine": {"n_iter": 0, "centroid_clusters": 0}}


def _with_defaults(params: dict[str, Any] | None, anchors: str) -> dict[str, Any]:
    """``params`` over the paired fit's defaults (the unpaired stages off), stage by stage."""
    merged = dict(params or {})
    if anchors == "paired":
        for stage, settings in PAIRED_DEFAULTS.items():
            merged[stage] = settings | dict(merged.get(stage) or {})
    return merged


def _measure(aligner: Any, encoder: Any, rows: Any, test: np.ndarray, batch_size: int, k: int = 10) -> dict[str, Any]:
    """Recall@k of new-model queries of held-out texts over their mapped vs their re-embedded vectors."""
    from subspaces.models.encoder import encode

    if len(test) < 2:
        return {"heldout": int(len(test))}
    queries = encode(encoder, rows.texts[test].tolist(), batch_size=batch_size, normalize=True)
    mapped = ops.unit_prefix(aligner.transform(rows.vectors[test]))
    k = min(k, len(test))
    _, over_mapped = ops.exact(ops.flat_index(mapped), queries, k)
    _, over_new = ops.exact(ops.flat_index(queries), queries, k)
    own = np.arange(len(test))[:, None]
    recall_mapped = float((over_mapped == own).any(axis=1).mean())
    recall_new = float((over_new == own).any(axis=1).mean())
    overlap = np.mean([len(set(a) & set(b)) / k for a, b in zip(over_mapped, over_new, strict=True)])
    return {
        "heldout": int(len(test)),
        f"recall@{k}_mapped": round(recall_mapped, 4),
        f"recall@{k}_reembedded": round(recall_new, 4),
        "recall_fraction": round(recall_mapped / recall_new, 4) if recall_new else None,
        f"overlap@{k}": round(float(overlap), 4),
    }


def commit(store: Store) -> str:
    """Make the pending space active (its rows complete) and retire the old one; returns the new active space."""
    with store._writing("store migrate --commit"):
        return _commit(store)


def _commit(store: Store) -> str:
    manifest = store.manifest
    pending = manifest.pending()
    if not pending:
        raise SubspacesError("no migration is pending; run `subspaces store migrate DIR --to MODEL` first")
    name = pending[0]
    space = manifest.spaces[name]
    assert space.mapped_from is not None
    store._sync(name)  # rows added by a run that stopped between its two writes
    if store.count(name) != store.count(space.mapped_from):
        raise SubspacesError(f"space {name} lacks rows of space {space.mapped_from}; rerun the migration")
    manifest.spaces[manifest.active].state = "retired"
    space.state = "active"
    manifest.active = name
    manifest.save(store.path)
    return name
