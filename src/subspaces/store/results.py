"""What a store search returns: :class:`SearchResult`, one per query."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from subspaces.results import JSONResult
from subspaces.store.columns import parsed


@dataclass(eq=False, kw_only=True)
class SearchResult(JSONResult, Mapping[str, Any]):
    """One query's ``k`` nearest rows, best first: ids, scores, texts (or None) and metadata (or None). It also
    reads as the dict :meth:`Store.search` returned before it (``result["ids"]``, ``{**result}``; docs/store.md)."""

    query: str | None = None
    ids: list[str]
    scores: list[float]
    texts: list[str | None]
    metadata: list[dict[str, Any] | None] = field(default_factory=list)

    def __getitem__(self, key: str) -> Any:
        return self.to_dict()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.to_dict())

    def __len__(self) -> int:
        return len(self.to_dict())


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
