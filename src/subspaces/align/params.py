"""The aligner's settings, one frozen dataclass per stage, each checking its own fields (bounds declared beside them,
``setting(default, low=...)``) when it is built; :func:`check_together` ties stages together."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar

from subspaces.errors import SubspacesError
from subspaces.numerics import PRECISIONS

FIT_SECONDS = 300.0  # the default time bound, so that a fit never runs away (docs/align.md, "Bounded time")


def setting(
    default: Any,
    *,
    low: float | None = None,
    high: float | None = None,
    above: bool = False,
    choices: tuple[str, ...] | None = None,
    optional: bool = False,
) -> Any:
    """A dataclass field with its check: ``low <= value`` (``low < value`` with ``above``), ``value <= high``,
    one of ``choices``; ``optional`` also allows ``None``."""
    return field(
        default=default, metadata={"low": low, "high": high, "above": above, "choices": choices, "optional": optional}
    )


def _check_field(owner: str, f: dataclasses.Field, value: Any) -> None:
    rule = f.metadata
    name = f"{owner}.{f.name}"
    if value is None:
        if not rule.get("optional"):
            raise SubspacesError(f"{name} must not be None")
        return
    kind = str if rule.get("choices") else type(f.default) if f.default is not None else float
    if kind is bool:
        if not isinstance(value, bool):
            raise SubspacesError(f"{name} must be true or false, got {value!r}")
        return
    if kind is str:
        if value not in rule["choices"]:
            raise SubspacesError(f"{name} must be one of {', '.join(map(repr, rule['choices']))}, got {value!r}")
        return
    numeric = (int,) if kind is int else (int, float)
    if isinstance(value, bool) or not isinstance(value, numeric):
        try:  # numpy scalars and the like
            if kind is int and int(value) != value:
                raise ValueError
            float(value)
        except (TypeError, ValueError):
            raise SubspacesError(
                f"{name} must be {'an integer' if kind is int else 'a number'}, got {value!r}"
            ) from None
    low, high = rule.get("low"), rule.get("high")
    if low is not None and (value <= low if rule.get("above") else value < low):
        raise SubspacesError(f"{name} must be {'above' if rule.get('above') else 'at least'} {low}, got {value}")
    if high is not None and value > high:
        raise SubspacesError(f"{name} must be at most {high}, got {value}")


class StageParams:
    """Base of the stage settings: checks every field on construction; reads and writes plain dicts."""

    stage: ClassVar[str]

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            _check_field(self.stage, f, getattr(self, f.name))
            if type(f.default) is int and getattr(self, f.name) is not None:  # numpy ints -> int, for JSON
                object.__setattr__(self, f.name, int(getattr(self, f.name)))

    @classmethod
    def from_dict(cls, values: dict[str, Any]):
        if not isinstance(values, dict):
            raise SubspacesError(f"{cls.stage} settings must be a JSON object, got {type(values).__name__}")
        valid = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
        unknown = sorted(set(values) - set(valid))
        if unknown:
            raise SubspacesError(f"unknown {cls.stage} setting(s) {', '.join(unknown)}; valid: {', '.join(valid)}")
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)  # type: ignore[call-overload]

    def __repr__(self) -> str:
        """Only the settings that differ from the defaults, as scikit-learn prints estimators."""
        changed = [
            f"{f.name}={getattr(self, f.name)!r}"
            for f in dataclasses.fields(self)  # type: ignore[arg-type]
            if getattr(self, f.name) != f.default
        ]
        return f"{type(self).__name__}({', '.join(changed)})"


@dataclass(frozen=True, repr=False)
class AnchorParams(StageParams):
    """Matched anchors and the initial map: ``n_runs`` k-means runs of ``n_clusters`` on ``sample`` rows a side
    (``kmeans_redo`` starts each, the tightest kept), matched by ``qap_method`` from ``qap_restarts`` starts comparing
    ``kernel`` (``"cosine"`` of unit centroids or ``"gram"`` of raw cluster means, the notebook's); ``keep``: the
    fraction of runs kept, best agreement first; the initial map is fitted on ``n_pseudo_pairs`` source rows and the
    mean of their ``relative_k`` nearest targets in relative space.
    """

    stage: ClassVar[str] = "anchors"
    n_runs: int = setting(30, low=1)
    n_clusters: int = setting(20, low=3)  # two clusters have one similarity: nothing for a QAP to match
    sample: int = setting(10_000, low=1)
    kmeans_iter: int = setting(25, low=1)
    kmeans_redo: int = setting(1, low=1)
    qap_method: str = setting("faq", choices=("faq", "2opt"))
    kernel: str = setting("cosine", choices=("cosine", "gram"))
    qap_restarts: int = setting(30, low=1)
    keep: float = setting(1.0, low=0, above=True, high=1)
    n_pseudo_pairs: int = setting(10_000, low=1)
    relative_k: int = setting(50, low=1)


@dataclass(frozen=True, repr=False)
class StructureParams(StageParams):
    """Structural refinement (ours): up to ``n_iter`` rounds (0 skips it) of ``n_runs`` seeded k-means pairs of
    ``n_clusters`` on ``sample`` rows, their pairing corrected by cluster structure, then ``steps`` refine-1 steps;
    ends after ``patience`` rounds without a better score, or at the first round that swaps at most
    ``stop_swap_share`` of the seeded pairs (``None``: never)."""

    stage: ClassVar[str] = "structure"
    n_iter: int = setting(10, low=0)
    n_clusters: int = setting(50, low=1)
    n_runs: int = setting(4, low=1)
    sample: int = setting(10_000, low=1)
    kmeans_iter: int = setting(25, low=1)
    steps: int = setting(5, low=0)
    patience: int = setting(2, low=1)
    stop_swap_share: float | None = setting(0.02, low=0, high=1, optional=True)


@dataclass(frozen=True, repr=False)
class RefineParams(StageParams):
    """Refine-1 and refine-2 (also the structural stage's inner steps). Refine-1: up to ``n_iter`` steps on ``sample``
    source rows, mean of ``k`` nearest target rows, blend weight ``alpha``; ``bidirectional`` also pairs target rows
    with mapped-back source neighbour means; scored every ``score_every`` steps, stopped after ``patience`` steps
    without a gain of ``tol``; ``average`` also tries the tail average of the iterates. Refine-2:
    ``centroid_clusters`` (0 skips it), blend ``centroid_alpha``. ``orthogonalize`` projects every blend back onto
    the orthogonal maps; known pairs each weigh ``pair_weight``; ``polish_iter``: more refine-1 steps on the kept map
    where its refine-1 was still climbing at its cap, kept only if the trust score rises (0: never).
    """

    stage: ClassVar[str] = "refine"
    n_iter: int = setting(50, low=0)
    sample: int = setting(1024, low=1)
    k: int = setting(50, low=1)
    alpha: float = setting(0.5, low=0, above=True, high=1)
    bidirectional: bool = setting(True)
    patience: int = setting(30, low=0)
    score_every: int = setting(10, low=1)
    average: bool = setting(True)
    tol: float = setting(1e-4, low=0)
    orthogonalize: bool = setting(True)
    centroid_clusters: int = setting(500, low=0)
    centroid_alpha: float = setting(0.5, low=0, above=True, high=1)
    centroid_kmeans_iter: int = setting(25, low=1)
    pair_weight: float = setting(1.0, low=0)
    polish_iter: int = setting(100, low=0)


@dataclass(frozen=True, repr=False)
class SearchParams(StageParams):
    """Neighbour search (:class:`~.neighbours.NeighbourIndex`) and the label-free score: ``ann_lists`` IVF cells
    (0 = exact), ``ann_probe`` cells visited per query; or ``shortlist_dims`` principal axes a shortlist is scanned on
    (0 = exact), ``shortlist_factor`` x k candidates re-ranked; ``probe_size`` rows of each space scored;
    ``precision`` the float type the exact search and k-means rank in (``None``: the process's setting;
    :mod:`subspaces.numerics`)."""

    stage: ClassVar[str] = "search"
    ann_lists: int = setting(0, low=0)
    ann_probe: int = setting(8, low=1)
    shortlist_dims: int = setting(0, low=0)
    shortlist_factor: int = setting(4, low=1)
    probe_size: int = setting(2048, low=1)
    precision: str | None = setting(None, choices=PRECISIONS, optional=True)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.ann_lists > 0 and self.shortlist_dims > 0:
            raise SubspacesError(
                f"search.ann_lists ({self.ann_lists}) and search.shortlist_dims ({self.shortlist_dims}) "
                "are two approximate searches; set one of them to 0"
            )


STAGES: dict[str, type[StageParams]] = {
    "anchors": AnchorParams,
    "structure": StructureParams,
    "refine": RefineParams,
    "search": SearchParams,
}


def check_together(anchors: AnchorParams, structure: StructureParams, converged_swap_share: float | None) -> None:
    """The checks that tie settings of different stages (or several fields) together."""
    # k-means needs several points per cluster or its centroids are single points (or faiss refuses).
    for where, params in (("anchors", anchors), ("structure", structure)):
        if params.sample < 4 * params.n_clusters:
            raise SubspacesError(
                f"{where}.sample ({params.sample}) must be at least 4 x {where}.n_clusters ({params.n_clusters})"
            )
    if converged_swap_share is not None and not 0 <= converged_swap_share <= 1:
        raise SubspacesError(f"converged_swap_share must be in [0, 1] or None, got {converged_swap_share}")
    stop = structure.stop_swap_share
    if stop is not None and converged_swap_share is not None and stop > converged_swap_share:
        # A structural stage ended above the convergence share would be judged failed: restarts and a warning.
        raise SubspacesError(
            f"structure.stop_swap_share ({stop}) must not exceed converged_swap_share ({converged_swap_share})"
        )


# The paper's own stages as one candidate pass of the fit: the author's notebook's settings (no structural stage).
RECIPE_ANCHORS = AnchorParams(
    n_runs=30, n_clusters=20, sample=10_000, qap_method="2opt", kernel="gram", qap_restarts=30, relative_k=50
)
RECIPE_REFINE = RefineParams(
    n_iter=100,
    sample=1000,
    k=50,
    alpha=0.5,
    bidirectional=False,
    patience=100,
    score_every=100,
    average=False,
    orthogonalize=False,
    centroid_clusters=500,
    centroid_alpha=0.5,
    polish_iter=0,
)
RECIPE_MIN_ROWS = 4000  # below this many rows a side, the notebook's 500 centroids would hold a handful of rows each
RECIPE_BUDGET = 2.5  # the whole fit's bound, in units of the recipe candidate's own time
