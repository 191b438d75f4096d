"""Label-free scores of a map, from the two unpaired training sets: ``fit`` uses them to choose between passes
and to stop refining. The checks that judge a finished map are :mod:`.verify`'s."""

from __future__ import annotations

import numpy as np

from subspaces.align.anchors import AnchorSet
from subspaces.align.neighbours import NeighbourIndex
from subspaces.align.preprocess import normalize_rows


def mean_nn_similarity(source_probe: np.ndarray, target: np.ndarray | NeighbourIndex, matrix: np.ndarray) -> float:
    """Mean cosine between each mapped source probe and its nearest target vector (a wrong map leaves the probes in
    empty space)."""
    index = target if isinstance(target, NeighbourIndex) else NeighbourIndex(target)
    forward, _ = index.search(normalize_rows(source_probe @ matrix), 1)
    return float(forward.mean())


def bidirectional_nn_similarity(
    source_probe: np.ndarray,
    target_probe: np.ndarray,
    source: np.ndarray | NeighbourIndex,
    target: np.ndarray | NeighbourIndex,
    matrix: np.ndarray,
) -> float:
    """Average of :func:`mean_nn_similarity` source->target (``W``) and target->source (``W^T``), so that sending
    everything into one dense region does not score well."""
    forward = mean_nn_similarity(source_probe, target, matrix)
    backward = mean_nn_similarity(target_probe, source, matrix.T)
    return 0.5 * (forward + backward)


def anchor_consistency(anchors: AnchorSet, matrix: np.ndarray) -> float:
    """Share of source anchors whose nearest target anchor of the same run, after mapping, is their QAP partner
    (chance level: 1 / clusters per run)."""
    mapped = normalize_rows(anchors.source @ matrix)
    hits = 0
    for run in np.unique(anchors.run):
        rows = np.flatnonzero(anchors.run == run)
        sims = mapped[rows] @ anchors.target[rows].T
        hits += int((sims.argmax(axis=1) == np.arange(len(rows))).sum())
    return hits / len(anchors.run)


def cross_similarities(source_probe: np.ndarray, target_probe: np.ndarray, matrix: np.ndarray) -> np.ndarray:
    """Cosines between every mapped source probe (rows) and every target probe (columns)."""
    return normalize_rows(source_probe @ matrix) @ target_probe.T


TRUST_K = 5  # CSLS neighbours of the trust score


def csls_score(sims: np.ndarray, k: int = TRUST_K) -> float:
    """Mean over source rows of the best CSLS (Conneau et al., 2018) among the target rows:
    ``CSLS(x, y) = 2 cos(x, y) - r_T(x) - r_S(y)``, ``r`` the mean cosine to the ``k`` nearest rows of the other
    space, so that a map gains nothing from making hubs."""
    import torch

    k_t, k_s = min(k, sims.shape[1]), min(k, sims.shape[0])
    rows = torch.from_numpy(np.ascontiguousarray(sims, dtype=np.float32))
    r_t = rows.topk(k_t, dim=1, sorted=False).values.mean(dim=1)
    r_s = rows.T.contiguous().topk(k_s, dim=1, sorted=False).values.mean(dim=1)
    best = (2 * rows - r_s[None, :]).max(dim=1).values
    return float(best.double().mean() - r_t.double().mean())
