"""Unsupervised alignment of embedding spaces (mini-vec2vec). The public names load on first use (PEP 562), so the
light modules beside them (``params``, ``budget``) import without the estimator's scientific stack."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from subspaces.align.aligner import MiniVec2Vec
    from subspaces.align.metrics import evaluate_alignment, retrieval_metrics

_HOMES = {
    "MiniVec2Vec": "subspaces.align.aligner",
    "evaluate_alignment": "subspaces.align.metrics",
    "retrieval_metrics": "subspaces.align.metrics",
}
__all__ = ["MiniVec2Vec", "evaluate_alignment", "retrieval_metrics"]


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'subspaces.align' has no attribute {name!r}")
    return getattr(importlib.import_module(_HOMES[name]), name)
