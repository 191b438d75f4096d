"""Matryoshka Representation Learning (Kusupati et al., 2022): SimCSE's InfoNCE at every nested prefix
``normalize(h[:, :d])``, summed with weights, through sentence-transformers' ``MatryoshkaLoss``."""

from __future__ import annotations

from collections.abc import Sequence

from sentence_transformers.sentence_transformer.losses import MatryoshkaLoss
from torch import nn

from subspaces.errors import DimensionError
from subspaces.losses.settings import InfoNCESettings
from subspaces.losses.simcse import SimCSELoss
from subspaces.vectors import resolve_dims


class MatryoshkaSimCSELoss(MatryoshkaLoss):
    """MatryoshkaLoss over :class:`SimCSELoss` (the name runs record; SimCSELoss gives each unsupervised view its own
    features dict, so the forward cache keeps both views' outputs)."""


def matryoshka_simcse_loss(
    model: nn.Module,
    dims: Sequence[int | None],
    weights: Sequence[float] | None = None,
    *,
    temperature: float = InfoNCESettings.temperature,
    hard_negative_weight: float = InfoNCESettings.hard_negative_weight,
) -> MatryoshkaSimCSELoss:
    """MRL with SimCSE's InfoNCE at every prefix in ``dims`` (``None``: the full size), one weight per dim
    (default 1 each)."""
    full = model.get_embedding_dimension()
    if weights is not None and len(weights) != len(dims):
        raise DimensionError(f"{len(weights)} weight(s) for {len(dims)} dim(s): give one weight per dim")
    if weights is not None and any(w < 0 for w in weights):
        raise DimensionError(f"Matryoshka weights must be non-negative, got {list(weights)}")
    resolved = [full if d is None else int(d) for d in dims]
    resolve_dims(resolved, full, order="descending", what="Matryoshka dims")  # each in 1..full
    if len(set(resolved)) != len(resolved):
        raise DimensionError(f"Matryoshka dims repeat: {resolved}")
    loss = SimCSELoss(model, temperature=temperature, hard_negative_weight=hard_negative_weight)
    return MatryoshkaSimCSELoss(model, loss, resolved, list(weights) if weights is not None else None)
