"""The SimCSE STS table: cosine similarity, Spearman x 100, over STS12-16, STS-B test and SICK-R test."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
from scipy.stats import spearmanr

from subspaces.data.sts import TASKS, STSPairs, Variant, load_stsb, load_task
from subspaces.errors import SubspacesError
from subspaces.eval.base import Evaluator
from subspaces.eval.geometry import alignment, uniformity
from subspaces.vectors import cosine_rows, resolve_dims, unit_prefix


def encode_sides(model, sides: Sequence[Sequence[str]], batch_size: int = 128, **options) -> list[np.ndarray]:
    """Each side's rows in order, from one pass over the distinct texts of all sides (``options``: of ``encode``)."""
    from subspaces.models.encoder import encode

    texts = [text for side in sides for text in side]
    unique = list(dict.fromkeys(texts))
    index = {s: i for i, s in enumerate(unique)}
    rows = np.asarray(encode(model, unique, batch_size=batch_size, **options))[[index[s] for s in texts]]
    return np.split(rows, np.cumsum([len(side) for side in sides])[:-1])


def embed_pairs(model, pairs: STSPairs, batch_size: int = 128, truncate_dim: int | None = None):
    """Unit embeddings of both sides of ``pairs``, each distinct sentence encoded once; (emb1, emb2)."""
    sides = (pairs.sentences1, pairs.sentences2)
    return encode_sides(model, sides, batch_size, truncate_dim=truncate_dim, normalize=True)


def spearman_x100(pred: np.ndarray, gold: Sequence[float] | np.ndarray) -> float:
    return float(spearmanr(pred, gold).statistic * 100)


def prefix_spearman(e1: np.ndarray, e2: np.ndarray, gold: Sequence[float], dim: int | None) -> float:
    """Spearman x 100 of the pairs' cosines at the Matryoshka prefix of size ``dim``."""
    return spearman_x100(cosine_rows(unit_prefix(e1, dim), unit_prefix(e2, dim)), gold)


@dataclass
class STSEvaluator(Evaluator):
    """``STSEvaluator()(model)`` -> ``{"STS12": .., ..., "avg": .., "alignment": .., ...}``; the primary metric is
    ``avg``, the mean Spearman x 100 over ``tasks``.

    ``variant``: ``original`` (raw files) or ``senteval`` (SentEval's tokenised, lower-cased copies); ``geometry``:
    also alignment and uniformity on STS-B test (:func:`geometry`); ``truncate_dim``: the first coordinates only.
    """

    tasks: Sequence[str] = TASKS
    variant: Variant = "original"
    batch_size: int = 128
    geometry: bool = True
    truncate_dim: int | None = None
    pairs: dict[str, STSPairs] = field(default_factory=dict, repr=False)

    primary_metric = "avg"

    def __post_init__(self) -> None:
        unknown = [t for t in self.tasks if t not in TASKS]
        if unknown:
            raise SubspacesError(f"unknown STS task(s) {unknown}; choose from {', '.join(TASKS)}")

    def check(self) -> None:
        for task in self.tasks:
            self._pairs(task)

    def _pairs(self, task: str) -> STSPairs:
        if task not in self.pairs:
            self.pairs[task] = load_task(task, self.variant)
        return self.pairs[task]

    def predictions(self, model) -> dict[str, np.ndarray]:
        """The model's cosine for every pair of every task, row-aligned with ``gold(task)``: what a paired
        bootstrap between two models resamples."""
        predicted = {}
        for task in self.tasks:
            e1, e2 = embed_pairs(model, self._pairs(task), self.batch_size, self.truncate_dim)
            predicted[task] = cosine_rows(e1, e2)
        return predicted

    def gold(self, task: str) -> np.ndarray:
        return np.asarray(self._pairs(task).scores, dtype=float)

    def __call__(self, model, output_path: str | None = None, epoch: int = -1, steps: int = -1) -> dict[str, float]:
        """The scores; ``output_path``, ``epoch`` and ``steps`` (what sentence-transformers' trainer passes) unused."""
        predicted = self.predictions(model)
        self.predicted_ = predicted  # the rows behind the last table, for a paired bootstrap without re-encoding
        scores = {task: spearman_x100(predicted[task], self.gold(task)) for task in self.tasks}
        scores["avg"] = float(np.mean([scores[t] for t in self.tasks]))
        if self.geometry:
            scores.update(geometry(model, self.variant, "test", self.batch_size, self.truncate_dim))
        return scores


def geometry(model, variant: Variant = "original", split: str = "test", batch_size: int = 128, truncate_dim=None):
    """Alignment over STS-B pairs scored > 4 and uniformity over all STS-B sentences of the split."""
    pairs = load_stsb(split, variant)  # type: ignore[arg-type]
    e1, e2 = embed_pairs(model, pairs, batch_size, truncate_dim)
    positive = np.asarray(pairs.scores) > 4.0
    both = np.concatenate([e1, e2])
    return {"alignment": alignment(e1[positive], e2[positive]), "uniformity": uniformity(both)}


@dataclass
class STSBDevEvaluator(Evaluator):
    """STS-B dev Spearman x 100 (``stsb_dev``), SimCSE's checkpoint selection; with ``dims``, also each prefix's
    (``stsb_dev@16``, ...) and their ``mean``, then the primary metric (the best model over all dims)."""

    variant: Variant = "original"
    batch_size: int = 128
    limit: int | None = None
    dims: Sequence[int | None] | None = None

    def __post_init__(self) -> None:
        self.primary_metric = "stsb_dev" if self.dims is None else "mean"

    def check(self) -> None:
        self.pairs  # noqa: B018 - read (and cached) now, so a missing file is reported before training

    @cached_property
    def pairs(self) -> STSPairs:
        pairs = load_stsb("dev", self.variant)
        return pairs.head(self.limit) if self.limit is not None else pairs

    def __call__(self, model) -> dict[str, float]:
        pairs = self.pairs
        e1, e2 = embed_pairs(model, pairs, self.batch_size)
        if self.dims is None:
            return {"stsb_dev": spearman_x100(cosine_rows(e1, e2), pairs.scores)}
        dims = resolve_dims(self.dims, e1.shape[1], order="descending", what="Matryoshka dims")
        scores = {f"stsb_dev@{d}": prefix_spearman(e1, e2, pairs.scores, d) for d in dims}
        return {**scores, "mean": float(np.mean(list(scores.values())))}
