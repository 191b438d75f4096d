"""Condition heads: turn a sentence embedding into its view *under a condition* (C-STS baselines and Hyper-CL).

A head maps ``(sentence_emb (B, d), condition_emb (B, d)) -> projected (B, d)``; two sentences' similarity under
``c`` is ``cos(head(s1, c), head(s2, c))``. The per-condition work is split out so a tri-encoder can cache it:
``head(s, c) == head.project(s, head.condition_params(c))``.

Heads (:func:`make_head`), with ``f`` a d×d linear condition transform started at the identity: ``hadamard``
``s ⊙ f(c)`` and ``concat`` ``act(Linear([s; f(c)]))`` (the C-STS baselines), ``hypernet`` (Hyper-CL)
``W1(c) (W2(c)ᵀ s)`` with d×K factors, or a whole d×d matrix for ``rank=None``. Conditional search
(:func:`corpus_view`, :func:`conditional_cosines`) keeps per condition what one product with the queries needs.
"""

from __future__ import annotations

import os
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import nn

from subspaces.errors import DimensionError, SubspacesError


class CorpusView(NamedTuple):
    """A corpus under one condition: ``<h(q), h(d_i)> = a(q) · rows_i`` and ``inv_norms_i = 1 / ||h(d_i)||``.

    ``rows`` is None where the corpus itself serves (hadamard: the condition moves to the query side).
    """

    rows: torch.Tensor | None
    inv_norms: torch.Tensor


HEAD_INITS: tuple[str, ...] = ("scaled", "torch")
# Training with Adam keeps weights, gradients and two moment buffers: 4 float32 copies of every parameter.
TRAIN_BYTES_PER_PARAM = 16
HEAD_KINDS = ("hadamard", "concat", "hypernet")


class ConditionTransform(nn.Module):
    """``f(c) = W dropout(c) + b``, started at the identity (``init="scaled"``) so an untrained head sees the raw
    condition embedding, or at ``nn.Linear``'s default (``init="torch"``)."""

    def __init__(self, dim: int, init: str = "scaled", dropout: float = 0.0) -> None:
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.linear = nn.Linear(dim, dim)
        if init == "scaled":
            with torch.no_grad():
                self.linear.weight.copy_(torch.eye(dim))
                self.linear.bias.zero_()

    def forward(self, condition_emb: torch.Tensor) -> torch.Tensor:
        return self.linear(self.dropout(condition_emb))


class ConditionHead(nn.Module):
    """Base class. Subclasses define :meth:`condition_params` and :meth:`project`."""

    kind: str = ""

    def __init__(self, dim: int, *, dropout: float = 0.0, init: str = "scaled") -> None:
        super().__init__()
        if dim <= 0:
            raise SubspacesError(f"head dimension must be positive, got {dim}")
        if not 0.0 <= dropout < 1.0:
            raise SubspacesError(f"head dropout must be in [0, 1), got {dropout}")
        if init not in HEAD_INITS:
            raise SubspacesError(f"unknown head init {init!r}; choose one of {', '.join(HEAD_INITS)}")
        self.dim = dim
        self.dropout_p = dropout
        self.init = init
        self.dropout = nn.Dropout(dropout)  # before the head's own layers (the transform has its own)
        self.condition_transform = ConditionTransform(dim, init, dropout)

    def condition_params(self, condition_emb: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """What the head computes once per condition; each tensor has the batch as its first axis."""
        raise NotImplementedError

    def project(self, sentence_emb: torch.Tensor, params: tuple[torch.Tensor, ...]) -> torch.Tensor:
        """Apply the per-condition ``params`` (row-aligned with ``sentence_emb``) to the sentences."""
        raise NotImplementedError

    def project_shared(self, sentence_emb: torch.Tensor, params: tuple[torch.Tensor, ...]) -> torch.Tensor:
        """Project rows that all share one condition's ``params`` (each with a batch axis of 1)."""
        return self.project(sentence_emb, tuple(p.expand(len(sentence_emb), *p.shape[1:]) for p in params))

    def forward(self, sentence_emb: torch.Tensor, condition_emb: torch.Tensor) -> torch.Tensor:
        if sentence_emb.ndim != 2 or sentence_emb.shape[-1] != self.dim:
            raise DimensionError(f"sentence embeddings must be (B, {self.dim}), got {tuple(sentence_emb.shape)}")
        if condition_emb.shape != sentence_emb.shape:
            raise DimensionError(
                f"condition embeddings {tuple(condition_emb.shape)} must match "
                f"sentence embeddings {tuple(sentence_emb.shape)}"
            )
        return self.project(sentence_emb, self.condition_params(condition_emb))

    def corpus_view(self, corpus: torch.Tensor, params: tuple[torch.Tensor, ...]) -> CorpusView:
        """What a search keeps of ``corpus`` (N, d) under one condition's ``params`` (batch axis 1): by default the
        projected rows themselves, exact for any head; :meth:`query_view` gives the matching query side."""
        rows = self.project_shared(corpus, params)
        return CorpusView(rows, _inv_sqrt(rows.square().sum(1)))

    def query_view(self, queries: torch.Tensor, params: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, torch.Tensor]:
        """``(a, 1 / ||h(q)||)`` for queries (B, d), with ``a · rows_i = <h(q), h(d_i)>`` for :meth:`corpus_view`."""
        projected = self.project_shared(queries, params)
        return projected, _inv_sqrt(projected.square().sum(1))

    def projection_matrix(self, condition_emb: torch.Tensor) -> torch.Tensor:
        """The explicit linear map ``(B, d, d)`` each condition applies to sentences (for analyses)."""
        raise SubspacesError(f"the {self.kind!r} head is not a per-condition linear map of the sentence")

    def config(self) -> dict:
        """Constructor arguments, so a saved head can be rebuilt with ``make_head(**config)``."""
        config: dict = {"kind": self.kind, "dim": self.dim}
        if self.dropout_p:
            config["dropout"] = self.dropout_p
        if self.init != "scaled":
            config["init"] = self.init
        return config


class HadamardHead(ConditionHead):
    """``h = s ⊙ f(c)`` (C-STS tri-encoder baseline)."""

    kind = "hadamard"

    def condition_params(self, condition_emb: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (self.condition_transform(condition_emb),)

    def project(self, sentence_emb: torch.Tensor, params: tuple[torch.Tensor, ...]) -> torch.Tensor:
        return sentence_emb * params[0]

    def projection_matrix(self, condition_emb: torch.Tensor) -> torch.Tensor:
        return torch.diag_embed(self.condition_transform(condition_emb))

    # <q ⊙ f, d ⊙ f> = (q ⊙ f²) · d and ||d ⊙ f||² = d² · f²: the corpus is kept as it is, plus N norms per
    # condition; the condition moves to the query.
    def corpus_view(self, corpus: torch.Tensor, params: tuple[torch.Tensor, ...]) -> CorpusView:
        return CorpusView(None, _inv_sqrt(corpus.square() @ params[0][0].square()))

    def query_view(self, queries: torch.Tensor, params: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, torch.Tensor]:
        squared = params[0][0].square()
        return queries * squared, _inv_sqrt(queries.square() @ squared)


class ConcatHead(ConditionHead):
    """``h = act(A s + B f(c) + b)``, i.e. ``act(Linear([s; f(c)]))`` (C-STS tri-encoder baseline)."""

    kind = "concat"

    def __init__(self, dim: int, activation: str = "relu", *, dropout: float = 0.0, init: str = "scaled") -> None:
        super().__init__(dim, dropout=dropout, init=init)
        activations = {"relu": nn.ReLU(), "tanh": nn.Tanh(), "gelu": nn.GELU(), "identity": nn.Identity()}
        if activation not in activations:
            raise SubspacesError(f"unknown activation {activation!r}; choose one of {', '.join(activations)}")
        self.activation_name = activation
        self.linear = nn.Linear(2 * dim, dim)
        self.activation = activations[activation]

    def condition_params(self, condition_emb: torch.Tensor) -> tuple[torch.Tensor, ...]:
        # The condition's half of the linear layer plus the bias: a per-condition offset, cacheable.
        # Dropout on [s; f(c)] is dropout on each half, so the split keeps Hyper-CL's dropout before the layer.
        weight_c = self.linear.weight[:, self.dim :]
        return (self.dropout(self.condition_transform(condition_emb)) @ weight_c.T + self.linear.bias,)

    def project(self, sentence_emb: torch.Tensor, params: tuple[torch.Tensor, ...]) -> torch.Tensor:
        weight_s = self.linear.weight[:, : self.dim]
        return self.activation(self.dropout(sentence_emb) @ weight_s.T + params[0])

    def config(self) -> dict:
        return {**super().config(), "activation": self.activation_name}


class HypernetHead(ConditionHead):
    """Hyper-CL: ``h = W_c s`` with ``W_c = W1(c) W2(c)ᵀ`` (``rank=K``) or a full d×d ``W_c`` (``rank=None``);
    ``condition_params`` returns ``(W1, W2)``, each ``(B, d, K)``, or ``(W_c,)``."""

    kind = "hypernet"

    def __init__(self, dim: int, rank: int | None = 64, *, dropout: float = 0.0, init: str = "scaled") -> None:
        super().__init__(dim, dropout=dropout, init=init)
        if rank is not None and not 0 < rank <= dim:
            raise SubspacesError(f"hypernet rank must be in 1..{dim} (or full), got {rank}")
        self.rank = rank
        if rank is None:
            self.hyper_full = nn.Linear(dim, dim * dim)
            layers = [self.hyper_full]
        else:
            self.hyper_w1 = nn.Linear(dim, dim * rank)
            self.hyper_w2 = nn.Linear(dim, dim * rank)
            layers = [self.hyper_w1, self.hyper_w2]
        if init == "scaled":
            # nn.Linear's default init makes ||W_c s|| shrink with d and K; these stds make W_c s start with about
            # unit norm for unit-norm c and s (cosine ignores scale, the optimiser's step size does not).
            for layer in layers:
                nn.init.normal_(layer.weight, std=dim**-0.5 if rank is None else (dim * rank) ** -0.25)
                nn.init.zeros_(layer.bias)

    def condition_params(self, condition_emb: torch.Tensor) -> tuple[torch.Tensor, ...]:
        c = self.dropout(self.condition_transform(condition_emb))
        batch = c.shape[0]
        if self.rank is None:
            return (self.hyper_full(c).view(batch, self.dim, self.dim),)
        w1 = self.hyper_w1(c).view(batch, self.dim, self.rank)
        w2 = self.hyper_w2(c).view(batch, self.dim, self.rank)
        return (w1, w2)

    def project(self, sentence_emb: torch.Tensor, params: tuple[torch.Tensor, ...]) -> torch.Tensor:
        s = sentence_emb.unsqueeze(-1)  # (B, d, 1)
        if self.rank is None:
            return torch.bmm(params[0], s).squeeze(-1)
        w1, w2 = params
        return torch.bmm(w1, torch.bmm(w2.transpose(1, 2), s)).squeeze(-1)  # W1 (W2ᵀ s): O(dK), not O(d²)

    def project_shared(self, sentence_emb: torch.Tensor, params: tuple[torch.Tensor, ...]) -> torch.Tensor:
        # One W_c for every row: two matrix products, (s W2) W1ᵀ, instead of a per-row copy of W_c.
        if self.rank is None:
            return sentence_emb @ params[0][0].T
        return (sentence_emb @ params[1][0]) @ params[0][0].T

    # Low rank: W_c d = W1 z with z = W2ᵀd, so <W_c q, W_c d> = z_qᵀ G z_d and ||W_c d||² = z_dᵀ G z_d, with
    # G = W1ᵀW1 (K×K). The corpus is kept as z (N×K) once per condition; a query costs one N×K product.
    # Full rank: the projected rows W_c d (N×d), the base class's view.
    def corpus_view(self, corpus: torch.Tensor, params: tuple[torch.Tensor, ...]) -> CorpusView:
        if self.rank is None:
            return super().corpus_view(corpus, params)
        w1, w2 = params[0][0], params[1][0]
        z = corpus @ w2
        return CorpusView(z, _inv_sqrt(((z @ (w1.T @ w1)) * z).sum(1)))

    def query_view(self, queries: torch.Tensor, params: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, torch.Tensor]:
        if self.rank is None:
            return super().query_view(queries, params)
        w1, w2 = params[0][0], params[1][0]
        z = queries @ w2
        a = z @ (w1.T @ w1)
        return a, _inv_sqrt((a * z).sum(1))

    def projection_matrix(self, condition_emb: torch.Tensor) -> torch.Tensor:
        params = self.condition_params(condition_emb)
        if self.rank is None:
            return params[0]
        w1, w2 = params
        return torch.bmm(w1, w2.transpose(1, 2))

    def config(self) -> dict:
        return {**super().config(), "rank": self.rank}


def project_grouped(
    head: ConditionHead,
    sentence_emb: torch.Tensor,
    params: tuple[torch.Tensor, ...],
    index: torch.Tensor,
    *,
    max_groups: int = 32,
    min_rows_per_group: int = 8,
) -> torch.Tensor:
    """``head.project(sentence_emb, tuple(p[index] for p in params))`` for ``params`` of *distinct* conditions;
    where few conditions cover many rows (a KGC batch), each condition's rows are projected together."""
    groups = len(params[0])
    if groups > max_groups or len(sentence_emb) < min_rows_per_group * groups:
        return head.project(sentence_emb, tuple(p[index] for p in params))
    out = sentence_emb.new_empty(len(sentence_emb), head.dim)
    for k in range(groups):
        rows = (index == k).nonzero(as_tuple=True)[0]
        if len(rows):
            out[rows] = head.project_shared(sentence_emb[rows], tuple(p[k : k + 1] for p in params))
    return out


def corpus_view(
    head: ConditionHead, corpus: torch.Tensor, params: tuple[torch.Tensor, ...], *, block_rows: int = 65_536
) -> CorpusView:
    """:meth:`ConditionHead.corpus_view` of ``corpus`` under one condition, ``block_rows`` rows at a time."""
    params = tuple(p.to(corpus.device, corpus.dtype) for p in params)
    with torch.no_grad():
        parts = [head.corpus_view(corpus[i : i + block_rows], params) for i in range(0, len(corpus), block_rows)]
    rows = None if parts[0].rows is None else torch.cat([p.rows for p in parts if p.rows is not None])
    return CorpusView(rows, torch.cat([p.inv_norms for p in parts]))


def conditional_cosines(
    head: ConditionHead,
    queries: torch.Tensor,
    params: tuple[torch.Tensor, ...],
    view: CorpusView,
    corpus: torch.Tensor,
) -> torch.Tensor:
    """``cos(h(q_b, c), h(d_i, c))`` for every query (B, d) and row of ``corpus`` (N, d): a (B, N) tensor, from
    ``view = corpus_view(head, corpus, params)``. A row or query that the head maps to zero scores 0."""
    params = tuple(p.to(corpus.device, corpus.dtype) for p in params)
    with torch.no_grad():
        a, inv_query = head.query_view(queries.to(corpus.device, corpus.dtype), params)
        rows = corpus if view.rows is None else view.rows
        return (a @ rows.T) * view.inv_norms * inv_query[:, None]


def conditional_search(
    head: ConditionHead,
    queries: torch.Tensor,
    params: tuple[torch.Tensor, ...],
    corpus: torch.Tensor,
    k: int = 10,
    *,
    view: CorpusView | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Scores and row numbers ``(B, k)`` of the rows of ``corpus`` (N, d) nearest each query (B, d) by
    ``cos(h(q, c), h(d, c))`` under one condition's ``params``; ``view``: a kept :func:`corpus_view`."""
    queries = torch.atleast_2d(queries)
    for name, matrix in (("query vectors", queries), ("corpus rows", corpus)):
        if matrix.ndim != 2 or matrix.shape[1] != head.dim:
            raise DimensionError(f"{name} have shape {tuple(matrix.shape)}; the head reads {head.dim} dimensions")
    if k < 1:
        raise SubspacesError(f"k must be at least 1, got {k}")
    view = corpus_view(head, corpus, params) if view is None else view
    scores, rows = torch.topk(conditional_cosines(head, queries, params, view, corpus), min(k, len(corpus)), dim=1)
    return scores.cpu().numpy(), rows.cpu().numpy()


def _inv_sqrt(squared: torch.Tensor) -> torch.Tensor:
    # 1/sqrt, and 0 for a zero (or, from a Gram form's rounding, slightly negative) square: its cosine is 0.
    tiny = torch.finfo(squared.dtype).tiny
    return torch.where(squared > tiny, squared.clamp_min(tiny).rsqrt(), torch.zeros_like(squared))


def head_parameter_count(kind: str, dim: int, rank: int | None = 64) -> int:
    """Parameters of a head, counted on torch's meta device (nothing is allocated; for the memory check)."""
    with torch.device("meta"):
        return sum(p.numel() for p in _build_head(kind, dim, rank).parameters())


def available_memory_bytes() -> int:
    """Memory the OS can still hand out (``MemAvailable``), falling back to total physical memory."""
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def auto_rank(dim: int) -> int:
    """Hyper-CL's rule of thumb for the hypernet's rank: K of about d / 12 (64 for d = 768, 32 for d = 384)."""
    return max(1, round(dim / 12))


def check_head_fits(kind: str, dim: int, rank: int | None = 64, *, memory_bytes: int | None = None) -> int:
    """Raise a clear :class:`SubspacesError` if training this head would not fit in memory; return its bytes."""
    params = head_parameter_count(kind, dim, rank)
    needed = params * TRAIN_BYTES_PER_PARAM
    budget = available_memory_bytes() if memory_bytes is None else memory_bytes
    if needed > budget:
        what = f"{kind} head (rank {'full' if rank is None else rank}, d={dim})"
        hint = f"; use a low rank, e.g. --rank {auto_rank(dim)} (about d/12, as Hyper-CL)" if kind == "hypernet" else ""
        raise SubspacesError(
            f"the {what} has {params:,} parameters and needs about {needed / 2**30:.1f} GiB to train "
            f"(weights, gradients, Adam state), but only {budget / 2**30:.1f} GiB is available{hint}"
        )
    return needed


def make_head(
    kind: str,
    dim: int,
    rank: int | str | None = 64,
    *,
    activation: str = "relu",
    memory_bytes: int | None = None,
    dropout: float = 0.0,
    init: str = "scaled",
) -> ConditionHead:
    """Build a condition head. ``rank`` applies to ``hypernet`` only (``None`` = full rank, ``"auto"`` =
    :func:`auto_rank`); ``activation`` to ``concat`` only. Raises :class:`SubspacesError` for an unknown kind, a bad
    rank, or a head too large for memory."""
    if kind not in HEAD_KINDS:
        raise SubspacesError(f"unknown head {kind!r}; choose one of {', '.join(HEAD_KINDS)}")
    if rank == "auto":
        rank = auto_rank(dim)
    elif isinstance(rank, str):
        raise SubspacesError(f"rank must be an integer, None (full) or 'auto', got {rank!r}")
    check_head_fits(kind, dim, rank, memory_bytes=memory_bytes)
    return _build_head(kind, dim, rank, activation=activation, dropout=dropout, init=init)


def _build_head(kind: str, dim: int, rank: int | None, activation: str = "relu", **options: Any) -> ConditionHead:
    if kind == "hadamard":
        return HadamardHead(dim, **options)
    if kind == "concat":
        return ConcatHead(dim, activation=activation, **options)
    if kind == "hypernet":
        return HypernetHead(dim, rank=rank, **options)
    raise SubspacesError(f"unknown head {kind!r}; choose one of {', '.join(HEAD_KINDS)}")


def head_from_config(config: dict) -> ConditionHead:
    """Rebuild a head from :meth:`ConditionHead.config` (as saved in a model folder)."""
    config = dict(config)
    return make_head(config.pop("kind"), config.pop("dim"), config.pop("rank", None), **config)
