"""A query-side map fitted without pairs: a new model's queries into a store's vectors, learned by mini-vec2vec
(:mod:`subspaces.align`) from a sample of domain texts the user gives and a sample of the stored vectors. This is
how a store nobody can re-embed (a ``--foreign`` store) becomes searchable by text, when the aligner's own
label-free verdict trusts the map and the mapped texts spread over the store as its rows do (:func:`spread`): a map
that fails either is refused with the reason, since a wrong map would return confident, wrong results.

The kept map is an :class:`~subspaces.store.maps.OrthogonalMap`: mini-vec2vec's ``unit(mu_t + s * unit((x - mu_s)
M))``, with ``(x - mu_s) M`` taken at its mean length ``c`` over the texts, is ``unit((x - mu_s) M s / c + mu_t)``.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np

from subspaces.align import MiniVec2Vec
from subspaces.align.anchors import kmeans
from subspaces.errors import ConvergenceWarning, DataError
from subspaces.fingerprint import texts_sha256
from subspaces.io import read_texts
from subspaces.store.maps import OrthogonalMap

TEXTS_PER_DIMENSION = 4  # as the paired fit's default pair count: fewer leave a d x d map poorly posed
SAMPLE = 20_000  # texts encoded and stored rows read, at most (the aligner's own default sample is 10,000)
REGIONS = 50  # spherical k-means regions of the stored rows that the mapped texts' spread is compared over
MISMATCH_LIMIT = 0.165  # the most :func:`spread` mismatch above its floor a map is used with (chosen on dev)


def read_domain_texts(path: str | Path, *, limit: int = SAMPLE, seed: int = 0) -> list[str]:
    """The distinct non-blank texts of ``path`` (one a line, ``.jsonl``'s ``text`` field, or a ``.csv``'s ``text``
    column), at most ``limit`` of them sampled with ``seed``; a missing or empty file is refused in one line."""
    texts = list(dict.fromkeys(t.strip() for t in read_texts(path) if t.strip()))
    if not texts:
        raise DataError("holds no text (a sample of domain texts, one a line, is needed)", path=path)
    if len(texts) > limit:
        keep = np.sort(np.random.default_rng(seed).choice(len(texts), limit, replace=False))
        texts = [texts[i] for i in keep]
    return texts


def check_count(texts: list[str], path: Any, dims: tuple[int, int]) -> None:
    """Refuse a texts sample too small to fit a ``dims[0] -> dims[1]`` map (:data:`TEXTS_PER_DIMENSION` a
    dimension of the wider space)."""
    need = TEXTS_PER_DIMENSION * max(dims)
    if len(texts) < need:
        raise DataError(
            f"holds {len(texts):,} distinct texts; an unpaired map of {dims[0]} -> {dims[1]} dimensions needs at "
            f"least {need:,} ({TEXTS_PER_DIMENSION} a dimension of the wider space)",
            path=path,
        )


def texts_digest(texts: list[str]) -> str:
    """What identifies a texts sample among a query map's options (a rerun with the same texts is the same fit)."""
    return texts_sha256(texts, b"\n", 16)


def fit(new: np.ndarray, stored: np.ndarray, *, params: dict[str, Any] | None, seed: int, show_progress: bool) -> Any:
    """mini-vec2vec fitted from ``new`` (the texts' new-model vectors) onto ``stored`` (a sample of the store's
    rows); its problems are kept in ``diagnostics_`` (:func:`verdict`), not warned about: the caller refuses."""

    aligner = MiniVec2Vec.from_params(dict(params or {}), random_state=seed, verbose=show_progress)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        aligner.fit(new, stored)
    return aligner


def verdict(aligner: Any) -> dict[str, Any]:
    """The aligner's trust checks, as a report shows them: trusted or not, why not, and the figures behind."""
    d = aligner.diagnostics_
    trust, agreement = d.trust, d.agreement
    return {
        "trusted": bool(aligner.converged_),
        "problems": list(d.problems),
        "confidence": _round(d.confidence),
        "kept": d.kept,
        "trust_score": getattr(trust, "score", None),
        "trust_lift": _round(getattr(trust, "lift", None)),  # over the best trivial map, in units of chance level
        "trust_margin": getattr(trust, "margin", None),
        "trust_final": _round(getattr(trust, "final", None)),
        "trust_identity": _round(getattr(trust, "identity", None)),
        "trust_random_rotation": _round(getattr(trust, "random_rotation", None)),
        "agreement": _round(agreement.agreement),
        "agreement_threshold": agreement.threshold,
        "stopped_early": d.stopped_early,
        "stop_reason": d.stop_reason,
    }


def refusal(aligner: Any, what: str, spreads: dict[str, float]) -> str | None:
    """The one-line reason ``what`` (the map, named) is not used, or None when the aligner trusts it and the mapped
    texts spread over the store as its rows do (:func:`spread`'s mismatch at most :data:`MISMATCH_LIMIT` above the
    floor)."""
    if not aligner.converged_:
        reason = " ".join(aligner.diagnostics_.problems[0].split())
        return f"{what} is not trusted by the aligner's label-free checks, so nothing was recorded: {reason}"
    excess = spreads["mismatch"] - spreads["floor"]
    if excess > MISMATCH_LIMIT:
        return (
            f"{what} is not used, so nothing was recorded: the mapped texts spread over the store's regions unlike "
            f"its rows (total variation {spreads['mismatch']:.3f} over {REGIONS} regions, {excess:.3f} above the "
            f"{spreads['floor']:.3f} sampling alone gives; at most {MISMATCH_LIMIT} is used). Give texts drawn as the "
            "store's were (the same sources, in the same proportions): queries alone, or one source of several, "
            "give a wrong map"
        )
    return None


def as_query_map(aligner: Any, new: np.ndarray) -> OrthogonalMap:
    """The fitted aligner as a query map of unit rows (see the module docstring); ``new``: the vectors it was
    fitted from, whose centred length ``c`` is taken at its mean."""
    matrix = np.asarray(aligner.matrix_, dtype=np.float64)
    source_mean = np.asarray(aligner.source_mean_, dtype=np.float64)
    target_mean = np.asarray(aligner.target_mean_, dtype=np.float64)
    length = float(np.linalg.norm((np.asarray(new, dtype=np.float64) - source_mean) @ matrix, axis=1).mean())
    weight = matrix * (aligner.target_scale_ / max(length, 1e-12))
    mapped = OrthogonalMap()
    mapped.n_features_in_, mapped.n_features_out_ = matrix.shape
    mapped.fit_seconds_ = float(aligner.fit_seconds_)
    mapped._linear(weight, target_mean - source_mean @ weight)
    return mapped


def spread(mapped: np.ndarray, stored: np.ndarray, *, seed: int) -> dict[str, float]:
    """How differently the mapped texts spread over the store than its rows do: the total variation distance between
    the shares of ``stored`` and of ``mapped`` (unit rows in the store's space) in :data:`REGIONS` spherical k-means
    regions of the stored rows (``mismatch``), and the same for as many stored rows drawn at random (``floor``, what
    sampling alone gives). mini-vec2vec matches the two samples' distributions, so texts drawn otherwise than the
    store's rows (its queries alone, one source of several) are spread wrongly, and their map with them."""
    rng = np.random.default_rng(seed)
    fit_rows = stored[rng.permutation(len(stored))[: min(len(stored), SAMPLE // 2)]]
    centroids = kmeans(fit_rows, min(REGIONS, len(fit_rows)), seed=seed)

    def shares(x: np.ndarray) -> np.ndarray:
        return np.bincount((x @ centroids.T).argmax(axis=1), minlength=len(centroids)) / len(x)

    rows = shares(stored)
    drawn = stored[rng.permutation(len(stored))[: min(len(mapped), len(stored))]]
    return {
        "mismatch": _round(0.5 * np.abs(rows - shares(np.asarray(mapped, dtype=np.float32))).sum()),
        "floor": _round(0.5 * np.abs(rows - shares(drawn)).sum()),
    }


def _round(value: Any, digits: int = 4) -> Any:
    return round(float(value), digits) if isinstance(value, (int, float, np.floating)) else value
