"""Matryoshka training: MRL over SimCSE's InfoNCE (one column: unsupervised; two or three: pairs / triplets),
optionally with MIC's regularisers, whose terms go into the history; the best mean STS-B dev Spearman over the
nested dims picks the model saved."""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn

from subspaces.eval.sts import STSBDevEvaluator
from subspaces.losses.matryoshka import matryoshka_simcse_loss
from subspaces.losses.mic import MICLoss
from subspaces.train.engine import FitResult
from subspaces.train.recipes import MatryoshkaConfig
from subspaces.train.sentence import train_sentence_loss


def train_matryoshka(
    model,
    examples: Sequence[tuple[str, ...]],
    config: MatryoshkaConfig,
    evaluator=None,
    *,
    card_notes=(),
    callback=None,
) -> FitResult:
    """Train ``model`` with MRL (``config.mic``: MRL + MIC) on ``examples``; see :class:`MatryoshkaConfig`."""
    infonce = {"temperature": config.temperature, "hard_negative_weight": config.hard_negative_weight}
    loss: nn.Module = matryoshka_simcse_loss(model, list(config.dims), config.weights, **infonce)
    if config.mic:
        loss = MICLoss(model, loss, settings=config)
    if evaluator is None and config.stsb_dev:
        evaluator = STSBDevEvaluator(limit=config.stsb_dev_limit, dims=config.dims)  # the primary metric: their mean
    return train_sentence_loss(model, loss, examples, config, evaluator, card_notes=card_notes, callback=callback)
