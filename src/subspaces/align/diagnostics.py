"""Label-free diagnostics: how good a map looks using only the two unpaired training sets.

None of these looks at paired data, so ``fit`` may use them to choose between restarts and to stop refining.
"""

from __future__ import annotations

import numpy as np

from subspaces.align.anchors import AnchorSet
from subspaces.align.neighbours import NeighbourIndex, knn
from subspaces.align.preprocess import normalize_rows


def mean_nn_similarity(source_probe: np.ndarray, target: np.ndarray | NeighbourIndex, matrix: np.ndarray) -> float:
    """Mean cosine between each mapped source probe and its nearest target vector.

    A right map puts each source vector next to a real target vector (its counterpart or a near paraphrase);
    a wrong one leaves it in empty space.
    """
    forward, _ = knn(normalize_rows(source_probe @ matrix), target, 1)
    return float(forward.mean())


def bidirectional_nn_similarity(
    source_probe: np.ndarray,
    target_probe: np.ndarray,
    source: np.ndarray | NeighbourIndex,
    target: np.ndarray | NeighbourIndex,
    matrix: np.ndarray,
) -> float:
    """Average of :func:`mean_nn_similarity` source->target (``W``) and target->source (``W^T``).

    Scoring both directions keeps a map from looking good by sending everything into one dense region.
    """
    forward = mean_nn_similarity(source_probe, target, matrix)
    backward = mean_nn_similarity(target_probe, source, matrix.T)
    return 0.5 * (forward + backward)


def anchor_consistency(anchors: AnchorSet, matrix: np.ndarray) -> float:
    """Share of source anchors whose nearest target anchor of the same run, after mapping, is their QAP partner.

    The anchors came from matching cluster *shapes*; a map learned from all the data that agrees with that
    matching confirms both. Chance level is 1 / clusters per run.
    """
    mapped = normalize_rows(anchors.source @ matrix)
    hits = 0
    for run in np.unique(anchors.run):
        rows = np.flatnonzero(anchors.run == run)
        sims = mapped[rows] @ anchors.target[rows].T
        hits += int((sims.argmax(axis=1) == np.arange(len(rows))).sum())
    return hits / len(anchors.run)


def trivial_gain_share(final: float, identity: float | None, control: float, *, tol: float = 1e-4) -> float | None:
    """Share of a map's lift above chance (``final - control``, control: a random rotation's score) that it owes
    to beating the best trivial map (the identity where the dims agree, else chance itself): 1 when that map is
    chance, near 0 when the identity scores as well; None when the map does not rise above chance."""
    lift = final - control
    if lift <= tol:
        return None
    trivial = control if identity is None else max(control, identity)
    return (final - trivial) / lift


def trust_problem(final: float, identity: float | None, control: float, *, margin: float, tol: float) -> str | None:
    """Why a map with label-free score ``final`` is not trusted against the trivial maps, or None.

    Not trusted when it does not beat chance (``control``) and the identity (``identity``, None where the dims
    differ) by ``tol``, or owes at most ``margin`` of its lift above chance to beating them.
    """
    share = trivial_gain_share(final, identity, control, tol=tol)
    trivial = control if identity is None else max(control, identity)
    if share is not None and share > margin and final > trivial + tol:
        return None
    if identity is not None and identity >= control:
        return (
            f"the fitted map's label-free score ({final:.4f}) is no better than leaving the vectors unmapped "
            f"(identity: {identity:.4f}; random rotation: {control:.4f}); the map is probably wrong, and the "
            f"identity may serve better."
        )
    return (
        f"the fitted map's label-free score ({final:.4f}) is no better than a random rotation's ({control:.4f}, "
        f"chance level); the map is probably wrong."
    )
