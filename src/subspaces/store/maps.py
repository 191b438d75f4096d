"""Maps between two models' spaces, learned on paired vectors (the same texts embedded by both), and the held-out
check that chooses among them (:func:`fit_and_choose`). Each map of :data:`KINDS` is fitted in the direction a
migration needs: ``queries`` (new -> old, query-side) or ``rows`` (old -> new, a rewrite); its output rows are unit
length, and it is saved as a hash-checked state folder. See docs/store.md ("Migration").
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin

from subspaces.align import MiniVec2Vec
from subspaces.align.procrustes import procrustes
from subspaces.config import scoped_threads
from subspaces.errors import DataError, DimensionError, SubspacesError
from subspaces.state_folder import read_state_folder, write_state_folder
from subspaces.store.search import mean_overlap
from subspaces.vectors import normalize_rows

FORMAT_VERSION = 1
CONFIG_FILE = "map.json"
DIRECTIONS = ("queries", "rows")  # queries: new -> old (query-side); rows: old -> new (a rewrite)
# Each direction's default parameters (a caller's override them): a query's linear maps are the adjoints of the
# row maps, its MLP trained on the pairs' similarities (chosen on dev sets: benchmarks/notes/store.md).
DIRECTION_DEFAULTS: dict[str, dict[str, dict[str, Any]]] = {
    "queries": {"affine": {"adjoint": True}, "lowrank": {"adjoint": True}, "mlp": {"objective": "query-similarity"}},
    "rows": {},
}
# Query-side: the kind kept unless its disagreement (1 - agreement) is over PREFERENCE_MARGIN times the best kind's
# (held-out agreement does not rank the kinds as Recall@10 does: benchmarks/notes/store.md).
QUERY_SIDE_PREFERRED = "mlp"
PREFERENCE_MARGIN = 1.25


def _check(x: Any, what: str, dim: int | None = None) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    if x.ndim == 1:
        x = x[None, :]
    if x.ndim != 2:
        raise DimensionError(f"{what}: expected a 2-D array of vectors, got shape {x.shape}")
    if dim is not None and x.shape[1] != dim:
        raise DimensionError(f"{what}: has {x.shape[1]} dimensions, the map was fitted on {dim}")
    if not np.isfinite(x).all():
        raise DimensionError(f"{what}: holds NaN or inf")
    return x


def _pairs(x: Any, y: Any) -> tuple[np.ndarray, np.ndarray]:
    x, y = _check(x, "source vectors"), _check(y, "target vectors")
    if len(x) != len(y):
        raise DimensionError(f"{len(x)} source and {len(y)} target vectors: pairs need one of each")
    if len(x) < 2:
        raise DataError(f"a map needs at least 2 pairs, got {len(x)}")
    return x.astype(np.float64), y.astype(np.float64)


def _ridge(xc: np.ndarray, yc: np.ndarray, alpha: float) -> np.ndarray:
    """``W`` minimising ``|xc W - yc|^2 + alpha * mean_var * |W|^2`` (``alpha`` relative to the inputs' scale)."""
    gram = xc.T @ xc
    scale = np.trace(gram) / max(gram.shape[0], 1)
    return np.linalg.solve(gram + alpha * max(scale, 1e-12) * np.eye(gram.shape[0]), xc.T @ yc)


class _PairMap(TransformerMixin, BaseEstimator):
    """What every map shares: checks, unit-length output, saving; a linear one is ``unit(x @ weight_ + bias_)``."""

    kind = ""

    def fit(self, x: np.ndarray, y: np.ndarray, rows: np.ndarray | None = None) -> _PairMap:
        """Fit on pairs ``x[i] -> y[i]``; ``rows``: stored rows of ``y``'s space (for ``rows_weight``)."""
        start = time.perf_counter()
        xs, ys = _pairs(x, y)
        if rows is not None and getattr(self, "rows_weight", None):  # checked only where a map reads them
            rows = _check(rows, "unpaired rows", ys.shape[1])
        self.n_features_in_, self.n_features_out_ = xs.shape[1], ys.shape[1]
        self._fit(xs, ys, rows)
        self.fit_seconds_ = time.perf_counter() - start
        return self

    def _fit(self, x: np.ndarray, y: np.ndarray, rows: np.ndarray | None = None) -> None:
        raise NotImplementedError

    def _check_fitted(self) -> None:
        if not hasattr(self, "n_features_in_"):
            raise SubspacesError(f"this {type(self).__name__} is not fitted yet; call fit() or load_map()")

    def transform(self, x: np.ndarray) -> np.ndarray:
        """Unit rows of the map of ``x`` (a vector or rows)."""
        self._check_fitted()  # lean (a query's cost): no NaN check here, the search checks what it is given
        x = np.asarray(x, dtype=np.float32)
        if x.ndim == 1:
            x = x[None, :]
        if x.ndim != 2 or x.shape[1] != self.n_features_in_:
            raise DimensionError(f"vectors of shape {x.shape}: the map was fitted on {self.n_features_in_} dimensions")
        y = self._apply(x)
        if len(y) == 1:  # one query: a dot product costs less than a norm over an axis
            y *= np.float32(1.0 / max(float(np.sqrt(np.dot(y[0], y[0]))), 1e-12))
            return y
        return normalize_rows(y, dtype=np.float32)

    def _apply(self, x: np.ndarray) -> np.ndarray:
        y = x @ self.weight_
        y += self.bias_
        return y

    def _state(self) -> dict[str, np.ndarray]:
        return {"weight": self.weight_, "bias": self.bias_}

    def _set_state(self, arrays: dict[str, np.ndarray]) -> None:
        self.weight_ = arrays["weight"].astype(np.float32)
        self.bias_ = arrays["bias"].astype(np.float32)

    def _linear(self, weight: np.ndarray, bias: np.ndarray) -> None:
        self.weight_ = np.ascontiguousarray(weight, dtype=np.float32)
        self.bias_ = np.ascontiguousarray(bias, dtype=np.float32)

    def save(self, path: str | os.PathLike[str]) -> Path:
        """``state.npz`` (the arrays) and ``map.json`` (class, parameters, fitted shapes; its fields hashed)."""
        self._check_fitted()
        config = {
            "class": type(self).__name__,
            "kind": self.kind,
            "params": dict(self.get_params()),
            "n_features_in": int(self.n_features_in_),
            "n_features_out": int(self.n_features_out_),
            "fit_seconds": float(getattr(self, "fit_seconds_", 0.0)),
        }
        return write_state_folder(
            path, CONFIG_FILE, self._state(), config, format_version=FORMAT_VERSION, hash_config=True
        )


class OrthogonalMap(_PairMap):
    """Centred orthogonal Procrustes with one scale: ``unit((x - mean_x) R s + mean_y)``."""

    kind = "orthogonal"

    def __init__(self, random_state: int | None = 0) -> None:
        self.random_state = random_state

    def _fit(self, x: np.ndarray, y: np.ndarray, rows: np.ndarray | None = None) -> None:
        mx, my = x.mean(0), y.mean(0)
        weight = procrustes(x - mx, y - my, scaled=True, dtype=np.float64)
        self._linear(weight, my - mx @ weight)


class _Adjointable(_PairMap):
    """A linear map that can be fitted the other way round and applied transposed (``adjoint=True``): fitted on
    ``(x, y)`` it fits ``g: y -> x`` and maps ``x`` by ``x W_g^T``, so a mapped query ``q`` ranks the old rows as
    ``q`` ranks the rows rewritten by ``g`` (``q . g(o) = (q W_g^T) . o + q . b_g``, the last term the same for
    every row)."""

    adjoint: bool

    def _fit(self, x: np.ndarray, y: np.ndarray, rows: np.ndarray | None = None) -> None:
        if not self.adjoint:
            self._fit_linear(x, y)
            return
        self._fit_linear(y, x)
        self._linear(self.weight_.T, np.zeros(self.weight_.shape[0], dtype=np.float32))

    def _fit_linear(self, x: np.ndarray, y: np.ndarray) -> None:
        raise NotImplementedError


class AffineMap(_Adjointable):
    """A full affine map by ridge regression (``alpha`` relative to the inputs' mean variance): ``unit(x W + b)``."""

    kind = "affine"

    def __init__(self, alpha: float = 0.1, adjoint: bool = False, random_state: int | None = 0) -> None:
        self.alpha = alpha
        self.adjoint = adjoint
        self.random_state = random_state

    def _fit_linear(self, x: np.ndarray, y: np.ndarray) -> None:
        mx, my = x.mean(0), y.mean(0)
        weight = _ridge(x - mx, y - my, self.alpha)
        self._linear(weight, my - mx @ weight)


class LowRankAffineMap(_Adjointable):
    """The orthogonal map plus a ridge correction of rank ``rank`` to its residual (needs fewer pairs)."""

    kind = "lowrank"

    def __init__(self, rank: int = 32, alpha: float = 0.1, adjoint: bool = False, random_state: int | None = 0) -> None:
        self.rank = rank
        self.alpha = alpha
        self.adjoint = adjoint
        self.random_state = random_state

    def _fit_linear(self, x: np.ndarray, y: np.ndarray) -> None:
        if self.rank < 1:
            raise SubspacesError(f"rank must be at least 1, got {self.rank}")
        mx, my = x.mean(0), y.mean(0)
        xc, yc = x - mx, y - my
        base = procrustes(xc, yc, scaled=True, dtype=np.float64)
        residual = _ridge(xc, yc - xc @ base, self.alpha)
        _, _, vt = np.linalg.svd(xc @ residual, full_matrices=False)
        top = vt[: min(self.rank, vt.shape[0])]
        weight = base + residual @ top.T @ top
        self._linear(weight, my - mx @ weight)


def _gelu(x: np.ndarray) -> np.ndarray:
    """GELU, tanh form (as training's); ``x * x * x``: numpy's float32 power is far slower."""
    return 0.5 * x * (1.0 + np.tanh(np.float32(0.7978845608) * (x + np.float32(0.044715) * (x * x * x))))


OBJECTIVES = ("cosine", "query-similarity", "row-similarity")


class ResidualMLPMap(_PairMap):
    """``unit(x W + b + g(x))``: an affine map (initialised in closed form, then trained too) plus
    ``g(x) = gelu(x W1 + b1) W2 + b2`` of width ``hidden`` (last layer zero at start), trained by AdamW on the CPU
    (``threads``); :meth:`transform` is numpy only.

    ``objective``: ``"cosine"`` (``1 - cos(f(x), y)``); ``"query-similarity"`` (new -> old: each mapped query's
    scores of a batch's old rows, ``unit(f(x_i)) . y_j``, trained to match the true ``x_i . x_j`` by listwise KL at
    ``temperature`` plus squared difference; affine part from the adjoint map, :class:`_Adjointable`);
    ``"row-similarity"`` (old -> new: ``y_i . unit(f(x_j))`` to match ``y_i . y_j``). ``rows_weight``
    (query-similarity, with ``rows`` in :meth:`fit`): the same loss over stored rows, each pair's ``rows_near``
    nearest plus ``rows_random`` random ones a batch."""

    kind = "mlp"

    def __init__(
        self,
        hidden: int = 512,
        epochs: int = 20,
        batch_size: int = 128,
        lr: float = 1e-3,
        weight_decay: float = 0.01,
        alpha: float = 0.1,
        objective: str = "cosine",
        temperature: float = 0.05,
        rows_weight: float = 0.0,
        rows_near: int = 64,
        rows_random: int = 1024,
        threads: int | None = 1,
        random_state: int | None = 0,
    ) -> None:
        self.hidden = hidden
        self.epochs = epochs
        self.batch_size = batch_size
        self.lr = lr
        self.weight_decay = weight_decay
        self.alpha = alpha
        self.objective = objective
        self.temperature = temperature
        self.rows_weight = rows_weight
        self.rows_near = rows_near
        self.rows_random = rows_random
        self.threads = threads
        self.random_state = random_state

    def _fit(self, x: np.ndarray, y: np.ndarray, rows: np.ndarray | None = None) -> None:
        if self.hidden < 1 or self.epochs < 0 or self.batch_size < 1 or self.temperature <= 0:
            raise SubspacesError(
                f"hidden and batch_size must be at least 1, epochs at least 0, temperature above 0: {self.get_params()}"
            )
        if self.objective not in OBJECTIVES:
            raise SubspacesError(f"objective must be one of {', '.join(OBJECTIVES)}, got {self.objective!r}")
        if self.rows_weight < 0 or self.rows_near < 0 or self.rows_random < 0:
            raise SubspacesError(f"rows_weight, rows_near and rows_random must be at least 0: {self.get_params()}")
        if self.rows_weight and self.objective != "query-similarity":
            raise SubspacesError("rows_weight applies to the query-similarity objective (a query-side map) only")
        if self.rows_weight and (self.rows_near + self.rows_random) == 0:
            raise SubspacesError(
                f"rows_weight needs rows to score: rows_near or rows_random above 0: {self.get_params()}"
            )
        with scoped_threads(self.threads):
            self._train(x, y, rows if self.rows_weight and rows is not None and len(rows) else None)

    def _nearest_rows(self, targets: Any, rows: Any) -> Any:
        """Each target's ``rows_near`` nearest stored rows (by inner product), in blocks: bounded memory."""
        import torch

        k = min(self.rows_near, len(rows))
        if k == 0:
            return torch.empty(len(targets), 0, dtype=torch.long)
        return torch.cat([(block @ rows.T).topk(k, dim=1).indices for block in targets.split(256)])

    def _listwise(self, got: Any, true: Any) -> Any:
        """KL of the softmaxes at ``temperature`` plus the mean squared difference: ``got`` scores to ``true``."""
        import torch.nn.functional as F

        kl = F.kl_div(
            F.log_softmax(got / self.temperature, dim=1),
            F.log_softmax(true / self.temperature, dim=1),
            log_target=True,
            reduction="batchmean",
        )
        return kl + F.mse_loss(got, true)

    def _train(self, x: np.ndarray, y: np.ndarray, rows: np.ndarray | None) -> None:
        import torch
        import torch.nn.functional as F

        base = AffineMap(alpha=self.alpha, adjoint=self.objective == "query-similarity")
        base._fit(x, y)
        seed = 0 if self.random_state is None else int(self.random_state)
        generator = torch.Generator().manual_seed(seed)
        din, dout = x.shape[1], y.shape[1]
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            affine = torch.nn.Linear(din, dout)
            hidden = torch.nn.Linear(din, self.hidden)
            out = torch.nn.Linear(self.hidden, dout)
        with torch.no_grad():
            affine.weight.copy_(torch.from_numpy(np.ascontiguousarray(base.weight_.T)))
            affine.bias.copy_(torch.from_numpy(base.bias_))
            out.weight.zero_()
            out.bias.zero_()
        modules = torch.nn.ModuleList([affine, hidden, out])
        act = torch.nn.GELU(approximate="tanh")
        tx, ty = torch.from_numpy(x.astype(np.float32)), torch.from_numpy(normalize_rows(y, dtype=np.float32))
        ux = torch.from_numpy(normalize_rows(x, dtype=np.float32))
        optimiser = torch.optim.AdamW(modules.parameters(), lr=self.lr, weight_decay=self.weight_decay)
        if rows is not None:
            stored = torch.from_numpy(normalize_rows(rows, dtype=np.float32))
            near = self._nearest_rows(ty, stored)
        for _ in range(self.epochs):
            order = torch.randperm(len(tx), generator=generator)
            for start in range(0, len(tx), self.batch_size):
                batch = order[start : start + self.batch_size]
                if len(batch) < 2:
                    continue
                xb = tx[batch]
                mapped = affine(xb) + out(act(hidden(xb)))
                if self.objective == "cosine":
                    loss = (1 - F.cosine_similarity(mapped, ty[batch], dim=1)).mean()
                elif self.objective == "query-similarity":
                    unit_mapped = normalize_rows(mapped)
                    loss = self._listwise(unit_mapped @ ty[batch].T, ux[batch] @ ux[batch].T)
                    if rows is not None:
                        drawn = torch.randint(len(stored), (self.rows_random,), generator=generator)
                        scored = stored[torch.cat([near[batch].reshape(-1), drawn]).unique()]
                        loss = loss + self.rows_weight * self._listwise(unit_mapped @ scored.T, ty[batch] @ scored.T)
                else:
                    unit_mapped = normalize_rows(mapped)
                    loss = self._listwise(ty[batch] @ unit_mapped.T, ty[batch] @ ty[batch].T)
                optimiser.zero_grad()
                loss.backward()
                optimiser.step()
        self.weight_ = affine.weight.detach().numpy().T.copy()
        self.bias_ = affine.bias.detach().numpy().copy()
        self.w1_ = hidden.weight.detach().numpy().T.copy()
        self.b1_ = hidden.bias.detach().numpy().copy()
        self.w2_ = out.weight.detach().numpy().T.copy()
        self.b2_ = out.bias.detach().numpy().copy()

    def _apply(self, x: np.ndarray) -> np.ndarray:
        return x @ self.weight_ + self.bias_ + _gelu(x @ self.w1_ + self.b1_) @ self.w2_ + self.b2_

    def _state(self) -> dict[str, np.ndarray]:
        return super()._state() | {"w1": self.w1_, "b1": self.b1_, "w2": self.w2_, "b2": self.b2_}

    def _set_state(self, arrays: dict[str, np.ndarray]) -> None:
        super()._set_state(arrays)
        for name in ("w1", "b1", "w2", "b2"):
            setattr(self, f"{name}_", arrays[name].astype(np.float32))


CLASSES: dict[str, type[_PairMap]] = {c.kind: c for c in (OrthogonalMap, AffineMap, LowRankAffineMap, ResidualMLPMap)}
KINDS = tuple(CLASSES)


def make(kind: str, params: dict[str, Any] | None = None, random_state: int | None = 0) -> _PairMap:
    """A new map of ``kind`` with ``params`` (refused in one line when unknown)."""
    if kind not in CLASSES:
        raise SubspacesError(f"unknown map {kind!r}; the maps are {', '.join(KINDS)}")
    cls = CLASSES[kind]
    options = dict(params or {})
    known = set(cls().get_params())
    unknown = sorted(set(options) - known)
    if unknown:
        raise SubspacesError(f"map {kind!r} has no parameter {unknown[0]!r}; it takes {', '.join(sorted(known))}")
    options.setdefault("random_state", random_state)
    return cls(**options)


def load_map(path: str | os.PathLike[str]) -> Any:
    """A fitted map from its folder (``map.json``), or a mini-vec2vec aligner (``aligner.json``)."""
    import io

    folder = Path(path)
    if not (folder / CONFIG_FILE).is_file() and (folder / "aligner.json").is_file():
        return MiniVec2Vec.load(folder)
    config, state = read_state_folder(
        folder, CONFIG_FILE, versions=(FORMAT_VERSION,), written_by="store migrate", config_hashed_from=1
    )
    try:
        cls = {c.__name__: c for c in CLASSES.values()}[config["class"]]
        fitted = cls(**config["params"])
        fitted.n_features_in_ = int(config["n_features_in"])
        fitted.n_features_out_ = int(config["n_features_out"])
        fitted.fit_seconds_ = float(config.get("fit_seconds", 0.0))
        with np.load(io.BytesIO(state)) as arrays:
            fitted._set_state({name: arrays[name] for name in arrays.files})
    except (KeyError, TypeError, ValueError) as exc:
        raise DataError(f"not a map's config ({type(exc).__name__}: {exc})", path=folder / CONFIG_FILE) from exc
    return fitted


def overlap(queries_a: np.ndarray, rows_a: np.ndarray, queries_b: np.ndarray, rows_b: np.ndarray, k: int = 10) -> float:
    """Mean fraction of ids shared by each query's top ``k`` rows in space a and in space b."""
    k = min(k, len(rows_a))
    return mean_overlap(_top(queries_a, rows_a, k), _top(queries_b, rows_b, k))


def _top(queries: np.ndarray, rows: np.ndarray, k: int) -> np.ndarray:
    unit_queries, unit_rows = (normalize_rows(x, dtype=np.float32) for x in (queries, rows))
    return np.argpartition(-(unit_queries @ unit_rows.T), k - 1, axis=1)[:, :k]


def agreement(fitted: Any, old: np.ndarray, new: np.ndarray, direction: str, k: int = 10) -> float:
    """Top-``k`` agreement of a map with the truth on held-out pairs ``old[i]``/``new[i]``: each new-model vector, as a
    query, ranks the rows under the map (``queries``: mapped query, old rows; ``rows``: mapped rows) and the true
    new-model rows."""
    if direction == "queries":
        return overlap(fitted.transform(new), old, new, new, k)
    return overlap(new, fitted.transform(old), new, new, k)


def _without(rows: np.ndarray, drop: np.ndarray) -> np.ndarray:
    """``rows`` less any row equal to one of ``drop`` (compared as bytes, float32)."""
    rows = np.ascontiguousarray(rows, dtype=np.float32)
    dropped = {row.tobytes() for row in np.ascontiguousarray(drop, dtype=np.float32)}
    return rows[[row.tobytes() not in dropped for row in rows]]


def fit_and_choose(
    old: np.ndarray,
    new: np.ndarray,
    direction: str,
    *,
    kinds: Sequence[str] = KINDS,
    params: dict[str, dict[str, Any]] | None = None,
    holdout: float = 0.2,
    k: int = 10,
    random_state: int | None = 0,
    queries: np.ndarray | None = None,
    among: tuple[np.ndarray, np.ndarray] | None = None,
    rows: np.ndarray | None = None,
) -> tuple[Any, dict[str, Any], dict[str, Any]]:
    """Fit each map of ``kinds`` (``params`` per kind) on ``1 - holdout`` of the pairs in ``direction``, keep the one
    with the best held-out :func:`agreement` (ties: the earlier, simpler kind) and refit it on every pair; ``rows``
    (query-side): stored old rows given to every fit. Returns ``(chosen map, candidates by kind, report)``.

    Query-side: with ``queries`` (new-model vectors of real queries) candidates are scored by those queries'
    agreement among the held-out pairs plus ``among`` (other ``(old, new)`` pairs), and
    :data:`QUERY_SIDE_PREFERRED` is kept unless its disagreement is over :data:`PREFERENCE_MARGIN` times the best's."""
    if direction not in DIRECTIONS:
        raise SubspacesError(f"direction must be one of {', '.join(DIRECTIONS)}, got {direction!r}")
    if queries is not None and direction != "queries":
        raise SubspacesError("query texts choose a query-side map only (direction 'queries')")
    if rows is not None and direction != "queries":
        raise SubspacesError("stored rows train a query-side map only (direction 'queries')")
    kinds = list(dict.fromkeys(kinds))
    if not kinds:
        raise SubspacesError(f"no map to fit: give at least one of {', '.join(KINDS)}")
    given = params or {}
    params = {kind: DIRECTION_DEFAULTS[direction].get(kind, {}) | dict(given.get(kind) or {}) for kind in KINDS}
    for kind in kinds:
        make(kind, params.get(kind))  # an unknown kind or parameter is refused before any fit
    unknown = sorted(set(given) - set(KINDS))
    if unknown:
        raise SubspacesError(f"params for unknown map {unknown[0]!r}; the maps are {', '.join(KINDS)}")
    old, new = _check(old, "old vectors"), _check(new, "new vectors")
    if len(old) != len(new):
        raise DimensionError(f"{len(old)} old and {len(new)} new vectors: pairs need one of each")
    if not 0 < holdout < 1:
        raise SubspacesError(f"holdout is a fraction of the pairs, between 0 and 1, got {holdout}")
    n_held = int(round(len(old) * holdout))
    if n_held < 2 or len(old) - n_held < 2:
        raise DataError(f"{len(old)} pairs are too few to fit a map and hold out {holdout:.0%} of them to choose it")
    order = np.random.default_rng(random_state).permutation(len(old))
    held, fit = order[:n_held], order[n_held:]
    source, target = (new, old) if direction == "queries" else (old, new)
    if queries is not None:
        queries = _check(queries, "query vectors", new.shape[1])
        rows_old, rows_new = old[held], new[held]
        if among is not None and len(among[0]):
            rows_old = np.concatenate([rows_old, _check(among[0], "old vectors", old.shape[1])])
            rows_new = np.concatenate([rows_new, _check(among[1], "new vectors", new.shape[1])])
    candidates: dict[str, Any] = {}
    report: dict[str, Any] = {}
    if not any((params.get(kind) or {}).get("rows_weight") for kind in kinds):
        rows = None  # no candidate reads them
    # The candidates never see the old vectors of the pairs that choose among them, not even as unpaired rows.
    rows_fit = _without(rows, old[held]) if rows is not None else None
    for kind in kinds:
        fitted = make(kind, params.get(kind), random_state).fit(source[fit], target[fit], rows_fit)
        candidates[kind] = fitted
        score = agreement(fitted, old[held], new[held], direction, k)
        report[kind] = {f"selection@{k}": round(score, 4), "fit_seconds": round(fitted.fit_seconds_, 3)}
        if queries is not None:
            agreed = overlap(fitted.transform(queries), rows_old, queries, rows_new, k)
            report[kind][f"queries@{k}"] = round(agreed, 4)
    by = f"queries@{k}" if queries is not None else f"selection@{k}"
    chosen = max(kinds, key=lambda kind: (report[kind][by], -kinds.index(kind)))
    measured = "query texts' agreement" if queries is not None else "held-out agreement"
    rule = f"best {measured}"
    preferred = QUERY_SIDE_PREFERRED
    prefer = direction == "queries" and preferred in kinds and chosen != preferred
    if prefer and 1 - report[preferred][by] <= PREFERENCE_MARGIN * (1 - report[chosen][by]):
        chosen, rule = preferred, f"{preferred} unless clearly worse by {measured}"
    final = make(chosen, params.get(chosen), random_state).fit(source, target, rows)
    summary = {
        "chosen": chosen,
        "chosen_by": rule,
        "direction": "new -> old (queries)" if direction == "queries" else "old -> new (rows)",
        "selection_pairs": int(n_held),
        "candidates": report,
    }
    if queries is not None:
        summary["selection_queries"] = int(len(queries))
    return final, candidates, summary


def query_microseconds(fitted: Any, dim: int, repeats: int = 2_000, seed: int = 0) -> dict[str, float]:
    """Median µs to map one query vector alone, and per query within a batch of 1,000."""
    rng = np.random.default_rng(seed)
    one = normalize_rows(rng.normal(size=(1, dim)), dtype=np.float32)
    batch = normalize_rows(rng.normal(size=(1_000, dim)), dtype=np.float32)

    def ns_per_row(x: np.ndarray) -> float:
        start = time.perf_counter_ns()
        fitted.transform(x)
        return (time.perf_counter_ns() - start) / len(x)

    fitted.transform(one)
    times = [ns_per_row(one) for _ in range(repeats)]
    batched = [ns_per_row(batch) for _ in range(5)]
    return {
        "map_us_per_query": round(float(np.median(times)) / 1e3, 2),
        "map_us_per_query_batched": round(float(np.median(batched)) / 1e3, 3),
    }
