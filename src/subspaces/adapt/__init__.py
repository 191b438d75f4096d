"""Matryoshka adapter for embeddings users already have (after Matryoshka-Adaptor, Yoon et al., EMNLP 2024)."""

from subspaces.adapt.adapter import MatryoshkaAdapter, adapt_file

__all__ = ["MatryoshkaAdapter", "adapt_file"]
