"""SimKGC's contrastive objective (Wang et al., 2022), for any KGC model that embeds a batch of triples.

For B training triples with query vectors ``hr_i`` and tail vectors ``t_j``::

    logits_ij = (cos(hr_i, t_j) - γ·[i = j]) · exp(log_inv_t)            in-batch negatives, additive margin γ
    pre_ik    = cos(hr_i, q_k) · exp(log_inv_t) · w                       pre-batch queue q of earlier tails
    self_i    = cos(hr_i, h_i) · exp(log_inv_t)                           the head itself as a negative tail
    loss = CE([logits | pre | self], i) + CE(logits[:, :B]ᵀ, i)           plus the tail -> (h, r) direction

The margin applies in training only; ``log_inv_t`` is learnable; false negatives (known *training* tails of
``(h, r)``, a head that is one, empty queue slots) are masked to -1e4. Details: docs/kgc.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from subspaces.losses.settings import SimKGCSettings
from subspaces.settings import chosen

if TYPE_CHECKING:
    from subspaces.kgc.graph import KnownTails

EmbedBatch = Callable[..., tuple[torch.Tensor, ...]]  # (triples, texts) -> (hr, tails, heads)
MASKED = -1e4


def false_negative_mask(
    row_triples: np.ndarray, col_tails: np.ndarray, known: KnownTails, diagonal: bool
) -> torch.Tensor:
    """``True`` where column j is a usable negative for row i (SimKGC's ``construct_mask``); with ``diagonal`` the
    columns are the rows' own tails and ``(i, i)``, the positive, is kept ``True``."""
    row_triples = np.asarray(row_triples)
    cols = np.asarray(col_tails)
    mask = row_triples[:, 2][:, None] != cols[None, :]
    columns_of: dict[int, list[int]] = {}
    for j, tail in enumerate(cols.tolist()):
        columns_of.setdefault(tail, []).append(j)
    for i, (h, r, _t) in enumerate(row_triples.tolist()):
        neighbours = known(h, r)
        if len(neighbours) <= 1:  # only the row's own tail: the exact-match test above suffices
            continue
        if len(neighbours) < len(columns_of):
            for tail in neighbours:
                for j in columns_of.get(tail, ()):
                    mask[i, j] = False
        else:  # hubs (FB15k-237 has (h, r) with thousands of tails): walk the columns instead
            for tail, js in columns_of.items():
                if tail in neighbours:
                    mask[i, js] = False
    mask = torch.from_numpy(mask)
    if diagonal:
        mask.fill_diagonal_(True)
    return mask


def self_negative_mask(triples: np.ndarray, known: KnownTails) -> torch.Tensor:
    """``False`` where the head is itself a known tail of ``(h, r)`` (then it is no negative)."""
    return torch.tensor([h not in known(h, r) for h, r, _t in np.asarray(triples).tolist()], dtype=torch.bool)


class SimKGCLoss(nn.Module):
    """SimKGC's loss for a KGC model: ``embed_batch(triples, texts) -> (hr, tail, head)`` (default: the model's own
    method). Training the loss trains the model and the temperature; ``known`` holds the training triples with
    inverses (the false-negative masks). ``settings`` (a :class:`SimKGCSettings`, or a recipe extending it) with
    ``changes`` to single fields; ``batch_size`` sizes the pre-batch queue (default: the first batch's)."""

    def __init__(
        self,
        model: nn.Module,
        known: KnownTails,
        *,
        settings: SimKGCSettings | None = None,
        batch_size: int | None = None,
        embed_batch: EmbedBatch | None = None,
        **changes: Any,
    ) -> None:
        super().__init__()
        self.settings = chosen(SimKGCSettings, settings, changes)
        temperature, pre_batch = self.settings.temperature, self.settings.pre_batch
        if temperature <= 0:
            raise ValueError(f"temperature must be positive, got {temperature}")
        if pre_batch < 0:
            raise ValueError(f"pre_batch must be >= 0, got {pre_batch}")
        self.model = model
        self.embed_batch = embed_batch
        self.known = known
        self.log_inv_t = nn.Parameter(torch.tensor(math.log(1.0 / temperature)))
        self._queue_vectors: torch.Tensor | None = None  # (pre_batch * B, d), detached tails of earlier batches
        self._queue_tails: torch.Tensor | None = None  # their entity ids, -1 = empty slot
        self._queue_offset = 0
        self._queue_rows = pre_batch * batch_size if batch_size else None

    @property
    def temperature(self) -> float:
        return float(torch.exp(-self.log_inv_t.detach()))

    def forward(self, triples: np.ndarray, texts=None) -> torch.Tensor:
        embed: EmbedBatch = self.embed_batch if self.embed_batch is not None else self.model.embed_batch  # type: ignore[assignment]
        hr, tails, heads = embed(triples, texts)
        logits = self.logits(hr, tails, heads, np.asarray(triples))
        labels = torch.arange(len(hr), device=logits.device)
        # SimKGC also trains the reverse direction: each tail picks its (h, r) among the batch's queries.
        return F.cross_entropy(logits, labels) + F.cross_entropy(logits[:, : len(hr)].T, labels)

    def logits(
        self, hr: torch.Tensor, tails: torch.Tensor, heads: torch.Tensor | None, triples: np.ndarray
    ) -> torch.Tensor:
        """The (B, B [+ queue] [+ 1]) logits, masks applied; column i of the first block is row i's positive."""
        settings = self.settings
        hr = F.normalize(hr, dim=-1) if settings.normalize_queries else hr
        tails = F.normalize(tails, dim=-1)
        inv_t = self.log_inv_t.exp()
        batch = len(hr)
        logits = hr @ tails.T
        if self.training and settings.margin:
            logits = logits - settings.margin * torch.eye(batch, dtype=logits.dtype, device=logits.device)
        logits = logits * inv_t
        mask = false_negative_mask(triples, triples[:, 2], self.known, diagonal=True).to(logits.device)
        logits = logits.masked_fill(~mask, MASKED)
        blocks = [logits]
        if settings.pre_batch and self.training:
            blocks.append(self._pre_batch_logits(hr, tails, triples, inv_t))
        if settings.self_negatives and self.training and heads is not None:
            self_logits = (hr * F.normalize(heads, dim=-1)).sum(dim=1) * inv_t
            self_logits = self_logits.masked_fill(~self_negative_mask(triples, self.known).to(hr.device), MASKED)
            blocks.append(self_logits[:, None])
        return torch.cat(blocks, dim=1)

    def _pre_batch_logits(
        self, hr: torch.Tensor, tails: torch.Tensor, triples: np.ndarray, inv_t: torch.Tensor
    ) -> torch.Tensor:
        rows = self._queue_rows or self.settings.pre_batch * len(hr)
        if self._queue_vectors is None or self._queue_vectors.shape != (rows, hr.shape[1]):
            self._queue_vectors = torch.zeros(rows, hr.shape[1], device=hr.device)
            self._queue_tails = torch.full((rows,), -1, dtype=torch.long)
            self._queue_offset = 0
        queue, queue_ids = self._queue_vectors, self._queue_tails
        assert queue is not None and queue_ids is not None
        logits = hr @ queue.clone().T * inv_t * self.settings.pre_batch_weight  # clone: the queue is updated below
        queue_tails = queue_ids.numpy()
        mask = false_negative_mask(triples, queue_tails, self.known, diagonal=False)
        mask &= torch.as_tensor(queue_tails >= 0)[None, :]
        logits = logits.masked_fill(~mask.to(hr.device), MASKED)
        # Enqueue this batch's tails (no gradient flows into the queue), overwriting the oldest.
        n = min(len(tails), rows)
        slots = (self._queue_offset + torch.arange(n)) % rows
        queue[slots] = tails[:n].detach()
        queue_ids[slots] = torch.as_tensor(triples[:n, 2])
        self._queue_offset = int((self._queue_offset + n) % rows)
        return logits

    def get_config_dict(self) -> dict:
        """The settings, the temperature as learnt so far (what a run records)."""
        return asdict(self.settings) | {"temperature": self.temperature}
