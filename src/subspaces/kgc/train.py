"""The KGC training loop: AdamW, linear schedule with warm-up, gradient clipping, seeded shuffles.

Why not :func:`subspaces.train.loop.train`: that loop feeds string columns to sentence-transformers losses,
while SimKGC's loss needs the entity ids of each example (false-negative masks, the pre-batch queue's ids)
and, with a frozen encoder, no text at all -- the batch is a set of rows of cached embeddings. This loop
trains anything with ``embed_batch(triples, texts)`` under :class:`~subspaces.kgc.loss.SimKGCLoss`.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

import numpy as np
import torch

from subspaces.kgc.loss import SimKGCLoss
from subspaces.train.loop import seed_everything


@dataclass
class KGCTrainConfig:
    """SimKGC's defaults where they apply to CPU: weight decay 1e-4, clipping at 10, warm-up as a step count."""

    batch_size: int = 1024
    lr: float = 1e-3
    head_lr: float | None = None  # the tri-encoder's head (randomly initialised) when the encoder fine-tunes
    epochs: int = 1
    max_steps: int | None = None
    warmup_steps: int = 400
    weight_decay: float = 1e-4
    max_grad_norm: float = 10.0
    seed: int = 42
    show_progress: bool = True


@dataclass
class KGCTrainResult:
    steps: int
    seconds: float
    examples_per_second: float
    final_temperature: float
    history: list[dict] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def train_kgc(loss: SimKGCLoss, examples: np.ndarray, config: KGCTrainConfig, texts=None) -> KGCTrainResult:
    """Train ``loss.model`` (and the loss's temperature) on ``examples``: ``(n, 3)`` triples, inverses included.

    Batches are full (the last ragged one is dropped, as SimKGC does: in-batch negatives change with size).
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
    from transformers import get_linear_schedule_with_warmup

    seed_everything(config.seed)
    examples = np.asarray(examples, dtype=np.int64)
    batch_size = min(config.batch_size, len(examples))
    per_epoch = len(examples) // batch_size
    total = per_epoch * config.epochs
    if config.max_steps is not None:
        total = min(total, config.max_steps)
    params = [p for p in loss.parameters() if p.requires_grad]
    if not params:
        raise ValueError("nothing to train: every parameter is frozen")
    head = getattr(loss.model, "head", None)
    if config.head_lr is not None and head is None:
        raise ValueError(f"head_lr is set but {type(loss.model).__name__} has no head beside its encoder")
    head_ids = {id(p) for p in head.parameters()} if config.head_lr is not None else set()
    others, head_params = [p for p in params if id(p) not in head_ids], [p for p in params if id(p) in head_ids]
    groups = []
    for lr, members in ((config.lr, others), (config.head_lr, head_params)):
        groups += [{"params": [p for p in members if p.ndim >= 2], "weight_decay": config.weight_decay, "lr": lr},
                   {"params": [p for p in members if p.ndim < 2], "weight_decay": 0.0, "lr": lr}]
    optimizer = torch.optim.AdamW([g for g in groups if g["params"]], lr=config.lr)
    scheduler = get_linear_schedule_with_warmup(optimizer, min(config.warmup_steps, max(total // 10, 0)), max(total, 1))
    loss.train()
    history: list[dict] = []
    step = 0
    started = time.perf_counter()
    columns = (TextColumn("training"), BarColumn(), MofNCompleteColumn(), TextColumn("loss {task.fields[loss]:.3f}"), TimeRemainingColumn())
    with Progress(*columns, transient=True, disable=not config.show_progress) as progress:
        task = progress.add_task("train", total=total, loss=float("nan"))
        for epoch in range(config.epochs):
            order = np.random.default_rng([config.seed, epoch]).permutation(len(examples))
            for b in range(per_epoch):
                if step >= total:
                    break
                batch = examples[order[b * batch_size : (b + 1) * batch_size]]
                value = loss(batch, texts)
                optimizer.zero_grad(set_to_none=True)
                value.backward()
                if config.max_grad_norm:
                    torch.nn.utils.clip_grad_norm_(params, config.max_grad_norm)
                optimizer.step()
                scheduler.step()
                step += 1
                progress.update(task, advance=1, loss=value.item())
                if step % 10 == 0 or step == total:
                    history.append({"step": step, "epoch": epoch, "loss": value.item(), "temperature": loss.temperature})
    seconds = time.perf_counter() - started
    loss.eval()
    return KGCTrainResult(step, seconds, step * batch_size / seconds if seconds else 0.0, loss.temperature, history)
