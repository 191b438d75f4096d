"""What a store search returns: :class:`SearchResult`, one per query."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from subspaces.store.columns import parsed

FIELDS = ("query", "ids", "scores", "texts", "metadata")


@dataclass(eq=False)
class SearchResult(Mapping[str, Any]):
    """The ``k`` nearest rows of one query, best first: their ids, scores (cosine, or the quantized score without
    rescoring), texts (None for a row imported without one) and metadata (a dict, or None).

    It reads as a mapping too (``result["ids"]``, ``dict(result)``, ``{**result}``), as search results were
    plain dicts before; ``to_dict()`` is its JSON form."""

    ids: list[str]
    scores: list[float]
    texts: list[str | None]
    metadata: list[dict[str, Any] | None] = field(default_factory=list)
    query: str | None = None

    def __getitem__(self, key: str) -> Any:
        if key not in FIELDS:
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self) -> Iterator[str]:
        return iter(FIELDS)

    def __len__(self) -> int:
        return len(FIELDS)

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in FIELDS}


def hits(
    ids: np.ndarray, texts: np.ndarray, metadata: np.ndarray, scores: np.ndarray, rows: np.ndarray
) -> SearchResult:
    """One query's hits: ``rows`` index ``ids``/``texts``/``metadata`` (a -1, no row, is dropped)."""
    keep = np.asarray(rows) >= 0
    rows, scores = np.asarray(rows)[keep].astype(np.int64), np.asarray(scores)[keep]
    return SearchResult(
        ids=ids[rows].tolist(),
        scores=scores.astype(float).tolist(),
        texts=texts[rows].tolist(),
        metadata=[parsed(m) for m in metadata[rows]],
    )
