"""Matryoshka training: MRL over SimCSE's InfoNCE, optionally with MIC's regularisers, on the generic loop.

One column per row trains unsupervised (dropout views); two or three columns train on pairs / triplets with hard
negatives. The model keeping the best mean STS-B dev Spearman over the nested dims is the one saved.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from torch import nn

from subspaces.losses.matryoshka import check_dims, matryoshka_simcse_loss
from subspaces.losses.mic import MICLoss
from subspaces.train.loop import TrainConfig, TrainResult, train


@dataclass
class MatryoshkaConfig(TrainConfig):
    dims: Sequence[int | None] = (16, 32, 64, 128, None)  # None = the model's full size
    weights: Sequence[float] | None = None  # one per dim; default 1 each
    temperature: float = 0.05
    hard_negative_weight: float = 0.0
    mic: bool = False
    gamma: float = 0.1
    tau_corr: float = 0.1
    lambda_var: float = 1.0
    t: float = 2.0
    layers: Sequence[int] | None = None  # default: the middle and the last transformer layer
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
        )
    return loss


class STSBDevAtDims:
    """Evaluator: STS-B dev Spearman x 100 at each prefix, and their mean as ``score``."""

    def __init__(self, dims: Sequence[int | None], limit: int | None = None) -> None:
        self.dims = list(dims)
        self.limit = limit

    def __call__(self, model) -> dict[str, float]:
        from subspaces.data.sts import load_stsb
        from subspaces.eval.dims import prefix
        from subspaces.eval.sts import cosine_rows, embed_pairs, spearman_x100

        pairs = load_stsb("dev")
        if self.limit is not None:
            pairs = pairs.head(self.limit)
        e1, e2 = embed_pairs(model, pairs)
        dims = check_dims(self.dims, e1.shape[1])
        scores = {f"stsb_dev@{d}": spearman_x100(cosine_rows(prefix(e1, d), prefix(e2, d)), pairs.scores) for d in dims}
        return {**scores, "score": float(np.mean(list(scores.values())))}


def train_matryoshka(model, examples: Sequence[tuple[str, ...]], config: MatryoshkaConfig, evaluator=None) -> TrainResult:
    """Train ``model`` with MRL (``config.mic``: MRL + MIC) on ``examples``; see :class:`MatryoshkaConfig`."""
    from subspaces.models.encoder import portable

    loss = build_loss(model, config)
    if evaluator is None and config.stsb_dev:
        evaluator = STSBDevAtDims(config.dims, config.stsb_dev_limit)
    return train(model, loss, examples, config, evaluator, export=portable)
