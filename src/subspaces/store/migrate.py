"""Move a store to a new model without re-embedding it, or search it with a new model's queries: a map fitted on a
sample of the store's texts re-embedded by the new model (:mod:`.maps`). A **rewrite** (:func:`migrate`) maps
every row into a pending space, switched to by :func:`commit` (undone by :func:`rollback`); a **query-side**
migration maps each new-model query into the old space. A store without texts gets a query map fitted without
pairs (:mod:`.unpaired`). See docs/store.md ("Migration").
"""

from __future__ import annotations

import functools
import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import numpy as np

from subspaces.align import MiniVec2Vec
from subspaces.errors import DataError, SubspacesError
from subspaces.io import check_file, open_text, read_jsonl
from subspaces.settings import setting
from subspaces.store import backfill, encoders, quantized, scaleout
from subspaces.store import maps as pair_maps
from subspaces.store import search as ops
from subspaces.store import unpaired as unpaired_maps
from subspaces.store.encoders import folder_prompts
from subspaces.store.fingerprint import ModelFingerprint
from subspaces.store.manifest import Space
from subspaces.store.table import lance_errors

if TYPE_CHECKING:
    from subspaces.store.core import Store


@dataclass(frozen=True)
class MigrationSettings:
    """How :func:`migrate` fits and measures its map, declared once: its keywords' defaults, and ``store migrate``'s
    options (and ``--config`` keys)."""

    pairs: Optional[int] = setting(None, "Texts embedded to fit the map (default 2,000 paired, 20,000 unpaired).")
    maps: Optional[tuple[str, ...]] = setting(None, "Candidate maps of orthogonal,affine,lowrank,mlp (default: all).")
    holdout: float = setting(0.2, "Fraction of the pairs held out to choose the map.")
    anchors: str = setting("paired", "paired: learned maps on known pairs; unpaired: mini-vec2vec (rewrite only).")
    heldout: int = setting(1_000, "Rows outside the pairs the migration is measured on.")
    seed: int = setting(0, "Random seed (samples, the maps).")


def migrate(
    store: Store,
    model: Any,
    *,
    name: str | None = None,
    pairs: int | None = MigrationSettings.pairs,
    anchors: str = MigrationSettings.anchors,
    heldout: int = MigrationSettings.heldout,
    params: dict[str, Any] | None = None,
    seed: int = MigrationSettings.seed,
    batch_size: int = 64,
    show_progress: bool = False,
    ray: bool | str = False,
    actors: int | None = None,
    query_side: bool = False,
    maps: list[str] | tuple[str, ...] | None = MigrationSettings.maps,
    map_params: dict[str, dict[str, Any]] | None = None,
    holdout: float = MigrationSettings.holdout,
    qrels: Any = None,
    queries: Any = None,
    unpaired: bool = False,
    texts: Any = None,
) -> dict[str, Any]:
    """Fit a map to ``model`` and either add a pending space of every row mapped (default) or, with ``query_side``,
    register the map of ``model``'s queries into the active space; returns the report. A rerun with the same options
    finishes an interrupted migration (or returns its report); other options refit (``pairs=None``: the earlier ones).

    ``anchors="paired"``: ``pairs`` rows with texts (default 2,000, or 4 per dimension of the wider space if more),
    re-embedded by the new model, fit each map of ``maps`` (``map_params`` per kind), one kept by
    :func:`.maps.fit_and_choose` on a ``holdout`` fraction of them (query-side: judged on ``queries`` when given);
    ``"unpaired"`` (rewrite only): mini-vec2vec (``params``, default 20,000 rows). ``heldout`` rows outside the pairs
    measure the result; ``qrels`` with ``queries`` add Recall@10 and nDCG@10 (:func:`qrels_report`). ``unpaired``
    (with ``query_side`` and ``texts``): a map fitted without pairs (:mod:`.unpaired`), recorded only if trusted."""
    if anchors not in ("paired", "unpaired"):
        raise SubspacesError(f"anchors must be 'paired' or 'unpaired', got {anchors!r}")
    if unpaired or texts is not None:
        _check_unpaired(unpaired, texts, query_side, anchors, pairs, maps, map_params)
    elif query_side and anchors != "paired":
        raise SubspacesError("a query-side migration fits its map on pairs: drop --anchors unpaired")
    if anchors == "paired" and params and not unpaired:
        raise SubspacesError(
            "params are the unpaired aligner's (mini-vec2vec); the paired maps take map_params (per map kind)"
        )
    if pairs is not None and pairs < 1:
        raise SubspacesError(f"--pairs must be at least 1, got {pairs}")
    kinds = list(maps) if maps is not None else list(pair_maps.KINDS)
    for kind in kinds:
        pair_maps.make(kind, (map_params or {}).get(kind))  # an unknown map or parameter: refused before any work
    evaluation = load_qrels(qrels, queries) if qrels is not None else None
    choice_texts = _choice_queries(queries, evaluation, query_side, unpaired or texts is not None, seed)
    domain = unpaired_maps.read_domain_texts(texts, seed=seed) if unpaired else None
    with store._writing("store migrate"):  # first: a second writer is refused before a model loads
        encoder, fingerprint = store.load_model(model, name)
        prompts = folder_prompts(encoder)  # the new model's, by convention (its rows: documents; its queries)
        encode = functools.partial(
            _encode, store, model, encoder, fingerprint, batch_size=batch_size, ray=ray, actors=actors
        )
        manifest = store.manifest
        asked = {"anchors": anchors, "heldout": heldout, "seed": seed, "params": _plain(params)}
        if domain is not None:
            asked |= {"anchors": "unpaired", "texts": unpaired_maps.texts_digest(domain)}
        elif anchors == "paired":
            asked |= {"maps": kinds, "map_params": _plain(map_params), "holdout": holdout}
            if query_side:
                asked["queries"] = unpaired_maps.texts_digest(choice_texts) if choice_texts else None
        source_name = manifest.active
        source_space = manifest.spaces[source_name]
        if source_space.model.matches(fingerprint):
            raise SubspacesError(f"{fingerprint.label()} is already the store's model: nothing to migrate")
        replaced = stale = None
        if query_side:
            for key, entry in source_space.query_maps.items():
                if fingerprint.matches(ModelFingerprint.from_dict(entry["model"])):
                    differs = _differs(entry.get("options") or {}, asked, pairs)
                    if not differs:
                        return dict(entry["report"])
                    replaced, stale = _replaced("the query-side map", entry.get("options") or {}, differs), key
                    break
            if domain is not None:  # the old map stays until the new one is trusted
                report = _query_side_unpaired(
                    store, encode, encoder, fingerprint, domain, texts, heldout, params, seed, batch_size,
                    show_progress, evaluation, asked, stale,
                )  # fmt: skip
                return report | ({"replaced": replaced} if replaced else {})
            if stale is not None:
                _drop_query_map(store, source_name, stale)
        else:
            for space_name in manifest.pending():
                space = manifest.spaces[space_name]
                if not space.model.matches(fingerprint):
                    other = space.model.name == fingerprint.name  # same name, other weights (a retrained model)
                    raise SubspacesError(
                        f"a migration to {space.model.label()} is pending"
                        + (f", fitted for other weights than this {fingerprint.label()}" if other else "")
                        + "; commit it (store migrate --commit) first"
                    )
                differs = _differs(space.options, asked, pairs)
                if not differs:  # an interrupted migration to this model, or a rerun: finish its mapping
                    store._models[space_name] = encoder
                    store._sync(space_name, show_progress=show_progress, ray=ray, actors=actors)
                    return space.report
                replaced = _replaced("the pending fit", space.options or space.report, differs)
                _discard(store, space_name)
        rows = store._load_rows(source_name)
        with_text = np.flatnonzero([t is not None for t in rows.texts])
        n = len(rows.ids)
        if len(with_text) < 10:
            raise SubspacesError(
                f"space {source_name} holds {len(with_text)} rows with texts; a map is fitted on stored texts "
                "re-embedded by the new model (at least 10, with more held out to measure it): import the rows' "
                "texts, or fit one without pairs from a sample of domain texts: --query-side --unpaired --texts FILE"
            )
        held = min(heldout, len(with_text) // 5)
        if pairs is None:  # a map needs several pairs per dimension to be well posed (4096-d LLM embedders too)
            dim = max(fingerprint.dimension, source_space.model.dimension)
            pairs = max(2_000, 4 * dim) if anchors == "paired" else 20_000
        order = with_text[np.random.default_rng(seed).permutation(len(with_text))]
        test, fit_rows = order[:held], order[held : held + pairs]

        start = time.perf_counter()
        texts = rows.texts[np.concatenate([fit_rows, test])].tolist()
        new_all = encode(texts, prompts.get("document"), show_progress=show_progress)
        # real queries choose the query-side map (see maps.fit_and_choose)
        choice_vectors = encode(choice_texts, prompts.get("query")) if choice_texts else None
        encode_s = time.perf_counter() - start
        target, new_test = new_all[: len(fit_rows)], new_all[len(fit_rows) :]
        source = rows.vectors[fit_rows]
        direction = "queries" if query_side else "rows"
        fit_start = time.perf_counter()
        if anchors == "unpaired":
            aligner: Any = MiniVec2Vec.from_params(dict(params or {}), random_state=seed, verbose=show_progress)
            aligner.fit(source, target)
            candidates: dict[str, Any] = {}
            summary: dict[str, Any] = {"chosen": "mini-vec2vec (unpaired)", "direction": "old -> new (rows)"}
        else:
            aligner, candidates, summary = pair_maps.fit_and_choose(
                source,
                target,
                direction,
                kinds=kinds,
                params=map_params,
                holdout=holdout,
                random_state=seed,
                queries=choice_vectors,
                among=(rows.vectors[test], new_test),
                rows=_unpaired_sample(rows.vectors, test, seed) if query_side else None,
            )
        fit_s = time.perf_counter() - fit_start
        report = _report(aligner, candidates, summary, rows.vectors[test], new_test, direction)
        report |= {
            "mode": "query-side" if query_side else "rewrite",
            "rows": n,
            "pairs": int(len(fit_rows)),
            "anchors": anchors,
        } | _timings(encode_s, fit_s, len(texts), n)
        if query_side:
            report |= pair_maps.query_microseconds(aligner, fingerprint.dimension)
        if evaluation is not None:
            report["qrels"] = qrels_report(
                store, source_name, rows, encoder, aligner, direction, evaluation, test, new_test, batch_size
            )
        options = asked | {"pairs": pairs}
        if query_side:
            report["migrate_seconds"] = round(time.perf_counter() - start, 3)
            _add_query_map(store, source_name, encoder, fingerprint, aligner, report, options)
        else:
            new_name = _add_pending_space(store, source_name, fingerprint, aligner, report, options, prompts)
            store._models[new_name] = encoder
            store._sync(new_name, show_progress=show_progress, ray=ray, actors=actors)
            report["migrate_seconds"] = round(time.perf_counter() - start, 3)
            manifest.save(store.path)  # the space's report, with its seconds
        return report | ({"replaced": replaced} if replaced else {})


def _replaced(what: str, was: dict[str, Any], differs: list[str]) -> str:
    """What a refit replaced: ``what`` with the earlier values of the options that differ."""
    return f"{what} with " + ", ".join(f"{key} {was.get(key, '?')}" for key in differs)


def _choice_queries(
    queries: Any, evaluation: Any, query_side: bool, unpaired: bool, seed: int, most: int = 1_000
) -> list[str]:
    """The query texts (at most ``most``, seeded) that choose a query-side paired map, or none."""
    if queries is None:
        return []
    if evaluation is None and (not query_side or unpaired):
        raise SubspacesError(
            "--queries without --qrels choose a query-side map fitted on pairs (--query-side, not --unpaired); "
            "else give --qrels with them"
        )
    if not query_side or unpaired:
        return []
    if evaluation is not None:
        found = list(evaluation[0].values())
    else:
        found = [str(t) for t in (queries if isinstance(queries, dict) else _read_queries(queries)).values()]
    found = list(dict.fromkeys(t for t in found if t.strip()))
    if not found:
        raise DataError("no query text to choose the map by", path=None if isinstance(queries, dict) else queries)
    if len(found) > most:
        found = [found[i] for i in sorted(np.random.default_rng(seed).choice(len(found), most, replace=False))]
    return found


def _check_unpaired(
    unpaired: bool, texts: Any, query_side: bool, anchors: str, pairs: int | None, maps: Any, map_params: Any
) -> None:
    """Refuse, before any work, options an unpaired query-side fit cannot take."""
    for refused, message in (
        (not unpaired, "--texts is the domain sample of an unpaired fit: add --unpaired (and --query-side)"),
        (not query_side, "an unpaired map from domain texts is used query-side: add --query-side"),
        (texts is None, "--unpaired needs --texts FILE: a sample of domain texts, one a line (or .jsonl)"),
        (anchors != "paired", "--unpaired fits mini-vec2vec on the domain texts: drop --anchors unpaired"),
        (pairs is not None, "--pairs counts re-embedded store texts; an unpaired fit uses none: drop --pairs"),
        (maps is not None or map_params, "--maps are fitted on pairs; an unpaired fit is mini-vec2vec's: drop --maps"),
    ):
        if refused:
            raise SubspacesError(message)


UNPAIRED_SAMPLE = 20_000  # stored rows a query-side map learns the old space's ranking from (bounded at any size)


def _unpaired_sample(vectors: np.ndarray, held: np.ndarray, seed: int) -> np.ndarray:
    """A seeded sample of the stored rows, the held-out ones left out (they measure the map)."""
    keep = np.setdiff1d(np.arange(len(vectors)), held)
    if len(keep) > UNPAIRED_SAMPLE:
        keep = np.sort(np.random.default_rng(seed).choice(keep, UNPAIRED_SAMPLE, replace=False))
    return vectors[keep]


MIN_HELDOUT = 20  # fewer re-embedded rows than this make top-10 overlap among them meaningless


def _query_side_unpaired(
    store: Store,
    encode: Any,
    encoder: Any,
    fingerprint: ModelFingerprint,
    domain: list[str],
    texts_path: Any,
    heldout: int,
    params: dict[str, Any] | None,
    seed: int,
    batch_size: int,
    show_progress: bool,
    evaluation: Any,
    options: dict[str, Any],
    stale: str | None,
) -> dict[str, Any]:
    """The unpaired query-side fit (:mod:`.unpaired`): ``domain`` texts embedded by the new model, mini-vec2vec onto a
    sample of the active space's rows, refused (nothing recorded, ``stale`` kept) unless the aligner trusts it, else
    recorded in ``stale``'s stead. ``overlap@10`` is measured on ``heldout`` stored rows with texts, where there are."""
    name = store.manifest.active
    space = store.manifest.spaces[name]
    unpaired_maps.check_count(domain, texts_path, (fingerprint.dimension, space.model.dimension))
    rows = store._load_rows(name)
    n = len(rows.ids)
    rng = np.random.default_rng(seed)
    stored = np.sort(rng.choice(n, min(n, unpaired_maps.SAMPLE), replace=False))
    with_text = np.flatnonzero([t is not None for t in rows.texts])
    held = with_text[rng.permutation(len(with_text))[: min(heldout, len(with_text))]]
    if len(held) < MIN_HELDOUT:
        held = held[:0]

    start = time.perf_counter()
    prompt = folder_prompts(encoder).get("document")
    encoded = encode(domain + rows.texts[held].tolist(), prompt, show_progress=show_progress)
    encode_s = time.perf_counter() - start
    new, new_held = encoded[: len(domain)], encoded[len(domain) :]
    fit_start = time.perf_counter()
    aligner = unpaired_maps.fit(new, rows.vectors[stored], params=params, seed=seed, show_progress=show_progress)
    fit_s = time.perf_counter() - fit_start
    fitted = unpaired_maps.as_query_map(aligner, new)
    spreads = unpaired_maps.spread(fitted.transform(new), rows.vectors[stored], seed=seed)
    what = f"the unpaired map of {fingerprint.label()}'s queries into space {name}"
    reason = unpaired_maps.refusal(aligner, what, spreads)
    if reason is not None:
        raise SubspacesError(reason)

    summary = {"chosen": "mini-vec2vec (unpaired)", "direction": "new -> old (queries)"}
    report = _report(fitted, {}, summary, rows.vectors[held], new_held, "queries")
    if not len(held):
        report["overlap@10"] = None
        report["overlap_note"] = (
            f"no top-10 overlap with a true re-embed: it needs {MIN_HELDOUT}+ stored rows with texts to re-embed, "
            f"and space {name} holds {len(with_text)}"
        )
    report |= {
        "mode": "query-side",
        "rows": n,
        "anchors": "unpaired",
        "texts": len(domain),
        "stored_sample": int(len(stored)),
        "trust": unpaired_maps.verdict(aligner) | {"spread": spreads},
    } | _timings(encode_s, fit_s, len(domain) + len(held), n if len(with_text) == n else None)
    report |= pair_maps.query_microseconds(fitted, fingerprint.dimension)
    if evaluation is not None:
        report["qrels"] = qrels_report(
            store, name, rows, encoder, fitted, "queries", evaluation, held, new_held, batch_size,
            reembed=len(with_text) > 0,
        )  # fmt: skip
    report["migrate_seconds"] = round(time.perf_counter() - start, 3)
    if stale is not None:
        _drop_query_map(store, name, stale)
    _add_query_map(store, name, encoder, fingerprint, fitted, report, options)
    return report


def _timings(encode_s: float, fit_s: float, encoded: int, rows: int | None) -> dict[str, float]:
    """A fit's seconds, and a full re-embed's estimate to 3 figures (``rows`` None: none, some row has no text)."""
    per_row = encode_s / max(encoded, 1)
    out = {
        "encode_seconds": round(encode_s, 3),
        "fit_seconds": round(fit_s, 3),
        "encode_seconds_per_row": round(per_row, 6),
    }
    if rows is not None:
        out["reembed_seconds_estimate"] = float(f"{per_row * rows:.3g}")
    return out


def _add_pending_space(
    store: Store,
    source: str,
    fingerprint: ModelFingerprint,
    aligner: Any,
    report: dict,
    options: dict,
    prompts: dict[str, str] | None = None,
) -> str:
    """A new pending space of ``fingerprint``'s model, to be mapped from ``source``; its name."""
    manifest = store.manifest
    name = str(1 + max(int(k) for k in manifest.spaces))
    table, aligner_dir = f"space_{name}", f"aligners/{name}"
    # Leftovers of a run killed before its manifest was written are not part of the store: replace them.
    shutil.rmtree(store.path / aligner_dir, ignore_errors=True)
    store._database.drop(table)
    backfill.forget_native(store, name)
    store._database.create(table, fingerprint.dimension)
    aligner.save(store.path / aligner_dir)
    manifest.spaces[name] = Space(
        table=table,
        model=fingerprint,
        source="mapped",
        mapped_from=source,
        aligner=aligner_dir,
        state="pending",
        report=report,
        options=options,
        prompts=dict(prompts or {}),
    )
    manifest.save(store.path)
    return name


def _encode(
    store: Store,
    model: Any,
    encoder: Any,
    fingerprint: Any,
    texts: list[str],
    prompt: str | None,
    *,
    batch_size: int,
    show_progress: bool = False,
    ray: bool | str,
    actors: int | None,
) -> np.ndarray:
    """Unit new-model vectors of ``texts`` after ``prompt`` (on Ray Data with ``ray``)."""
    if not ray:
        return encoders.encode(encoder, texts, prompt, batch_size=batch_size, show_progress=show_progress)
    scaleout.start(ray)
    return scaleout.encode_texts(
        texts,
        model=scaleout.shippable(model, fingerprint, encoder),
        runtime=store.runtime,
        expected=fingerprint,
        batch_size=batch_size,
        block_rows=1024,
        actors=actors,
        prompt=prompt,
    )


def _report(
    chosen: Any,
    candidates: dict[str, Any],
    summary: dict[str, Any],
    old: np.ndarray,
    new: np.ndarray,
    direction: str,
    k: int = 10,
) -> dict[str, Any]:
    """Top-``k`` overlap with a true re-embed on the held-out rows, of the chosen map and of each candidate."""
    report: dict[str, Any] = {"map": summary["chosen"], "direction": summary["direction"], "heldout": int(len(old))}
    if len(old) < 2:
        return report
    report[f"overlap@{k}"] = round(pair_maps.agreement(chosen, old, new, direction, k), 4)
    table = {}
    for kind, fitted in candidates.items():
        table[kind] = summary["candidates"][kind] | {
            f"overlap@{k}": round(pair_maps.agreement(fitted, old, new, direction, k), 4)
        }
    if table:
        report["candidates"] = table
        report["selection_pairs"] = summary["selection_pairs"]
        report["chosen_by"] = summary["chosen_by"]
        if "selection_queries" in summary:
            report["selection_queries"] = summary["selection_queries"]
    return report


QUERY_MAPS = "query_maps"


def _add_query_map(
    store: Store, space: str, encoder: Any, fingerprint: Any, fitted: Any, report: dict[str, Any], options: dict
) -> str:
    """Save ``fitted`` under ``query_maps/SPACE/KEY`` (first), then record it; ``encoder`` stays loaded."""
    record = store.manifest.spaces[space]
    key = str(1 + max([int(k) for k in record.query_maps] or [0]))
    folder = f"{QUERY_MAPS}/{space}/{key}"
    shutil.rmtree(store.path / folder, ignore_errors=True)
    fitted.save(store.path / folder)
    record.query_maps[key] = {
        "model": fingerprint.to_dict(),
        "map": folder,
        "report": report,
        "options": options,
        "prompts": folder_prompts(encoder),
    }
    store.manifest.save(store.path)
    store._models[f"query:{fingerprint.weights}"] = encoder
    return key


def _drop_query_map(store: Store, space: str, key: str) -> None:
    entry = store.manifest.spaces[space].query_maps.pop(key)
    store.manifest.save(store.path)
    store._query_maps.pop((space, key), None)
    shutil.rmtree(store.path / entry["map"], ignore_errors=True)


# -- evaluation with relevance judgements -------------------------------------------------------------------------
def load_qrels(qrels: Any, queries: Any) -> tuple[dict[str, str], dict[str, dict[str, float]]]:
    """``(queries, qrels)``: query id -> text, and query id -> {relevant id: grade}, from files or dicts. Queries:
    ``.jsonl`` or ``id<TAB>text`` lines; qrels: ``.jsonl``, ``qid<TAB>docid[<TAB>grade]`` (or TREC's
    ``qid 0 docid grade``; a header line is skipped), or ``.json`` ``{qid: [ids] | {id: grade}}``. Only queries with
    a text and a relevant id of grade above 0 are kept (docs/store.md, "Migration")."""
    if qrels is None or queries is None:
        raise SubspacesError("--qrels and --queries go together: relevance judgements, and the queries' texts")
    texts = dict(queries) if isinstance(queries, dict) else _read_queries(queries)
    judged = _plain_qrels(qrels) if isinstance(qrels, dict) else _read_qrels(qrels)
    kept = {q: {d: g for d, g in rel.items() if g > 0} for q, rel in judged.items() if q in texts}
    kept = {q: rel for q, rel in kept.items() if rel}
    if not kept:
        raise DataError("no query of the qrels has a text in the queries file and a relevant id", path=qrels)
    return {q: str(texts[q]) for q in kept}, kept


def _plain_qrels(qrels: dict[Any, Any]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for q, rel in qrels.items():
        rel = rel if isinstance(rel, dict) else dict.fromkeys([rel] if isinstance(rel, (str, int)) else rel, 1.0)
        out[str(q)] = {str(d): float(g) for d, g in rel.items()}
    return out


def _lines(path: Any) -> list[tuple[int, Any]]:
    """Each non-blank line with its number: a JSON object of a ``.jsonl`` file, else the line's text."""
    if str(path).endswith((".jsonl", ".jsonl.gz")):
        return list(read_jsonl(path))
    with open_text(check_file(path)) as handle:
        return [(i, line.rstrip("\n").lstrip("\ufeff")) for i, line in enumerate(handle, 1) if line.strip()]


def _read_queries(path: Any) -> dict[str, str]:
    out: dict[str, str] = {}
    for number, line in _lines(path):
        if isinstance(line, dict):
            try:
                key = next(line[f] for f in ("id", "_id", "query_id", "qid") if f in line)
                out[str(key)] = str(next(line[f] for f in ("text", "query", "question") if f in line))
            except StopIteration as exc:
                raise DataError("not a JSON object with an id and a text field", path=path, line=number) from exc
        else:
            parts = line.split("\t", 1)
            if len(parts) != 2:
                raise DataError("expected 'id<TAB>text'", path=path, line=number)
            out[parts[0]] = parts[1]
    return out


def _read_qrels(path: Any) -> dict[str, dict[str, float]]:
    if str(path).endswith(".json"):
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise DataError(f"unreadable JSON ({exc})", path=path) from exc
        if not isinstance(data, dict):
            raise DataError("expected an object {query id: [ids] or {id: grade}}", path=path)
        return _plain_qrels(data)
    out: dict[str, dict[str, float]] = {}
    lines = _lines(path)
    for number, line in lines:
        if isinstance(line, dict):
            try:
                q = str(next(line[f] for f in ("query_id", "qid", "query-id") if f in line))
                d = str(next(line[f] for f in ("doc_id", "corpus_id", "corpus-id", "id") if f in line))
                grade = float(next((line[f] for f in ("score", "relevance", "grade") if f in line), 1))
            except (ValueError, StopIteration, TypeError) as exc:
                raise DataError("not a JSON object with a query id and a document id", path=path, line=number) from exc
        else:
            parts = line.split("\t") if "\t" in line else line.split()
            if len(parts) == 4:  # TREC: qid iteration docid grade
                parts = [parts[0], parts[2], parts[3]]
            if len(parts) not in (2, 3):
                raise DataError("expected 'query id<TAB>document id[<TAB>grade]'", path=path, line=number)
            try:
                grade = float(parts[2]) if len(parts) == 3 else 1.0
            except ValueError:
                if number == lines[0][0]:
                    continue  # a header line
                raise DataError(f"grade {parts[2]!r} is not a number", path=path, line=number) from None
            q, d = parts[0], parts[1]
        out.setdefault(q, {})[d] = grade
    return out


def _scores(top: np.ndarray, ids: np.ndarray, relevant: dict[str, float], k: int) -> tuple[float, float]:
    """Recall@k and nDCG@k (graded, log2 discount) of one ranking (row positions ``top`` into ``ids``)."""
    found = [relevant.get(str(ids[i]), 0.0) for i in top[:k]]
    recall = sum(1 for g in found if g > 0) / len(relevant)
    dcg = sum(g / np.log2(rank + 2) for rank, g in enumerate(found))
    ideal = sum(g / np.log2(rank + 2) for rank, g in enumerate(sorted(relevant.values(), reverse=True)[:k]))
    return recall, (dcg / ideal if ideal else 0.0)


def judged_figures(top: np.ndarray, ids: np.ndarray, judged: list[dict[str, float]], k: int) -> dict[str, float]:
    """Mean Recall@k and nDCG@k of rankings ``top`` (row positions into ``ids``), one per judged query."""
    pairs = [_scores(t, ids, rel, k) for t, rel in zip(top, judged, strict=True)]
    return {f"{m}@{k}": round(float(np.mean([p[i] for p in pairs])), 4) for i, m in enumerate(("recall", "ndcg"))}


def _evaluate(
    queries: np.ndarray, rows: np.ndarray, ids: np.ndarray, judged: list[dict[str, float]], k: int
) -> dict[str, float]:
    return judged_figures(ops.top_rows(rows, queries, min(k, len(rows))), ids, judged, k)


def qrels_report(
    store: Store,
    space: str,
    rows: Any,
    encoder: Any,
    fitted: Any,
    direction: str,
    evaluation: tuple[dict[str, str], dict[str, dict[str, float]]],
    test: np.ndarray,
    new_test: np.ndarray,
    batch_size: int,
    k: int = 10,
    reembed: bool = True,
) -> dict[str, Any]:
    """Recall@k and nDCG@k of the judged queries for the old store, the migrated one and a re-embed over a sample (the
    held-out rows plus every judged row, re-embedded), and of the old and migrated search over the whole store; the
    old queries need the old model here. Without ``reembed`` (no texts) only the whole store is searched."""
    texts, judged = evaluation
    position = {str(row_id): i for i, row_id in enumerate(rows.ids)}
    relevant = sorted({position[d] for rel in judged.values() for d in rel if d in position} - set(test.tolist()))
    missing = [d for rel in judged.values() for d in rel if d not in position]
    no_text = [i for i in relevant if rows.texts[i] is None]
    if reembed and no_text:
        raise SubspacesError(
            f"{len(no_text)} judged rows have no text to re-embed (first: id {rows.ids[no_text[0]]!r}); "
            "the qrels' re-embedded baseline needs their texts"
        )
    qids = list(texts)
    grades = [judged[q] for q in qids]
    query_prompt = folder_prompts(encoder).get("query")
    new_queries = encoders.encode(
        encoder, [texts[q] for q in qids], query_prompt, batch_size=batch_size, show_progress=None
    )
    old_queries = None
    if not store.manifest.spaces[space].model.foreign:
        old_queries = store.encode([texts[q] for q in qids], "query", space, batch_size=batch_size)

    def figures(old_rows: np.ndarray, ids: np.ndarray, new_rows: np.ndarray | None = None) -> dict[str, Any]:
        """The migrated search, the re-embedded one (``new_rows``) and the old one, over the same rows."""
        if direction == "queries":
            mapped = _evaluate(fitted.transform(new_queries), old_rows, ids, grades, k)
        else:
            chunks = np.array_split(old_rows, max(1, len(old_rows) // 16384))
            mapped = _evaluate(new_queries, np.concatenate([fitted.transform(c) for c in chunks]), ids, grades, k)
        out = {"migrated": mapped}
        if new_rows is not None:
            out["reembedded"] = _evaluate(new_queries, new_rows, ids, grades, k)
        if old_queries is not None:
            out["old"] = _evaluate(old_queries, old_rows, ids, grades, k)
        return out

    out: dict[str, Any] = {"queries": len(qids), "sample_rows": 0, "judged_ids_not_in_store": len(missing)}
    if not reembed:
        return out | {
            "store": figures(rows.vectors, rows.ids),
            f"recall@{k}_of_reembed": None,
            "note": "the store holds no texts: no re-embedded baseline to compare with",
        }
    sample = np.concatenate([test, np.asarray(relevant, dtype=np.int64)]).astype(np.int64)
    prompt = folder_prompts(encoder).get("document")
    extra = (
        encoders.encode(encoder, rows.texts[relevant].tolist(), prompt, batch_size=batch_size, show_progress=None)
        if relevant
        else np.zeros((0, new_test.shape[1]), dtype=np.float32)
    )
    result = figures(rows.vectors[sample], rows.ids[sample], np.concatenate([new_test, extra]) if len(test) else extra)
    base = result["reembedded"][f"recall@{k}"]
    return out | {
        "sample_rows": int(len(sample)),
        "sample": result,
        "store": figures(rows.vectors, rows.ids),
        f"recall@{k}_of_reembed": round(result["migrated"][f"recall@{k}"] / base, 4) if base else None,
    }


def _plain(params: dict[str, Any] | None) -> dict[str, Any] | None:
    """``params`` as the manifest's JSON keeps them (so a rerun's compare equal to the recorded ones)."""
    return json.loads(json.dumps(params, default=str)) if params else None


def _differs(recorded: dict[str, Any], asked: dict[str, Any], pairs: int | None) -> list[str]:
    """The fit options in which this run differs from a recorded one (none recorded: ``pairs``, if given)."""
    if not recorded:
        return ["pairs"] if pairs is not None else []
    wanted = asked | ({"pairs": pairs} if pairs is not None else {})
    return [key for key, value in wanted.items() if recorded.get(key) != value]


def _discard(store: Store, name: str) -> None:
    """Drop pending space ``name``: out of the manifest first, then its table, aligner and quantized copy."""
    space = store.manifest.spaces.pop(name)
    store.manifest.save(store.path)
    store._models.pop(name, None)
    store._loaded.pop(name, None)
    with lance_errors(str(store.path)):
        store._database.drop(space.table)
    if space.aligner:
        shutil.rmtree(store.path / space.aligner, ignore_errors=True)
    shutil.rmtree(store.path / quantized.FOLDER / name, ignore_errors=True)
    backfill.forget_native(store, name)


def commit(store: Store) -> str:
    """Make the pending space active (its rows complete) and retire the old one; returns the new active space."""
    with store._writing("store migrate --commit"):
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


def rollback(store: Store) -> str:
    """Undo :func:`commit`: the retired space the committed one was mapped from is active again, the committed one
    pending again. Refused when rows were added after the commit or another migration is pending. Returns the active
    space."""
    with store._writing("store migrate --rollback"):
        manifest = store.manifest
        name = manifest.active
        space = manifest.spaces[name]
        previous = space.mapped_from
        if space.source != "mapped" or previous is None or manifest.spaces[previous].state != "retired":
            raise SubspacesError(
                "nothing to roll back: the active space was not made active by `store migrate --commit`"
            )
        if manifest.pending():
            pending = manifest.spaces[manifest.pending()[0]].model.label()
            raise SubspacesError(f"a migration to {pending} is pending; commit it first, then roll back each commit")
        extra = store._ids(name) - store._ids(previous)
        if extra:
            raise SubspacesError(
                f"{len(extra):,} rows were added after the commit and exist only in {space.model.label()}'s space "
                f"(first: id {sorted(extra)[0]!r}); delete them (store delete) or keep the new model"
            )
        manifest.spaces[previous].state = "active"
        space.state = "pending"
        manifest.active = previous
        manifest.save(store.path)
        return previous
