"""The conditional-similarity recipe: every setting of ``cond train`` with its help (the CLI derives its options
from it; no torch here)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from subspaces.train.recipes import FitConfig


@dataclass
class CondTrainConfig(FitConfig):
    """A conditional-similarity run: the model to build, the objective, and the loop's settings."""

    arch: Literal["tri", "bi"] = field(
        default="tri", metadata={"help": "tri: sentence and condition encoded apart (cacheable); bi: (s, c) pairs."}
    )
    head: Literal["hypernet", "concat", "hadamard"] = field(default="hypernet", metadata={"help": "Tri-encoder head."})
    rank: int | str | None = field(
        default="auto", metadata={"help": "Hypernet rank K, 'auto' (d/12, as Hyper-CL) or None/'full'."}
    )
    freeze_encoder: bool = field(
        default=True,
        metadata={"help": "Train only the head on cached embeddings.", "flags": ("--freeze-encoder/--fine-tune",)},
    )
    condition_encoder: str | None = field(default=None, metadata={"help": "A separate encoder for conditions (tri)."})
    max_length: int | None = field(
        default=None,
        metadata={
            "help": "Tokens per text (default: the encoder's own limit).",
            "flags": ("--max-length", "--max-seq-length"),
        },
    )
    objective: Literal["mse", "quadruplet", "infonce_mse"] = field(
        default="mse", metadata={"help": "mse; quadruplet and infonce_mse need pairs under two conditions."}
    )
    batch_size: int = field(default=32, metadata={"help": "Rows per step."})
    head_lr: float = field(default=1e-3, metadata={"help": "Learning rate of the head."})
    encoder_lr: float = field(default=2e-5, metadata={"help": "Learning rate of the encoder when fine-tuning."})
    lr: float = field(init=False, repr=False)  # derived: the loop's base rate, the head's (each group has its own)
    epochs: int = field(default=10, metadata={"help": "Passes over the training rows."})
    temperature: float = field(default=1.7, metadata={"help": "τ of infonce_mse."})
    margin: float = field(default=1.0, metadata={"help": "Margin of the quadruplet loss."})
    in_batch_negatives: bool = field(
        default=False, metadata={"help": "infonce_mse: other pairs of the batch as negatives."}
    )
    eval_every_epoch: bool = field(default=True, metadata={"help": "Score the dev split after each epoch."})
    trainable_layers: int | str | None = field(
        default=None, metadata={"help": "Fine-tuning: only the top N transformer layers (None/'all': all)."}
    )
    cache_dir: str | None = field(
        default=None, metadata={"help": "Where partial fine-tuning keeps the bottom activations (None: memory)."}
    )

    def __post_init__(self) -> None:
        self.lr = self.head_lr
