"""Train a sentence-transformers model with an ST-style loss on rows of strings (what SimCSE, MRL and MIC share):
:class:`RowBatches` and a step that tokenises each column and calls the loss, on the engine's ``TrainingLoop``.
Training reads ``max_length`` tokens; the saved model keeps the base model's ``max_seq_length``."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

import torch
from torch import nn

from subspaces.errors import SubspacesError
from subspaces.fingerprint import texts_sha256
from subspaces.models.partial import partially_trained
from subspaces.train import distributed as ddp
from subspaces.train.engine import FitResult, TrainingLoop, epoch_order
from subspaces.train.recipes import EncoderTrainConfig

Row = tuple[str, ...]


class RowBatches:
    """Batches of rows: a fixed permutation per (seed, epoch); rank r of W takes the r-th slice of each global batch."""

    def __init__(self, rows: Sequence[Row], batch_size: int, seed: int, *, drop_last: bool = True) -> None:
        if not rows:
            raise SubspacesError("no training examples")
        if batch_size < 1:
            raise SubspacesError(f"batch size must be at least 1, got {batch_size}")
        self.width = len(rows[0])
        if any(len(row) != self.width for row in rows):
            raise SubspacesError("training rows have different numbers of columns")
        self.rows, self.batch_size, self.seed, self.drop_last = rows, batch_size, seed, drop_last
        self.rank, self.world = ddp.init_from_env()  # joins torchrun's process group now: the slices depend on it
        self.global_batch = batch_size * self.world
        if self.global_batch > len(rows):
            raise SubspacesError(
                f"batch size {batch_size} x {self.world} process(es) is larger than the data ({len(rows)} rows)"
            )

    def __len__(self) -> int:
        n = len(self.rows)
        # In-batch negatives: a ragged last batch changes the task; SimCSE's loader drops it too.
        return n // self.global_batch if self.drop_last else math.ceil(n / self.global_batch)

    def batch(self, epoch: int, index: int) -> list[Row]:
        order = epoch_order(self.seed, epoch, len(self.rows))
        lo = index * self.global_batch + self.rank * self.batch_size
        return [self.rows[i] for i in order[lo : lo + self.batch_size]]

    def fingerprint(self) -> str:
        return texts_sha256(("\x1f".join(row) for row in self.rows), b"\x1e", 16)

    def texts(self) -> list[str]:
        """The distinct texts of every column, in first-seen order (what a partial-fine-tuning cache needs)."""
        return list(dict.fromkeys(text for row in self.rows for text in row))


def loss_step(model: Any, loss: nn.Module) -> Callable[[list[Row]], torch.Tensor]:
    """``rows -> loss(tokenised columns, None)``, the inputs on the model's device."""
    from sentence_transformers.util import batch_to_device

    def step(rows: list[Row]) -> torch.Tensor:
        columns = [[row[c] for row in rows] for c in range(len(rows[0]))]
        features = [batch_to_device(model.preprocess(column), model.device) for column in columns]
        return loss(features, None)

    return step


def train_sentence_loss(
    model: Any,
    loss: nn.Module,
    examples: Sequence[Row],
    config: EncoderTrainConfig,
    evaluator: Any = None,
    *,
    card_notes: Sequence[str] = (),
    callback: Callable[[int, float], None] | None = None,
) -> FitResult:
    """Minimise ``loss`` over ``examples``; the best model by ``evaluator`` (or the last) is saved in
    ``config.output_dir`` as a portable sentence-transformers folder with ``card_notes`` in its card."""
    from subspaces.models.encoder import portable

    batches = RowBatches(examples, config.batch_size, config.seed, drop_last=config.drop_last)
    encoder_fields = {f.name for f in fields(EncoderTrainConfig)}
    get_config = getattr(loss, "get_config_dict", None)
    loss_config = sorted((get_config() if callable(get_config) else {}).items())
    recorded = {name: getattr(config, name) for name in _RECORDED} | {"loss": f"{type(loss).__name__} {loss_config!r}"}
    recorded |= {f.name: getattr(config, f.name) for f in fields(config) if f.name not in encoder_fields}
    if recorded["trainable_layers"] == "all":
        recorded["trainable_layers"] = None
    inference_length = model.max_seq_length
    notes = [*card_notes, f"max_seq_length {inference_length} (trained on {config.max_length} tokens)"]

    def save_model(folder: Path) -> None:
        exported = portable(model)
        trained_length = model.max_seq_length
        exported.max_seq_length = inference_length  # shares the transformer module with ``model``
        try:
            exported.save(str(folder))
        finally:
            exported.max_seq_length = trained_length
        write_card_notes(folder, notes)

    if config.state_dropout and config.trainable_layers in (None, "all"):
        raise SubspacesError(
            "state dropout acts on cached activations: it needs partial fine-tuning (trainable layers N)"
        )
    reports_terms = isinstance(getattr(loss, "last_terms", None), dict)
    model.max_seq_length = config.max_length
    try:
        with partially_trained(
            [(model, batches.texts())],  # every training text goes through the frozen bottom once, first
            config.trainable_layers,
            cache_dir=config.cache_dir,
            show_progress=config.show_progress and ddp.is_main(),
            description=f"caching activations for {config.description}",
            state_dropout=config.state_dropout,
        ) as attached:
            for pft in attached:
                notes.append(
                    f"fine-tuned the top {pft.trainable_layers} of {pft.total_layers} transformer layers "
                    "(the embeddings and lower layers are the base model's)"
                )
            return TrainingLoop(
                model,
                loss_step(model, loss),
                batches,
                config,
                evaluator,
                save_model=save_model,
                settings=recorded,
                log=(lambda step: {"terms": dict(vars(loss)["last_terms"])}) if reports_terms else None,
                log_first_step=reports_terms,
                on_step=callback,
            ).run()
    finally:
        model.max_seq_length = inference_length


# EncoderTrainConfig's fields recorded as settings (FitConfig's own are fingerprinted by the loop).
_RECORDED = ("batch_size", "max_length", "drop_last", "trainable_layers", "state_dropout")


def write_card_notes(folder: Path, notes: Sequence[str]) -> None:
    """Append a "Training (subspaces)" section to the model card sentence-transformers wrote (README.md)."""
    card = folder / "README.md"
    text = card.read_text(encoding="utf-8") if card.is_file() else ""
    section = "\n## Training (subspaces)\n\n" + "".join(f"- {note}\n" for note in notes)
    card.write_text(text.rstrip("\n") + "\n" + section, encoding="utf-8")
