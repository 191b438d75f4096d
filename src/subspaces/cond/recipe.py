"""The conditional-similarity recipe: every setting of ``cond train`` with its help (the CLI derives its options
from it; no torch here)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from subspaces.losses.settings import ConditionalSettings
from subspaces.settings import setting
from subspaces.train.recipes import FitConfig


@dataclass
class CondTrainConfig(ConditionalSettings, FitConfig):
    """A conditional-similarity run: the loop's settings, the objective's (:class:`ConditionalSettings`), and the
    model to build."""

    arch: Literal["tri", "bi"] = setting(
        "tri", "tri: sentence and condition encoded apart (cacheable); bi: (s, c) pairs."
    )
    head: Literal["hypernet", "concat", "hadamard"] = setting("hypernet", "Tri-encoder head.")
    rank: int | str | None = setting("auto", "Hypernet rank K, 'auto' (d/12, as Hyper-CL) or None/'full'.")
    freeze_encoder: bool = setting(True, "Train only the head on cached embeddings.", "--freeze-encoder/--fine-tune")
    condition_encoder: str | None = setting(None, "A separate encoder for conditions (tri).")
    max_length: int | None = setting(
        None, "Tokens per text (default: the encoder's own limit).", "--max-length", "--max-seq-length"
    )
    batch_size: int = setting(32, "Rows per step.")
    head_lr: float = setting(1e-3, "Learning rate of the head.")
    encoder_lr: float = setting(2e-5, "Learning rate of the encoder when fine-tuning.")
    lr: float = field(init=False, repr=False)  # derived: the loop's base rate, the head's (each group has its own)
    epochs: int = setting(10, "Passes over the training rows.")
    eval_every_epoch: bool = setting(True, "Score the dev split after each epoch.")
    trainable_layers: int | str | None = setting(
        None, "Fine-tuning: only the top N transformer layers (None/'all': all)."
    )
    cache_dir: str | None = setting(None, "Where partial fine-tuning keeps the bottom activations (None: memory).")

    def __post_init__(self) -> None:
        self.lr = self.head_lr
