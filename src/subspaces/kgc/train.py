"""KGC as a task on the shared :class:`~subspaces.train.engine.TrainingLoop`: the engine optimises the
:class:`~subspaces.losses.simkgc.SimKGCLoss` (the model and the temperature) over full batches of a seeded permutation
of the triples; the evaluator is :class:`subspaces.kgc.pipeline.RankingEvaluator`."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from subspaces.cond.train import total_steps
from subspaces.errors import SubspacesError
from subspaces.eval.base import Evaluator
from subspaces.fingerprint import sha256_hex
from subspaces.kgc.recipes import KGCTrainConfig
from subspaces.kgc.texts import KGCTexts
from subspaces.losses.simkgc import SimKGCLoss
from subspaces.models.conditional import ConditionalModel, TriEncoder
from subspaces.train import engine


def embed_batch(model: ConditionalModel, triples: np.ndarray, texts: KGCTexts) -> tuple[torch.Tensor, ...]:
    """``(hr, tail, head)`` vectors of a batch of ``(h, r, t)`` triples for SimKGC's loss (``head`` feeds the
    self-negatives), with gradients where the model trains."""
    triples = np.asarray(triples)
    head_texts, tail_texts = texts.training_texts(triples)
    relations = [texts.relations[r] for r in triples[:, 1].tolist()]
    if isinstance(model, TriEncoder):  # one encoder pass over the batch's texts: heads and tails share the backbone
        vectors = model.embed_sentences([*head_texts, *tail_texts])
        heads, tails = vectors[: len(triples)], vectors[len(triples) :]
        return model.condition(heads, relations), tails, heads
    return model.project(head_texts, relations), model.embed_sentences(tail_texts), model.embed_sentences(head_texts)


class TripleBatches:
    """A :class:`~subspaces.train.engine.BatchSource` of ``(batch_size, 3)`` triples: a seeded permutation per epoch."""

    def __init__(self, examples: np.ndarray, batch_size: int, seed: int = 42) -> None:
        self.examples = np.asarray(examples, dtype=np.int64)
        self.batch_size = min(batch_size, len(self.examples))
        self.seed = seed

    def __len__(self) -> int:
        return len(self.examples) // self.batch_size

    def batch(self, epoch: int, index: int) -> np.ndarray:
        order = engine.epoch_order(self.seed, epoch, len(self.examples))
        return self.examples[order[index * self.batch_size : (index + 1) * self.batch_size]]

    def fingerprint(self) -> str:
        return sha256_hex((f"{self.batch_size}|{self.seed}".encode(), self.examples.tobytes()), 16)


def _param_groups(loss: SimKGCLoss, config: KGCTrainConfig) -> list[dict[str, Any]]:
    """AdamW groups: weight decay on matrices only; the tri-encoder's head at its own rate when it has one."""
    params = [p for p in loss.parameters() if p.requires_grad]
    head = getattr(loss.model, "head", None)
    if config.head_lr is not None and head is None:
        raise SubspacesError(f"head_lr is set but {type(loss.model).__name__} has no head beside its encoder")
    rest_lr, head_lr = config.rates(bool(getattr(loss.model, "freeze_encoder", False)))
    head_ids = {id(p) for p in head.parameters()} if head_lr is not None else set()
    others, head_params = [p for p in params if id(p) not in head_ids], [p for p in params if id(p) in head_ids]
    return engine.param_groups([(others, rest_lr), (head_params, head_lr)], config.weight_decay)


def train_kgc(
    loss: SimKGCLoss,
    examples: np.ndarray,
    config: KGCTrainConfig,
    *,
    texts: KGCTexts | None = None,
    evaluator: Evaluator | None = None,
) -> engine.FitResult:
    """Train ``loss.model`` (and the loss's temperature) on ``(n, 3)`` triples, inverses included, whose ``texts``
    the model reads; with an ``evaluator`` the state best on it (at each epoch end) is kept. The history logs each
    step's epoch and temperature too."""
    batches = TripleBatches(examples, config.batch_size, config.seed)
    per_epoch = len(batches)
    total = total_steps(per_epoch, config)
    frozen = bool(getattr(loss.model, "freeze_encoder", False))
    lr, head_lr = config.rates(frozen)
    fit_config = config.loop_config(
        lr=lr,
        max_steps=total,
        warmup_steps=min(config.warmup_steps or 0, total // 10),
        eval_steps=None,
        eval_every_epoch=evaluator is not None,
        output_dir=None if config.output_dir is None else str(config.output_dir),
    )
    settings = {"batch_size": batches.batch_size, "head_lr": head_lr, **loss.get_config_dict()}
    result = engine.TrainingLoop(
        loss,
        lambda batch: loss(batch, texts),
        batches,
        fit_config,
        evaluator,
        param_groups=_param_groups(loss, config),
        settings=settings,
        log=lambda step: {"epoch": (step - 1) // per_epoch, "temperature": loss.temperature},
    ).run()
    loss.eval()
    return result
