"""mini-vec2vec (Dar, 2025): a linear map between two embedding spaces learned from unpaired vectors.

    aligner = MiniVec2Vec(random_state=0).fit(source_vectors, target_vectors)   # different texts, no pairs
    moved = aligner.transform(old_store)        # old model's vectors, now in the new model's space

Stages (each its own module): centre + normalise (:mod:`.preprocess`); matched anchors from an ensemble of
k-means runs and quadratic assignment (:mod:`.anchors`, :mod:`.matching`); relative representations -> neighbour
means -> Procrustes (:mod:`.relative`, :mod:`.procrustes`); structural, neighbour-mean and centroid refinement
(:mod:`.refine`). Label-free diagnostics (:mod:`.diagnostics`) pick among ``n_restarts`` independent anchor
stages and stop refinement; ``fit`` never sees paired data.

Beyond the paper's notebook: a structural refinement (seeded k-means partitions whose pairing is corrected by
the clusters' similarity structure) that pulls a weak initial map into the right basin, restarts chosen by a
label-free score (and run only until one converges), runs filtered by matching agreement (``anchor_keep``),
relative representations centred per anchor, blended maps projected back to orthogonal, early stopping with the
best map kept, a centroid refinement that is only accepted if the label-free score does not drop, bidirectional
refine-1 steps, tail-averaged refine-1 iterates, and optional IVF indexes for the repeated searches.
``n_restarts=1, structure_iter=0, refine_bidirectional=False, refine_average=False, anchor_kernel="gram",
orthogonalize=False, refine_patience=refine_iter`` is close to the paper's plain recipe (the k-means
and QAP solver still differ; see docs/align.md).
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import time
import warnings
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from subspaces.align.anchors import matched_anchors
from subspaces.align.diagnostics import anchor_consistency, bidirectional_nn_similarity
from subspaces.align.neighbours import NeighbourIndex
from subspaces.align.preprocess import center_normalize, check_embeddings, normalize_rows
from subspaces.align.procrustes import orthogonality_gap
from subspaces.align.refine import (
    NeighbourStep,
    StructureHistory,
    refine_by_centroids,
    refine_by_neighbours,
    refine_by_structure,
)
from subspaces.align.relative import initial_map
from subspaces.errors import ConvergenceWarning, DataError, DimensionError, SubspacesError
from subspaces.io import atomic_open

logger = logging.getLogger(__name__)

FORMAT_VERSION = 1
CONFIG_FILE = "aligner.json"
STATE_FILE = "state.npz"


class MiniVec2Vec:
    """Unsupervised linear alignment of a source embedding space onto a target space.

    Args:
        n_anchor_runs: k-means runs pooled into anchors (paper: 30).
        n_anchor_clusters: clusters per run (paper: 20).
        anchor_sample: rows sampled from each space per run (paper: 10,000).
        kmeans_iter: Lloyd iterations of every k-means.
        kmeans_redo: random starts of each anchor k-means, the lowest-inertia one kept (steadier partitions).
        qap_method: ``"faq"`` or ``"2opt"`` (scipy's quadratic-assignment solvers).
        anchor_kernel: what the QAP compares: ``"cosine"`` of the unit centroids, or ``"gram"``, the double-centred
            Gram matrix of the raw cluster means (the paper's notebook).
        qap_restarts: solver starts per run, each polished by pairwise swaps; the best objective is kept.
        anchor_keep: fraction of runs kept, best matching agreement first (1.0 = paper, keep all).
        n_restarts: at most this many independent full passes (anchors, initial map, both refinements); the one
            with the best label-free score after refinement is kept.
        converged_swap_share: no further restarts once a pass's last structural round changed at most this share
            of the seeded cluster pairs (the label-free sign that the map agrees with both spaces' cluster
            structure; working pairs end at 0-6 %, failing ones at 16-42 %). ``None`` always runs ``n_restarts``.
        n_pseudo_pairs: source rows used to fit the initial map.
        relative_k: target neighbours averaged in relative space (paper: 50).
        structure_iter: maximum rounds of structural refinement (ours; 0 = the paper's pipeline without it).
        structure_clusters: clusters per k-means in a structural round.
        structure_runs: k-means pairs (seeded target at mapped source centroids) per structural round.
        structure_sample: rows sampled from each space per structural k-means.
        structure_steps: refine-1 steps after each structural correction.
        structure_patience: stop structural refinement after this many rounds without a better label-free score.
        structure_stop_swap_share: end structural refinement at the first round that swaps at most this share of
            the seeded pairs (the map agrees with both spaces' cluster structure; refine-1 goes on from there).
            ``None`` runs until ``structure_patience`` or ``structure_iter``.
        refine_iter: maximum refine-1 iterations (paper: 100).
        refine_sample: source rows per refine-1 iteration.
        refine_k: target neighbours averaged per mapped source row in refine-1 (paper: 50).
        refine_alpha: blend weight of each new map (paper: 0.5).
        refine_bidirectional: also pair sampled target rows with their mapped-back source neighbour means in each
            refine-1 step (ours; the paper pairs source rows only).
        refine_patience: stop refine-1 after this many iterations without a better label-free score.
        refine_score_every: score the refine-1 map only every so many iterations (a score costs about a step).
        refine_average: also score the orthogonal projection of the mean of refine-1's last half of iterates
            (Polyak-Ruppert tail averaging; ours) and keep it if it scores higher than the best single iterate.
        refine_tol: smallest score gain that counts as better.
        centroid_clusters: k of refine-2's k-means (paper: 500); 0 skips refine-2.
        centroid_alpha: blend weight of refine-2's map (paper: 0.5).
        orthogonalize: project every blended map back onto the (semi-)orthogonal matrices (the paper lets it drift).
        ann_lists: IVF cells of the faiss indexes searched during refinement and scoring; 0 (default) searches
            exactly. An IVF index (e.g. 128) makes each search cheaper but its neighbour means are worse
            pseudo-targets: up to 3 points of top-1 lower on the benchmark pairs (tweets 2.1 on average, WordNet
            -> wordllama 1.8-2.9, the easy WordNet pair level; BENCHMARKS.md section 2).
        ann_probe: IVF cells visited per query.
        probe_size: rows of each space used for the label-free score.
        random_state: seed for every sample, k-means and QAP start.
        verbose: show progress bars.
    """

    def __init__(
        self,
        *,
        n_anchor_runs: int = 30,
        n_anchor_clusters: int = 20,
        anchor_sample: int = 10_000,
        kmeans_iter: int = 25,
        kmeans_redo: int = 1,
        qap_method: str = "faq",
        anchor_kernel: str = "cosine",
        qap_restarts: int = 30,
        anchor_keep: float = 1.0,
        n_restarts: int = 3,
        converged_swap_share: float | None = 0.1,
        n_pseudo_pairs: int = 10_000,
        relative_k: int = 50,
        structure_iter: int = 10,
        structure_clusters: int = 50,
        structure_runs: int = 4,
        structure_sample: int = 10_000,
        structure_steps: int = 5,
        structure_patience: int = 2,
        structure_stop_swap_share: float | None = 0.02,
        refine_iter: int = 100,
        refine_sample: int = 1024,
        refine_k: int = 50,
        refine_alpha: float = 0.5,
        refine_bidirectional: bool = True,
        refine_patience: int = 30,
        refine_score_every: int = 5,
        refine_average: bool = True,
        refine_tol: float = 1e-4,
        centroid_clusters: int = 500,
        centroid_alpha: float = 0.5,
        orthogonalize: bool = True,
        ann_lists: int = 0,
        ann_probe: int = 8,
        probe_size: int = 2048,
        random_state: int | None = 0,
        verbose: bool = False,
    ) -> None:
        self.n_anchor_runs = n_anchor_runs
        self.n_anchor_clusters = n_anchor_clusters
        self.anchor_sample = anchor_sample
        self.kmeans_iter = kmeans_iter
        self.kmeans_redo = kmeans_redo
        self.qap_method = qap_method
        self.anchor_kernel = anchor_kernel
        self.qap_restarts = qap_restarts
        self.anchor_keep = anchor_keep
        self.n_restarts = n_restarts
        self.converged_swap_share = converged_swap_share
        self.n_pseudo_pairs = n_pseudo_pairs
        self.relative_k = relative_k
        self.structure_iter = structure_iter
        self.structure_clusters = structure_clusters
        self.structure_runs = structure_runs
        self.structure_sample = structure_sample
        self.structure_steps = structure_steps
        self.structure_patience = structure_patience
        self.structure_stop_swap_share = structure_stop_swap_share
        self.refine_iter = refine_iter
        self.refine_sample = refine_sample
        self.refine_k = refine_k
        self.refine_alpha = refine_alpha
        self.refine_bidirectional = refine_bidirectional
        self.refine_patience = refine_patience
        self.refine_score_every = refine_score_every
        self.refine_average = refine_average
        self.refine_tol = refine_tol
        self.centroid_clusters = centroid_clusters
        self.centroid_alpha = centroid_alpha
        self.orthogonalize = orthogonalize
        self.ann_lists = ann_lists
        self.ann_probe = ann_probe
        self.probe_size = probe_size
        self.random_state = random_state
        self.verbose = verbose

    # -- scikit-learn protocol ---------------------------------------------------------------------------------
    def get_params(self, deep: bool = True) -> dict[str, Any]:
        import inspect

        names = [p for p in inspect.signature(type(self).__init__).parameters if p != "self"]
        return {name: getattr(self, name) for name in names}

    def set_params(self, **params: Any) -> MiniVec2Vec:
        valid = self.get_params()
        for key, value in params.items():
            if key not in valid:
                raise ValueError(f"unknown parameter {key!r} of MiniVec2Vec")
            setattr(self, key, value)
        return self

    def check_params(self) -> None:
        """Raise :class:`SubspacesError` on a bad parameter; ``fit`` calls it, callers may call it before any I/O."""
        if self.qap_method not in ("faq", "2opt"):
            raise SubspacesError(f"qap_method must be 'faq' or '2opt', got {self.qap_method!r}")
        if self.anchor_kernel not in ("cosine", "gram"):
            raise SubspacesError(f"anchor_kernel must be 'cosine' or 'gram', got {self.anchor_kernel!r}")
        for name in ("n_anchor_runs", "kmeans_iter", "qap_restarts", "n_restarts",
                     "relative_k", "refine_k", "refine_sample", "n_pseudo_pairs", "probe_size", "anchor_sample",
                     "ann_probe", "kmeans_redo", "refine_score_every", "structure_clusters", "structure_runs",
                     "structure_sample", "structure_patience"):
            if int(getattr(self, name)) < 1:
                raise SubspacesError(f"{name} must be at least 1, got {getattr(self, name)}")
        for name in ("structure_iter", "structure_steps", "refine_iter", "refine_patience", "centroid_clusters",
                     "ann_lists"):
            if int(getattr(self, name)) < 0:
                raise SubspacesError(f"{name} must be at least 0, got {getattr(self, name)}")
        if int(self.n_anchor_clusters) < 3:  # two clusters have one similarity: nothing for a QAP to match
            raise SubspacesError(f"n_anchor_clusters must be at least 3, got {self.n_anchor_clusters}")
        # k-means needs several points per cluster or its centroids are single points (or faiss refuses).
        for sample, clusters in (("anchor_sample", "n_anchor_clusters"), ("structure_sample", "structure_clusters")):
            if int(getattr(self, sample)) < 4 * int(getattr(self, clusters)):
                raise SubspacesError(f"{sample} ({getattr(self, sample)}) must be at least 4 x {clusters} "
                                     f"({getattr(self, clusters)})")
        for name in ("refine_alpha", "centroid_alpha", "anchor_keep"):
            if not 0 < float(getattr(self, name)) <= 1:
                raise SubspacesError(f"{name} must be in (0, 1], got {getattr(self, name)}")
        if float(self.refine_tol) < 0:
            raise SubspacesError(f"refine_tol must be at least 0, got {self.refine_tol}")
        for name in ("converged_swap_share", "structure_stop_swap_share"):
            value = getattr(self, name)
            if value is not None and not 0 <= float(value) <= 1:
                raise SubspacesError(f"{name} must be in [0, 1] or None, got {value}")
        stop, converged = self.structure_stop_swap_share, self.converged_swap_share
        if stop is not None and converged is not None and stop > converged:
            # A structural stage ended above the convergence share would be judged failed: restarts and a warning.
            raise SubspacesError(
                f"structure_stop_swap_share ({stop}) must not exceed converged_swap_share ({converged})"
            )

    def _check_rows(self, n_source: int, n_target: int) -> None:
        need = max(4 * self.n_anchor_clusters, self.relative_k, self.refine_k)
        for what, n in (("source", n_source), ("target", n_target)):
            if n < need:
                raise DataError(
                    f"{what} has {n} rows; the aligner needs at least {need} "
                    f"(4 x n_anchor_clusters={self.n_anchor_clusters}, and relative_k/refine_k neighbours)"
                )

    def fit(self, source: np.ndarray, target: np.ndarray) -> MiniVec2Vec:
        """Learn the map from unpaired ``source`` (n_a x d_a) and ``target`` (n_b x d_b) vectors."""
        start = time.perf_counter()
        self.check_params()
        source = check_embeddings(source, "source embeddings")
        target = check_embeddings(target, "target embeddings")
        self._check_rows(len(source), len(target))
        rng = np.random.default_rng(self.random_state)

        self.source_mean_ = source.mean(axis=0)
        self.target_mean_ = target.mean(axis=0)
        a = center_normalize(source, self.source_mean_)
        b = center_normalize(target, self.target_mean_)
        # Typical length of a centred target vector: lets transform() return vectors in the target's own space.
        self.target_scale_ = float(np.linalg.norm(target - self.target_mean_, axis=1).mean())
        self.n_features_in_ = a.shape[1]
        self.n_features_out_ = b.shape[1]

        probe_a = a[rng.choice(len(a), min(self.probe_size, len(a)), replace=False)]
        probe_b = b[rng.choice(len(b), min(self.probe_size, len(b)), replace=False)]

        index_a = NeighbourIndex(a, n_lists=self.ann_lists, n_probe=self.ann_probe, seed=int(rng.integers(2**31)))
        index_b = NeighbourIndex(b, n_lists=self.ann_lists, n_probe=self.ann_probe, seed=int(rng.integers(2**31)))

        def score(matrix: np.ndarray) -> float:
            return bidirectional_nn_similarity(probe_a, probe_b, index_a, index_b, matrix)

        restarts = []
        for restart in range(self.n_restarts):
            restarts.append(self._fit_one(restart, a, b, index_a, index_b, score, rng))
            if self._converged(restarts[-1]) is True:
                break  # a converged pass is trusted; restarts are for passes whose structure still disagrees
        # Refined maps are compared, not initial ones: a wrong start can look as good as a right one before
        # refinement, but only a right one reaches a high neighbour similarity after it. A converged pass (the
        # stronger, structural evidence) is preferred to any unconverged one.
        chosen = max(range(len(restarts)),
                     key=lambda i: (self._converged(restarts[i]) is True, restarts[i]["nn_similarity"]["final"]))
        self.matrix_ = restarts[chosen].pop("matrix").astype(np.float32)
        for r in restarts:
            r.pop("matrix", None)
        self.fit_seconds_ = time.perf_counter() - start
        converged = self._converged(restarts[chosen])
        if converged is False:
            warnings.warn(
                f"no pass of the alignment converged: the kept one's structural search still swapped "
                f"{restarts[chosen]['structure_swapped'][-1]:.0%} of the seeded cluster pairs in its last round "
                f"(converged: <= {self.converged_swap_share:.0%}); the map is probably wrong. Try more n_restarts, "
                f"more data, or check the pair on a few paired texts.",
                ConvergenceWarning, stacklevel=2,
            )
        self.diagnostics_ = {
            "chosen_restart": chosen,
            "converged": converged,
            "nn_similarity": restarts[chosen]["nn_similarity"],
            "anchor_consistency": restarts[chosen]["anchor_consistency_final"],
            "orthogonality_gap": orthogonality_gap(self.matrix_),
            "restarts": restarts,
        }
        return self

    def _converged(self, restart: dict[str, Any]) -> bool | None:
        """Whether a pass's last structural round swapped at most ``converged_swap_share`` of the seeded pairs;
        None where there is nothing to judge by (``structure_iter=0``) or no threshold to judge with."""
        swapped = restart["structure_swapped"]
        if self.converged_swap_share is None or not swapped:
            return None
        return swapped[-1] <= self.converged_swap_share

    def _fit_one(self, restart: int, a, b, index_a, index_b, score, rng: np.random.Generator) -> dict[str, Any]:
        """One full pass: anchors -> initial map -> refine-1 -> refine-2, with its label-free diagnostics."""
        seconds: dict[str, float] = {}
        clock = time.perf_counter()

        def lap(stage: str) -> None:
            nonlocal clock
            now = time.perf_counter()
            seconds[stage] = now - clock
            clock = now

        with self._progress(f"anchors (restart {restart + 1}/{self.n_restarts})", self.n_anchor_runs) as tick:
            anchors = matched_anchors(
                a, b,
                n_runs=self.n_anchor_runs, n_clusters=self.n_anchor_clusters, sample_size=self.anchor_sample,
                kmeans_iter=self.kmeans_iter, kmeans_redo=self.kmeans_redo, qap_method=self.qap_method,
                qap_restarts=self.qap_restarts,
                keep_fraction=self.anchor_keep, kernel=self.anchor_kernel, rng=rng, progress=tick,
            )
        rows = rng.choice(len(a), min(self.n_pseudo_pairs, len(a)), replace=False)
        matrix = initial_map(a[rows], b, anchors.source, anchors.target, k=self.relative_k)
        initial_score = score(matrix)
        initial_consistency = anchor_consistency(anchors, matrix)
        lap("anchors_and_initial_map")

        step = NeighbourStep(
            a, b, rng, target_index=index_b, source_index=index_a, sample_size=self.refine_sample, k=self.refine_k,
            alpha=self.refine_alpha, orthogonalize=self.orthogonalize, bidirectional=self.refine_bidirectional,
        )
        structure = StructureHistory(best_score=initial_score)  # as it stands when the stage is skipped
        if self.structure_iter > 0:
            with self._progress(f"structure (restart {restart + 1}/{self.n_restarts})", self.structure_iter) as tick:
                matrix, structure = refine_by_structure(
                    matrix, step, score=score, n_iter=self.structure_iter, n_clusters=self.structure_clusters,
                    n_runs=self.structure_runs, sample_size=self.structure_sample, kmeans_iter=self.kmeans_iter,
                    inner_steps=self.structure_steps, patience=self.structure_patience, tol=self.refine_tol,
                    stop_swap_share=self.structure_stop_swap_share,
                    start_score=initial_score, progress=tick,
                )
        structure_score = structure.best_score
        lap("structure")

        with self._progress(f"refine (restart {restart + 1}/{self.n_restarts})", self.refine_iter) as tick:
            matrix, history = refine_by_neighbours(
                matrix, step, score=score, n_iter=self.refine_iter, patience=self.refine_patience,
                tol=self.refine_tol, start_score=structure_score, average=self.refine_average,
                score_every=self.refine_score_every, progress=tick,
            )
        refined_score = history.best_score
        lap("refine1")

        centroid_score, centroid_accepted = None, False
        if self.centroid_clusters > 0:
            candidate = refine_by_centroids(
                a, b, matrix, n_clusters=self.centroid_clusters, kmeans_iter=self.kmeans_iter,
                alpha=self.centroid_alpha, orthogonalize=self.orthogonalize, seed=int(rng.integers(2**31)),
            )
            centroid_score = score(candidate)
            # Accepted unless it makes the label-free score worse: refinement may not undo a good map.
            if centroid_score >= refined_score - self.refine_tol:
                matrix, centroid_accepted = candidate, True
        final_score = max(refined_score, centroid_score) if centroid_accepted else refined_score
        lap("refine2")
        logger.info("restart %d: nn-similarity %.4f -> %.4f", restart, initial_score, final_score)
        return {
            "matrix": matrix,
            "nn_similarity": {
                "initial": initial_score, "structure": structure_score, "refine1": refined_score,
                "refine2": centroid_score, "final": final_score,
            },
            "qap_agreement": float(anchors.agreement[anchors.kept].mean()),
            "mean_qap_objective": float(anchors.objective.mean()),
            "runs_kept": int(anchors.kept.sum()),
            "anchor_consistency_initial": initial_consistency,
            "anchor_consistency_final": anchor_consistency(anchors, matrix),
            "structure_iterations": structure.iterations,
            "structure_scores": structure.scores,
            "structure_swapped": structure.swapped,
            "refine1_iterations": history.iterations,
            "refine1_best_iteration": history.best_iteration,
            "refine1_stopped_early": history.stopped_early,
            "refine1_scores": history.scores,
            "refine1_average_score": history.average_score,
            "refine1_averaged": history.averaged,
            "refine2_accepted": centroid_accepted,
            "stage_seconds": seconds,
        }

    def _progress(self, description: str, total: int):
        """A context manager yielding ``tick(done, total)``; silent unless ``verbose``."""
        import contextlib

        @contextlib.contextmanager
        def bar():
            if not self.verbose:
                yield None
                return
            from tqdm.auto import tqdm

            with tqdm(total=total, desc=description, leave=False) as pbar:
                yield lambda done, _total: pbar.update(done - pbar.n)

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
        folder = Path(path)
        if folder.exists() and not folder.is_dir():
            raise DataError("exists and is not a folder", path=folder)
        folder.mkdir(parents=True, exist_ok=True)
        buffer = io.BytesIO()
        np.savez(buffer, matrix=self.matrix_, source_mean=self.source_mean_, target_mean=self.target_mean_,
                 target_scale=np.float32(self.target_scale_))
        state = buffer.getvalue()
        config = json.dumps({  # serialised before anything is written: a failure here touches no file
            "format_version": FORMAT_VERSION,
            "class": "MiniVec2Vec",
            "params": _plain(self.get_params()),
            "n_features_in": self.n_features_in_,
            "n_features_out": self.n_features_out_,
            "state_sha256": hashlib.sha256(state).hexdigest(),
            "fit_seconds": self.fit_seconds_,
            "diagnostics": _plain(self.diagnostics_),
        }, indent=2)
        with atomic_open(folder / STATE_FILE, "wb") as handle:
            handle.write(state)
        with atomic_open(folder / CONFIG_FILE, "w", encoding="utf-8") as handle:
            handle.write(config + "\n")
        return folder

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> MiniVec2Vec:
        folder = Path(path)
        config_path, state_path = folder / CONFIG_FILE, folder / STATE_FILE
        for p in (config_path, state_path):
            if not p.is_file():
                raise DataError("not found; is this a folder written by `subspaces align fit`?", path=p)
        try:
            config = json.loads(config_path.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise DataError(f"not valid JSON: {exc}", path=config_path) from exc
        version = config.get("format_version") if isinstance(config, dict) else None
        if version != FORMAT_VERSION:
            raise DataError(f"unsupported format_version {version!r}", path=config_path)
        state_bytes = state_path.read_bytes()
        expected = config.get("state_sha256")
        if expected is not None and hashlib.sha256(state_bytes).hexdigest() != expected:
            raise DataError(f"does not belong to {CONFIG_FILE} beside it (an interrupted save?); refit", path=state_path)
        try:
            aligner = cls(**config["params"])
            aligner.n_features_in_ = int(config["n_features_in"])
            aligner.n_features_out_ = int(config["n_features_out"])
        except (KeyError, TypeError, ValueError) as exc:
            raise DataError(f"not an aligner config ({type(exc).__name__}: {exc})", path=config_path) from exc
        try:
            with np.load(io.BytesIO(state_bytes), allow_pickle=False) as state:
                aligner.matrix_ = state["matrix"]
                aligner.source_mean_ = state["source_mean"]
                aligner.target_mean_ = state["target_mean"]
                aligner.target_scale_ = float(state["target_scale"])
        except (OSError, ValueError, KeyError, zipfile.BadZipFile) as exc:
            raise DataError(f"unreadable aligner state: {exc}", path=state_path) from exc
        shapes = {"matrix": aligner.matrix_.shape, "source_mean": aligner.source_mean_.shape,
                  "target_mean": aligner.target_mean_.shape}
        if shapes != {"matrix": (aligner.n_features_in_, aligner.n_features_out_),
                      "source_mean": (aligner.n_features_in_,), "target_mean": (aligner.n_features_out_,)}:
            raise DimensionError(f"{state_path}: shapes {shapes} do not fit the config's "
                                 f"{aligner.n_features_in_} -> {aligner.n_features_out_} dimensions")
        aligner.fit_seconds_ = config.get("fit_seconds")
        aligner.diagnostics_ = config.get("diagnostics", {})
        return aligner


def _plain(value: Any) -> Any:
    """``value`` with numpy scalars and arrays turned into Python ones, so ``json`` takes it."""
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    if isinstance(value, (np.generic, np.ndarray)):
        return value.tolist()
    return value
