"""Matryoshka training: MRL over SimCSE's InfoNCE, optionally with MIC's regularisers, on the generic loop.

One column per row trains unsupervised (dropout views); two or three columns train on pairs / triplets with hard
negatives. The model keeping the best mean STS-B dev Spearman over the nested dims is the one saved. With MIC, the
size of each of its terms (:attr:`subspaces.losses.mic.MICLoss.last_terms`) goes into the history
(:class:`subspaces.train.engine.History`), so ``trainer_state.json`` and the checkpoint keep them.
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn

from subspaces.eval.sts import STSBDevEvaluator
from subspaces.losses.matryoshka import matryoshka_simcse_loss
from subspaces.losses.mic import MICLoss
from subspaces.train.engine import FitResult
from subspaces.train.recipes import MatryoshkaConfig
from subspaces.train.sentence import train_sentence_loss


def build_loss(model, config: MatryoshkaConfig) -> nn.Module:
    """MRL (and MIC around it when ``config.mic``) for ``model``."""
    loss: nn.Module = matryoshka_simcse_loss(
        model,
        list(config.dims),
        config.weights,
        temperature=config.temperature,
        hard_negative_weight=config.hard_negative_weight,
    )
    return MICLoss(model, loss, settings=config) if config.mic else loss


def train_matryoshka(
    model,
    examples: Sequence[tuple[str, ...]],
    config: MatryoshkaConfig,
    evaluator=None,
    *,
    card_notes=(),
    callback=None,
) -> FitResult:
    """Train ``model`` with MRL (``config.mic``: MRL + MIC) on ``examples``; see :class:`MatryoshkaConfig`.

    The model kept is the one with the best *mean* STS-B dev Spearman over ``config.dims``.
    """
    loss = build_loss(model, config)
    if evaluator is None and config.stsb_dev:
        evaluator = STSBDevEvaluator(limit=config.stsb_dev_limit, dims=config.dims)  # the primary metric: their mean
    return train_sentence_loss(model, loss, examples, config, evaluator, card_notes=card_notes, callback=callback)
