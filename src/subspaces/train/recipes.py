"""The training recipes' settings with their help, declared once: :class:`FitConfig` (what the loop takes) and the
recipes extending it with the losses' settings and their own; the CLI derives its options from them (no torch here)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any, Literal

from subspaces.losses.settings import InfoNCESettings, MICSettings
from subspaces.settings import setting

Mode = Literal["unsup", "sup"]
Augmentation = Literal["dropout", "none", "delete_one_word"]  # unsup SimCSE's two views of a sentence


@dataclass
class FitConfig:
    """What every training run is given; a recipe extends it with its own fields."""

    output_dir: str | None = setting(None, "Folder for the model and checkpoints.")
    lr: float = setting(3e-5, "AdamW learning rate.")
    epochs: int = setting(1, "Passes over the data.")
    max_steps: int | None = setting(None, "Stop after this many steps (wins over epochs).")
    warmup_ratio: float = setting(0.0, "Fraction of the steps spent warming up the lr.")
    warmup_steps: int | None = setting(None, "Warm-up steps (wins over the ratio).")
    weight_decay: float = setting(0.0, "AdamW weight decay (not on biases and norms).")
    max_grad_norm: float | None = setting(1.0, "Clip the gradient norm to this.")
    seed: int = setting(42, "Seeds the model's new weights, the batches and dropout.")
    eval_steps: int | None = setting(125, "Evaluate every N steps (0: only at the end).")
    eval_every_epoch: bool = setting(False, "Evaluate at each epoch end as well.")
    save_steps: int | None = setting(125, "Write a resumable checkpoint every N steps.")
    resume: bool = setting(True, "Continue from the output folder's checkpoint.pt.")
    show_progress: bool = setting(True, "Show a progress display on stderr.")
    description: str = setting("train", "Progress label.")
    overwrite: bool = setting(False, "Write into a non-empty folder not of a subspaces run.")

    def loop_config(self, **changes: Any) -> FitConfig:
        """What the loop takes of this recipe (its :class:`FitConfig` fields), with ``changes``."""
        return FitConfig(**{f.name: getattr(self, f.name) for f in fields(FitConfig)} | changes)


@dataclass
class EncoderTrainConfig(FitConfig):
    """:class:`FitConfig` plus what a sentence-encoder recipe adds. A recipe's own fields (those of a subclass) are
    recorded as the run's settings in ``trainer_state.json``."""

    batch_size: int = setting(64, "Rows per step, per process.")
    max_length: int = setting(32, "Tokens per text in training (the saved model keeps the base's length).")
    drop_last: bool = setting(True, "Drop the ragged last batch of an epoch.")
    trainable_layers: int | str | None = setting(
        None, "Train only the top N transformer layers over cached activations (None/'all': all)."
    )
    cache_dir: str | None = setting(None, "Partial fine-tuning: keep the cached activations in this folder.")
    state_dropout: float = setting(0.0, "Partial fine-tuning: dropout on the cached bottom states in training.")


# What each SimCSE mode sets unless a run does: the paper's (Gao et al., 2021, Appendix A).
SIMCSE_MODE_DEFAULTS: dict[str, dict[str, int | float]] = {
    "unsup": {"batch_size": 64, "lr": 3e-5, "epochs": 1},
    "sup": {"batch_size": 512, "lr": 5e-5, "epochs": 3},
}


@dataclass
class SimCSEConfig(EncoderTrainConfig, InfoNCESettings):
    """The ``simcse train`` recipe; :meth:`for_mode` gives a mode its own defaults."""

    mode: Mode = setting("unsup", "unsup: dropout views; sup: NLI triplets with hard negatives.")
    stsb_dev: bool = setting(True, "Evaluate on STS-B dev and keep the best model.")
    stsb_variant: Literal["original", "senteval"] = setting("original", "Which STS-B dev split scores the run.")

    @classmethod
    def for_mode(cls, mode: Mode = "unsup", **settings: Any) -> SimCSEConfig:
        """The recipe for ``mode``: what ``settings`` leaves out takes the mode's defaults (SIMCSE_MODE_DEFAULTS)."""
        return cls(mode=mode, **{**SIMCSE_MODE_DEFAULTS[mode], **settings})


@dataclass
class MatryoshkaConfig(EncoderTrainConfig, InfoNCESettings, MICSettings):
    """The ``matryoshka train`` recipe: the loop's settings, InfoNCE's, MIC's (used with ``mic``) and these."""

    dims: Sequence[int | None] = setting((16, 32, 64, 128, None), "Nested prefix sizes (None: the model's full size).")
    weights: Sequence[float] | None = setting(None, "One MRL weight per dim (default 1 each).")
    mic: bool = setting(False, "Add MIC's regularisers (SCR + SIR) and distillation to MRL.")
    stsb_dev: bool = setting(True, "Evaluate STS-B dev at every dim; keep the best mean.")
    stsb_dev_limit: int | None = setting(None, "Score only the first N STS-B dev pairs.")
