"""mini-vec2vec (Dar, 2025): a linear map between two embedding spaces learned from unpaired vectors.

    aligner = MiniVec2Vec(random_state=0).fit(source_vectors, target_vectors)   # different texts, no pairs
    moved = aligner.transform(old_store)        # old model's vectors, now in the new model's space

Stages (each its own module): centre + normalise (:mod:`.preprocess`); matched anchors from an ensemble of
k-means runs and quadratic assignment (:mod:`.anchors`, :mod:`.matching`); relative representations -> neighbour
means -> Procrustes (:mod:`.relative`, :mod:`.procrustes`); structural, neighbour-mean and centroid refinement
(:mod:`.refine`). Label-free diagnostics (:mod:`.diagnostics`) pick among ``n_restarts`` independent anchor
stages and stop refinement, and judge the result against two trivial maps (identity, random rotation).
``fit`` sees paired data only where the caller has some (``pairs=``: they replace the anchors, join every
refinement step and, from 20 of them, judge the map); ``max_seconds`` bounds its time.

Beyond the paper's notebook: a structural refinement (seeded k-means partitions whose pairing is corrected by
the clusters' similarity structure) that pulls a weak initial map into the right basin, restarts chosen by a
label-free score (and run only until one converges), runs filtered by matching agreement (``anchor_keep``),
relative representations centred per anchor, blended maps projected back to orthogonal, early stopping with the
best map kept, a centroid refinement that is only accepted if the label-free score does not drop, bidirectional
refine-1 steps, tail-averaged refine-1 iterates, and optional IVF indexes for the repeated searches.
``n_restarts=1, structure=StructureParams(n_iter=0), anchors=AnchorParams(kernel="gram"),
refine=RefineParams(bidirectional=False, average=False, orthogonalize=False, patience=100)`` is close to the
paper's plain recipe (the k-means and QAP solver still differ; see docs/align.md).
"""

from __future__ import annotations

import dataclasses
import inspect
import io
import logging
import os
import time
import warnings
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator

from subspaces.align.anchors import AnchorSet, matched_anchors
from subspaces.align.budget import Budget
from subspaces.align.diagnostics import (
    TRUST_K,
    anchor_consistency,
    bidirectional_nn_similarity,
    map_agreement,
    paired_check,
    trust_lift,
    trust_problem,
    trust_score,
)
from subspaces.align.neighbours import NeighbourIndex
from subspaces.align.params import (
    FIT_SECONDS,
    STAGES,
    AnchorParams,
    RefineParams,
    SearchParams,
    StageParams,
    StructureParams,
    check_together,
    from_flat,
)
from subspaces.align.preprocess import center_normalize, check_embeddings, normalize_rows
from subspaces.align.procrustes import orthogonality_gap, procrustes
from subspaces.align.refine import (
    NeighbourStep,
    StructureHistory,
    refine_by_centroids,
    refine_by_neighbours,
    refine_by_structure,
)
from subspaces.align.relative import initial_map
from subspaces.errors import ConvergenceWarning, DataError, DimensionError, SubspacesError
from subspaces.numerics import cpu_record
from subspaces.numerics import resolve as resolve_precision
from subspaces.state_folder import STATE_FILE, read_state_folder, write_state_folder

logger = logging.getLogger(__name__)

TRUST_ROWS = 4096  # rows of each side the trust score compares (the cost of CSLS grows with their square)
# How far (x chance level) the identity reference's trust score may beat the fitted map's before the fit is flagged.
# Chosen on dev (benchmarks/notes/align.md, seventeenth session): maps of 0.9 x the oracle or more trailed the
# reference by -0.01 to +0.12 x chance, wrong maps by 0.45-0.78 x (short proper names, paraphrase-l3); 0.1 flagged
# a good WordNet-names map (0.116).
IDENTITY_REFERENCE_MARGIN = 0.25
INITS = ("auto", "anchors", "identity")
IDENTITY_PASS = -2  # the pass number of a pass started from the identity (init="identity", or the reference)
FORMAT_VERSION = 2  # 2: parameters grouped by stage; 1: the 37 flat names (still read)
CONFIG_FILE = "aligner.json"


class MiniVec2Vec(BaseEstimator):
    """Unsupervised linear alignment of a source embedding space onto a target space (a scikit-learn estimator).

    Each stage's settings are one frozen dataclass (:mod:`.params`), checked when it is built:

        MiniVec2Vec(anchors=AnchorParams(n_runs=12), refine=RefineParams(n_iter=50), random_state=0)

    Args:
        anchors: matched anchors and the initial map (:class:`AnchorParams`).
        structure: structural refinement (:class:`StructureParams`; ``n_iter=0`` skips it).
        refine: refine-1 and refine-2 (:class:`RefineParams`).
        search: neighbour search and the label-free score (:class:`SearchParams`).
        n_restarts: at most this many independent full passes (anchors, initial map, refinements); the one
            with the best label-free score after refinement is kept.
        converged_swap_share: a pass has converged once its last structural round changed at most this share
            of the seeded cluster pairs (the label-free sign that the map agrees with both spaces' cluster
            structure; working pairs end at 0-6 %, failing ones at 16-42 %); no further restarts then.
            ``None`` always runs ``n_restarts`` and judges nothing. Where two passes agree (``agreement_threshold``)
            or 20 or more known pairs judge the map, the swap share does not judge it.
        trust_margin: a map is trusted only if its trust score (CSLS of the mapped source rows among the target
            rows, on up to 4,096 rows of each side that the fit's stopping rules did not score) beats the best
            trivial map's (the identity where the dims agree; the best of three random rotations, chance level)
            by more than this multiple of chance level. The default 0 asks only that it beat them: a weak veto,
            as no margin separates good maps from wrong ones on both dev pools (good maps lift 0.70 and more on
            WordNet but 0.06-0.15 on tweets, wrong ones up to 0.38; ``benchmarks/align_protocol.py
            trust-check``).
        agreement_threshold: after the restarts, one more independent pass (anchors, initial map, structure; no
            refinement) is run on its own seed, and the map is trusted only if two independent passes agree:
            the mean cosine of the rows that ``trust_margin`` scores, mapped by each, is at least this. A right
            map is found again from other anchors; a wrong one is one of many local optima. If the check pass
            agrees, it is refined too and the better of the two maps by final neighbour similarity is kept (agreeing
            maps can still differ: two trusted seeds of the test pools were 0.06 below their pools' others, and
            the check pass was the better map on both); if it disagrees, the agreement search
            (``agreement_search``) runs. The default 0.55 lies
            between the dev pools' wrong pairs (0.44 at most, refined or not; -0.01-0.01 where no map exists)
            and right ones (0.64-0.87 against the check pass on the 40k pools, 0.81 refined against refined on
            WordNet 6k): ``benchmarks/align_protocol.py trust-check``, ``benchmarks/align_pass_diagnostics.py``.
            ``None`` skips the check (it costs about a pass) and the confidence is then the structural
            one. Not run with known pairs, which anchor every pass alike (from 20 of them the pairs judge the map
            instead: :func:`~subspaces.align.diagnostics.paired_check`).
        agreement_search: when the check pass disagrees with the kept map, at most this many more passes are
            refined (the check pass first, then passes left unrefined, which do not count, then new passes on
            their own seeds) until two refined maps agree; the best-scoring map of an agreeing pair is kept.
            On small pools a pass finds the right basin about one time in three and the restarts often hold no
            right pass (``benchmarks/notes/align.md``); the search is what finds one, and where no pair agrees
            the map is flagged. 0: the check only judges (it is not refined), it never changes the map.
        search_anchor_clusters: the agreement search's new passes alternate between this many anchor clusters
            and ``anchors.n_clusters``, this count first (``None``: always ``anchors.n_clusters``). The search
            runs only where the restarts' passes and the check disagreed, so a second partition scale is a second
            chance: on the short-text dev pool no pass of 20 clusters found the right basin and 4 of 6 of 40 did,
            while 40 clusters everywhere did worse on a small dev pool (``benchmarks/notes/align.md``, "Short
            texts"). Fits whose check agrees never start a search pass, so their maps do not depend on it. Where
            the rows or ``anchors.sample`` are fewer than 4 x this count, the search keeps ``anchors.n_clusters``.
        init: where the map starts. ``"auto"`` (default): the paper's anchored passes and, where the dims agree,
            a second candidate refined from the identity (the vectors left as they are, then refine-1); the
            identity candidate is kept (and polished) if its CSLS trust score beats the anchored map's by more
            than :data:`IDENTITY_REFERENCE_MARGIN` x chance level, and ``diagnostics_["kept"]`` says which was
            kept and why. Two models of one family can share coordinates so closely that the identity is a better
            start than any anchors (short technical texts ``minilm-l6 -> paraphrase-l3``: default 0.055 top-1,
            a pass from the identity 0.880, issue 57). The map then depends on the target's coordinates.
            ``"anchors"``: the anchored passes only, blind to the coordinates, so a rotation or permutation of the
            target leaves the result unchanged; the identity candidate only flags a map it clearly beats.
            ``"identity"``: one pass from the identity, for a successor model that shares the source's
            coordinates (same family, fine-tuned); needs equal dims. There are no independent anchors to agree
            with, so the agreement check does not run; the trust check against the unrefined identity and random
            rotations still does.
        max_seconds: stop at the next safe point (between k-means runs, rounds, steps, passes) after this many
            seconds and keep the best map so far (``stopped_early_``); the first pass's initial map is always
            made. ``None``: no limit. The default (:data:`FIT_SECONDS`) is a bound, so that a fit never runs away.
        random_state: seed for every sample, k-means and QAP start.
        verbose: show progress bars.

    Fitted: ``matrix_`` (the map, on centred unit rows), ``converged_`` (trusted), ``confidence_`` (0 when not
    trusted; else the agreement of two independent passes, or with 20+ known pairs their in-sample top-1, which a
    right map usually takes to 1.0, or the structural stage's share of kept cluster pairs), ``stopped_early_``,
    ``diagnostics_`` (every score and check, saved with the map) and ``pass_maps_`` (each pass's structured and
    refined map, in ``diagnostics_["restarts"]`` order; for diagnosis, not saved).
    """

    def __init__(
        self,
        *,
        anchors: AnchorParams = AnchorParams(),
        structure: StructureParams = StructureParams(),
        refine: RefineParams = RefineParams(),
        search: SearchParams = SearchParams(),
        n_restarts: int = 3,
        converged_swap_share: float | None = 0.1,
        trust_margin: float = 0.0,
        agreement_threshold: float | None = 0.55,
        agreement_search: int = 4,
        search_anchor_clusters: int | None = 40,
        init: str = "auto",
        max_seconds: float | None = FIT_SECONDS,
        random_state: int | None = 0,
        verbose: bool = False,
    ) -> None:
        # scikit-learn's contract: store the arguments as given; fit (or check_params) validates them.
        self.anchors = anchors
        self.structure = structure
        self.refine = refine
        self.search = search
        self.n_restarts = n_restarts
        self.converged_swap_share = converged_swap_share
        self.trust_margin = trust_margin
        self.agreement_threshold = agreement_threshold
        self.agreement_search = agreement_search
        self.search_anchor_clusters = search_anchor_clusters
        self.init = init
        self.max_seconds = max_seconds
        self.random_state = random_state
        self.verbose = verbose

    @classmethod
    def from_params(cls, params: dict[str, Any], **overrides: Any) -> MiniVec2Vec:
        """An aligner from stage-grouped plain values (``{"anchors": {"n_runs": 12}, "n_restarts": 1}``, the
        ``--params`` JSON and the saved form); unknown stages or settings are errors naming the valid ones."""
        if not isinstance(params, dict):
            raise SubspacesError(f"aligner parameters must be a JSON object, got {type(params).__name__}")
        top = [name for name in inspect.signature(cls.__init__).parameters if name not in ("self", *STAGES)]
        unknown = sorted(set(params) - set(STAGES) - set(top))
        if unknown:
            raise SubspacesError(
                f"unknown aligner parameter(s) {', '.join(unknown)}; valid: "
                f"{', '.join([*STAGES, *top])} (stage settings nest under their stage)"
            )
        kwargs = {name: STAGES[name].from_dict(value) if name in STAGES else value for name, value in params.items()}
        return cls(**kwargs | overrides)

    def to_params(self) -> dict[str, Any]:
        """The inverse of :meth:`from_params`: plain, JSON-ready values."""
        return {
            name: value.to_dict() if isinstance(value, StageParams) else _plain(value)
            for name, value in self.get_params(deep=False).items()
        }

    def check_params(self) -> None:
        """Raise :class:`SubspacesError` on a bad parameter; ``fit`` calls it, callers may call it before any I/O."""
        for name, kind in STAGES.items():
            if not isinstance(getattr(self, name), kind):
                raise SubspacesError(f"{name} must be a {kind.__name__}, got {type(getattr(self, name)).__name__}")
        if isinstance(self.n_restarts, bool) or int(self.n_restarts) != self.n_restarts or self.n_restarts < 1:
            raise SubspacesError(f"n_restarts must be an integer of at least 1, got {self.n_restarts!r}")
        check_together(self.anchors, self.structure, self.converged_swap_share)
        if isinstance(self.trust_margin, bool) or not 0 <= self.trust_margin < float("inf"):
            raise SubspacesError(f"trust_margin must be a number of at least 0, got {self.trust_margin!r}")
        threshold = self.agreement_threshold
        if threshold is not None and (isinstance(threshold, bool) or not -1 <= threshold <= 1):
            raise SubspacesError(f"agreement_threshold must be a number in [-1, 1] or None, got {threshold!r}")
        search = self.agreement_search
        if isinstance(search, bool) or not isinstance(search, (int, np.integer)) or search < 0:
            raise SubspacesError(f"agreement_search must be an integer of at least 0, got {search!r}")
        clusters = self.search_anchor_clusters
        if clusters is not None and (
            isinstance(clusters, bool) or not isinstance(clusters, (int, np.integer)) or clusters < 3
        ):
            raise SubspacesError(f"search_anchor_clusters must be an integer of at least 3 or None, got {clusters!r}")
        if self.init not in INITS:
            raise SubspacesError(f"init must be one of {', '.join(INITS)}, got {self.init!r}")
        if self.max_seconds is not None and (isinstance(self.max_seconds, bool) or not self.max_seconds >= 0):
            raise SubspacesError(f"max_seconds must be a number of at least 0 or None, got {self.max_seconds!r}")

    def _check_rows(self, n_source: int, n_target: int) -> None:
        need = max(4 * self.anchors.n_clusters, self.anchors.relative_k, self.refine.k)
        for what, n in (("source", n_source), ("target", n_target)):
            if n < need:
                raise DataError(
                    f"{what} has {n} rows; the aligner needs at least {need} "
                    f"(4 x anchors.n_clusters={self.anchors.n_clusters}, and anchors.relative_k/refine.k neighbours)"
                )

    def fit(
        self, source: np.ndarray, target: np.ndarray, *, pairs: tuple[np.ndarray, np.ndarray] | None = None
    ) -> MiniVec2Vec:
        """Learn the map from unpaired ``source`` (n_a x d_a) and ``target`` (n_b x d_b) vectors.

        ``pairs``: optional known pairs ``(P_a, P_b)``, row i of each embedding the same text (a sample re-embedded
        with the new model). The initial map is then their orthogonal Procrustes instead of the unpaired anchors,
        they join every refinement step as fixed anchors, and one pass runs (restarts are for unlucky anchors).
        From 20 pairs they also judge the map (in-sample top-1 among them, ``diagnostics_["paired_check"]``).
        """
        from threadpoolctl import threadpool_limits

        self.check_params()
        # The large products (searches, k-means) run in torch's thread pool; numpy's are small (384 x 384 polar
        # factors, 1,024-row batches) and alternate with torch's many times a second, so two pools spin on the same
        # cores. WordNet 40k dev pool, 2 threads, BLAS on 2 threads -> 1: 38.5 -> 27.5 s (bfloat16 search),
        # 70.1 -> 56.4 s (float32, faiss's search included); benchmarks/notes/align.md, "One BLAS thread".
        with threadpool_limits(limits=1, user_api="blas"):
            problems = self._fit(source, target, pairs)
        for problem in problems:
            warnings.warn(problem, ConvergenceWarning, stacklevel=2)
        return self

    def _fit(self, source: np.ndarray, target: np.ndarray, pairs: tuple[np.ndarray, np.ndarray] | None) -> list[str]:
        """:meth:`fit`'s work; returns the warnings it is to give."""
        budget = Budget(self.max_seconds)
        # One float type for the whole fit, resolved once (the process's setting could change during it).
        self.precision_ = resolve_precision(self.search.precision)
        source = check_embeddings(source, "source embeddings")
        target = check_embeddings(target, "target embeddings")
        self._check_rows(len(source), len(target))
        if pairs is not None:
            pairs = _check_pairs(pairs, source.shape[1], target.shape[1])
        if self.init == "identity" and source.shape[1] != target.shape[1]:
            raise DimensionError(
                f"init='identity' needs equal dims, got source {source.shape[1]} and target {target.shape[1]}; "
                f"use init='anchors'"
            )
        # One independent stream per pass and per stage: how far one stage ran (its stopping rule reads scores,
        # which carry the BLAS kernel's rounding) must not shift every later random draw.
        # The agreement check's, search's, polish's and identity reference's streams are spawned last, so the
        # passes' streams are those of a fit without them (a SeedSequence's children do not depend on how many are
        # spawned, only on their place).
        n_search = self.agreement_search
        seeds = np.random.SeedSequence(self.random_state).spawn(4 + self.n_restarts + n_search)
        setup_seed, pass_seeds = seeds[0], seeds[1 : 1 + self.n_restarts]
        check_seed, search_seeds = (
            seeds[1 + self.n_restarts],
            seeds[2 + self.n_restarts : 2 + self.n_restarts + n_search],
        )
        polish_seed, reference_seed = seeds[2 + self.n_restarts + n_search], seeds[3 + self.n_restarts + n_search]
        rng = np.random.default_rng(setup_seed)

        self.source_mean_ = source.mean(axis=0)
        self.target_mean_ = target.mean(axis=0)
        a = center_normalize(source, self.source_mean_)
        b = center_normalize(target, self.target_mean_)
        # Typical length of a centred target vector: lets transform() return vectors in the target's own space.
        self.target_scale_ = float(np.linalg.norm(target - self.target_mean_, axis=1).mean())
        self.n_features_in_ = a.shape[1]
        self.n_features_out_ = b.shape[1]

        probe_rows_a = rng.choice(len(a), min(self.search.probe_size, len(a)), replace=False)
        probe_rows_b = rng.choice(len(b), min(self.search.probe_size, len(b)), replace=False)
        probe_a, probe_b = a[probe_rows_a], b[probe_rows_b]

        def neighbour_index(rows: np.ndarray) -> NeighbourIndex:
            s = self.search
            return NeighbourIndex(
                rows,
                n_lists=s.ann_lists,
                n_probe=s.ann_probe,
                shortlist_dims=s.shortlist_dims,
                shortlist_factor=s.shortlist_factor,
                seed=int(rng.integers(2**31)),
                precision=self.precision_,
            )

        index_a, index_b = neighbour_index(a), neighbour_index(b)

        def score(matrix: np.ndarray) -> float:
            return bidirectional_nn_similarity(probe_a, probe_b, index_a, index_b, matrix)

        known = None
        if pairs is not None:
            known = (center_normalize(pairs[0], self.source_mean_), center_normalize(pairs[1], self.target_mean_))
        # Where the dims agree, "leave the vectors as they are" is a map too; a fit that does not beat it has
        # learnt nothing (issue 23: a 0.016 map where the identity scored 0.948). A random rotation is chance
        # level, for any dims. Both are drawn after every other setup draw, so the map does not depend on them.
        eye = np.eye(a.shape[1], dtype=np.float32) if a.shape[1] == b.shape[1] else None
        # The identity candidate runs first, on its own seed stream (the passes draw as without it), so that a fit
        # cut short by its budget still has it: run last, it was skipped on a busy machine (issue 57's dev pool).
        reference, candidate = self._identity_candidate(
            a, b, index_a, index_b, score, reference_seed, budget, eye, known
        )
        passes: list[_Pass] = []
        if self.init == "identity":  # one pass: every start from the identity is the same start
            passes.append(
                self._start_pass(IDENTITY_PASS, a, b, index_a, index_b, score, pass_seeds[0], budget, known, start=eye)
            )
            self._finish_pass(passes[0], score, budget)
        # Anchored passes: none from the identity, one with known pairs (every pass would start from them alike).
        anchored = 0 if self.init == "identity" else 1 if known is not None else self.n_restarts
        for restart in range(anchored):
            if restart and budget.spent(f"before restart {restart + 1}/{self.n_restarts}"):
                break
            passes.append(self._start_pass(restart, a, b, index_a, index_b, score, pass_seeds[restart], budget, known))
            converged_now = self._converged(passes[-1].record) is True
            # A converged pass replaces every unconverged one, so refining those first would be wasted: without a
            # budget they are refined only once no later pass has converged (each stage draws from its own
            # stream, so the order changes no map). Under a budget each is refined at once, before time runs out.
            if converged_now or self.max_seconds is not None:
                self._finish_pass(passes[-1], score, budget)
            if converged_now:
                break  # a converged pass is trusted; restarts are for passes whose structure still disagrees
        else:  # no pass converged: every one is a candidate, so each is refined
            for started in passes:
                if not started.record["refined"]:
                    self._finish_pass(started, score, budget)
        # Refined maps are compared, not initial ones: a wrong start can look as good as a right one before
        # refinement, but only a right one reaches a high neighbour similarity after it. A converged pass (the
        # stronger, structural evidence) is preferred to any unconverged one (which is then left unrefined).
        chosen = self._best(passes, [i for i, started in enumerate(passes) if started.record["refined"]])
        rotations = [_random_orthogonal(a.shape[1], b.shape[1], rng) for _ in range(3)]
        # The trust check does not use the nn score: wrong maps that crowd points into dense regions score higher
        # on it than right ones (issue 24), and refinement climbed it on the very probes it is computed on.
        trust_a = a[_unseen_first(len(a), probe_rows_a, TRUST_ROWS, rng)]
        trust_b = b[_unseen_first(len(b), probe_rows_b, TRUST_ROWS, rng)]
        search = _Search(a, b, index_a, index_b, score, budget, trust_a)
        chosen, agreement = self._agreement(passes, chosen, search, check_seed, search_seeds, known)
        restarts = [started.record for started in passes]
        # Every pass's maps, for diagnosis (``benchmarks/align_pass_diagnostics.py``); in memory only, not saved.
        self.pass_maps_ = [
            {"structured": r.pop("structured_matrix"), "final": r["matrix"] if r["refined"] else None} for r in restarts
        ]
        self.matrix_, polish = self._polish(passes[chosen], score, trust_a, trust_b, polish_seed, budget)
        for r in restarts:
            r.pop("matrix")
        converged = self._converged(restarts[chosen])
        identity = score(eye) if eye is not None else None
        control = max(score(rotation) for rotation in rotations)
        # the polish scored the map it kept already
        kept_trust = polish["trust_after"] if polish["accepted"] else polish["trust_before"]
        trusted_final = trust_score(trust_a, trust_b, self.matrix_) if kept_trust is None else kept_trust
        trusted_identity = trust_score(trust_a, trust_b, eye) if eye is not None else None
        trusted_control = max(trust_score(trust_a, trust_b, rotation) for rotation in rotations)
        if candidate is not None:
            candidate_trust = trust_score(trust_a, trust_b, candidate.record["matrix"].astype(np.float32))
            lift = (candidate_trust - trusted_final) / max(abs(trusted_control), 1e-12)
            reference |= {"trust": candidate_trust, "lift": lift}
        # The identity candidate is kept where it clearly beats the anchored map (init="auto"); "anchors" only flags.
        beaten = reference["lift"] is not None and reference["lift"] > IDENTITY_REFERENCE_MARGIN
        kept = "anchors" if self.init != "identity" else "identity"
        if beaten and self.init == "auto" and candidate is not None:
            kept = "identity reference"
            self.matrix_, polish = self._polish(candidate, score, trust_a, trust_b, polish_seed, budget)
            trusted_final = polish["trust_after"] if polish["accepted"] else reference["trust"]
        trust: dict[str, Any] = {
            "final": trusted_final,
            "identity": trusted_identity,
            "random_rotation": trusted_control,
            "lift": trust_lift(trusted_final, trusted_identity, trusted_control),
            "margin": self.trust_margin,
            "score": f"csls (k={TRUST_K})",
            "rows": [len(trust_a), len(trust_b)],
        }
        paired = paired_check(known, self.matrix_, eye) if known is not None else None
        judged = paired if paired is not None and paired["judged"] else None  # the pairs' verdict, where they give one
        self.fit_seconds_ = budget.elapsed()
        problems = self._row_count_problems(len(a), len(b))
        # Two independent maps that agree are stronger evidence than one pass's structural swap share (which on
        # small pools ends low on wrong passes too), so the swap share judges only where agreement was not checked;
        # with enough known pairs, they judge instead (the swap share stays above the threshold on pools whose
        # clusters overlap, right map or not: utterances, issue 24).
        # The anchored passes' own verdicts (structure, agreement) do not judge an identity candidate kept instead.
        anchored_verdicts = kept != "identity reference"
        if anchored_verdicts and converged is False and agreement["agreement"] is None and judged is None:
            problems.append(
                f"no pass of the alignment converged: the kept one's structural search still swapped "
                f"{restarts[chosen]['structure_swapped'][-1]:.0%} of the seeded cluster pairs in its last round "
                f"(converged: <= {self.converged_swap_share:.0%}); the map is probably wrong. Try more n_restarts, "
                f"more data, or check the pair on a few paired texts."
            )
        if judged is not None and judged["problem"] is not None:
            problems.append(judged["problem"])
        problem = trust_problem(trusted_final, trusted_identity, trusted_control, margin=self.trust_margin)
        if problem is not None:
            problems.append(problem)
        if beaten and kept == "anchors":
            problems.append(
                f"a map refined from the identity (the vectors left as they are, then refine-1) "
                f"scores clearly higher than the fitted map on the label-free score (CSLS "
                f"{reference['trust']:.4f} against {trusted_final:.4f}; chance level {trusted_control:.4f}): "
                f"the two models probably share coordinates and the fitted map is in a worse basin. Refit with "
                f"init='identity' (--init identity), or check the pair on a few paired texts."
            )
        if anchored_verdicts and agreement["agreement"] is not None and agreement["agreement"] < agreement["threshold"]:
            problems.append(
                f"no two independent passes of the alignment agree ({agreement['compared']} compared): their maps "
                f"give the same rows a mean cosine of {agreement['agreement']:.2f} at most (trusted: >= "
                f"{agreement['threshold']:g}; passes whose structure did not converge are not compared); a right "
                f"map is found again from other anchors, so this one is probably wrong. Try more data, more "
                f"agreement_search passes, or fit with a few hundred known pairs (--pairs-source/--pairs-target)."
            )
        self.stopped_early_ = budget.stopped_at is not None
        messages = list(problems)
        if self.stopped_early_:
            messages.append(f"alignment stopped early: {budget.reason}")
        self.converged_ = not problems  # an unconverged pass is a problem unless two passes agreed or pairs judged
        # Confidence in [0, 1], 0 when a problem was found: the agreement with an independent pass where it was
        # checked, else the known pairs' top-1 where they judge, else the share of seeded cluster pairs the last
        # structural round kept.
        swapped = restarts[chosen]["structure_swapped"]
        confidence = 1.0 - swapped[-1] if swapped else None
        if kept == "identity reference":  # its lead over the anchored map, in units of chance level, capped
            confidence = min(float(reference["lift"]), 1.0)
        elif agreement["agreement"] is not None:
            confidence = min(max(agreement["agreement"], 0.0), 1.0)
        elif judged is not None:
            confidence = judged["top1"]
        self.confidence_ = 0.0 if problems else confidence
        # With the identity candidate kept, no anchored restart is the map: the map's own keys describe the candidate.
        kept_record = candidate.record if kept == "identity reference" and candidate is not None else restarts[chosen]
        self.diagnostics_ = {
            "chosen_restart": chosen,  # the anchored passes' choice (``kept`` says whether it is the map)
            "converged": converged,
            "trusted": self.converged_,
            "confidence": self.confidence_,
            "problems": problems,
            "identity_nn_similarity": identity,
            "random_rotation_nn_similarity": control,
            "trust": trust,
            "agreement": agreement,
            "polish": polish,
            "identity_reference": reference,
            "init": self.init,
            "kept": kept,
            "stopped_early": self.stopped_early_,
            "stop_reason": budget.reason,
            **cpu_record(self.precision_),
            "n_pairs": 0 if pairs is None else len(pairs[0]),
            "paired_check": paired,
            "nn_similarity": kept_record["nn_similarity"],
            "anchor_consistency": kept_record.get("anchor_consistency_final"),
            "orthogonality_gap": orthogonality_gap(self.matrix_),
            "restarts": restarts,
        }
        return messages

    def _polish(
        self, kept: _Pass, score, trust_a: np.ndarray, trust_b: np.ndarray, seed, budget: Budget
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """The kept map, polished by up to ``refine.polish_iter`` more refine-1 steps where its pass's refine-1 ran
        to its cap while still climbing; the best of the polish's own iterates (or their tail average) is kept only
        if the trust score on unseen rows rises.

        Why: from a half-right start (short texts: names) refine-1 still climbs at its cap, 50 steps chosen where it
        converges sooner, and 100 more lift such maps by 0.03-0.07 top-1 (dev); but on small pools more steps can
        also drift a right map away, which the probes' neighbour score climbs through and the CSLS trust score on
        rows it never scored does not (``benchmarks/notes/align.md``, fifteenth session)."""
        rp, record = self.refine, kept.record
        matrix = record["matrix"].astype(np.float32)
        out: dict[str, Any] = {"ran": False, "iterations": 0, "trust_before": None, "trust_after": None}
        climbing = (
            record["refined"] and record["refine1_iterations"] == rp.n_iter and not record["refine1_stopped_early"]
        )
        # Not with known pairs: they anchor every step already, and the dev rule that chose polishing ran without.
        unpaired = kept.step.pairs is None
        if rp.polish_iter == 0 or not climbing or not unpaired or budget.spent("before polishing the kept map"):
            return matrix, out | {"accepted": False}
        step = dataclasses.replace(kept.step, rng=np.random.default_rng(seed))
        # Patience is judged against the polish's own iterates, not its start: the start is a tail average, which
        # single iterates seldom beat within the patience, so judged against it the polish stopped after 30 steps.
        polished, history = self._refine1(
            matrix,
            step,
            score,
            n_iter=rp.polish_iter,
            start_score=float("-inf"),
            out_of_time=budget.check("in polishing"),
        )
        polished = polished.astype(np.float32)  # as kept, so its trust score is the fit's (not computed again)
        before, after = trust_score(trust_a, trust_b, matrix), trust_score(trust_a, trust_b, polished)
        accepted = after > before
        out |= {"ran": True, "iterations": history.iterations, "trust_before": before, "trust_after": after}
        return (polished if accepted else matrix), out | {"accepted": accepted}

    def _identity_candidate(
        self, a, b, index_a, index_b, score, seed, budget: Budget, eye: np.ndarray | None, known
    ) -> tuple[dict[str, Any], _Pass | None]:
        """The identity candidate of ``init="auto"`` and ``"anchors"`` where the dims agree: refine-1 from the
        identity (no anchors, no structural stage, no refine-2), and its record; ``fit`` adds its trust score's
        ``lift`` over the anchored map's, in units of chance level, and judges it against
        :data:`IDENTITY_REFERENCE_MARGIN` (``"auto"`` keeps it where it wins, ``"anchors"`` flags). Not with known
        pairs (they judge against the identity themselves) nor once the budget is spent."""
        out: dict[str, Any] = {"trust": None, "nn_similarity": None, "lift": None, "seconds": None, "skipped": None}
        out |= {"margin": IDENTITY_REFERENCE_MARGIN, "cut_short": False}
        if self.init == "identity" or eye is None:
            return out | {"skipped": "init='identity'" if eye is not None else "the dims differ"}, None
        if known is not None:
            return out | {"skipped": "known pairs judge the map against the identity"}, None
        if budget.spent("before the identity candidate"):
            return out | {"skipped": "out of time"}, None
        clock = time.perf_counter()
        # Refine-1 only: from the identity the structural stage and refine-2 add little, and with them the
        # candidate cost 29-40 s on a 40k dev pool (+29-44 % fit time), against the 25 % its dev rule allowed.
        candidate = self._start_pass(
            IDENTITY_PASS, a, b, index_a, index_b, score, seed, budget, None, start=eye, structure_stage=False
        )
        self._finish_pass(candidate, score, budget, centroid_stage=False)
        # Cut short by the budget it is still a refined map, and the anchored pass that follows gets only its
        # initial map: the trust scores choose between them as between any two.
        nn_similarity = candidate.record["nn_similarity"]["final"]
        seconds = time.perf_counter() - clock
        return out | {
            "nn_similarity": nn_similarity,
            "seconds": seconds,
            "cut_short": budget.stopped_at is not None,
        }, candidate

    def _refine1(self, matrix, step, score, *, n_iter: int, start_score, out_of_time, progress=None):
        """Refine-1 with this aligner's settings, for ``n_iter`` steps (a pass's refine-1, or the polish)."""
        rp = self.refine
        return refine_by_neighbours(
            matrix,
            step,
            score=score,
            n_iter=n_iter,
            patience=rp.patience,
            tol=rp.tol,
            start_score=start_score,
            average=rp.average,
            score_every=rp.score_every,
            progress=progress,
            out_of_time=out_of_time,
        )

    def _agreement(
        self, passes: list[_Pass], chosen: int, search: _Search, check_seed, search_seeds, known
    ) -> tuple[int, dict[str, Any]]:
        """The agreement check and search of ``agreement_threshold`` and ``agreement_search``: the kept pass and
        its diagnostics. ``passes`` grows by the passes refined here (an agreeing check pass, or the search's)."""
        threshold = self.agreement_threshold
        out: dict[str, Any] = {"agreement": None, "threshold": threshold, "skipped": None, "compared": None}
        if threshold is None:
            out["skipped"] = "agreement_threshold is None"
        elif known is not None:
            out["skipped"] = "known pairs anchor every pass alike"
        elif self.init == "identity":
            out["skipped"] = "init='identity': one start, no independent anchors to agree with"
        elif search.budget.spent("before the agreement check"):
            out["skipped"] = "out of time"
        if out["skipped"] is not None or threshold is None:
            return chosen, out
        check = self._start_pass(-1, *search.pass_args(check_seed))
        agreement = map_agreement(search.rows, passes[chosen].record["matrix"], check.record["matrix"])
        out |= {
            "check_structure_swapped": check.record["structure_swapped"],
            "check_stage_seconds": check.record["stage_seconds"],
            "check_agreement": agreement,
            "search": None,
        }
        if search.budget.stopped_at is not None:  # a check pass cut short is weaker: its disagreement proves nothing
            return chosen, out | {"skipped": "out of time during the check pass"}
        if self.agreement_search == 0:  # the check only judges
            return chosen, out | {"agreement": agreement, "compared": 2}
        if agreement < threshold:
            return self._search(passes, chosen, check, agreement, threshold, search, search_seeds, out)
        # Agreeing passes can still differ in quality: on test samples 3 and 5 two trusted seeds sat 0.06-0.07 below
        # their pools' others, with lower label-free scores, and the check pass was the better map on both. So the
        # check pass is refined too (~5 s on a 40k pool) and the better-scoring map kept.
        passes.append(check)
        self._finish_pass(check, search.score, search.budget)
        return self._best(passes, [chosen, len(passes) - 1]), out | {"agreement": agreement, "compared": 2}

    def _search(
        self,
        passes: list[_Pass],
        chosen: int,
        check: _Pass,
        agreement: float,
        threshold: float,
        search: _Search,
        search_seeds,
        out: dict[str, Any],
    ) -> tuple[int, dict[str, Any]]:
        """The agreement search of ``agreement_search``, run when the check pass disagreed with the kept map."""
        # The search: refined maps agree more than a structured one does with a refined one (0.62-0.81 for right
        # pairs, 0.47 at most with a wrong pass), so candidates are refined before they are compared.
        waiting = [check, *(started for started in passes if not started.record["refined"])]
        fresh = iter(enumerate(search_seeds))
        scales = [self.anchors]  # the new passes' anchor settings, in turn (search_anchor_clusters)
        other = self.search_anchor_clusters
        rows = min(len(search.a), len(search.b), self.anchors.sample)
        if other is not None and other != self.anchors.n_clusters and rows >= 4 * other:
            scales.insert(0, dataclasses.replace(self.anchors, n_clusters=int(other)))
        cost = 0  # passes refined by the search that the restarts had not started: the check and new ones
        pairs: dict[tuple[int, int], float] = {}
        while True:
            if cost >= self.agreement_search or search.budget.spent("in the agreement search"):
                break
            if waiting:
                started = waiting.pop(0)
                cost += int(started is check)
            else:
                step, seed = next(fresh)
                scale = scales[step % len(scales)]
                started = self._start_pass(self.n_restarts + 1 + step, *search.pass_args(seed, scale))
                cost += 1
            if started not in passes:
                passes.append(started)
            self._finish_pass(started, search.score, search.budget)
            new = passes.index(started)
            # Only structurally converged passes are compared: among many passes two wrong maps may agree by
            # chance (in 8 dims, unconverged ones on a target with no map did, at 0.88), and every right pass
            # of the dev pools had converged.
            if self._converged(started.record) is not False:
                for other, candidate in enumerate(passes):
                    if other != new and candidate.record["refined"] and self._converged(candidate.record) is not False:
                        pairs[(other, new)] = map_agreement(
                            search.rows, candidate.record["matrix"], started.record["matrix"]
                        )
            if max(pairs.values(), default=-1.0) >= threshold:
                break
        refined = [i for i, started in enumerate(passes) if started.record["refined"]]
        out["search"] = {
            "passes_refined": len(refined),
            "new_passes": cost,
            "pairwise": [[i, j, value] for (i, j), value in sorted(pairs.items())],
        }
        if not pairs:  # no two converged maps to compare: the check's verdict on the kept map stands
            return chosen, out | {"agreement": agreement, "compared": 2}
        compared = len({i for pair in pairs for i in pair})  # the refined, converged passes compared
        best = max(pairs.values())
        if best < threshold:  # the restarts' choice stands, now among every refined pass; it is flagged
            return self._best(passes, refined), out | {"agreement": max(best, agreement), "compared": compared}
        # The final neighbour similarity ranked every pool's passes correctly (benchmarks/notes/align.md).
        agreeing = {i for pair, value in pairs.items() if value >= threshold for i in pair}
        chosen = max(agreeing, key=lambda i: passes[i].record["nn_similarity"]["final"])
        partner = max(value for pair, value in pairs.items() if chosen in pair)
        return chosen, out | {"agreement": partner, "compared": compared}

    def _best(self, passes: list[_Pass], candidates: list[int]) -> int:
        """The restarts' rule: a converged pass before any unconverged one, then the highest final nn score."""
        return max(
            candidates,
            key=lambda i: (self._converged(passes[i].record) is True, passes[i].record["nn_similarity"]["final"]),
        )

    def _label(self, restart: int) -> str:
        """A pass's name: ``restart i/n``, ``agreement check`` (-1), ``identity start`` (-2), or ``search pass j``
        (beyond the restarts)."""
        if restart == IDENTITY_PASS:
            return "identity start"
        if restart < 0:
            return "agreement check"
        if restart < self.n_restarts:
            return f"restart {restart + 1}/{self.n_restarts}"
        return f"search pass {restart - self.n_restarts}"

    def _row_count_problems(self, n_source: int, n_target: int) -> list[str]:
        """Warnings for k-means with too few rows per cluster to be trusted (``_check_rows`` refuses fewer)."""
        per_cluster = 20  # below this, centroids are noise the structure and refine-2 stages then fit
        fewest = min(n_source, n_target)
        problems = []
        for what, rows, clusters in (
            ("anchors", min(fewest, self.anchors.sample), self.anchors.n_clusters),
            (
                "structure",
                min(fewest, self.structure.sample),
                self.structure.n_clusters if self.structure.n_iter else 0,
            ),
        ):  # not refine-2's centroids: that stage is kept only where it does not lower the score
            if clusters and rows < per_cluster * clusters:
                problems.append(
                    f"{rows} rows for {clusters} {what} clusters (fewer than {per_cluster} a cluster): "
                    f"too few for the cluster counts to be trustworthy; use more rows or fewer clusters"
                )
        return problems

    def _converged(self, restart: dict[str, Any]) -> bool | None:
        """Whether a pass's last structural round swapped at most ``converged_swap_share`` of the seeded pairs;
        None where there is nothing to judge by (``structure_iter=0``) or no threshold to judge with."""
        swapped = restart["structure_swapped"]
        if self.converged_swap_share is None or not swapped:
            return None
        return swapped[-1] <= self.converged_swap_share

    def _start_pass(
        self,
        restart: int,
        a,
        b,
        index_a,
        index_b,
        score,
        seed: np.random.SeedSequence,
        budget: Budget,
        known: tuple[np.ndarray, np.ndarray] | None,
        anchor_params: AnchorParams | None = None,
        start: np.ndarray | None = None,
        structure_stage: bool = True,
    ) -> _Pass:
        """A pass up to its convergence judgement: anchors (or the known pairs, or the given ``start`` map) ->
        initial map -> structure (unless ``structure_stage`` is False), with its label-free diagnostics; each stage
        stops at its next safe point once ``budget`` is spent."""
        ap, sp, rp = anchor_params or self.anchors, self.structure, self.refine
        rng, structure_rng, refine_rng, centroid_rng = (np.random.default_rng(s) for s in seed.spawn(4))
        clock = time.perf_counter()
        where = f"({self._label(restart)})"
        anchors = None
        if start is not None:
            matrix = start
        elif known is not None:  # known pairs are better anchors than any matching of cluster shapes
            matrix = procrustes(*known)
        else:
            with self._progress(f"anchors {where}", ap.n_runs, "run") as tick:
                anchors = matched_anchors(
                    a,
                    b,
                    n_runs=ap.n_runs,
                    n_clusters=ap.n_clusters,
                    sample_size=ap.sample,
                    kmeans_iter=ap.kmeans_iter,
                    kmeans_redo=ap.kmeans_redo,
                    qap_method=ap.qap_method,
                    qap_restarts=ap.qap_restarts,
                    keep_fraction=ap.keep,
                    kernel=ap.kernel,
                    precision=self.precision_,
                    rng=rng,
                    progress=tick,
                    out_of_time=budget.check(f"in the anchor runs {where}"),
                )
            rows = rng.choice(len(a), min(ap.n_pseudo_pairs, len(a)), replace=False)
            matrix = initial_map(a[rows], b, anchors.source, anchors.target, k=ap.relative_k, precision=self.precision_)
        initial_score = score(matrix)
        initial_consistency = anchor_consistency(anchors, matrix) if anchors is not None else None
        seconds = {"anchors_and_initial_map": time.perf_counter() - clock}
        clock = time.perf_counter()

        step = NeighbourStep(
            a,
            b,
            structure_rng,
            target_index=index_b,
            source_index=index_a,
            sample_size=rp.sample,
            k=rp.k,
            alpha=rp.alpha,
            orthogonalize=rp.orthogonalize,
            bidirectional=rp.bidirectional,
            pairs=known,
            pair_weight=rp.pair_weight,
        )
        structure = StructureHistory(best_score=initial_score)  # as it stands when the stage is skipped
        if sp.n_iter > 0 and structure_stage:
            with self._progress(f"structure {where}", sp.n_iter, "iteration") as tick:
                matrix, structure = refine_by_structure(
                    matrix,
                    step,
                    score=score,
                    n_iter=sp.n_iter,
                    n_clusters=sp.n_clusters,
                    n_runs=sp.n_runs,
                    sample_size=sp.sample,
                    kmeans_iter=sp.kmeans_iter,
                    inner_steps=sp.steps,
                    patience=sp.patience,
                    tol=rp.tol,
                    stop_swap_share=sp.stop_swap_share,
                    start_score=initial_score,
                    precision=self.precision_,
                    progress=tick,
                    out_of_time=budget.check(f"in the structural refinement {where}"),
                )
        seconds["structure"] = time.perf_counter() - clock
        record: dict[str, Any] = {
            "label": self._label(restart),
            "matrix": matrix,
            "structured_matrix": matrix,  # kept: refinement replaces "matrix"
            "refined": False,
            "nn_similarity": {
                "initial": initial_score,
                "structure": structure.best_score,
                "refine1": None,
                "refine2": None,
                "final": None,
            },
            "anchor_clusters": ap.n_clusters if anchors is not None else None,
            "qap_agreement": float(anchors.agreement[anchors.kept].mean()) if anchors is not None else None,
            "mean_qap_objective": float(anchors.objective.mean()) if anchors is not None else None,
            "runs_kept": int(anchors.kept.sum()) if anchors is not None else 0,
            "anchor_consistency_initial": initial_consistency,
            "anchor_consistency_final": None,
            "structure_iterations": structure.iterations,
            "structure_scores": structure.scores,
            "structure_swapped": structure.swapped,
            "refine1_iterations": 0,
            "refine1_best_iteration": -1,
            "refine1_stopped_early": False,
            "refine1_scores": [],
            "refine1_average_score": None,
            "refine1_averaged": False,
            "refine2_accepted": False,
            "stage_seconds": seconds,
        }
        return _Pass(restart, record, anchors, dataclasses.replace(step, rng=refine_rng), centroid_rng)

    def _finish_pass(self, started: _Pass, score, budget: Budget, *, centroid_stage: bool = True) -> None:
        """The rest of a pass, into its record: refine-1 -> refine-2 (unless ``centroid_stage`` is False), each
        stopping at its next safe point once ``budget`` is spent."""
        rp, record, seconds = self.refine, started.record, started.record["stage_seconds"]
        where = f"({self._label(started.restart)})"
        refined_from = record["nn_similarity"]["structure"]
        clock = time.perf_counter()
        with self._progress(f"refine {where}", rp.n_iter, "iteration") as tick:
            matrix, history = self._refine1(
                record["matrix"],
                started.step,
                score,
                n_iter=rp.n_iter,
                start_score=refined_from,
                out_of_time=budget.check(f"in refine-1 {where}"),
                progress=tick,
            )
        refined_score = history.best_score
        seconds["refine1"] = time.perf_counter() - clock
        clock = time.perf_counter()

        centroid_score, centroid_accepted = None, False
        if centroid_stage and rp.centroid_clusters > 0 and not budget.spent(f"before refine-2 {where}"):
            candidate = refine_by_centroids(
                started.step.source,
                started.step.target,
                matrix,
                n_clusters=rp.centroid_clusters,
                kmeans_iter=rp.centroid_kmeans_iter,
                alpha=rp.centroid_alpha,
                orthogonalize=rp.orthogonalize,
                seed=int(started.centroid_rng.integers(2**31)),
                precision=self.precision_,
                pairs=started.step.pairs,
                pair_weight=rp.pair_weight,
            )
            centroid_score = score(candidate)
            # Accepted unless it makes the label-free score worse: refinement may not undo a good map.
            if centroid_score >= refined_score - rp.tol:
                matrix, centroid_accepted = candidate, True
        final_score = max(refined_score, centroid_score) if centroid_accepted else refined_score
        seconds["refine2"] = time.perf_counter() - clock
        logger.info(
            "restart %d: nn-similarity %.4f -> %.4f", started.restart, record["nn_similarity"]["initial"], final_score
        )
        anchors = started.anchors
        record["nn_similarity"] |= {"refine1": refined_score, "refine2": centroid_score, "final": final_score}
        record |= {
            "matrix": matrix,
            "refined": True,
            "anchor_consistency_final": anchor_consistency(anchors, matrix) if anchors is not None else None,
            "refine1_iterations": history.iterations,
            "refine1_best_iteration": history.best_iteration,
            "refine1_stopped_early": history.stopped_early,
            "refine1_scores": history.scores,
            "refine1_average_score": history.average_score,
            "refine1_averaged": history.averaged,
            "refine2_accepted": centroid_accepted,
        }

    def _progress(self, description: str, total: int, unit: str):
        """A context manager yielding ``tick(done, total)`` (None unless ``verbose``) over a
        :class:`~subspaces.progress.Progress` named ``align fit: <description>``."""
        import contextlib

        from subspaces.progress import Progress

        @contextlib.contextmanager
        def bar():
            if not self.verbose:
                yield None
                return
            with Progress(total, f"align fit: {description}", unit=unit) as shown:
                yield lambda done, _total: shown.update(done - shown.n)

        return bar()

    def _check_fitted(self) -> None:
        if not hasattr(self, "matrix_"):
            raise SubspacesError("this MiniVec2Vec is not fitted yet; call fit() or MiniVec2Vec.load()")

    def preprocess_source(self, x: np.ndarray) -> np.ndarray:
        """Source vectors as the map sees them: centred on the training mean, unit length."""
        self._check_fitted()
        return center_normalize(check_embeddings(x, "source embeddings", dim=self.n_features_in_), self.source_mean_)

    def preprocess_target(self, y: np.ndarray) -> np.ndarray:
        """Target vectors in the space ``transform(..., centered=True)`` maps into."""
        self._check_fitted()
        return center_normalize(check_embeddings(y, "target embeddings", dim=self.n_features_out_), self.target_mean_)

    def transform(self, x: np.ndarray, *, centered: bool = False) -> np.ndarray:
        """Map source vectors into the target space.

        By default the result lives in the target model's own coordinates (the target's training mean added
        back, typical length restored), so it can be searched with raw vectors of the target model. With
        ``centered=True`` it is the unit vector in the centred target space (compare with ``preprocess_target``).
        """
        mapped = normalize_rows(self.preprocess_source(x) @ self.matrix_)
        if centered:
            return mapped
        return (self.target_mean_ + self.target_scale_ * mapped).astype(np.float32)

    def fit_transform(self, source: np.ndarray, target: np.ndarray) -> np.ndarray:
        return self.fit(source, target).transform(source)

    # -- persistence -------------------------------------------------------------------------------------------
    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write ``state.npz`` (map, means) and ``aligner.json`` (parameters, diagnostics) into folder ``path``.

        Each file is replaced atomically, the state first; the config records the state's SHA-256, so a save
        interrupted between the two leaves a folder that ``load`` refuses instead of mixing old and new.
        """
        self._check_fitted()
        arrays = {
            "matrix": self.matrix_,
            "source_mean": self.source_mean_,
            "target_mean": self.target_mean_,
            "target_scale": np.float32(self.target_scale_),
        }
        config = {
            "class": "MiniVec2Vec",
            "params": self.to_params(),
            "n_features_in": self.n_features_in_,
            "n_features_out": self.n_features_out_,
            "fit_seconds": self.fit_seconds_,
            "diagnostics": _plain(self.diagnostics_),
        }
        return write_state_folder(path, CONFIG_FILE, arrays, config, format_version=FORMAT_VERSION)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> MiniVec2Vec:
        config_path, state_path = Path(path) / CONFIG_FILE, Path(path) / STATE_FILE
        # Format-1 folders may predate the state's hash.
        config, state_bytes = read_state_folder(
            path, CONFIG_FILE, versions=(1, FORMAT_VERSION), written_by="align fit", require_hash=False
        )
        version = config["format_version"]
        try:
            params = config["params"]
            aligner = cls(**from_flat(params)) if version == 1 else cls.from_params(params)
            aligner.n_features_in_ = int(config["n_features_in"])
            aligner.n_features_out_ = int(config["n_features_out"])
            aligner.fit_seconds_ = float(config["fit_seconds"])
        except (KeyError, TypeError, ValueError, SubspacesError) as exc:
            raise DataError(f"not an aligner config ({type(exc).__name__}: {exc})", path=config_path) from exc
        try:
            with np.load(io.BytesIO(state_bytes), allow_pickle=False) as state:
                aligner.matrix_ = state["matrix"]
                aligner.source_mean_ = state["source_mean"]
                aligner.target_mean_ = state["target_mean"]
                aligner.target_scale_ = float(state["target_scale"])
        except (OSError, ValueError, KeyError, zipfile.BadZipFile) as exc:
            raise DataError(f"unreadable aligner state: {exc}", path=state_path) from exc
        shapes = {
            "matrix": aligner.matrix_.shape,
            "source_mean": aligner.source_mean_.shape,
            "target_mean": aligner.target_mean_.shape,
        }
        if shapes != {
            "matrix": (aligner.n_features_in_, aligner.n_features_out_),
            "source_mean": (aligner.n_features_in_,),
            "target_mean": (aligner.n_features_out_,),
        }:
            raise DimensionError(
                f"{state_path}: shapes {shapes} do not fit the config's "
                f"{aligner.n_features_in_} -> {aligner.n_features_out_} dimensions"
            )
        aligner.diagnostics_ = config.get("diagnostics", {})
        # Format-1 folders judged structural convergence only.
        aligner.converged_ = aligner.diagnostics_.get("trusted", aligner.diagnostics_.get("converged") is not False)
        aligner.confidence_ = aligner.diagnostics_.get("confidence")
        aligner.stopped_early_ = bool(aligner.diagnostics_.get("stopped_early", False))
        aligner.precision_ = aligner.diagnostics_.get("precision", "float32")
        return aligner


@dataclasses.dataclass
class _Search:
    """What every pass of one fit shares: the centred rows, their indexes, the score, the budget, and the rows
    that the agreement of two maps is measured on."""

    a: np.ndarray
    b: np.ndarray
    index_a: NeighbourIndex
    index_b: NeighbourIndex
    score: Any
    budget: Budget
    rows: np.ndarray

    def pass_args(self, seed: np.random.SeedSequence, anchors: AnchorParams | None = None) -> tuple:
        """The arguments of ``MiniVec2Vec._start_pass`` after ``restart``, for an unpaired pass on ``seed`` (with
        ``anchors`` instead of the aligner's anchor settings, where given)."""
        return self.a, self.b, self.index_a, self.index_b, self.score, seed, self.budget, None, anchors


@dataclasses.dataclass
class _Pass:
    """A pass that has run up to its convergence judgement: its diagnostics so far (``record``, the map under
    ``"matrix"``) and what its refinement needs."""

    restart: int
    record: dict[str, Any]
    anchors: AnchorSet | None
    step: NeighbourStep  # refine-1's step, on the pass's own refine stream
    centroid_rng: np.random.Generator


def _plain(value: Any) -> Any:
    """``value`` with numpy scalars and arrays turned into Python ones, so ``json`` takes it."""
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    if isinstance(value, (np.generic, np.ndarray)):
        return value.tolist()
    return value


def _check_pairs(pairs: Any, source_dim: int, target_dim: int) -> tuple[np.ndarray, np.ndarray]:
    """Known pairs as two float32 arrays whose row i embeds the same text, or a one-line error."""
    if not isinstance(pairs, (tuple, list)) or len(pairs) != 2:
        raise SubspacesError("pairs must be two arrays (source rows, target rows of the same texts)")
    ps = check_embeddings(pairs[0], "paired source embeddings")
    pt = check_embeddings(pairs[1], "paired target embeddings")
    for what, rows, dim in (("source", ps, source_dim), ("target", pt, target_dim)):
        if rows.shape[1] != dim:
            raise DimensionError(f"paired {what} embeddings have {rows.shape[1]} dimensions, the {what} ones {dim}")
    if len(ps) != len(pt):
        raise DataError(f"paired source and target embeddings must have one row per pair, got {len(ps)} and {len(pt)}")
    if len(ps) < 2:
        raise DataError(f"at least 2 known pairs are needed, got {len(ps)}")
    return ps, pt


def _unseen_first(n: int, seen: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
    """``size`` row indices of ``n``: rows outside ``seen`` first (in random order), then seen ones if need be."""
    unseen = np.setdiff1d(np.arange(n), seen)
    return np.concatenate([rng.permutation(unseen), rng.permutation(seen)])[: min(size, n)]


def _random_orthogonal(d_in: int, d_out: int, rng: np.random.Generator) -> np.ndarray:
    """A uniformly random (semi-)orthogonal ``d_in x d_out`` map: QR of a Gaussian matrix, signs fixed."""
    q, r = np.linalg.qr(rng.normal(size=(max(d_in, d_out), min(d_in, d_out))))
    q = q * np.sign(np.diag(r))
    return (q if d_in >= d_out else q.T).astype(np.float32)
