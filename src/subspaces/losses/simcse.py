"""SimCSE's contrastive objective (Gao et al., 2021): InfoNCE over in-batch negatives.

For anchors h_i, positives h_i^+ and optional hard negatives h_i^-::

    loss_i = -log  exp(sim(h_i, h_i^+)/τ) / ( Σ_j exp(sim(h_i, h_j^+)/τ) + Σ_j w_ij exp(sim(h_i, h_j^-)/τ) )

with sim the cosine and w_ij = e^{weight} for the anchor's own hard negative, 1 otherwise. With weight 0 and one
process this is ``MultipleNegativesRankingLoss(model, scale=1/τ)`` (tested); under DDP the batch is gathered, each
process keeping its own slice's gradient.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor, nn

from subspaces.losses.settings import InfoNCESettings


def gather_with_grad(x: Tensor) -> Tensor:
    """All-gather ``x`` (B, d) from every process, keeping the autograd graph of this process's own slice."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return x
    parts = [torch.zeros_like(x) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, x.contiguous())
    parts[dist.get_rank()] = x  # the gathered copies carry no gradient; keep ours
    return torch.cat(parts, dim=0)


def info_nce(
    anchors: Tensor,
    positives: Tensor,
    negatives: Tensor | None = None,
    *,
    temperature: float = 0.05,
    hard_negative_weight: float = 0.0,
) -> Tensor:
    """SimCSE's InfoNCE (see the module docstring); returns the mean loss over anchors (of all processes)."""
    if anchors.shape != positives.shape or (negatives is not None and negatives.shape != anchors.shape):
        raise ValueError(
            f"anchors {tuple(anchors.shape)}, positives {tuple(positives.shape)} and negatives "
            f"{None if negatives is None else tuple(negatives.shape)} must have the same shape"
        )
    anchors, positives = gather_with_grad(anchors), gather_with_grad(positives)
    negatives = gather_with_grad(negatives) if negatives is not None else None
    a = F.normalize(anchors, dim=-1)
    logits = a @ F.normalize(positives, dim=-1).T / temperature
    if negatives is not None:
        neg_logits = a @ F.normalize(negatives, dim=-1).T / temperature
        if hard_negative_weight:
            neg_logits = neg_logits + hard_negative_weight * torch.eye(len(a), device=a.device, dtype=a.dtype)
        logits = torch.cat([logits, neg_logits], dim=1)
    labels = torch.arange(len(a), device=a.device)
    return F.cross_entropy(logits, labels)


class SimCSELoss(nn.Module):
    """InfoNCE as a sentence-transformers loss over a batch's tokenised columns: one (unsupervised: encoded twice),
    two (anchor, positive) or three (plus a hard negative)."""

    def __init__(
        self,
        model: nn.Module,
        temperature: float = InfoNCESettings.temperature,
        hard_negative_weight: float = InfoNCESettings.hard_negative_weight,
    ) -> None:
        super().__init__()
        if temperature <= 0:
            raise ValueError(f"temperature must be positive, got {temperature}")
        self.model = model
        self.temperature = temperature
        self.hard_negative_weight = hard_negative_weight

    def forward(self, sentence_features: Iterable[dict[str, Tensor]], labels: Tensor | None = None) -> Tensor:
        features = list(sentence_features)
        if len(features) == 1:  # unsupervised: two dropout views of the same batch
            # Two dicts, not one twice: the model writes its outputs into the dict it is given, and a wrapper
            # that caches those outputs (MatryoshkaLoss) would otherwise see the second view under both names.
            features = [features[0], dict(features[0])]
        if len(features) not in (2, 3):
            raise ValueError(f"SimCSELoss takes 1, 2 or 3 columns, got {len(features)}")
        anchors, positives, *negatives = (self.model(f)["sentence_embedding"] for f in features)
        return info_nce(anchors, positives, *negatives, **self.get_config_dict())

    def get_config_dict(self) -> dict[str, Any]:
        return {"temperature": self.temperature, "hard_negative_weight": self.hard_negative_weight}

    @property
    def citation(self) -> str:
        return "Gao, Yao & Chen (2021). SimCSE: Simple Contrastive Learning of Sentence Embeddings. EMNLP."
