"""Unsupervised alignment of embedding spaces (mini-vec2vec)."""

from subspaces.align.aligner import MiniVec2Vec
from subspaces.align.metrics import evaluate_alignment, retrieval_metrics

__all__ = ["MiniVec2Vec", "evaluate_alignment", "retrieval_metrics"]
