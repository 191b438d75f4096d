"""KGC as a task on the shared engine (:func:`subspaces.train.engine.fit`): triple batches, SimKGC's loss, MRR on dev.

The engine optimises the :class:`~subspaces.losses.simkgc.SimKGCLoss` (it holds the model and the learnable
temperature); a step is the loss of one batch of triples. Batches are full (the last ragged one is dropped, as
SimKGC does: in-batch negatives change with size) and each epoch is a seeded permutation of the triples.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np

from subspaces.errors import SubspacesError
from subspaces.eval.base import Evaluator
from subspaces.losses.simkgc import SimKGCLoss


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
    description: str = "train kgc"
    # Where the engine checkpoints (every save_steps and on Ctrl-C) and what a rerun resumes from exactly; None:
    # no checkpoints (a frozen-encoder head trains in minutes; a fine-tuned encoder on CPU takes hours an epoch).
    checkpoint_dir: str | None = None
    save_steps: int = 50


@dataclass
class KGCTrainResult:
    steps: int
    seconds: float
    examples_per_second: float
    final_temperature: float
    best_dev_mrr: float | None = None
    history: list[dict] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


@lru_cache(maxsize=2)
def _order(seed: int, epoch: int, n: int) -> np.ndarray:
    return np.random.default_rng([seed, epoch]).permutation(n)


class TripleBatches:
    """A :class:`~subspaces.train.engine.BatchSource` of ``(batch_size, 3)`` triples: a seeded permutation per epoch."""

    def __init__(self, examples: np.ndarray, batch_size: int, seed: int = 42) -> None:
        self.examples = np.asarray(examples, dtype=np.int64)
        if self.examples.ndim != 2 or self.examples.shape[1] != 3 or not len(self.examples):
            raise SubspacesError(f"training triples must be a non-empty (n, 3) array, got shape {self.examples.shape}")
        self.batch_size = min(batch_size, len(self.examples))
        self.seed = seed

    def __len__(self) -> int:
        return len(self.examples) // self.batch_size

    def batch(self, epoch: int, index: int) -> np.ndarray:
        order = _order(self.seed, epoch, len(self.examples))
        return self.examples[order[index * self.batch_size : (index + 1) * self.batch_size]]

    def fingerprint(self) -> str:
        digest = hashlib.sha256(f"{self.batch_size}|{self.seed}".encode())
        digest.update(self.examples.tobytes())
        return digest.hexdigest()[:16]


class RankingEvaluator(Evaluator):
    """Filtered ranking of one split (forward and backward averaged); the primary metric is MRR.

    Called with the loss the engine trains (or a model); the loss is in eval mode then, so no margin applies.
    ``select=False`` tracks the split (MRR after each epoch) without choosing a state on it.
    """

    primary_metric = "mrr"
    greater_is_better = True

    def __init__(self, kg: Any, split: str, texts: Any, *, select: bool = True) -> None:
        self.kg, self.split, self.texts = kg, split, texts
        self.select = select  # False: only record each epoch's MRR; the last state is the one kept

    def is_better(self, score: float, best: float | None) -> bool:
        return super().is_better(score, best) if self.select else True

    def __call__(self, module: Any) -> dict[str, float]:
        from subspaces.kgc.pipeline import evaluate_model

        model = getattr(module, "model", module)
        result = evaluate_model(model, self.kg, split=self.split, texts=self.texts, show_progress=False)
        # What the evaluation cost rides along, so a run's history separates training from evaluation time.
        return {
            **result.average,
            "inference_seconds": result.inference_seconds,
            "cache_hit_rate": result.cache_hit_rate,
        }


def _param_groups(loss: SimKGCLoss, config: KGCTrainConfig) -> list[dict[str, Any]]:
    """AdamW groups: weight decay on matrices only; the tri-encoder's head at ``head_lr`` when it is set."""
    params = [p for p in loss.parameters() if p.requires_grad]
    head = getattr(loss.model, "head", None)
    if config.head_lr is not None and head is None:
        raise SubspacesError(f"head_lr is set but {type(loss.model).__name__} has no head beside its encoder")
    head_ids = {id(p) for p in head.parameters()} if config.head_lr is not None else set()
    others, head_params = [p for p in params if id(p) not in head_ids], [p for p in params if id(p) in head_ids]
    groups = []
    for lr, members in ((config.lr, others), (config.head_lr, head_params)):
        groups += [
            {"params": [p for p in members if p.ndim >= 2], "weight_decay": config.weight_decay, "lr": lr},
            {"params": [p for p in members if p.ndim < 2], "weight_decay": 0.0, "lr": lr},
        ]
    return [g for g in groups if g["params"]]


def train_kgc(
    loss: SimKGCLoss,
    examples: np.ndarray,
    config: KGCTrainConfig,
    texts: Any = None,
    evaluator: Evaluator | None = None,
) -> KGCTrainResult:
    """Train ``loss.model`` (and the loss's temperature) on ``examples``: ``(n, 3)`` triples, inverses included.

    With an ``evaluator`` the state best on it (by MRR, at each epoch end) is the one kept.
    """
    from subspaces.train.engine import FitConfig
    from subspaces.train.engine import fit as engine_fit

    batches = TripleBatches(examples, config.batch_size, config.seed)
    per_epoch = len(batches)
    total = per_epoch * config.epochs if config.max_steps is None else min(per_epoch * config.epochs, config.max_steps)
    if total < 1:
        raise SubspacesError("nothing to train: max_steps (or, without it, epochs) must be at least 1")
    temperatures: dict[int, float] = {}
    fit_config = FitConfig(
        lr=config.lr,
        epochs=config.epochs,
        max_steps=total,
        warmup_steps=min(config.warmup_steps, total // 10),
        weight_decay=config.weight_decay,
        max_grad_norm=config.max_grad_norm,
        seed=config.seed,
        eval_steps=None,
        eval_every_epoch=evaluator is not None,
        output_dir=config.checkpoint_dir,
        save_steps=config.save_steps if config.checkpoint_dir is not None else None,
        show_progress=config.show_progress,
        description=config.description,
    )
    settings = {"batch_size": batches.batch_size, "head_lr": config.head_lr, **loss.get_config_dict()}
    result = engine_fit(
        loss,
        lambda batch: loss(batch, texts),
        batches,
        fit_config,
        evaluator,
        param_groups=_param_groups(loss, config),
        settings=settings,
        callback=lambda step, _value: temperatures.__setitem__(step, loss.temperature),
    )
    loss.eval()
    history = [
        {**entry, "epoch": (entry["step"] - 1) // per_epoch, "temperature": temperatures.get(entry["step"])}
        if "loss" in entry
        else entry
        for entry in result.history
    ]
    examples_per_second = result.steps * batches.batch_size / result.seconds if result.seconds else 0.0
    return KGCTrainResult(
        result.steps, result.seconds, examples_per_second, loss.temperature, result.best_score, history
    )
