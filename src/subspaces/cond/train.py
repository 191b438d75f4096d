"""Conditional similarity as a task on the shared :class:`~subspaces.train.engine.TrainingLoop` (batches from
:mod:`subspaces.cond.sampler`, :class:`~subspaces.losses.conditional.ConditionalLoss`, the dev metrics; the state
best on dev is kept), its evaluation, and the checks both conditional tasks (cond, kgc) share."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from subspaces.cond.metrics import choose_threshold, conditional_metrics
from subspaces.cond.recipe import CondTrainConfig
from subspaces.cond.sampler import PairSampler, RowSampler
from subspaces.cond.tasks import Task
from subspaces.data.csts import ConditionalPair
from subspaces.errors import SubspacesError
from subspaces.eval.base import Evaluator
from subspaces.losses.conditional import ConditionalLoss
from subspaces.models.conditional import BiEncoder, ConditionalModel, TriEncoder
from subspaces.models.partial import partially_trained
from subspaces.train import engine
from subspaces.train.recipes import FitConfig

ENCODER_PREFIXES = ("encoder.", "condition_encoder.")


def check_trainable(task: str, arch: str, freeze_encoder: bool, trainable_layers: int | str | None) -> None:
    """Refuse, before anything loads, the settings that leave nothing to train."""
    if arch == "bi" and freeze_encoder:
        raise SubspacesError(
            "a bi-encoder with a frozen encoder has nothing to train (it has no head; --head applies to --arch tri): "
            f"pass --fine-tune, or score it zero-shot with `subspaces {task} eval MODEL`"
        )
    if trainable_layers not in (None, "all") and freeze_encoder:
        raise SubspacesError("--trainable-layers trains encoder layers: it needs --fine-tune, not --freeze-encoder")


def total_steps(per_epoch: int, config: FitConfig) -> int:
    """The run's length: ``epochs`` passes, or ``max_steps`` when that is fewer."""
    steps = per_epoch * config.epochs
    return steps if config.max_steps is None else min(steps, config.max_steps)


def predict(model: ConditionalModel, rows: Sequence[ConditionalPair]) -> np.ndarray:
    return model.similarity([r.sentence1 for r in rows], [r.sentence2 for r in rows], [r.condition for r in rows])


def evaluate(
    model: ConditionalModel,
    task: Task,
    rows: Sequence[ConditionalPair],
    *,
    dev_rows: Sequence[ConditionalPair] | None = None,
    seen_keys: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Metrics on ``rows`` (overall, seen, unseen); binary tasks at a threshold chosen on
    ``dev_rows`` (without them ``rows`` are the dev split, as in training)."""
    labelled = [r for r in rows if r.label is not None]
    if not labelled:
        raise SubspacesError(
            "the evaluation split has no gold labels (C-STS's test set is hidden): use --split validation"
        )
    scores = predict(model, labelled)
    threshold = None
    if task.binary:
        dev = labelled if dev_rows is None else [r for r in dev_rows if r.label is not None]
        dev_scores = scores if dev_rows is None else predict(model, dev)
        threshold = choose_threshold(dev_scores, np.asarray(task.scaled_labels(dev)))
    keys = set(seen_keys or ())
    seen = np.array([task.seen_key(r) in keys for r in labelled]) if keys else None
    result = conditional_metrics(
        scores, task.scaled_labels(labelled), binary=task.binary, threshold=threshold, seen=seen
    )
    if threshold is not None:
        result["threshold"] = threshold
    return result


class DevEvaluator(Evaluator):
    """The task's dev metrics of a conditional model; the primary metric is the task's selection metric."""

    greater_is_better = True

    def __init__(self, task: Task, rows: Sequence[ConditionalPair]) -> None:
        self.task, self.rows, self.primary_metric = task, rows, task.selection_metric

    def __call__(self, model: ConditionalModel) -> dict[str, float]:
        return {k: float(v) for k, v in evaluate(model, self.task, self.rows)["metrics"].items()}


def param_groups(model: ConditionalModel, config: CondTrainConfig) -> list[dict[str, Any]]:
    """AdamW groups: the head at ``head_lr``, the encoders (when they train) at ``encoder_lr``."""
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    head = [p for n, p in named if not n.startswith(ENCODER_PREFIXES)]
    encoders = [p for n, p in named if n.startswith(ENCODER_PREFIXES)]
    return engine.param_groups(
        [(head, config.head_lr), (encoders, config.encoder_lr)], config.weight_decay, decay_all=True
    )


def fit(
    model: ConditionalModel,
    task: Task,
    train_rows: Sequence[ConditionalPair],
    config: CondTrainConfig,
    *,
    dev_rows: Sequence[ConditionalPair] | None = None,
) -> engine.FitResult:
    """Train ``model`` on ``train_rows`` with the engine; keeps the state best on ``dev_rows`` (if given). The history
    has one entry per epoch (its mean loss, its dev metrics); the run's summary (steps, best epoch, the sampler's) is
    recorded in ``model.metadata["training"]``."""
    check_trainable("cond", model.arch, model.freeze_encoder, config.trainable_layers)
    loss_fn = ConditionalLoss(settings=config)
    sampler = (PairSampler if loss_fn.needs_pairs else RowSampler)(train_rows, config.batch_size, seed=config.seed)
    model.metadata.update(
        {
            "task": task.name,
            "label_range": list(task.label_range),
            "seen_keys": task.seen_keys(train_rows),
            # the exact condition texts, for TriEncoder.search's note on a condition never trained on
            "seen_conditions": sorted({r.condition for r in train_rows}),
            "objective": config.objective,
        }
    )
    labels_all = task.scaled_labels(train_rows)
    if model.freeze_encoder:
        model.store.show_progress = config.show_progress  # the one encoder pass of the run: say what it encodes
        _warm_caches(model, train_rows, dev_rows, task.name)

    def step(batch: list[int]) -> torch.Tensor:
        rows = [train_rows[i] for i in batch]
        z1, z2 = model([r.sentence1 for r in rows], [r.sentence2 for r in rows], [r.condition for r in rows])
        labels = torch.tensor([labels_all[i] for i in batch], dtype=torch.float32, device=z1.device)
        return loss_fn(z1, z2, labels)

    per_epoch = len(sampler)
    steps = total_steps(per_epoch, config)
    evaluator = DevEvaluator(task, dev_rows) if dev_rows is not None and config.eval_every_epoch else None
    recorded = ("objective", "batch_size", "encoder_lr", "temperature", "margin")
    settings = {name: getattr(config, name) for name in recorded} | {"arch": model.arch}
    fit_config = config.loop_config(
        max_steps=steps, eval_steps=None, eval_every_epoch=True, description=f"train cond {model.arch} on {task.name}"
    )
    with partially_trained(
        _training_texts(model, train_rows),
        config.trainable_layers,
        cache_dir=config.cache_dir,
        show_progress=config.show_progress,
        description=f"caching activations for cond {task.name}",
    ) as attached:
        if attached:
            settings["trainable_layers"] = attached[0].trainable_layers
        result = engine.TrainingLoop(
            model,
            step,
            sampler,
            fit_config,
            evaluator,
            param_groups=param_groups(model, config),
            settings=settings,
            by_epoch=True,
        ).run()
    model.eval()
    if model.freeze_encoder:
        reset_cache_stats(model)  # the cached embeddings stay valid; only training's lookups are forgotten
    else:
        model.clear_caches(reset_stats=True)  # embeddings from mid-training encoders are stale
    best_epoch = None if result.best_step is None else (result.best_step - 1) // per_epoch
    model.metadata["training"] = {
        "steps": result.steps,
        "seconds": result.seconds,
        "best_epoch": best_epoch,
        "best_dev": result.best_score,
        "sampler": sampler.summary(),
    }
    return result


def _training_texts(model: ConditionalModel, rows: Sequence[ConditionalPair]) -> list[tuple[Any, list[Any]]]:
    """Each encoder with the inputs it reads in training: sentences and conditions, or (sentence, condition) pairs."""
    if isinstance(model, BiEncoder):
        return [(model.encoder, [(s, r.condition) for r in rows for s in (r.sentence1, r.sentence2)])]
    sentences = [s for r in rows for s in (r.sentence1, r.sentence2)]
    return [(model.encoder, sentences), (model.store.encoders["condition"], [r.condition for r in rows])]


def _warm_caches(
    model: ConditionalModel, train: Sequence[ConditionalPair], dev: Sequence[ConditionalPair] | None, name: str
) -> None:
    """Encode every distinct text of the splits once, in large batches (the frozen encoder's only pass)."""
    rows = [*train, *(dev or [])]
    if isinstance(model, TriEncoder):
        sentences = sorted({s for r in rows for s in (r.sentence1, r.sentence2)})
        model.embed_sentences(sentences, f"cond {name}: encoding {len(sentences):,} sentences")
        conditions = sorted({r.condition for r in rows})
        model.embed_conditions(conditions, f"cond {name}: encoding {len(conditions):,} conditions")
    reset_cache_stats(model)


def reset_cache_stats(model: TriEncoder | BiEncoder) -> None:
    for cache in model.caches().values():
        cache.reset_stats()
