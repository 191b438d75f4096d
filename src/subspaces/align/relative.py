"""Step 3 of mini-vec2vec: the first map, from relative representations (cosines to each space's own matched
anchors; Moschella et al., 2023), in which the two spaces share coordinates."""

from __future__ import annotations

import numpy as np

from subspaces.align.neighbours import neighbour_means
from subspaces.align.preprocess import normalize_rows
from subspaces.align.procrustes import procrustes


def relative_representation(x: np.ndarray, anchors: np.ndarray) -> np.ndarray:
    """Cosines to the anchors, centred per anchor (each model's baseline similarity level differs) and
    L2-normalised per row."""
    rel = x @ anchors.T
    return normalize_rows(rel - rel.mean(axis=0, keepdims=True))


def initial_map(
    source: np.ndarray,
    target: np.ndarray,
    source_anchors: np.ndarray,
    target_anchors: np.ndarray,
    *,
    k: int = 50,
    precision: str = "float32",
) -> np.ndarray:
    """Orthogonal Procrustes from the source rows to their pseudo-pairs: the mean of each one's ``k`` nearest target
    rows in the shared relative space (searched in ``precision``)."""
    rel_source = relative_representation(source, source_anchors)
    rel_target = relative_representation(target, target_anchors)
    pseudo = neighbour_means(rel_source, rel_target, target, k, precision=precision)
    return procrustes(source, normalize_rows(pseudo))
