"""A vector store on LanceDB: add texts, search them (exact, ANN, Matryoshka funnel), migrate to a new model."""

from subspaces.store.core import Store
from subspaces.store.fingerprint import ModelFingerprint

__all__ = ["ModelFingerprint", "Store"]
