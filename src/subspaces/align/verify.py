"""Label-free scores of a map, from the two unpaired training sets, and whether a finished map is to be trusted.

``fit`` chooses between passes and stops refining by :func:`bidirectional_nn_similarity`. Each check of a finished map
compares it with something it was not fitted to climb (the trivial maps, an independent pass, the candidates, known
pairs); :func:`verdict` turns them into problems and a confidence."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from subspaces.align.anchors import AnchorSet
from subspaces.align.neighbours import NeighbourIndex
from subspaces.align.preprocess import normalize_rows
from subspaces.results import JSONResult

if TYPE_CHECKING:
    from subspaces.align.params import AnchorParams, StructureParams
    from subspaces.align.passes import CandidateRecord, FitDiagnostics


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


TRUST_ROWS = 4096  # rows of each side the trust score compares (the cost of CSLS grows with their square)
# How far (x chance level) a candidate's trust score must beat the anchored map's to replace or flag it.
IDENTITY_REFERENCE_MARGIN = 0.25


def map_agreement(rows: np.ndarray, first: np.ndarray, second: np.ndarray) -> float:
    """Mean cosine between ``rows`` mapped by ``first`` and by ``second`` (the agreement check)."""
    return float(np.mean(np.sum(normalize_rows(rows @ first) * normalize_rows(rows @ second), axis=1)))


def trust_score(source_probe: np.ndarray, target_probe: np.ndarray, matrix: np.ndarray) -> float:
    """:func:`csls_score` of the mapped source rows among the target rows, on rows the stopping rules did not see."""
    return csls_score(cross_similarities(source_probe, target_probe, matrix))


def trust_lift(final: float, identity: float | None, control: float) -> float:
    """How far a map's :func:`trust_score` rises above the best trivial map's (the identity's, ``None`` where the dims
    differ, and ``control``, a random rotation's: chance level), in units of chance level."""
    trivial = control if identity is None else max(control, identity)
    return (final - trivial) / max(abs(control), 1e-12)


def trust_problem(final: float, identity: float | None, control: float, *, margin: float) -> str | None:
    """Why a map with trust score ``final`` is not trusted (its :func:`trust_lift` is at most ``margin``), or None."""
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


MIN_JUDGING_PAIRS = 20  # fewer known pairs are too coarse (and too easy) to judge a map by
MAX_JUDGING_PAIRS = 4096  # an evenly spaced subset above this (the check holds an n x n block)
PAIRED_TOP1_FLOOR = 0.5  # the line between a broken map and a usable one, as a share of the pairs


def paired_top1(source: np.ndarray, target: np.ndarray, matrix: np.ndarray) -> float:
    """Share of known pairs whose mapped source row has its own target row nearest among the pairs' targets; a tie
    (within 1e-5: the BLAS may round one dot product two ways) counts as found, so repeated texts lose nothing."""
    sims = cross_similarities(source, target, matrix)
    return float((np.diagonal(sims) >= sims.max(axis=1) - 1e-5).mean())


@dataclass
class PairedCheck(JSONResult):
    """:func:`paired_check`'s record (``diagnostics_.paired_check``)."""

    pairs: int
    scored: int  # an evenly spaced subset of at most MAX_JUDGING_PAIRS
    judged: bool  # enough pairs (MIN_JUDGING_PAIRS) to judge the map by
    top1: float
    identity_top1: float | None  # None: the dims differ
    problem: str | None


def paired_check(pairs: tuple[np.ndarray, np.ndarray], matrix: np.ndarray, identity: np.ndarray | None) -> PairedCheck:
    """How a map fitted with known ``pairs`` (preprocessed rows) places them: top-1 among the pairs (at most
    :data:`MAX_JUDGING_PAIRS`), the identity's where the dims agree, and the problem if it fails. In-sample, so it
    cannot certify a map, but one that places under half of them, or does worse than the identity, is broken."""
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
    return PairedCheck(pairs=n, scored=len(rows), judged=judged, top1=top1, identity_top1=unmapped, problem=problem)


@dataclass
class TrustCheck(JSONResult):
    """:func:`trust_report`'s record (``diagnostics_.trust``): the kept map's trust score beside the trivial maps'."""

    final: float
    identity: float | None  # None: the dims differ
    random_rotation: float  # chance level
    lift: float  # :func:`trust_lift`
    margin: float
    score: str
    rows: list[int]  # each side's rows scored


def trust_report(
    trust_a: np.ndarray, trust_b: np.ndarray, final: float, eye: np.ndarray | None, rotations: list, margin: float
) -> TrustCheck:
    """The trust check of a map whose trust score is ``final``: the trivial maps' scores on the same rows (``eye``
    where the dims agree, the best of the random ``rotations``) and the lift over them."""
    identity = trust_score(trust_a, trust_b, eye) if eye is not None else None
    control = max(trust_score(trust_a, trust_b, rotation) for rotation in rotations)
    return TrustCheck(
        final=final,
        identity=identity,
        random_rotation=control,
        lift=trust_lift(final, identity, control),
        margin=margin,
        score=f"csls (k={TRUST_K})",
        rows=[len(trust_a), len(trust_b)],
    )


def candidate_beats(record: CandidateRecord) -> bool:
    """Whether a candidate's trust score beats the anchored map's by more than the margin."""
    return record.lift is not None and record.lift > IDENTITY_REFERENCE_MARGIN


def row_count_problems(anchors: AnchorParams, structure: StructureParams, n_source: int, n_target: int) -> list[str]:
    """Warnings for k-means with too few rows per cluster to be trusted (fewer than 4 a cluster are refused)."""
    per_cluster = 20  # below this, centroids are noise the structure and refine-2 stages then fit
    fewest = min(n_source, n_target)
    problems = []
    for what, rows, clusters in (  # not refine-2's centroids: that stage is kept only where it does not lower the score
        ("anchors", min(fewest, anchors.sample), anchors.n_clusters),
        ("structure", min(fewest, structure.sample), structure.n_clusters if structure.n_iter else 0),
    ):
        if clusters and rows < per_cluster * clusters:
            problems.append(
                f"{rows} rows for {clusters} {what} clusters (fewer than {per_cluster} a cluster): "
                f"too few for the cluster counts to be trustworthy; use more rows or fewer clusters"
            )
    return problems


def kept_why(kept: str, trust: TrustCheck, reference: CandidateRecord, recipe: CandidateRecord) -> str:
    """One sentence for ``diagnostics_.kept_why``: which map was kept, and the trust scores that chose it."""
    scores = [
        f"{name} {record.trust:.4f} ({record.lift:+.2f} x chance against the anchored map)"
        for name, record in (("identity candidate", reference), ("paper recipe", recipe))
        if record.trust is not None and record.lift is not None
    ]
    margin = f"a candidate replaces the anchored map above +{IDENTITY_REFERENCE_MARGIN:g} x chance"
    listed = f"; candidates' CSLS trust: {', '.join(scores)}; {margin}" if scores else "; no candidate ran"
    return f"kept: {kept}, CSLS trust {trust.final:.4f} (chance {trust.random_rotation:.4f}){listed}"


def verdict(
    d: FitDiagnostics, earlier: list[str], converged_swap_share: float | None
) -> tuple[list[str], float | None]:
    """The problems found with the kept map (``earlier`` ones first; each a sentence for a warning) and its
    confidence in [0, 1] (0 with a problem): the agreement with an independent pass where checked, else the known
    pairs' top-1 where they judge, else the share of seeded cluster pairs the last structural round kept. A kept
    candidate is not judged by the anchored passes' checks; its lead over the anchored map is its confidence."""
    kept, converged, agreement, paired, trust = d.kept, d.converged, d.agreement, d.paired_check, d.trust
    assert trust is not None  # a fit records it
    reference = d.identity_reference
    candidate = d.recipe_candidate if kept == "paper recipe" else reference
    swapped = d.restarts[d.chosen_restart].structure_swapped
    judged = paired if paired is not None and paired.judged else None
    anchored = kept not in ("identity reference", "paper recipe")
    problems = list(earlier)
    if anchored and converged is False and agreement.agreement is None and judged is None:
        problems.append(
            f"no pass of the alignment converged: the kept one's structural search still swapped "
            f"{swapped[-1]:.0%} of the seeded cluster pairs in its last round "
            f"(converged: <= {converged_swap_share:.0%}); the map is probably wrong. Try more n_restarts, "
            f"more data, or check the pair on a few paired texts."
        )
    if judged is not None and judged.problem is not None:
        problems.append(judged.problem)
    problem = trust_problem(trust.final, trust.identity, trust.random_rotation, margin=trust.margin)
    if problem is not None:
        problems.append(problem)
    if candidate_beats(reference) and kept == "anchors":
        problems.append(
            f"a map refined from the identity (the vectors left as they are, then refine-1) "
            f"scores clearly higher than the fitted map on the label-free score (CSLS "
            f"{reference.trust:.4f} against {trust.final:.4f}; chance level {trust.random_rotation:.4f}): "
            f"the two models probably share coordinates and the fitted map is in a worse basin. Refit with "
            f"init='identity' (--init identity), or check the pair on a few paired texts."
        )
    if anchored and agreement.disagrees:
        problems.append(
            f"no two independent passes of the alignment agree ({agreement.compared} compared): their maps "
            f"give the same rows a mean cosine of {agreement.agreement:.2f} at most (trusted: >= "
            f"{agreement.threshold:g}; passes whose structure did not converge are not compared); a right "
            f"map is found again from other anchors, so this one is probably wrong. Try more data, more "
            f"agreement_search passes, or fit with a few hundred known pairs (--pairs-source/--pairs-target)."
        )
    confidence = 1.0 - swapped[-1] if swapped else None
    if not anchored:  # the kept candidate's lead over the anchored map, in units of chance level, capped
        assert candidate.lift is not None
        confidence = min(float(candidate.lift), 1.0)
    elif agreement.agreement is not None:
        confidence = min(max(agreement.agreement, 0.0), 1.0)
    elif judged is not None:
        confidence = judged.top1
    return problems, 0.0 if problems else confidence
