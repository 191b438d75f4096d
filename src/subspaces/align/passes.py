"""The fit's typed records: a pass's (anchors -> initial map -> structure -> refine-1 -> refine-2; what is saved of
it, :class:`PassRecord`, and what its later stages need, :class:`Pass`), a candidate map's (:class:`CandidateRecord`),
the agreement check's and the polish's, and the whole fit's (:class:`FitDiagnostics`, saved with the map)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self

import numpy as np

from subspaces.align.anchors import AnchorSet
from subspaces.align.refine import NeighbourStep, RefineHistory, StructureHistory
from subspaces.align.verify import IDENTITY_REFERENCE_MARGIN, PairedCheck, TrustCheck
from subspaces.results import JSONResult


@dataclass
class StageScores:
    """The label-free neighbour similarity after each stage (None: not run yet)."""

    initial: float
    structure: float
    refine1: float | None = None
    refine2: float | None = None
    final: float | None = None


@dataclass(kw_only=True)
class PassRecord:
    """One pass's label-free diagnostics (the field order is the saved order)."""

    label: str  # "restart i/n", "agreement check", "identity start", "paper recipe" or "search pass j"
    refined: bool = False  # refine-1 and refine-2 ran (a pass a converged one replaced is left unrefined)
    nn_similarity: StageScores
    anchor_clusters: int | None = None  # None: started from known pairs or the identity
    qap_agreement: float | None = None
    mean_qap_objective: float | None = None
    runs_kept: int = 0
    anchor_consistency_initial: float | None = None
    anchor_consistency_final: float | None = None
    structure_iterations: int = 0
    structure_scores: list[float] = field(default_factory=list)
    structure_swapped: list[float] = field(default_factory=list)  # share of seeded cluster pairs each round swapped
    refine1_iterations: int = 0
    refine1_best_iteration: int = -1
    refine1_stopped_early: bool = False
    refine1_scores: list[float] = field(default_factory=list)
    refine1_average_score: float | None = None
    refine1_averaged: bool = False
    refine2_accepted: bool = False
    stage_seconds: dict[str, float] = field(default_factory=dict)

    def converged(self, swap_share: float | None) -> bool | None:
        """Whether the last structural round swapped at most ``swap_share`` of the seeded pairs (None: no structural
        stage or no threshold)."""
        if swap_share is None or not self.structure_swapped:
            return None
        return self.structure_swapped[-1] <= swap_share

    def take_anchors(self, matched: AnchorSet, n_clusters: int, consistency: float) -> None:
        self.anchor_clusters, self.runs_kept = n_clusters, int(matched.kept.sum())
        self.qap_agreement = float(matched.agreement[matched.kept].mean())
        self.mean_qap_objective = float(matched.objective.mean())
        self.anchor_consistency_initial = consistency

    def take_structure(self, history: StructureHistory) -> None:
        self.nn_similarity.structure = history.best_score
        self.structure_iterations, self.structure_scores = history.iterations, history.scores
        self.structure_swapped = history.swapped

    def take_refinement(self, history: RefineHistory, refine2: float | None, final: float, accepted: bool) -> None:
        self.refined, self.refine2_accepted = True, accepted
        scores = self.nn_similarity
        scores.refine1, scores.refine2, scores.final = history.best_score, refine2, final
        for name in ("iterations", "best_iteration", "stopped_early", "scores", "average_score", "averaged"):
            setattr(self, f"refine1_{name}", getattr(history, name))

    @classmethod
    def from_dict(cls, saved: dict[str, Any]) -> PassRecord:
        """A saved record; a field an older format-2 file lacks keeps its default."""
        known = {f.name for f in dataclasses.fields(cls)}
        values = {name: value for name, value in saved.items() if name in known} | {"label": saved.get("label", "")}
        return cls(**values | {"nn_similarity": StageScores(**saved["nn_similarity"])})


@dataclass
class CandidateRecord(JSONResult):
    """A candidate map's record (``diagnostics_.identity_reference``, ``.recipe_candidate``)."""

    OMIT_IF_NONE: ClassVar[frozenset[str]] = frozenset({"stage_seconds"})

    trust: float | None = None
    nn_similarity: float | None = None
    lift: float | None = None  # its trust score's lead over the anchored map's, in units of chance level
    seconds: float | None = None
    cpu_seconds: float | None = None  # this process's, what ``recipe_budget`` multiplies
    skipped: str | None = None  # why it did not run
    margin: float = IDENTITY_REFERENCE_MARGIN
    cut_short: bool = False  # the budget ran out during it
    stage_seconds: dict[str, float] | None = None  # the paper recipe's, once run


@dataclass
class AgreementSearch(JSONResult):
    """The agreement search's record: the passes refined in all, the new ones it ran, each compared pair's agreement."""

    passes_refined: int
    new_passes: int
    pairwise: list[list[Any]]  # [i, j, agreement] of passes i < j, both refined and converged


@dataclass
class AgreementCheck(JSONResult):
    """``diagnostics_.agreement``: the agreement check and search; the check pass's fields are written once it ran."""

    OMIT_IF_NONE: ClassVar[frozenset[str]] = frozenset(
        {"check_structure_swapped", "check_stage_seconds", "check_agreement"}
    )

    agreement: float | None = None  # the kept map's with an independent pass (None: not judged)
    threshold: float | None = None
    skipped: str | None = None  # why it did not judge
    compared: int | None = None  # the passes compared
    check_structure_swapped: list[float] | None = None
    check_stage_seconds: dict[str, float] | None = None
    check_agreement: float | None = None  # the check pass's with the restarts' choice
    search: AgreementSearch | None = None

    @property
    def disagrees(self) -> bool:
        """The check judged, and no two passes agree."""
        return self.agreement is not None and self.threshold is not None and self.agreement < self.threshold

    def to_dict(self) -> dict[str, Any]:
        saved = super().to_dict()
        return saved if self.check_agreement is not None else {k: v for k, v in saved.items() if k != "search"}

    @classmethod
    def from_dict(cls, saved: Mapping[str, Any]) -> Self:
        search = saved.get("search")
        return super().from_dict({**saved, "search": None if search is None else AgreementSearch.from_dict(search)})


@dataclass
class PolishRecord(JSONResult):
    """``diagnostics_.polish``: the kept map's polish (refine-1 continued), accepted where its trust score rose."""

    ran: bool = False
    iterations: int = 0
    trust_before: float | None = None
    trust_after: float | None = None
    accepted: bool = False


@dataclass
class Pass:
    """A pass in progress: its record, its map (structured, then refined) and what refinement needs."""

    record: PassRecord
    matrix: np.ndarray
    structured: np.ndarray  # the map after the structural stage, kept for diagnosis (``pass_maps_``)
    anchors: AnchorSet | None
    step: NeighbourStep  # refine-1's step, on the pass's own refine stream, with the pass's refine settings
    centroid_rng: np.random.Generator

    @property
    def final_score(self) -> float:
        """The label-free score of a refined pass's final map."""
        assert self.record.nn_similarity.final is not None, f"{self.record.label} is not refined"
        return self.record.nn_similarity.final


@dataclass(kw_only=True)
class FitDiagnostics:
    """``MiniVec2Vec.diagnostics_``: the verdict on the kept map and every score and check behind it; saved with the
    map as :meth:`to_dict` (``trusted`` and ``stopped_early`` included), read back by :meth:`from_dict`."""

    chosen_restart: int  # the anchored passes' choice (``kept`` says whether it is the map)
    converged: bool | None  # the chosen pass's structure converged (None: nothing or no threshold to judge by)
    confidence: float | None  # :func:`.verify.verdict`'s
    problems: list[str]  # why the map is not trusted (:func:`.verify.verdict`), each a sentence
    identity_nn_similarity: float | None  # the trivial maps' label-free scores (identity: where the dims agree)
    random_rotation_nn_similarity: float
    trust: TrustCheck | None  # :func:`.verify.trust_report` (None: a file from before it was recorded)
    agreement: AgreementCheck
    polish: PolishRecord
    identity_reference: CandidateRecord
    recipe_candidate: CandidateRecord
    init: str
    kept: str  # "anchors", "identity" (init="identity") or a candidate ("identity reference", "paper recipe")
    kept_why: str
    stop_reason: str | None  # where the time budget stopped the fit (None: it did not)
    precision: str  # :func:`subspaces.numerics.cpu_record`'s three
    cpu: str
    native_bfloat16: bool
    n_pairs: int
    paired_check: PairedCheck | None  # :func:`.verify.paired_check`, with known pairs
    nn_similarity: StageScores  # the kept map's own (with a candidate kept, no anchored restart is the map)
    anchor_consistency: float | None
    orthogonality_gap: float
    restarts: list[PassRecord]  # every pass, in the order they started

    @property
    def trusted(self) -> bool:
        return not self.problems

    @property
    def stopped_early(self) -> bool:
        return self.stop_reason is not None

    def to_dict(self) -> dict[str, Any]:
        saved = dataclasses.asdict(self) | {"trusted": self.trusted, "stopped_early": self.stopped_early}
        records = ("trust", "agreement", "polish", "identity_reference", "recipe_candidate", "paired_check")
        return saved | {name: None if (r := getattr(self, name)) is None else r.to_dict() for name in records}

    @classmethod
    def from_dict(cls, saved: dict[str, Any]) -> FitDiagnostics:
        """The saved record. Format 2 grew fields: one an older file lacks reads as unrecorded (None, empty, a check
        or candidate skipped, no polish), its precision as float32, and its saved ``trusted`` still decides."""
        fields = {f.name for f in dataclasses.fields(cls)}
        values: dict[str, Any] = dict.fromkeys(fields)
        values |= {"problems": [], "n_pairs": 0, "precision": "float32", "restarts": []}
        values |= {k: v for k, v in saved.items() if k in fields}
        if not saved.get("trusted", False) and not values["problems"]:
            values["problems"] = ["its fit did not converge"]
        unrecorded = {"skipped": "not recorded by the version that fitted this map"}
        trust, paired, candidates = values["trust"], values["paired_check"], ("identity_reference", "recipe_candidate")
        return cls(
            **values
            | {name: CandidateRecord.from_dict(saved.get(name, unrecorded)) for name in candidates}
            | {
                "trust": TrustCheck.from_dict(trust) if trust else None,
                "agreement": AgreementCheck.from_dict(saved.get("agreement") or unrecorded),
                "polish": PolishRecord.from_dict(saved.get("polish", {})),
                "paired_check": None if paired is None else PairedCheck.from_dict(paired),
                "nn_similarity": StageScores(**saved["nn_similarity"]),
                "restarts": [PassRecord.from_dict(record) for record in values["restarts"]],
            }
        )
