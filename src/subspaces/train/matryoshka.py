"""Matryoshka training: MRL over SimCSE's InfoNCE, optionally with MIC's regularisers, on the generic loop.

One column per row trains unsupervised (dropout views); two or three columns train on pairs / triplets with hard
negatives. The model keeping the best mean STS-B dev Spearman over the nested dims is the one saved. With MIC, the
size of each of its terms (:attr:`subspaces.losses.mic.MICLoss.last_terms`) at step 1 (the forward pass on the
start weights), every 10 steps and the last goes into the history entries of the engine (``"terms"``), so
trainer_state.json and the checkpoint keep them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from torch import nn

from subspaces.eval.sts import STSBDevEvaluator
from subspaces.losses.matryoshka import matryoshka_simcse_loss
from subspaces.losses.mic import LayerPrefixMapping, MICLoss
from subspaces.train.engine import FitResult
from subspaces.train.sentence import EncoderTrainConfig, train_sentence_loss


@dataclass
class MatryoshkaConfig(EncoderTrainConfig):
    dims: Sequence[int | None] = (16, 32, 64, 128, None)  # None = the model's full size
    weights: Sequence[float] | None = None  # one per dim; default 1 each
    temperature: float = 0.05
    hard_negative_weight: float = 0.0
    mic: bool = False
    # MIC (see subspaces.losses.mic for what each weight multiplies; the defaults are ours)
    gamma: float = 0.1
    tau_corr: float = 0.0
    lambda_corr: float = 100.0
    lambda_var: float = 25.0
    var_floor: float = 0.5
    relative_floor: bool = True
    lambda_sir: float = 1.0
    t: float = 2.0
    lambda_distill: float = 0.1
    distill_temperature: float = 0.05
    layers: Sequence[int] | None = None  # default: the middle and the last layer ("all"), one per dim ("paired")
    layer_prefix_mapping: LayerPrefixMapping = "all"
    stsb_dev: bool = True
    stsb_dev_limit: int | None = None


def build_loss(model, config: MatryoshkaConfig) -> nn.Module:
    """MRL (and MIC around it when ``config.mic``) for ``model``."""
    loss: nn.Module = matryoshka_simcse_loss(
        model,
        list(config.dims),
        config.weights,
        temperature=config.temperature,
        hard_negative_weight=config.hard_negative_weight,
    )
    if config.mic:
        loss = MICLoss(
            model,
            loss,
            layers=config.layers,
            gamma=config.gamma,
            tau_corr=config.tau_corr,
            lambda_var=config.lambda_var,
            t=config.t,
            lambda_corr=config.lambda_corr,
            var_floor=config.var_floor,
            relative_floor=config.relative_floor,
            lambda_sir=config.lambda_sir,
            lambda_distill=config.lambda_distill,
            distill_temperature=config.distill_temperature,
            layer_prefix_mapping=config.layer_prefix_mapping,
        )
    return loss


class STSBDevAtDims(STSBDevEvaluator):
    """STS-B dev Spearman x 100 at each prefix (``stsb_dev@16``, ...) and their ``mean``, the primary metric."""

    def __init__(self, dims: Sequence[int | None], limit: int | None = None) -> None:
        super().__init__(limit=limit, dims=dims)


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
        evaluator = STSBDevAtDims(config.dims, config.stsb_dev_limit)
    settings = {name: getattr(config, name) for name in _LOSS_FIELDS}
    # MICLoss.last_terms reach the engine's history (trainer_state.json, checkpoints) through train_sentence_loss
    return train_sentence_loss(
        model, loss, examples, config, evaluator, settings=settings, card_notes=card_notes, callback=callback
    )


# What changes the objective or the choice of the best model: a resume must agree on them.
_LOSS_FIELDS = (
    "dims",
    "weights",
    "temperature",
    "hard_negative_weight",
    "mic",
    "gamma",
    "tau_corr",
    "lambda_corr",
    "lambda_var",
    "var_floor",
    "relative_floor",
    "lambda_sir",
    "t",
    "lambda_distill",
    "distill_temperature",
    "layers",
    "layer_prefix_mapping",
    "stsb_dev",
    "stsb_dev_limit",
)
