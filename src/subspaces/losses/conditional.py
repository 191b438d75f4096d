"""Objectives for conditional similarity (C-STS, Hyper-CL) on ``cos(h(s1, c), h(s2, c))``, labels in [0, 1].

``mse`` regresses the cosine on the label; ``quadruplet`` (C-STS) asks a sentence pair's cosine under its higher-
labelled condition to exceed the lower one's by ``margin``; ``infonce_mse`` (Hyper-CL) is the cross-entropy of
``[cos_high, cos_low] / τ`` towards the higher plus both rows' MSE. Pair objectives take rows in (high, low) pairs
(:class:`subspaces.cond.sampler.PairSampler`).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from subspaces.errors import SubspacesError
from subspaces.losses.settings import OBJECTIVES, ConditionalSettings
from subspaces.settings import chosen


class ConditionalLoss(nn.Module):
    """One objective over projected embeddings ``z1, z2`` (rows ``2i`` and ``2i+1`` form a pair for pair objectives).

    ``in_batch_negatives``: ``infonce_mse`` also ranks ``cos(z1_i, z2_j)`` of the batch's other pairs ``j`` below
    ``cos_high_i`` (each side under its own pair's higher condition: no extra projections). ``settings`` (a
    :class:`ConditionalSettings`, or a recipe extending it) with ``changes`` to single fields.
    """

    def __init__(self, *, settings: ConditionalSettings | None = None, **changes: Any) -> None:
        super().__init__()
        self.settings = chosen(ConditionalSettings, settings, changes)
        objective, temperature = self.settings.objective, self.settings.temperature
        if objective not in OBJECTIVES:
            raise SubspacesError(f"unknown objective {objective!r}; choose one of {', '.join(OBJECTIVES)}")
        if temperature <= 0:
            raise SubspacesError(f"temperature must be positive, got {temperature}")

    @property
    def needs_pairs(self) -> bool:
        return self.settings.objective != "mse"

    def forward(self, z1: torch.Tensor, z2: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        settings = self.settings
        cosine = F.cosine_similarity(z1, z2, dim=-1)
        if settings.objective == "mse":
            return F.mse_loss(cosine, labels)
        if len(cosine) % 2:
            raise ValueError("pair objectives need rows in (high, low) pairs: an even batch")
        cos_high, cos_low = cosine[0::2], cosine[1::2]
        if settings.objective == "quadruplet":  # cosine distance: max(0, d_high - d_low + margin)
            return F.relu(settings.margin - (cos_high - cos_low)).mean()
        logits = torch.stack([cos_high, cos_low], dim=1)
        if settings.in_batch_negatives and len(cos_high) > 1:
            a = F.normalize(z1[0::2], dim=-1)
            b = F.normalize(z2[0::2], dim=-1)
            sims = a @ b.T  # anchor i's first sentence against every pair's second sentence (under its own condition)
            off_diagonal = ~torch.eye(len(sims), dtype=torch.bool, device=sims.device)
            logits = torch.cat([logits, sims[off_diagonal].view(len(sims), len(sims) - 1)], dim=1)
        target = torch.zeros(len(logits), dtype=torch.long, device=logits.device)
        contrast = F.cross_entropy(logits / settings.temperature, target)
        return contrast + 0.5 * (F.mse_loss(cos_high, labels[0::2]) + F.mse_loss(cos_low, labels[1::2]))
