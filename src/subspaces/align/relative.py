"""Step 3 of mini-vec2vec: relative representations and the first map from them.

A vector's relative representation is its cosine to each anchor of its own space (Moschella et al., 2023).
Matched anchors make the two relative spaces share coordinates, so a source vector's nearest target vectors in
relative space are candidate counterparts; the mean of its k nearest is its pseudo-pair.
"""

from __future__ import annotations

import numpy as np

from subspaces.align.neighbours import neighbour_means
from subspaces.align.preprocess import normalize_rows
from subspaces.align.procrustes import procrustes


def relative_representation(x: np.ndarray, anchors: np.ndarray) -> np.ndarray:
    """Cosines to the anchors, centred per anchor and L2-normalised per row.

    Centring each anchor's column removes the model's baseline similarity level (static word-vector models
    give every pair a high cosine, transformers a low one), which would otherwise differ between the spaces.
    """
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
