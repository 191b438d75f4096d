"""Train and evaluate conditional similarity models.

Why not the generic loop of :mod:`subspaces.train.loop`: that one feeds rows of *strings* to an ST loss without
labels and optimises a SentenceTransformer. Conditional training needs graded labels, (high, low) condition pairs
kept in one batch, and -- with ``freeze_encoder`` -- no tokenisation at all: every sentence and condition is
encoded once into the model's content-keyed cache and only the head learns, which makes CPU training take
seconds. The same loop fine-tunes the encoder when it is not frozen.

The best state on the dev split (by the task's selection metric) is the one kept.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch

from subspaces.cond.metrics import choose_threshold, conditional_metrics
from subspaces.cond.models import ConditionalModel
from subspaces.cond.sampler import PairSampler, RowSampler
from subspaces.cond.tasks import Task
from subspaces.data.csts import ConditionalPair
from subspaces.errors import SubspacesError
from subspaces.losses.conditional import ConditionalLoss


@dataclass
class CondTrainConfig:
    objective: str = "mse"
    batch_size: int = 32
    lr: float = 1e-3  # heads on a frozen encoder; fine-tuning the encoder wants about 2e-5
    encoder_lr: float = 2e-5
    epochs: int = 10
    max_steps: int | None = None
    weight_decay: float = 0.0
    temperature: float = 1.7
    margin: float = 1.0
    in_batch_negatives: bool = False
    seed: int = 42
    eval_every_epoch: bool = True
    show_progress: bool = True


@dataclass
class CondTrainResult:
    steps: int
    seconds: float
    best_epoch: int | None
    best_dev: float | None
    sampler: str
    history: list[dict[str, Any]] = field(default_factory=list)


def predict(model: ConditionalModel, rows: Sequence[ConditionalPair], batch_size: int = 256) -> np.ndarray:
    return model.similarity([r.sentence1 for r in rows], [r.sentence2 for r in rows], [r.condition for r in rows],
                            batch_size=batch_size)


def evaluate(
    model: ConditionalModel,
    task: Task,
    rows: Sequence[ConditionalPair],
    *,
    dev_rows: Sequence[ConditionalPair] | None = None,
    seen_keys: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Metrics on ``rows`` (overall, seen, unseen) plus the scores; binary tasks pick the threshold on ``dev_rows``."""
    labelled = [r for r in rows if r.label is not None]
    if not labelled:
        raise SubspacesError("the evaluation split has no gold labels (C-STS's test set is hidden): use --split validation")
    scores = predict(model, labelled)
    threshold = None
    if task.binary:
        dev = [r for r in (dev_rows if dev_rows is not None else labelled) if r.label is not None]
        dev_scores = scores if dev_rows is None else predict(model, dev)
        threshold = choose_threshold(dev_scores, np.asarray(task.scaled_labels(dev)))
    seen = None
    if seen_keys:
        keys = set(seen_keys)
        seen = np.array([task.seen_key(r) in keys for r in labelled])
    result = conditional_metrics(scores, task.scaled_labels(labelled), binary=task.binary, threshold=threshold, seen=seen)
    if threshold is not None:
        result["threshold"] = threshold
    result["scores"] = scores
    return result


def fit(
    model: ConditionalModel,
    task: Task,
    train_rows: Sequence[ConditionalPair],
    config: CondTrainConfig,
    *,
    dev_rows: Sequence[ConditionalPair] | None = None,
) -> CondTrainResult:
    """Train ``model`` on ``train_rows``; keeps the state that scores best on ``dev_rows`` (if given)."""
    torch.manual_seed(config.seed)
    loss_fn = ConditionalLoss(config.objective, temperature=config.temperature, margin=config.margin,
                              in_batch_negatives=config.in_batch_negatives)
    sampler: PairSampler | RowSampler
    if loss_fn.needs_pairs:
        sampler = PairSampler(train_rows, config.batch_size, seed=config.seed)
    else:
        sampler = RowSampler(train_rows, config.batch_size, seed=config.seed)
    model.metadata.update({"task": task.name, "label_range": list(task.label_range),
                           "seen_keys": task.seen_keys(train_rows), "objective": config.objective})
    groups = []
    head_params = [p for n, p in model.named_parameters() if p.requires_grad and not n.startswith(("encoder.", "condition_encoder."))]
    enc_params = [p for n, p in model.named_parameters() if p.requires_grad and n.startswith(("encoder.", "condition_encoder."))]
    if head_params:
        groups.append({"params": head_params, "lr": config.lr})
    if enc_params:
        groups.append({"params": enc_params, "lr": config.encoder_lr})
    if not groups:
        # A bi-encoder on a frozen encoder has no parameters: it is the zero-shot baseline.
        return CondTrainResult(0, 0.0, None, None, sampler.summary())
    optimizer = torch.optim.AdamW(groups, weight_decay=config.weight_decay)
    labels_all = task.scaled_labels(train_rows)

    if model.freeze_encoder:
        _warm_caches(model, train_rows, dev_rows)

    total = len(sampler) * config.epochs
    if config.max_steps is not None:
        total = min(total, config.max_steps)
    progress = None
    if config.show_progress:
        from tqdm.auto import tqdm

        progress = tqdm(total=total, desc=f"train {model.arch}", unit="step", dynamic_ncols=True)
    history: list[dict[str, Any]] = []
    best_state, best_dev, best_epoch = None, None, None
    step, start = 0, time.perf_counter()
    try:
        for epoch in range(config.epochs):
            model.train()
            losses = []
            for batch in sampler.epoch(epoch):
                rows = [train_rows[i] for i in batch]
                labels = torch.tensor([labels_all[i] for i in batch], dtype=torch.float32)
                z1, z2 = model([r.sentence1 for r in rows], [r.sentence2 for r in rows], [r.condition for r in rows])
                loss = loss_fn(z1, z2, labels)
                if not torch.isfinite(loss):
                    raise SubspacesError(f"loss became {loss.item()} at step {step}; lower --lr")
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_([p for g in groups for p in g["params"]], 1.0)
                optimizer.step()
                step += 1
                losses.append(float(loss.detach()))
                if progress is not None:
                    progress.update(1)
                    progress.set_postfix(loss=f"{np.mean(losses[-50:]):.4f}", epoch=epoch)
                if step >= total:
                    break
            entry: dict[str, Any] = {"epoch": epoch, "step": step, "loss": float(np.mean(losses)) if losses else None}
            if dev_rows is not None and config.eval_every_epoch:
                dev = evaluate(model, task, dev_rows)
                score = float(dev["metrics"].get(task.selection_metric, float("nan")))
                entry["dev"] = {k: v for k, v in dev["metrics"].items()}
                if best_dev is None or score > best_dev:
                    best_dev, best_epoch = score, epoch
                    best_state = _trainable_state(model)
            history.append(entry)
            if step >= total:
                break
    finally:
        if progress is not None:
            progress.close()
    seconds = time.perf_counter() - start
    if best_state is not None:
        model.load_state_dict(best_state, strict=False)
    model.eval()
    if model.freeze_encoder:
        _reset_stats(model)  # the cached embeddings stay valid; only training's lookups are forgotten
    else:
        model.clear_caches(reset_stats=True)  # embeddings from mid-training encoders are stale
    result = CondTrainResult(step, seconds, best_epoch, best_dev, sampler.summary(), history)
    model.metadata["training"] = {k: v for k, v in asdict(result).items() if k != "history"}
    return result


def _trainable_state(model: ConditionalModel) -> dict[str, torch.Tensor]:
    """A copy of the weights training can change (a frozen encoder's are left out: no 90 MB copy per epoch)."""
    frozen = ("encoder.", "condition_encoder.") if model.freeze_encoder else ()
    return {k: v.detach().clone() for k, v in model.state_dict().items() if not (frozen and k.startswith(frozen))}


def _warm_caches(model: ConditionalModel, *splits: Sequence[ConditionalPair] | None) -> None:
    """Encode every distinct text of the splits once, in large batches (the frozen encoder's only pass)."""
    from subspaces.cond.models import TriEncoder

    rows = [r for split in splits if split for r in split]
    if isinstance(model, TriEncoder):
        sentences = sorted({s for r in rows for s in (r.sentence1, r.sentence2)})
        model.embed_sentences(sentences)
        model.embed_conditions(sorted({r.condition for r in rows}))
    _reset_stats(model)


def _reset_stats(model: ConditionalModel) -> None:
    for cache in model.caches().values():
        cache.reset_stats()
