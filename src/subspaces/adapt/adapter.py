"""``MatryoshkaAdapter``: make the prefixes of stored embeddings usable, from the vectors alone (no encoder, no texts).

After Matryoshka-Adaptor (Yoon et al., EMNLP 2024): a residual map ``f(x) = x + g(x)``, ``g`` a small MLP (or a
linear map) whose last layer starts at zero, trained so that every prefix ``f(x)[:m]`` keeps the neighbourhoods of
the full input vectors (:mod:`subspaces.adapt.losses`). The fitted map is plain arrays; :meth:`transform` is numpy.
"""

from __future__ import annotations

import io
import math
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin

from subspaces import topk
from subspaces.errors import DataError, SubspacesError
from subspaces.numerics import cpu_record
from subspaces.progress import Progress
from subspaces.state_folder import read_state_folder, write_state_folder
from subspaces.vectors import check_rows, normalize_rows, principal_axes, resolve_dims
from subspaces.vectors_file import map_vectors_file

FORMAT_VERSION = 3  # from 3, adapter.json's own fields are hashed: an edited scale or parameter is refused
CONFIG_FILE = "adapter.json"
TERMS = ("pair", "topk", "rank", "var", "corr", "sup", "rec")
MINED_POOL = 50_000  # rows whose neighbours ``mined`` batches draw on: exact search over them is n² · D


def check_vectors(x: np.ndarray, what: str, dim: int | None = None, row_offset: int = 0) -> np.ndarray:
    """``x`` as 2-D float32, or a :class:`DimensionError` naming a NaN/inf or zero row, or a wrong width."""
    return check_rows(x, what, dim=dim, fitted="the adapter", row_offset=row_offset)


def _finite(value: Any) -> bool:
    try:
        return math.isfinite(value)
    except TypeError:  # not a number
        return False


class MatryoshkaAdapter(TransformerMixin, BaseEstimator):
    """A residual map on frozen embeddings whose prefixes keep the full vectors' neighbourhoods (scikit-learn API).

    Args:
        dims: prefix sizes to train, strictly increasing: integers, or a string such as ``"16,32,full"``
            (``None`` or ``full``: the full size, which is always added).
        hidden: width of g's hidden layer (ReLU); 0 makes g a linear map.
        epochs: passes over the shuffled rows.
        batch_size: rows per AdamW step (the similarities are in-batch).
        lr: AdamW's learning rate.
        weight_decay: AdamW's weight decay.
        topk: neighbours per row in the top-k term.
        pair_weight: weight of the paper's all-pairs similarity term (:mod:`subspaces.adapt.losses`).
        topk_weight: weight of the paper's top-k similarity term.
        rec_weight: weight of the paper's reconstruction term.
        rank_weight: weight of listwise KL self-distillation (ours; off by default).
        rank_temperature: softmax temperature of the listwise term.
        var_weight: weight of the MIC-style hinge on each output dimension's spread (off by default).
        var_floor: the spread (batch std over the dimensions' mean) below which that hinge counts.
        corr_weight: weight of the MIC-style prefix/rest decorrelation (off by default).
        tau_corr: the correlation above which that decorrelation counts.
        sup_weight: weight of in-batch InfoNCE on the ``pairs`` given to :meth:`fit` (if any).
        sup_temperature: temperature of that InfoNCE.
        mined: ``k > 0``: half of each batch is random rows of a seeded pool of at most ``MINED_POOL`` rows, the
            other half one of each of those rows' ``k`` nearest pool rows (the close neighbours top-10 search
            separates); 0: random rows.
        basis: where g acts: ``model``, on the input coordinates; ``pca``, on the input rotated into its principal
            axes (every full-size cosine kept), so that training starts from PCA truncation.
        random_state: seeds the initialisation and the batch order.
        verbose: show a progress bar.

    Fitted: ``n_features_in_``, ``dims_`` (with the full size), ``scale_`` (mean input norm), ``weights_`` (g's
    arrays, and ``rotation`` with ``basis="pca"``), ``history_`` (mean loss per epoch), ``loss_terms_`` (each
    unweighted term on a fixed batch at the start and the end), ``fit_seconds_``, ``fitted_on_``
    (:func:`subspaces.numerics.cpu_record`).
    """

    def __init__(
        self,
        dims: Sequence[int | None] = (16, 32, 64, 128),
        hidden: int = 512,
        epochs: int = 20,
        batch_size: int = 512,
        lr: float = 1e-3,
        weight_decay: float = 0.0,
        topk: int = 10,
        pair_weight: float = 1.0,
        topk_weight: float = 1.0,
        rec_weight: float = 1.0,
        rank_weight: float = 0.0,
        rank_temperature: float = 0.05,
        var_weight: float = 0.0,
        var_floor: float = 0.5,
        corr_weight: float = 0.0,
        tau_corr: float = 0.1,
        sup_weight: float = 1.0,
        sup_temperature: float = 0.05,
        mined: int = 0,
        basis: str = "model",
        random_state: int | None = 0,
        verbose: bool = False,
    ) -> None:
        self.dims = dims
        self.hidden = hidden
        self.epochs = epochs
        self.batch_size = batch_size
        self.lr = lr
        self.weight_decay = weight_decay
        self.topk = topk
        self.pair_weight = pair_weight
        self.topk_weight = topk_weight
        self.rec_weight = rec_weight
        self.rank_weight = rank_weight
        self.rank_temperature = rank_temperature
        self.var_weight = var_weight
        self.var_floor = var_floor
        self.corr_weight = corr_weight
        self.tau_corr = tau_corr
        self.sup_weight = sup_weight
        self.sup_temperature = sup_temperature
        self.mined = mined
        self.basis = basis
        self.random_state = random_state
        self.verbose = verbose

    def check_params(self) -> None:
        """Refuse a parameter out of range (a NaN or infinite float included) before any data is read."""
        if int(self.mined) < 0:
            raise SubspacesError(f"mined must be 0 (random batches) or positive, got {self.mined}")
        for name in ("epochs", "batch_size", "topk"):
            if int(getattr(self, name)) < 1:
                raise SubspacesError(f"{name} must be at least 1, got {getattr(self, name)}")
        if int(self.batch_size) < 2:
            raise SubspacesError("batch_size must be at least 2 (the losses compare rows of a batch)")
        if self.basis not in ("model", "pca"):
            raise SubspacesError(f"basis must be 'model' or 'pca', got {self.basis!r}")
        if int(self.hidden) < 0:
            raise SubspacesError(f"hidden must be 0 (linear) or positive, got {self.hidden}")
        # Every float parameter is a finite number (a NaN passes every comparison, and would train to a NaN loss).
        for name in ("lr", "rank_temperature", "sup_temperature"):
            if not _finite(getattr(self, name)) or not getattr(self, name) > 0:
                raise SubspacesError(f"{name} must be a positive number, got {getattr(self, name)}")
        for name in (*(f"{term}_weight" for term in TERMS), "weight_decay", "var_floor", "tau_corr"):
            if not _finite(getattr(self, name)) or getattr(self, name) < 0:
                raise SubspacesError(f"{name} must be a number, 0 or more, got {getattr(self, name)}")

    def _check_fitted(self) -> None:
        if not hasattr(self, "weights_"):
            raise SubspacesError("this MatryoshkaAdapter is not fitted yet; call fit() or MatryoshkaAdapter.load()")

    @staticmethod
    def _check_pairs(pairs: Any, n: int) -> np.ndarray | None:
        if pairs is None:
            return None
        p = np.asarray(pairs)
        if p.ndim != 2 or p.shape[1] != 2 or len(p) < 2 or not np.issubdtype(p.dtype, np.integer):
            raise DataError(f"pairs must be an integer array of (query row, positive row), at least 2, got {p.shape}")
        if p.min() < 0 or p.max() >= n:
            raise DataError(f"pairs name rows outside 0..{n - 1}")
        return p.astype(np.int64)

    def _module(self, full: int):
        from torch import nn

        if int(self.hidden) == 0:
            last = nn.Linear(full, full)
            g: nn.Module = last
        else:
            last = nn.Linear(int(self.hidden), full)
            g = nn.Sequential(nn.Linear(full, int(self.hidden)), nn.ReLU(), last)
        nn.init.zeros_(last.weight)  # g = 0: training starts from the identity map
        nn.init.zeros_(last.bias)
        return g

    def _terms(self, g, x, sup: tuple[Any, Any] | None):
        """Each unweighted term (averaged over the prefixes) on input batch ``x``; ``sup``: (queries, positives)."""
        import torch

        from subspaces.adapt import losses

        y = x + g(x)
        teacher = losses.cosine_matrix(x).detach()
        index = losses.neighbours(teacher, int(self.topk)) if self.topk_weight else None
        sums = dict.fromkeys(TERMS[:-1], torch.zeros(()))
        if sup is not None:
            yq, yp = sup[0] + g(sup[0]), sup[1] + g(sup[1])
        for m in self.dims_:
            student = losses.cosine_matrix(y[:, :m])
            if self.pair_weight:
                sums["pair"] = sums["pair"] + losses.pairwise_loss(student, teacher)
            if index is not None:
                sums["topk"] = sums["topk"] + losses.topk_loss(student, teacher, index)
            if self.rank_weight:
                sums["rank"] = sums["rank"] + losses.rank_loss(student, teacher, self.rank_temperature)
            if self.var_weight:
                sums["var"] = sums["var"] + losses.variance_floor(y[:, :m], self.var_floor)
            if self.corr_weight:
                sums["corr"] = sums["corr"] + losses.decorrelation(y, m, self.tau_corr)
            if sup is not None:
                sums["sup"] = sums["sup"] + losses.supervised_loss(yq[:, :m], yp[:, :m], self.sup_temperature)
        terms = {k: v / len(self.dims_) for k, v in sums.items()}
        terms["rec"] = losses.reconstruction_loss(y, x)
        return terms

    def _total(self, terms: dict[str, Any]):
        return sum(getattr(self, f"{k}_weight") * v for k, v in terms.items())

    def fit(self, X: np.ndarray, y: Any = None, pairs: np.ndarray | None = None) -> MatryoshkaAdapter:
        """Fit on stored vectors ``X`` (rows × D). ``pairs``: optional (query row, positive row) indices into X."""
        import torch

        self.check_params()
        x_np = check_vectors(X, "embeddings")
        n, full = x_np.shape
        if n < 2:
            raise DataError(f"the adapter needs at least 2 rows to compare, got {n}")
        dims = resolve_dims(self.dims, full, order="increasing")
        pair_rows = self._check_pairs(pairs, n)
        seed = 0 if self.random_state is None else int(self.random_state)
        start_time = time.perf_counter()
        self.n_features_in_ = full
        self.dims_ = dims if dims[-1] == full else [*dims, full]
        self.scale_ = float(np.linalg.norm(x_np, axis=1).mean())
        rotation = None
        if self.basis == "pca":
            rotation = principal_axes(x_np, seed=seed)
            x_np = x_np @ rotation
        xs = torch.from_numpy(np.ascontiguousarray(x_np / self.scale_, dtype=np.float32))
        batch = min(int(self.batch_size), n)
        with torch.random.fork_rng(devices=[]):  # seeded without touching the caller's global RNG
            torch.manual_seed(seed)
            g = self._module(full)
            order = torch.Generator().manual_seed(seed)
            probe = torch.randperm(n, generator=order)[:batch]
            optimiser = torch.optim.AdamW(g.parameters(), lr=self.lr, weight_decay=self.weight_decay)

            def sup_batch():
                if pair_rows is None or not self.sup_weight:
                    return None
                pick = torch.randperm(len(pair_rows), generator=order)[: min(batch, len(pair_rows))]
                rows = torch.from_numpy(pair_rows[pick.numpy()])
                return xs[rows[:, 0]], xs[rows[:, 1]]

            def snapshot() -> dict[str, float]:
                with torch.no_grad():
                    return {k: float(v) for k, v in self._terms(g, xs[probe], sup_batch()).items()}

            start_terms = snapshot()
            self.history_: list[float] = []
            near = torch.from_numpy(self._near(x_np, order)) if int(self.mined) and batch >= 4 else None
            steps = n // batch  # a short last batch would compare too few rows; its rows come next epoch
            with Progress(int(self.epochs) * steps, "adapt fit", unit="step", enabled=self.verbose) as bar:
                for _ in range(int(self.epochs)):
                    perm = torch.randperm(n if near is None else len(near), generator=order)
                    total = 0.0
                    for s in range(steps):
                        if near is None:
                            rows = perm[s * batch : (s + 1) * batch]
                        else:  # half random anchors (wrapping round the pool), half a near row of each
                            anchors = perm[(torch.arange(batch // 2) + s * (batch // 2)) % len(perm)]
                            pick = 1 + torch.randint(near.shape[1] - 1, (len(anchors),), generator=order)
                            rows = torch.cat([near[anchors, 0], near[anchors, pick]])
                        loss = self._total(self._terms(g, xs[rows], sup_batch()))
                        optimiser.zero_grad(set_to_none=True)
                        loss.backward()
                        optimiser.step()
                        value = loss.item()
                        total += value
                        bar.update(1, loss=value)
                    self.history_.append(total / steps)
            self.loss_terms_ = {"start": start_terms, "end": snapshot()}
        if not np.isfinite(self.history_).all():
            raise SubspacesError("the adapter's loss became NaN/inf; lower lr")
        self.weights_ = {name: p.detach().numpy().astype(np.float32) for name, p in g.state_dict().items()}
        if rotation is not None:
            self.weights_["rotation"] = rotation
        self.fit_seconds_ = time.perf_counter() - start_time
        self.fitted_on_ = cpu_record("float32")  # torch's float32 training, on every CPU
        return self

    def _near(self, x: np.ndarray, order: Any) -> np.ndarray:
        """Rows of a seeded pool of at most ``MINED_POOL`` rows, each with its ``mined`` nearest pool rows by cosine:
        column 0 is the row itself, columns 1.. its neighbours (row numbers of ``x``)."""
        import torch

        pool = torch.randperm(len(x), generator=order)[:MINED_POOL].sort().values.numpy()
        unit = normalize_rows(x[pool])
        k = min(int(self.mined), len(pool) - 1) + 1
        _, found = topk.exact(topk.flat_index(unit), unit, k)
        return pool[found]

    def _g(self, x: np.ndarray) -> np.ndarray:
        w = self.weights_
        if int(self.hidden) == 0:
            return x @ w["weight"].T + w["bias"]
        h = np.maximum(x @ w["0.weight"].T + w["0.bias"], 0.0)
        return h @ w["2.weight"].T + w["2.bias"]

    def transform(self, X: np.ndarray, chunk_size: int = 65_536) -> np.ndarray:
        """``z + g(z)`` for every row, ``z`` the row in the adapter's basis (``x`` itself, or ``x`` rotated into its
        principal axes); float32, not normalised: take a prefix and L2-normalise it to use it."""
        self._check_fitted()
        x = check_vectors(X, "embeddings", dim=self.n_features_in_)
        out = np.empty_like(x)
        rotation = self.weights_.get("rotation")
        for i in range(0, len(x), chunk_size):
            part = x[i : i + chunk_size]
            if rotation is not None:
                part = part @ rotation
            out[i : i + chunk_size] = part + self.scale_ * self._g(part / np.float32(self.scale_))
        return out

    def get_feature_names_out(self, input_features: Any = None) -> np.ndarray:
        self._check_fitted()
        return np.asarray([f"adapted{i}" for i in range(self.n_features_in_)], dtype=object)

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write ``state.npz`` (g's arrays) and ``adapter.json`` into ``path`` (:mod:`subspaces.state_folder`: an
        interrupted save, or an edited ``adapter.json``, is refused by :meth:`load`)."""
        self._check_fitted()
        params = self.get_params()
        params["dims"] = resolve_dims(params["dims"], self.n_features_in_, order="increasing")  # integers
        config = {
            "class": "MatryoshkaAdapter",
            "params": params,
            "n_features_in": self.n_features_in_,
            "dims": self.dims_,
            "scale": self.scale_,
            "fit_seconds": self.fit_seconds_,
            "history": self.history_,
            "loss_terms": self.loss_terms_,
            "fitted_on": self.fitted_on_,
        }
        return write_state_folder(
            path, CONFIG_FILE, self.weights_, config, format_version=FORMAT_VERSION, hash_config=True
        )

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> MatryoshkaAdapter:
        config_path = Path(path) / CONFIG_FILE
        config, state = read_state_folder(
            path, CONFIG_FILE, versions=(1, 2, FORMAT_VERSION), written_by="adapt fit", config_hashed_from=3
        )
        try:
            adapter = cls(**config["params"])
            adapter.n_features_in_ = int(config["n_features_in"])
            adapter.dims_ = [int(d) for d in config["dims"]]
            adapter.scale_ = float(config["scale"])
            adapter.fit_seconds_ = float(config["fit_seconds"])
            adapter.history_ = list(config["history"])
            adapter.loss_terms_ = dict(config["loss_terms"])
            adapter.fitted_on_ = dict(config.get("fitted_on") or {})  # {} in folders written before it was kept
            with np.load(io.BytesIO(state), allow_pickle=False) as arrays:
                adapter.weights_ = {k: arrays[k].astype(np.float32) for k in arrays.files}
        except (KeyError, TypeError, ValueError) as exc:
            raise DataError(f"malformed adapter config: {exc}", path=config_path) from exc
        return adapter


def adapt_file(
    adapter: MatryoshkaAdapter,
    input_path: str | os.PathLike[str],
    output_path: str | os.PathLike[str],
    *,
    chunk_size: int = 65_536,
    show_progress: bool = False,
) -> int:
    """Write ``adapter.transform`` of every row of ``input_path`` (.npy or .parquet) to ``output_path``, chunk by
    chunk, atomically (:func:`subspaces.vectors_file.map_vectors_file`, as ``align apply``); returns the row count. A
    bad row (NaN/inf, zero) or width raises a :class:`DimensionError` naming the row."""

    def adapted(rows: np.ndarray, where: str, start: int) -> np.ndarray:
        return adapter.transform(check_vectors(rows, where, dim=adapter.n_features_in_, row_offset=start))

    adapter._check_fitted()
    return map_vectors_file(
        input_path,
        output_path,
        adapted,
        width=adapter.n_features_in_,
        label="adapt apply:",
        chunk_size=chunk_size,
        show_progress=show_progress,
    )
