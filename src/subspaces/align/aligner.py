"""mini-vec2vec (Dar, 2025): a linear map between two embedding spaces learned from unpaired vectors.

    aligner = MiniVec2Vec(random_state=0).fit(source_vectors, target_vectors)   # different texts, no pairs
    moved = aligner.transform(old_store)        # old model's vectors, now in the new model's space

A pass: matched anchors -> initial map (:mod:`.anchors`) -> structure -> refine-1 -> refine-2 (:mod:`.refine`). A fit
runs the candidates (the paper recipe's settings are in :mod:`.params`), the restarts, the agreement check and search,
then keeps and polishes a map, which :mod:`.verify` judges. Evidence for each piece: ``benchmarks/notes/align.md``.
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator

from subspaces.align.anchors import initial_map, matched_anchors
from subspaces.align.budget import Budget
from subspaces.align.neighbours import NeighbourIndex
from subspaces.align.params import (
    FIT_SECONDS,
    RECIPE_ANCHORS,
    RECIPE_BUDGET,
    RECIPE_MIN_ROWS,
    RECIPE_REFINE,
    STAGES,
    AnchorParams,
    RefineParams,
    SearchParams,
    StageParams,
    StructureParams,
    check_together,
)
from subspaces.align.passes import (
    AgreementCheck,
    AgreementSearch,
    CandidateRecord,
    FitDiagnostics,
    Pass,
    PassRecord,
    PolishRecord,
    StageScores,
)
from subspaces.align.preprocess import center_normalize, check_embeddings, normalize_rows
from subspaces.align.procrustes import orthogonality_gap, procrustes
from subspaces.align.refine import NeighbourStep, refine_by_centroids, refine_by_neighbours, refine_by_structure
from subspaces.align.verify import (
    TRUST_ROWS,
    TrustCheck,
    anchor_consistency,
    bidirectional_nn_similarity,
    candidate_beats,
    kept_why,
    map_agreement,
    paired_check,
    row_count_problems,
    trust_lift,
    trust_report,
    trust_score,
    verdict,
)
from subspaces.errors import ConvergenceWarning, DataError, DimensionError, SubspacesError
from subspaces.numerics import cpu_record
from subspaces.numerics import resolve as resolve_precision
from subspaces.progress import Progress
from subspaces.state_folder import STATE_FILE, read_state_folder, write_state_folder

logger = logging.getLogger(__name__)

INITS = ("auto", "anchors", "identity")
# What ``diagnostics_.kept`` names where a candidate replaced the anchored passes' choice.
KEPT_CANDIDATES = {"identity": "identity reference", "recipe": "paper recipe"}
FORMAT_VERSION = 2
CONFIG_FILE = "aligner.json"


class MiniVec2Vec(BaseEstimator):
    """Unsupervised linear alignment of a source embedding space onto a target space (a scikit-learn estimator).

        MiniVec2Vec(anchors=AnchorParams(n_runs=12), refine=RefineParams(n_iter=50), random_state=0)

    Args:
        anchors, structure, refine, search: the stages' settings (:mod:`.params`; ``structure.n_iter=0`` skips it).
        n_restarts: at most this many independent passes; the best by label-free score after refinement is kept.
        converged_swap_share: a pass has converged once its last structural round swapped at most this share of
            the seeded cluster pairs; restarts stop there. ``None``: always run ``n_restarts``, judge nothing.
        trust_margin: trusted only if the map's CSLS trust score on unseen rows beats the best trivial map's
            (identity, random rotations) by more than this multiple of chance level.
        agreement_threshold: trusted only if an independent pass agrees with the map (mean cosine of the rows
            mapped by each) at least this much; ``None`` skips the check.
        agreement_search: where the check disagrees, at most this many more passes are refined until two agree.
        search_anchor_clusters: the search's new passes alternate this many anchor clusters with
            ``anchors.n_clusters`` (``None``: always the latter).
        init: ``"auto"``: the anchored passes and the candidates (a pass from the identity where the dims agree,
            one of the paper recipe from :data:`RECIPE_MIN_ROWS` rows a side), the one whose trust score beats the
            anchored map's most, by more than its margin, kept; ``"anchors"``: the same, but the identity candidate
            only flags; ``"identity"``: one pass from the identity (equal dims).
        max_seconds: stop at the next safe point after this many seconds, keeping the best map so far
            (``stopped_early_``); ``None`` or ``inf``: no limit (nor ``recipe_budget``'s).
        recipe_budget: where the paper-recipe candidate ran, the fit stops after this many times its CPU seconds
            (this process's: another job's load does not move the bound), though never before the first anchored
            restart is refined.
        random_state: seed for every sample, k-means and QAP start.
        verbose: show progress bars.

    Fitted: ``matrix_`` (the map, on centred unit rows), ``diagnostics_`` (a :class:`~.passes.FitDiagnostics`,
    saved with the map; ``converged_``, ``confidence_`` and ``stopped_early_`` read it) and ``pass_maps_`` (each
    pass's structured and refined map, in ``diagnostics_.restarts`` order; not saved).
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
        recipe_budget: float | None = RECIPE_BUDGET,
        random_state: int | None = 0,
        verbose: bool = False,
    ) -> None:
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
        self.recipe_budget = recipe_budget
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
        params = {
            name: value.to_dict() if isinstance(value, StageParams) else _plain(value)
            for name, value in self.get_params(deep=False).items()
        }
        return params | {"max_seconds": None if self.max_seconds == float("inf") else self.max_seconds}

    def check_params(self) -> None:
        """Raise :class:`SubspacesError` on a bad parameter; ``fit`` calls it, callers may call it before any I/O."""
        for name, kind in STAGES.items():
            if not isinstance(getattr(self, name), kind):
                raise SubspacesError(f"{name} must be a {kind.__name__}, got {type(getattr(self, name)).__name__}")
        self._check_numbers(("n_restarts", lambda v: int(v) == v and v >= 1, "an integer of at least 1"))
        check_together(self.anchors, self.structure, self.converged_swap_share)
        integer = (int, np.integer)
        self._check_numbers(
            ("trust_margin", lambda v: 0 <= v < float("inf"), "a number of at least 0"),
            ("agreement_threshold", lambda v: v is None or -1 <= v <= 1, "a number in [-1, 1] or None"),
            ("agreement_search", lambda v: isinstance(v, integer) and v >= 0, "an integer of at least 0"),
            (
                "search_anchor_clusters",
                lambda v: v is None or isinstance(v, integer) and v >= 3,
                "an integer of at least 3 or None",
            ),
            ("init", lambda v: v in INITS, f"one of {', '.join(INITS)}"),
            ("max_seconds", lambda v: v is None or v >= 0, "a number of at least 0 or None"),
            ("recipe_budget", lambda v: v is None or 1 <= v < float("inf"), "a number of at least 1 or None"),
        )

    def _check_numbers(self, *rules: tuple[str, Callable[[Any], Any], str]) -> None:
        for name, ok, what in rules:
            value = getattr(self, name)
            if isinstance(value, bool) or not ok(value):
                raise SubspacesError(f"{name} must be {what}, got {value!r}")

    def fit(
        self, source: np.ndarray, target: np.ndarray, *, pairs: tuple[np.ndarray, np.ndarray] | None = None
    ) -> MiniVec2Vec:
        """Learn the map from unpaired ``source`` (n_a x d_a) and ``target`` (n_b x d_b) vectors.

        ``pairs``: optional known pairs ``(P_a, P_b)``, row i of each embedding the same text. Their Procrustes is
        the initial map, they join every refinement step as fixed anchors, and one pass runs; from 20 pairs they
        also judge the map (``diagnostics_.paired_check``).
        """
        from threadpoolctl import threadpool_limits

        self.check_params()
        # The large products run in torch's thread pool; a second BLAS pool would spin on the same cores.
        with threadpool_limits(limits=1, user_api="blas"):
            problems = self._fit(source, target, pairs)
        for problem in problems:
            warnings.warn(problem, ConvergenceWarning, stacklevel=2)
        return self

    def _fit(self, source: np.ndarray, target: np.ndarray, pairs: tuple[np.ndarray, np.ndarray] | None) -> list[str]:
        budget = Budget(None if self.max_seconds == float("inf") else self.max_seconds)
        self.precision_ = resolve_precision(self.search.precision)  # once: the process's setting could change
        seeds = _spawn_seeds(self.random_state, self.n_restarts, self.agreement_search)
        run = self._prepare(source, target, pairs, seeds["setup"], budget)
        # The identity candidate first, so that a fit cut short by its budget still has it.
        candidates = {name: self._candidate(run, name, seeds[name]) for name in KEPT_CANDIDATES}
        recipe_cpu = candidates["recipe"][0].cpu_seconds
        cpu_bound = None
        if recipe_cpu is not None and self.recipe_budget is not None:
            why = f"recipe_budget={self.recipe_budget:g} x the paper-recipe candidate's {recipe_cpu:.0f} CPU s"
            cpu_bound = (self.recipe_budget * recipe_cpu, why)
        passes = self._restarts(run, seeds["passes"], cpu_bound)
        chosen = self._best(passes, [i for i, started in enumerate(passes) if started.record.refined])
        chosen, agreement = self._agreement(run, passes, chosen, seeds)
        self.pass_maps_ = [
            {"structured": p.structured, "final": p.matrix if p.record.refined else None} for p in passes
        ]
        kept, kept_pass, polish, trust = self._keep(run, passes[chosen], candidates, seeds["polish"])
        paired = paired_check(run.known, self.matrix_, run.eye) if run.known is not None else None
        self.fit_seconds_ = budget.elapsed()
        reference, recipe = candidates["identity"][0], candidates["recipe"][0]
        d = self.diagnostics_ = FitDiagnostics(
            chosen_restart=chosen,
            converged=passes[chosen].record.converged(self.converged_swap_share),
            confidence=None,  # both set by the verdict below
            problems=[],
            identity_nn_similarity=run.score(run.eye) if run.eye is not None else None,
            random_rotation_nn_similarity=max(run.score(rotation) for rotation in run.rotations),
            trust=trust,
            agreement=agreement,
            polish=polish,
            identity_reference=reference,
            recipe_candidate=recipe,
            init=self.init,
            kept=kept,
            kept_why=kept_why(kept, trust, reference, recipe),
            stop_reason=run.budget.reason,
            **cpu_record(self.precision_),
            n_pairs=0 if run.known is None else len(run.known[0]),
            paired_check=paired,
            nn_similarity=kept_pass.record.nn_similarity,
            anchor_consistency=kept_pass.record.anchor_consistency_final,
            orthogonality_gap=orthogonality_gap(self.matrix_),
            restarts=[started.record for started in passes],
        )
        earlier = row_count_problems(self.anchors, self.structure, len(run.a), len(run.b))
        d.problems, d.confidence = verdict(d, earlier, self.converged_swap_share)
        return d.problems + ([f"alignment stopped early: {budget.reason}"] if d.stopped_early else [])

    @property
    def converged_(self) -> bool:
        """Whether the fit trusts its map: no check found a problem."""
        return self.diagnostics_.trusted

    @property
    def confidence_(self) -> float | None:
        """In [0, 1], 0 when not trusted: the agreement of two independent passes, or with 20+ known pairs their
        in-sample top-1, or the structural stage's share of kept cluster pairs (:func:`.verify.verdict`)."""
        return self.diagnostics_.confidence

    @property
    def stopped_early_(self) -> bool:
        """Whether ``max_seconds`` ended the fit before its stages did (``diagnostics_.stop_reason`` says where)."""
        return self.diagnostics_.stopped_early

    def check_trusted(self, where: str | os.PathLike[str] | None = None) -> None:
        """Refuse (:class:`SubspacesError`) a map its fit did not trust; ``where`` (its folder) starts the message."""
        self._check_fitted()
        if not self.converged_:
            prefix = f"{where}: " if where is not None else ""
            raise SubspacesError(
                f"{prefix}this map is not trusted ({self.diagnostics_.problems[0]}); refit, or pass --force"
            )

    # -- the fit's stages ----------------------------------------------------------------------------------------
    def _prepare(self, source, target, pairs, seed: np.random.SeedSequence, budget: Budget) -> _Run:
        """The checked, centred unit rows and everything the passes share, from the setup stream."""
        source = check_embeddings(source, "source embeddings")
        target = check_embeddings(target, "target embeddings")
        need = max(4 * self.anchors.n_clusters, self.anchors.relative_k, self.refine.k)
        for what, n in (("source", len(source)), ("target", len(target))):
            if n < need:
                raise DataError(
                    f"{what} has {n} rows; the aligner needs at least {need} "
                    f"(4 x anchors.n_clusters={self.anchors.n_clusters}, and anchors.relative_k/refine.k neighbours)"
                )
        if pairs is not None:
            pairs = _check_pairs(pairs, source.shape[1], target.shape[1])
        if self.init == "identity" and source.shape[1] != target.shape[1]:
            raise DimensionError(
                f"init='identity' needs equal dims, got source {source.shape[1]} and target {target.shape[1]}; "
                f"use init='anchors'"
            )
        rng = np.random.default_rng(seed)
        self.source_mean_, self.target_mean_ = source.mean(axis=0), target.mean(axis=0)
        a, b = center_normalize(source, self.source_mean_), center_normalize(target, self.target_mean_)
        # Typical length of a centred target vector: lets transform() return vectors in the target's own space.
        self.target_scale_ = float(np.linalg.norm(target - self.target_mean_, axis=1).mean())
        self.n_features_in_, self.n_features_out_ = a.shape[1], b.shape[1]
        probes_a = rng.choice(len(a), min(self.search.probe_size, len(a)), replace=False)
        probes_b = rng.choice(len(b), min(self.search.probe_size, len(b)), replace=False)
        index_a, index_b = self._index(a, rng), self._index(b, rng)
        known = None
        if pairs is not None:
            known = (center_normalize(pairs[0], self.source_mean_), center_normalize(pairs[1], self.target_mean_))
        # The trivial maps: the identity where the dims agree, random rotations (chance level) for any dims.
        eye = np.eye(a.shape[1], dtype=np.float32) if a.shape[1] == b.shape[1] else None
        rotations = [_random_orthogonal(a.shape[1], b.shape[1], rng) for _ in range(3)]
        # The trust score reads rows the stopping rules did not climb on (not the probes), where there are some.
        trust_a = a[_unseen_first(len(a), probes_a, TRUST_ROWS, rng)]
        trust_b = b[_unseen_first(len(b), probes_b, TRUST_ROWS, rng)]
        return _Run(a, b, a[probes_a], b[probes_b], index_a, index_b, known, eye, rotations, trust_a, trust_b, budget)

    def _index(self, rows: np.ndarray, rng: np.random.Generator) -> NeighbourIndex:
        return NeighbourIndex(rows, self.search, seed=int(rng.integers(2**31)), precision=self.precision_)

    def _candidate(self, run: _Run, name: str, seed) -> tuple[CandidateRecord, Pass | None]:
        """A candidate map and its record: ``"identity"`` (refine-1 from the identity) or ``"recipe"``."""
        record = CandidateRecord(skipped=self._candidate_skipped(run, name))
        if record.skipped is not None:
            return record, None
        clock, cpu_clock = time.perf_counter(), time.process_time()
        if name == "identity":
            started = self._start_pass(run, "identity start", seed, start=run.eye, structure_stage=False)
        else:
            started = self._start_pass(
                run, "paper recipe", seed, anchors=RECIPE_ANCHORS, structure_stage=False, refine=RECIPE_REFINE
            )
        self._finish_pass(run, started, centroid_stage=name != "identity")
        # Cut short by the budget it is still a refined map: the trust scores choose between it and the anchored.
        record.nn_similarity = started.record.nn_similarity.final
        record.seconds, record.cpu_seconds = time.perf_counter() - clock, time.process_time() - cpu_clock
        record.cut_short = run.budget.stopped_at is not None
        if name == "recipe":
            record.stage_seconds = started.record.stage_seconds
        return record, started

    def _candidate_skipped(self, run: _Run, name: str) -> str | None:
        """Why a candidate does not run (None: it does)."""
        if self.init == "identity":
            return "init='identity'"
        if name == "identity" and run.eye is None:
            return "the dims differ"
        if run.known is not None:
            return f"known pairs {'judge the map against the identity' if name == 'identity' else 'start every pass'}"
        if name == "recipe" and min(len(run.a), len(run.b)) < RECIPE_MIN_ROWS:
            return f"fewer than {RECIPE_MIN_ROWS} rows a side"
        where = "the identity candidate" if name == "identity" else "the paper-recipe candidate"
        return "out of time" if run.budget.spent(f"before {where}") else None

    def _restarts(
        self, run: _Run, seeds: list[np.random.SeedSequence], cpu_bound: tuple[float, str] | None = None
    ) -> list[Pass]:
        """The restarts (or, for ``init="identity"``, the one pass from the identity), refined where they may be
        kept: the first structurally converged pass ends them and replaces every unconverged one. ``cpu_bound``
        (``recipe_budget``'s) applies once the first restart is refined: it never cuts the first anchored pass
        short (a dev pool lost 0.03 top-1 where it did; benchmarks/notes/align.md)."""
        if self.init == "identity":  # every start from the identity is the same start
            only = self._start_pass(run, "identity start", seeds[0], start=run.eye)
            self._finish_pass(run, only)
            return [only]
        passes: list[Pass] = []
        for restart in range(1 if run.known is not None else self.n_restarts):  # known pairs start every pass alike
            label = f"restart {restart + 1}/{self.n_restarts}"
            if restart and run.budget.spent(f"before {label}"):
                break
            passes.append(self._start_pass(run, label, seeds[restart]))
            converged = passes[-1].record.converged(self.converged_swap_share) is True
            # Without a budget an unconverged pass is refined only once no later one converged; under one, at once.
            if converged or run.budget.max_seconds is not None:
                self._finish_pass(run, passes[-1])
            if restart == 0 and cpu_bound is not None:
                run.budget.tighten(*cpu_bound)
            if converged:
                return passes
        for started in passes:  # no pass converged: each is a candidate
            if not started.record.refined:
                self._finish_pass(run, started)
        return passes

    def _best(self, passes: list[Pass], candidates: list[int]) -> int:
        """The restarts' rule: a converged pass before any unconverged one, then the highest final nn score."""
        return max(
            candidates,
            key=lambda i: (passes[i].record.converged(self.converged_swap_share) is True, passes[i].final_score),
        )

    def _agreement(
        self, run: _Run, passes: list[Pass], chosen: int, seeds: dict[str, Any]
    ) -> tuple[int, AgreementCheck]:
        """The agreement check (``agreement_threshold``) and, where it disagrees, the search (``agreement_search``):
        the kept pass and the report. ``passes`` grows by the passes refined here."""
        threshold = self.agreement_threshold
        out = AgreementCheck(threshold=threshold)
        if threshold is None:
            out.skipped = "agreement_threshold is None"
        elif run.known is not None:
            out.skipped = "known pairs anchor every pass alike"
        elif self.init == "identity":
            out.skipped = "init='identity': one start, no independent anchors to agree with"
        elif run.budget.spent("before the agreement check"):
            out.skipped = "out of time"
        if out.skipped is not None or threshold is None:
            return chosen, out
        check = self._start_pass(run, "agreement check", seeds["check"])
        agreement = map_agreement(run.trust_a, passes[chosen].matrix, check.matrix)
        out.check_structure_swapped, out.check_agreement = check.record.structure_swapped, agreement
        out.check_stage_seconds = check.record.stage_seconds
        if run.budget.stopped_at is not None:  # a check pass cut short is weaker: its disagreement proves nothing
            return chosen, dataclasses.replace(out, skipped="out of time during the check pass")
        if self.agreement_search == 0:  # the check only judges
            return chosen, dataclasses.replace(out, agreement=agreement, compared=2)
        if agreement < threshold:
            return self._search(run, passes, chosen, check, agreement, seeds["search"], out)
        # Agreeing maps can still differ in quality: the check pass is refined too and the better-scoring kept.
        passes.append(check)
        self._finish_pass(run, check)
        return self._best(passes, [chosen, len(passes) - 1]), dataclasses.replace(out, agreement=agreement, compared=2)

    def _search(
        self, run: _Run, passes: list[Pass], chosen: int, check: Pass, agreement: float, seeds, out: AgreementCheck
    ) -> tuple[int, AgreementCheck]:
        """The agreement search: refine the check pass, the unrefined restarts, then new passes, until two refined,
        structurally converged maps agree; keep the best-scoring of them."""
        threshold = self.agreement_threshold
        assert threshold is not None  # the check ran
        waiting = [check, *(started for started in passes if not started.record.refined)]
        fresh = iter(enumerate(seeds))
        # New passes alternate two partition scales, search_anchor_clusters first, where the rows hold 4 x as many.
        scales, other = [self.anchors], self.search_anchor_clusters
        rows = min(len(run.a), len(run.b), self.anchors.sample)
        if other is not None and other != self.anchors.n_clusters and rows >= 4 * other:
            scales.insert(0, dataclasses.replace(self.anchors, n_clusters=int(other)))
        cost = 0  # passes refined by the search that the restarts had not started: the check and new ones
        pairs: dict[tuple[int, int], float] = {}
        while cost < self.agreement_search and not run.budget.spent("in the agreement search"):
            if waiting:
                started = waiting.pop(0)
                cost += int(started is check)
            else:
                step, seed = next(fresh)
                scale = scales[step % len(scales)]
                started = self._start_pass(run, f"search pass {step + 1}", seed, anchors=scale)
                cost += 1
            if started not in passes:
                passes.append(started)
            self._finish_pass(run, started)
            pairs |= self._agreeing_pairs(run, passes, passes.index(started))
            if max(pairs.values(), default=-1.0) >= threshold:
                break
        refined = [i for i, started in enumerate(passes) if started.record.refined]
        pairwise = [[i, j, value] for (i, j), value in sorted(pairs.items())]
        out.search = AgreementSearch(passes_refined=len(refined), new_passes=cost, pairwise=pairwise)
        if not pairs:  # no two converged maps to compare: the check's verdict on the kept map stands
            return chosen, dataclasses.replace(out, agreement=agreement, compared=2)
        compared = len({i for pair in pairs for i in pair})  # the refined, converged passes compared
        best = max(pairs.values())
        if best < threshold:  # the restarts' choice stands, now among every refined pass; it is flagged
            out = dataclasses.replace(out, agreement=max(best, agreement), compared=compared)
            return self._best(passes, refined), out
        agreeing = {i for pair, value in pairs.items() if value >= threshold for i in pair}
        chosen = max(agreeing, key=lambda i: passes[i].final_score)
        partner = max(value for pair, value in pairs.items() if chosen in pair)
        return chosen, dataclasses.replace(out, agreement=partner, compared=compared)

    def _agreeing_pairs(self, run: _Run, passes: list[Pass], new: int) -> dict[tuple[int, int], float]:
        """The agreement of pass ``new`` with every other refined pass, among structurally converged ones only."""
        share = self.converged_swap_share
        if passes[new].record.converged(share) is False:
            return {}
        return {
            (other, new): map_agreement(run.trust_a, candidate.matrix, passes[new].matrix)
            for other, candidate in enumerate(passes)
            if other != new and candidate.record.refined and candidate.record.converged(share) is not False
        }

    def _keep(
        self, run: _Run, anchored: Pass, candidates: dict[str, tuple[CandidateRecord, Pass | None]], seed
    ) -> tuple[str, Pass, PolishRecord, TrustCheck]:
        """The map kept (``matrix_``), polished: the anchored passes' choice, or the candidate (the identity's only
        with ``init="auto"``) whose trust score beats it most, by more than its margin. Returns which was kept, its
        pass, the polish and the trust check; each candidate's record gains its trust score and lift."""
        self.matrix_, polish = self._polish(run, anchored, seed)
        scored = polish.trust_after if polish.accepted else polish.trust_before  # the polish scored it
        final = run.trust(self.matrix_) if scored is None else scored
        trust = trust_report(run.trust_a, run.trust_b, final, run.eye, run.rotations, self.trust_margin)
        eligible: dict[str, float] = {}  # the candidates that may replace it, by trust score
        for name, (record, candidate) in candidates.items():
            if candidate is None:
                continue
            record.trust = run.trust(candidate.matrix.astype(np.float32))
            record.lift = (record.trust - final) / max(abs(trust.random_rotation), 1e-12)
            # init="anchors" keeps its map independent of the target's coordinates: the identity only flags there
            if candidate_beats(record) and (name != "identity" or self.init == "auto"):
                eligible[name] = record.trust
        if not eligible:
            return ("anchors" if self.init != "identity" else "identity"), anchored, polish, trust
        best = max(eligible, key=eligible.__getitem__)
        candidate = candidates[best][1]
        assert candidate is not None
        self.matrix_, polish = self._polish(run, candidate, seed)
        final = polish.trust_after if polish.accepted and polish.trust_after is not None else eligible[best]
        trust.final, trust.lift = final, trust_lift(final, trust.identity, trust.random_rotation)
        return KEPT_CANDIDATES[best], candidate, polish, trust

    def _polish(self, run: _Run, kept: Pass, seed) -> tuple[np.ndarray, PolishRecord]:
        """The kept map, polished by up to ``refine.polish_iter`` more refine-1 steps where its refine-1 ran to its
        cap still climbing (not with known pairs); kept only if the trust score rises."""
        rp, record = self.refine, kept.record
        matrix = kept.matrix.astype(np.float32)
        climbing = record.refined and record.refine1_iterations == rp.n_iter and not record.refine1_stopped_early
        unpaired = kept.step.pairs is None
        if rp.polish_iter == 0 or not climbing or not unpaired:
            return matrix, PolishRecord()
        # recipe_budget's CPU bound ends the search for better passes, not the polish of the one kept: that answers
        # only to the caller's wall-clock limit.
        budget = run.budget
        cpu_bound = budget.stopped_by == "cpu"
        out_of_time = budget.wall_spent if cpu_bound else budget.check("in polishing")
        if budget.wall_spent() if cpu_bound else budget.spent("before polishing the kept map"):
            return matrix, PolishRecord()
        step = dataclasses.replace(kept.step, rng=np.random.default_rng(seed))
        # Patience counts against the polish's own iterates, not its start (a tail average they seldom beat soon).
        polish = dataclasses.replace(rp, n_iter=rp.polish_iter)
        polished, history = refine_by_neighbours(
            matrix, step, polish, score=run.score, start_score=float("-inf"), out_of_time=out_of_time
        )
        polished = polished.astype(np.float32)  # as kept, so its trust score is the fit's (not computed again)
        before, after = run.trust(matrix), run.trust(polished)
        accepted = after > before
        return (polished if accepted else matrix), PolishRecord(
            ran=True, iterations=history.iterations, trust_before=before, trust_after=after, accepted=accepted
        )

    # -- one pass ------------------------------------------------------------------------------------------------
    def _start_pass(
        self,
        run: _Run,
        label: str,
        seed: np.random.SeedSequence,
        *,
        anchors: AnchorParams | None = None,
        start: np.ndarray | None = None,
        structure_stage: bool = True,
        refine: RefineParams | None = None,
    ) -> Pass:
        """A pass, named ``label`` in its record, up to its convergence judgement: anchors (with ``anchors`` for the
        aligner's settings, or from the known pairs, or the ``start`` map) -> initial map -> structure (unless
        ``structure_stage`` is False)."""
        rng, structure_rng, refine_rng, centroid_rng = (np.random.default_rng(s) for s in seed.spawn(4))
        clock = time.perf_counter()
        ap, rp = anchors or self.anchors, refine or self.refine
        matrix, matched = self._initial_map(run, ap, rng, start, label)
        initial_score = run.score(matrix)
        record = PassRecord(
            label=label,
            nn_similarity=StageScores(initial=initial_score, structure=initial_score),
            stage_seconds={"anchors_and_initial_map": time.perf_counter() - clock},
        )
        if matched is not None:
            record.take_anchors(matched, ap.n_clusters, anchor_consistency(matched, matrix))
        clock = time.perf_counter()
        step = NeighbourStep(run.a, run.b, structure_rng, rp, run.index_b, run.index_a, run.known)
        if self.structure.n_iter > 0 and structure_stage:
            with self._progress(f"structure ({label})", self.structure.n_iter, "iteration") as shown:
                matrix, structure = refine_by_structure(
                    matrix,
                    step,
                    self.structure,
                    score=run.score,
                    tol=self.refine.tol,
                    start_score=initial_score,
                    precision=self.precision_,
                    progress=shown.update,
                    out_of_time=run.budget.check(f"in the structural refinement ({label})"),
                )
            record.take_structure(structure)
        record.stage_seconds["structure"] = time.perf_counter() - clock
        refine_step = dataclasses.replace(step, rng=refine_rng)
        return Pass(record, matrix, matrix, matched, refine_step, centroid_rng)

    def _initial_map(self, run: _Run, ap: AnchorParams, rng, start: np.ndarray | None, label: str):
        """The pass's initial map and its matched anchors (None without them)."""
        if start is not None:
            return start, None
        if run.known is not None:  # known pairs are better anchors than any matching of cluster shapes
            return procrustes(*run.known), None
        with self._progress(f"anchors ({label})", ap.n_runs, "run") as shown:
            out_of_time = run.budget.check(f"in the anchor runs ({label})")
            matched = matched_anchors(
                run.a, run.b, ap, rng=rng, precision=self.precision_, progress=shown.update, out_of_time=out_of_time
            )
        rows = rng.choice(len(run.a), min(ap.n_pseudo_pairs, len(run.a)), replace=False)
        matrix = initial_map(
            run.a[rows], run.b, matched.source, matched.target, k=ap.relative_k, precision=self.precision_
        )
        return matrix, matched

    def _finish_pass(self, run: _Run, started: Pass, *, centroid_stage: bool = True) -> None:
        """The rest of a pass: refine-1 -> refine-2 (unless ``centroid_stage`` is False), into its record."""
        record, seconds, rp = started.record, started.record.stage_seconds, started.step.params
        where = f"({record.label})"
        clock = time.perf_counter()
        with self._progress(f"refine {where}", rp.n_iter, "iteration") as shown:
            out_of_time = run.budget.check(f"in refine-1 {where}")
            matrix, history = refine_by_neighbours(
                started.matrix,
                started.step,
                rp,
                score=run.score,
                start_score=record.nn_similarity.structure,
                progress=shown.update,
                out_of_time=out_of_time,
            )
        seconds["refine1"] = time.perf_counter() - clock
        assert history.best_score is not None  # the start's score, or a step's
        clock = time.perf_counter()
        centroid_score, accepted = None, False
        if centroid_stage and rp.centroid_clusters > 0 and not run.budget.spent(f"before refine-2 {where}"):
            step, seed = started.step, int(started.centroid_rng.integers(2**31))
            candidate = refine_by_centroids(
                step.source, step.target, matrix, rp, seed=seed, precision=self.precision_, pairs=step.pairs
            )
            centroid_score = run.score(candidate)
            # Accepted unless it makes the label-free score worse: refinement may not undo a good map.
            if centroid_score >= history.best_score - rp.tol:
                matrix, accepted = candidate, True
        final_score = (
            max(history.best_score, centroid_score) if accepted and centroid_score is not None else history.best_score
        )
        seconds["refine2"] = time.perf_counter() - clock
        logger.info("%s: nn-similarity %.4f -> %.4f", record.label, record.nn_similarity.initial, final_score)
        started.matrix = matrix
        record.take_refinement(history, centroid_score, final_score, accepted)
        if started.anchors is not None:
            record.anchor_consistency_final = anchor_consistency(started.anchors, matrix)

    def _progress(self, description: str, total: int, unit: str) -> Progress:
        return Progress(total, f"align fit: {description}", unit=unit, enabled=self.verbose)

    # -- use ----------------------------------------------------------------------------------------------------
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
        """Map source vectors into the target model's own coordinates (its training mean added back, typical length
        restored); with ``centered=True``, unit vectors in the centred target space (``preprocess_target``'s)."""
        mapped = normalize_rows(self.preprocess_source(x) @ self.matrix_)
        if centered:
            return mapped
        return (self.target_mean_ + self.target_scale_ * mapped).astype(np.float32)

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write ``state.npz`` (map, means) and ``aligner.json`` (parameters, diagnostics) into folder ``path``, each
        atomically, the config holding the state's SHA-256 (:func:`~subspaces.state_folder.write_state_folder`)."""
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
            "diagnostics": _plain(self.diagnostics_.to_dict()),
        }
        return write_state_folder(path, CONFIG_FILE, arrays, config, format_version=FORMAT_VERSION)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> MiniVec2Vec:
        config_path, state_path = Path(path) / CONFIG_FILE, Path(path) / STATE_FILE
        config, state_bytes = read_state_folder(path, CONFIG_FILE, versions=(FORMAT_VERSION,), written_by="align fit")
        try:
            aligner = cls.from_params(config["params"])
            aligner.n_features_in_ = d_in = int(config["n_features_in"])
            aligner.n_features_out_ = d_out = int(config["n_features_out"])
            aligner.fit_seconds_ = float(config["fit_seconds"])
            aligner.diagnostics_ = FitDiagnostics.from_dict(config["diagnostics"])
        except (KeyError, TypeError, ValueError, SubspacesError) as exc:
            raise DataError(f"not an aligner config ({type(exc).__name__}: {exc})", path=config_path) from exc
        expected = {"matrix": (d_in, d_out), "source_mean": (d_in,), "target_mean": (d_out,)}
        try:
            with np.load(io.BytesIO(state_bytes), allow_pickle=False) as state:
                for name in expected:
                    setattr(aligner, f"{name}_", state[name])
                aligner.target_scale_ = float(state["target_scale"])
        except (OSError, ValueError, KeyError, zipfile.BadZipFile) as exc:
            raise DataError(f"unreadable aligner state: {exc}", path=state_path) from exc
        shapes = {name: getattr(aligner, f"{name}_").shape for name in expected}
        if shapes != expected:
            raise DimensionError(f"{state_path}: shapes {shapes} do not fit the config's {d_in} -> {d_out} dimensions")
        aligner.precision_ = aligner.diagnostics_.precision
        return aligner


def _spawn_seeds(random_state: int | None, n_restarts: int, n_search: int) -> dict[str, Any]:
    """One independent stream per pass and per stage, so how far one stage ran never shifts a later draw; the
    passes' streams come first, so they are those of a fit without the check, search, polish and candidates."""
    setup, *rest = np.random.SeedSequence(random_state).spawn(5 + n_restarts + n_search)
    passes, (check, *rest) = rest[:n_restarts], rest[n_restarts:]
    streams = (setup, passes, check, rest[:n_search], *rest[n_search:])
    return dict(zip(("setup", "passes", "check", "search", "polish", "identity", "recipe"), streams, strict=True))


@dataclasses.dataclass
class _Run:
    """What every pass and check of one fit shares."""

    a: np.ndarray
    b: np.ndarray
    probe_a: np.ndarray
    probe_b: np.ndarray
    index_a: NeighbourIndex
    index_b: NeighbourIndex
    known: tuple[np.ndarray, np.ndarray] | None
    eye: np.ndarray | None  # the identity, where the dims agree
    rotations: list[np.ndarray]  # random rotations: chance level
    trust_a: np.ndarray  # the rows the trust score and the agreement read
    trust_b: np.ndarray
    budget: Budget

    def score(self, matrix: np.ndarray) -> float:
        """The label-free score that chooses passes and stops refinement."""
        return bidirectional_nn_similarity(self.probe_a, self.probe_b, self.index_a, self.index_b, matrix)

    def trust(self, matrix: np.ndarray) -> float:
        return trust_score(self.trust_a, self.trust_b, matrix)


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
