"""Objectives for conditional similarity (C-STS and Hyper-CL).

All three act on the cosine similarity ``cos(h(s1, c), h(s2, c))`` of a pair under a condition, with gold
labels scaled to [0, 1]:

- ``mse``: ``(cos - label)²`` over rows (C-STS's regression objective).
- ``quadruplet``: for a sentence pair seen under a higher- and a lower-labelled condition,
  ``max(0, margin - (cos_high - cos_low))`` with cosine distance, margin 1.0 (C-STS's quadruplet loss).
- ``infonce_mse`` (Hyper-CL): cross-entropy of ``[cos_high, cos_low] / τ`` towards the higher one, plus the MSE of
  both rows; optionally the other pairs of the batch are extra negatives.

The pair objectives take rows already matched as (high, low) by :class:`subspaces.cond.sampler.PairSampler`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from subspaces.errors import SubspacesError

OBJECTIVES = ("mse", "quadruplet", "infonce_mse")
PAIR_OBJECTIVES = ("quadruplet", "infonce_mse")


def mse_loss(cosine: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return F.mse_loss(cosine, labels)


def quadruplet_loss(cos_high: torch.Tensor, cos_low: torch.Tensor, margin: float = 1.0) -> torch.Tensor:
    # With cosine distance d = 1 - cos: max(0, d_high - d_low + margin) = max(0, margin - (cos_high - cos_low)).
    return F.relu(margin - (cos_high - cos_low)).mean()


def infonce_mse_loss(
    cos_high: torch.Tensor,
    cos_low: torch.Tensor,
    labels_high: torch.Tensor,
    labels_low: torch.Tensor,
    temperature: float = 1.7,
    extra_negatives: torch.Tensor | None = None,
) -> torch.Tensor:
    """Hyper-CL's objective. ``extra_negatives`` is ``(P, N)``: more cosines each anchor should rank below."""
    logits = torch.stack([cos_high, cos_low], dim=1)
    if extra_negatives is not None:
        logits = torch.cat([logits, extra_negatives], dim=1)
    target = torch.zeros(len(logits), dtype=torch.long, device=logits.device)
    contrast = F.cross_entropy(logits / temperature, target)
    mse = 0.5 * (F.mse_loss(cos_high, labels_high) + F.mse_loss(cos_low, labels_low))
    return contrast + mse


class ConditionalLoss(nn.Module):
    """One objective over projected embeddings ``z1, z2`` (rows ``2i`` and ``2i+1`` form a pair for pair objectives).

    Args:
        objective: ``mse``, ``quadruplet`` or ``infonce_mse``.
        temperature: τ of ``infonce_mse`` (Hyper-CL uses about 1.5-1.9).
        margin: margin of ``quadruplet`` (C-STS: 1.0).
        in_batch_negatives: ``infonce_mse`` also ranks ``cos(z1_i, z2_j)`` below ``cos_high_i`` for the other
            pairs ``j`` of the batch (each side projected under its own pair's higher condition, so no extra
            projections are computed).
    """

    def __init__(
        self, objective: str = "mse", *, temperature: float = 1.7, margin: float = 1.0, in_batch_negatives: bool = False
    ) -> None:
        super().__init__()
        if objective not in OBJECTIVES:
            raise SubspacesError(f"unknown objective {objective!r}; choose one of {', '.join(OBJECTIVES)}")
        if temperature <= 0:
            raise SubspacesError(f"temperature must be positive, got {temperature}")
        self.objective = objective
        self.temperature = temperature
        self.margin = margin
        self.in_batch_negatives = in_batch_negatives

    @property
    def needs_pairs(self) -> bool:
        return self.objective in PAIR_OBJECTIVES

    def forward(self, z1: torch.Tensor, z2: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        cosine = F.cosine_similarity(z1, z2, dim=-1)
        if self.objective == "mse":
            return mse_loss(cosine, labels)
        if len(cosine) % 2:
            raise ValueError("pair objectives need rows in (high, low) pairs: an even batch")
        cos_high, cos_low = cosine[0::2], cosine[1::2]
        if self.objective == "quadruplet":
            return quadruplet_loss(cos_high, cos_low, self.margin)
        extra = None
        if self.in_batch_negatives and len(cos_high) > 1:
            a = F.normalize(z1[0::2], dim=-1)
            b = F.normalize(z2[0::2], dim=-1)
            sims = a @ b.T  # anchor i's first sentence against every pair's second sentence (under its own condition)
            off_diagonal = ~torch.eye(len(sims), dtype=torch.bool, device=sims.device)
            extra = sims[off_diagonal].view(len(sims), len(sims) - 1)
        return infonce_mse_loss(cos_high, cos_low, labels[0::2], labels[1::2], self.temperature, extra)
