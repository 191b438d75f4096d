"""Search plans: how query vectors are ranked against one space's rows. :func:`plan` turns :meth:`Store.search`'s
options into :class:`Exact`, :class:`Funnel`, :class:`Ann`, :class:`Quantized` or :class:`Conditional`; each
applies its ``where`` filter before the top ``k``, and keeps what it derives on the rows (:class:`~.table.Rows`).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Optional, Union, get_args

import numpy as np

from subspaces import topk
from subspaces.cache import LRUCache
from subspaces.errors import DimensionError, SubspacesError
from subspaces.settings import setting
from subspaces.store import search as ops
from subspaces.store.matryoshka import trained
from subspaces.store.quantized import search_copy
from subspaces.store.results import SearchResult, hits
from subspaces.store.shrink import chosen, load_adapter
from subspaces.store.table import Rows, check_filter, column_objects, vectors_of

if TYPE_CHECKING:
    from subspaces.store.core import Store

Rerank = Literal["full", "none"]
RERANK: tuple[str, ...] = get_args(Rerank)
ANN_REFINE = 4  # an ANN search re-ranks k x this many of the index's candidates by their full vectors
RESCORE = 4  # a quantized search rescores k x this many candidates
MATCHES_KEPT = 16  # the where= filters whose matches are kept per table version


@dataclass(frozen=True)
class SearchSettings:
    """How a store search ranks, declared once (the search commands derive their options from these fields):
    :meth:`plan_options` are :func:`plan`'s keywords, ``k`` and ``batch_size`` :meth:`Store.search`'s.
    ``refine_factor`` and ``rescore`` as on the command line: None is the default multiple, 0 none."""

    k: int = setting(10, "Results per query.", "-k")
    dims: Optional[int] = setting(
        None, "Funnel: shortlist by the first DIMS coordinates of --basis, then re-rank at full size."
    )
    rerank: Rerank = setting("full", "With --dims: re-rank the shortlist by full vectors (funnel).")
    shortlist: Optional[int] = setting(None, f"With --dims: the funnel's shortlist, x k ({ops.SHORTLIST_FACTOR}).")
    basis: Optional[ops.Basis] = setting(
        None,
        "With --dims: whose first axes the funnel reads: the model's, the principal axes (pca) or the `store shrink` "
        "adapter (a store's). Default: model for vector files; in a store, what `store shrink` chose, else model for "
        "a Matryoshka model, else pca.",
    )
    ann: bool = setting(False, "Use the store's ANN index (`store index`).", "--ann")
    refine_factor: Optional[int] = setting(
        None, f"With --ann: re-rank this x k candidates exactly (0: none; {ANN_REFINE})."
    )
    quantized: bool = setting(False, "Search the quantized copy (`store index --quantize`).", "--quantized")
    rescore: Optional[int] = setting(
        None, f"With codes (--quantize, a store's --quantized): rescore this x k candidates (0: none; {RESCORE})."
    )
    batch_size: int = setting(64, "Queries per encoder batch.")
    query_prompt: Optional[str] = setting(None, 'Instead of the recorded query prompt ("": none).')

    def __post_init__(self) -> None:
        for name in ("refine_factor", "rescore"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise SubspacesError(f"{name} is a multiple of k, at least 0 (0: none), got {value}")

    def plan_options(self) -> dict[str, Any]:
        """:func:`plan`'s keywords (``where``, ``condition`` and ``head`` aside)."""
        return {
            "dims": self.dims,
            "rerank": self.rerank,
            "shortlist": self.shortlist,
            "basis": self.basis,
            "ann": self.ann,
            "refine_factor": (ANN_REFINE if self.refine_factor is None else self.refine_factor) or None,
            "quantized": self.quantized,
            "rescore": (RESCORE if self.rescore is None else self.rescore) or None,
        }


@dataclass(frozen=True)
class Exact:
    where: str | None = None

    def run(self, store: Store, name: str, vectors: np.ndarray, k: int) -> list[SearchResult]:
        rows, subset = _rows(store, name, self.where)
        if rows.file is not None:  # a space too large for memory: its vector file, a block at a time
            return _found(rows, *topk.exact_blocks(rows.blocks(), vectors, k, len(rows), subset=subset))
        if rows.index is None:
            rows.index = topk.flat_index(rows.vectors)
        return _found(rows, *topk.exact(rows.index, vectors, k, subset=subset))


@dataclass(frozen=True)
class Funnel:
    """A prefix shortlist of ``shortlist * k`` rows (default: ``SHORTLIST_FACTOR``) re-ranked by full vectors
    (``rerank``)."""

    dims: int
    rerank: bool = True
    shortlist: int | None = None
    basis: str | None = None
    where: str | None = None

    def run(self, store: Store, name: str, vectors: np.ndarray, k: int) -> list[SearchResult]:
        rows, subset = _rows(store, name, self.where)
        dims = self.dims
        basis = self.basis or default_basis(store, name, dims)
        adapter = load_adapter(store, name) if basis == "adapter" else None  # rows and queries through its map
        axes = None if adapter is not None or basis == "model" else rows.principal_axes()
        prefix_queries = ops.prefix_rows(vectors if adapter is None else adapter.transform(vectors), dims, axes)
        # the prefix ranking alone is scored exactly; a funnel's shortlist index is chosen by its size
        codes = self.rerank and topk.scans_codes(len(rows), len(vectors))
        prefixes = rows.prefixes
        key = (basis, dims, codes)
        if key not in prefixes:

            def prefix_blocks() -> Iterator[np.ndarray]:
                for _, block in rows.blocks():
                    yield ops.prefix_rows(block if adapter is None else adapter.transform(block), dims, axes)

            build = topk.int8_index_of(prefix_blocks, dims) if codes else None
            prefixes[key] = build if build is not None else topk.flat_index_of(prefix_blocks(), dims)
        if not self.rerank:
            return _found(rows, *topk.exact(prefixes[key], prefix_queries, k, subset=subset))
        admitted = len(rows) if subset is None else len(subset)
        factor = ops.SHORTLIST_FACTOR if self.shortlist is None else self.shortlist
        size = topk.check_k(k, max(admitted, 1)) * factor
        found = topk.funnel(prefixes[key], rows.floats, vectors, k, size, prefix_queries=prefix_queries, subset=subset)
        return _found(rows, *found)


@dataclass(frozen=True)
class Ann:
    """LanceDB's ANN index, ``refine_factor * k`` candidates re-ranked by full vectors (None: none)."""

    nprobes: int = 20
    refine_factor: int | None = ANN_REFINE
    where: str | None = None

    def run(self, store: Store, name: str, vectors: np.ndarray, k: int) -> list[SearchResult]:
        table = store._table(name)
        topk.check_k(k, 1)
        if not table.indices():
            raise SubspacesError(f"{store.path}: no ANN index yet; build it with `subspaces store index`")
        out = []
        for vector in vectors:
            found = table.nearest(vector, k, self.nprobes, self.refine_factor, self.where)
            # the score is the stored vector's cosine, as exact search's (LanceDB's `_distance` mixes PQ and exact)
            scores = vectors_of(found.column("vector"), vectors.shape[1]) @ vector
            order = np.argsort(-scores, kind="stable")
            ids, texts, metadata = (column_objects(found, c) for c in ("id", "text", "metadata"))
            out.append(hits(ids, texts, metadata, scores[order], order))
        return out


@dataclass(frozen=True)
class Quantized:
    """The space's quantized copy (:meth:`Store.quantize`), ``rescore * k`` candidates rescored (None: none)."""

    rescore: int | None = RESCORE
    where: str | None = None

    def run(self, store: Store, name: str, vectors: np.ndarray, k: int) -> list[SearchResult]:
        return search_copy(store, name, vectors, k, self.rescore, where=self.where)


@dataclass(frozen=True)
class Conditional:
    """Rows and queries projected by tri-encoder ``head`` under ``condition``, ranked by cosine exactly."""

    condition: str
    head: Any
    where: str | None = None

    def run(self, store: Store, name: str, vectors: np.ndarray, k: int) -> list[SearchResult]:
        import torch

        from subspaces.models.heads import conditional_cosines
        from subspaces.models.triencoder import ConditionalCorpus

        rows, subset = _rows(store, name, self.where)
        tri = store.condition_head(self.head, name)
        fingerprint = store._checked_heads[tri][1]
        was_training = tri.training
        tri.eval()  # as its own similarity(): no dropout, and the condition-matrix cache in use
        try:
            with torch.no_grad():
                params, _ = tri.condition_params([self.condition])  # from the tri-encoder's condition-matrix cache
            if rows.conditioned is None:  # one cache of views for every head on these rows
                rows.conditioned = LRUCache(max_bytes=None, max_items=4, name="conditioned rows")
            if fingerprint not in rows.corpora:
                with warnings.catch_warnings():  # the rows are read-only, and nothing writes to them: no copy
                    warnings.simplefilter("ignore", UserWarning)
                    rows.corpora[fingerprint] = ConditionalCorpus(tri.head, rows.vectors, rows.conditioned)
            corpus, key = rows.corpora[fingerprint], (fingerprint, self.condition)
            queries = torch.from_numpy(np.ascontiguousarray(vectors, dtype=np.float32))
            if subset is None:
                return _found(rows, *corpus.search(queries, key, params, k))
            # a filter: every admitted row's conditional cosine, the others out of the top k
            topk.check_k(k, 1)
            cosines = conditional_cosines(tri.head, queries, params, corpus.view(key, params), corpus.vectors)
            admitted = torch.from_numpy(np.asarray(subset, dtype=np.int64))
            scores, best = torch.topk(cosines[:, admitted], min(k, len(subset)), dim=1)
            return _found(rows, scores.cpu().numpy(), admitted[best].cpu().numpy())
        finally:
            tri.train(was_training)


Plan = Union[Exact, Funnel, Ann, Quantized, Conditional]


def plan(
    full: int,
    *,
    dims: int | None = None,
    rerank: str = "full",
    shortlist: int | None = None,
    basis: str | None = None,
    ann: bool = False,
    nprobes: int = 20,
    refine_factor: int | None = ANN_REFINE,
    where: str | None = None,
    condition: str | None = None,
    head: Any | None = None,
    quantized: bool = False,
    rescore: int | None = RESCORE,
) -> Plan:
    """The plan :meth:`Store.search`'s options ask for, or a refusal of options that do not go together."""
    if rerank not in RERANK:
        raise SubspacesError(f"rerank must be one of {', '.join(RERANK)}, got {rerank!r}")
    if basis is not None and basis not in ops.BASES:
        raise SubspacesError(f"basis must be one of {', '.join(ops.BASES)}, got {basis!r}")
    if basis not in (None, "model") and (dims is None or dims == full):
        raise SubspacesError(f"basis {basis!r} says whose prefix to read: give dims below {full}")
    if dims is not None and not 0 < dims <= full:
        raise DimensionError(f"dims {dims} is outside 1..{full}")
    if shortlist is not None and shortlist < 1:
        raise SubspacesError(f"shortlist is a multiple of k and must be at least 1, got {shortlist}")
    if refine_factor is not None and refine_factor < 1:
        raise SubspacesError(f"refine_factor must be at least 1 (None: no re-ranking), got {refine_factor}")
    check_condition(condition, head, ann, dims)
    if where is not None:
        check_filter(where)
    if quantized:
        if ann or dims is not None or condition is not None:
            raise SubspacesError("quantized search reads the quantized copy alone: drop ann, dims and condition")
        return Quantized(rescore, where)
    if ann:
        if dims is not None:
            raise SubspacesError("the ANN index reads full vectors: give either ann or dims, not both")
        return Ann(nprobes, refine_factor, where)
    if condition is not None:
        return Conditional(condition, head, where)
    if dims is None or dims == full:
        return Exact(where)
    return Funnel(dims, rerank == "full", shortlist, basis, where)


def check_condition(condition: str | None, head: Any, ann: bool, dims: int | None) -> None:
    if (condition is None) != (head is None):
        raise SubspacesError("conditional search needs both a condition and a head (--condition with --head)")
    if condition is not None and (ann or dims is not None):
        raise SubspacesError("conditional search is exact over the projected rows: drop --ann and --dims")


def default_basis(store: Store, name: str, dims: int | None = None) -> str:
    """Whose axes a prefix search reads by default: shrink's choice, else model (Matryoshka), else pca."""
    picked = chosen(store, name, dims) if dims is not None else None
    if picked is not None:
        return picked
    return "model" if trained(store._space(name).model) else "pca"


def _rows(store: Store, name: str, where: str | None) -> tuple[Rows, np.ndarray | None]:
    """The space's rows (none: refused) and those filter ``where`` admits (None: no filter)."""
    rows = store._load_rows(name, refuse_empty=True)
    if where is None:
        return rows, None
    matches = rows.matches
    if where not in matches:
        if len(matches) >= MATCHES_KEPT:
            matches.pop(next(iter(matches)))
        matches[where] = store._table(name).matching(where, rows.rowids)
    return rows, matches[where]


def _found(rows: Rows, scores: Any, found: Any) -> list[SearchResult]:
    """Each query's hits, their ids, texts and metadata read in one go (:meth:`.table.Rows.take`)."""
    found = np.asarray(found, dtype=np.int64)
    ids, texts, metadata = rows.take(found)
    positions = np.where(found >= 0, np.arange(found.shape[1]), -1)
    return [hits(i, t, m, s, p) for i, t, m, s, p in zip(ids, texts, metadata, scores, positions, strict=True)]
