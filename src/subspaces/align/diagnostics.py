"""Diagnostics: how good a map looks, label-free (from the two unpaired training sets), and one check against the
known pairs a user fitted with.

None of these but :func:`paired_check` looks at paired data, so ``fit`` may use them to choose between restarts and
to stop refining; :func:`paired_check` only judges a fit made with known pairs, after the fact.
"""

from __future__ import annotations

from typing import Any

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


def cross_similarities(source_probe: np.ndarray, target_probe: np.ndarray, matrix: np.ndarray) -> np.ndarray:
    """Cosines between every mapped source probe (rows) and every target probe (columns)."""
    return normalize_rows(source_probe @ matrix) @ target_probe.T


TRUST_K = 5  # CSLS neighbours of the trust score: 5 separated good from bad maps best on the dev pool (of 5-50)


def csls_score(sims: np.ndarray, k: int = TRUST_K) -> float:
    """Mean over source rows of the best CSLS (Conneau et al., 2018) among the target rows.

    ``CSLS(x, y) = 2 cos(x, y) - r_T(x) - r_S(y)``, ``r`` the mean cosine to the ``k`` nearest rows of the other
    space. A map that pushes points into a dense region raises their cosines and their ``r_T`` alike, so, unlike
    the plain nearest-neighbour similarity, it gains nothing from making hubs.
    """
    import torch

    k_t, k_s = min(k, sims.shape[1]), min(k, sims.shape[0])
    # torch's top-k selects in half the time of numpy's partition (4,096 x 4,096, 5 of a fit's calls); it selects
    # the same values, and a row's k values (k=5) are summed in order, at any thread count.
    rows = torch.from_numpy(np.ascontiguousarray(sims, dtype=np.float32))
    r_t = rows.topk(k_t, dim=1, sorted=False).values.mean(dim=1)
    r_s = rows.T.contiguous().topk(k_s, dim=1, sorted=False).values.mean(dim=1)
    best = (2 * rows - r_s[None, :]).max(dim=1).values
    return float(best.double().mean() - r_t.double().mean())


def mutual_nn_rate(sims: np.ndarray) -> float:
    """Share of mapped source rows whose nearest target row has them as its nearest mapped source row.

    A hub is the nearest neighbour of many rows but mutual with at most one, so a hub-making map loses here.
    """
    forward = sims.argmax(axis=1)
    backward = sims.argmax(axis=0)
    return float((backward[forward] == np.arange(len(sims))).mean())


def knn_mixing(mapped_source: np.ndarray, target: np.ndarray, k: int = 10) -> float:
    """How well the mapped source rows mix with the target rows: the share of each row's ``k`` nearest rows
    (both sets pooled, itself left out) that come from the other set, over that share's value for two samples of
    one distribution; 1: indistinguishable (a two-sample k-NN statistic, Schilling 1986), 0: apart.

    A right map makes the mapped source another sample of the target distribution; a wrong one, a hub-making
    one included, leaves mapped rows nearer each other than the target rows.
    """
    rows = np.vstack([normalize_rows(mapped_source), target]).astype(np.float32)
    n_source, n = len(mapped_source), len(rows)
    sims = rows @ rows.T
    np.fill_diagonal(sims, -np.inf)
    k = min(k, n - 1)
    ids = np.argpartition(-sims, k - 1, axis=1)[:, :k]
    from_source = ids < n_source
    is_source = np.arange(n) < n_source
    cross = np.where(is_source[:, None], ~from_source, from_source).mean(axis=1)
    # Under perfect mixing a row's neighbours are drawn from the other n - 1 rows at random.
    expected = np.where(is_source, n - n_source, n_source) / (n - 1)
    return float(0.5 * ((cross / expected)[is_source].mean() + (cross / expected)[~is_source].mean()))


def map_agreement(rows: np.ndarray, first: np.ndarray, second: np.ndarray) -> float:
    """Mean cosine between ``rows`` mapped by ``first`` and by ``second``: how far two maps found from
    independent anchors agree (the agreement check of ``MiniVec2Vec.agreement_threshold``)."""
    return float(np.mean(np.sum(normalize_rows(rows @ first) * normalize_rows(rows @ second), axis=1)))


def trust_score(source_probe: np.ndarray, target_probe: np.ndarray, matrix: np.ndarray) -> float:
    """The label-free score the trust check uses: :func:`csls_score` of the mapped source rows among the target
    rows. Chosen on the dev pool (``benchmarks/align_protocol.py trust-check``) over the plain neighbour
    similarity, the mutual-neighbour rate and the k-NN mixing, which all scored wrong fitted maps at or above the
    supervised ceiling; score it on rows the fit's stopping rules did not see, as those rules climb their own."""
    return csls_score(cross_similarities(source_probe, target_probe, matrix))


def trust_lift(final: float, identity: float | None, control: float) -> float:
    """How far a map's :func:`trust_score` rises above the best trivial map's (the identity where the dims agree,
    ``None`` otherwise, and ``control``: a random rotation's, chance level), in units of chance level."""
    trivial = control if identity is None else max(control, identity)
    return (final - trivial) / max(abs(control), 1e-12)


def trust_problem(final: float, identity: float | None, control: float, *, margin: float) -> str | None:
    """Why a map with trust score ``final`` is not trusted against the trivial maps, or None.

    Trusted when it beats the best trivial map by more than ``margin`` x chance level (:func:`trust_lift`).
    """
    if trust_lift(final, identity, control) > margin:
        return None
    scores = f"random rotation: {control:.4f}, chance level; margin: {margin:g} x chance"
    if identity is not None and identity >= control:
        return (
            f"the fitted map's label-free score (CSLS {final:.4f}) is not clearly better than leaving the vectors "
            f"unmapped (identity: {identity:.4f}; {scores}); the map is probably wrong, and the identity may serve "
            f"better."
        )
    return (
        f"the fitted map's label-free score (CSLS {final:.4f}) is not clearly better than a random rotation's "
        f"({scores}); the map is probably wrong."
    )


MIN_JUDGING_PAIRS = 20  # fewer known pairs leave top-1 among them too coarse (and too easy) to judge a map by
MAX_JUDGING_PAIRS = 4096  # an evenly spaced subset above this: the check holds an n x n block (64 MiB at 4,096)
PAIRED_TOP1_FLOOR = 0.5  # the protocol's line between a broken map and a usable one, as a share of the pairs


def paired_top1(source: np.ndarray, target: np.ndarray, matrix: np.ndarray) -> float:
    """Share of known pairs whose mapped source row has its own target row as nearest among the pairs' targets
    (a tie counts as found, so a pair file that repeats a text loses nothing). Ties within 1e-5: the BLAS may give
    one dot product two roundings at two places of a product (OpenBLAS on an AMD AVX2 CPU did)."""
    sims = cross_similarities(source, target, matrix)
    return float((np.diagonal(sims) >= sims.max(axis=1) - 1e-5).mean())


def paired_check(
    pairs: tuple[np.ndarray, np.ndarray], matrix: np.ndarray, identity: np.ndarray | None
) -> dict[str, Any]:
    """How a map fitted with known ``pairs`` (preprocessed rows) places them: top-1 among the pairs (on at most
    :data:`MAX_JUDGING_PAIRS` of them), the identity's where the dims agree, and the problem if it fails.

    The map has seen these pairs (each weighs one neighbour-mean pair of thousands in every step), so this is an
    in-sample check: it cannot certify a map (a right one usually places every pair, top-1 1.0), but one that does
    not put at least half of the user's own re-embedded texts next to their new vectors, or does worse than
    leaving them unmapped, is broken. Top-1 among more pairs is harder, so the share is reported with their
    number. Judged from :data:`MIN_JUDGING_PAIRS` pairs; with it, ``fit`` no longer asks the structural swap share,
    which stays high on pools whose clusters overlap, right map or not.
    """
    n = len(pairs[0])
    rows = np.linspace(0, n - 1, min(n, MAX_JUDGING_PAIRS)).round().astype(int)
    source, target = pairs[0][rows], pairs[1][rows]
    top1 = paired_top1(source, target, matrix)
    unmapped = paired_top1(source, target, identity) if identity is not None else None
    judged = n >= MIN_JUDGING_PAIRS
    problem = None
    if judged and (top1 < PAIRED_TOP1_FLOOR or (unmapped is not None and top1 < unmapped)):
        against = f"; unmapped: {unmapped:.0%}" if unmapped is not None else ""
        problem = (
            f"the map puts only {top1:.0%} of {len(rows)} known pairs' source texts nearest their own target "
            f"vectors among those pairs (in-sample; trusted: >= {PAIRED_TOP1_FLOOR:.0%} and no worse than leaving "
            f"them unmapped{against}); check that row i of both pair files embeds the same text."
        )
    return {
        "pairs": n,
        "scored": len(rows),
        "judged": judged,
        "top1": top1,
        "identity_top1": unmapped,
        "problem": problem,
    }
