"""The KGC recipe, :class:`KGCTrainConfig` (every setting of ``kgc train`` with its help; the CLI derives its
options from it; no torch here), and named configurations of released code (:data:`RECIPES`), which a caller's
explicit values override."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from subspaces.errors import SubspacesError
from subspaces.losses.settings import SimKGCSettings
from subspaces.settings import setting
from subspaces.train.recipes import FitConfig

Ties = Literal["realistic", "optimistic", "pessimistic"]  # how tied scores rank in evaluation (kgc.ranking)


@dataclass
class KGCTrainConfig(SimKGCSettings, FitConfig):
    """A KGC run: the loop's settings, SimKGC's objective (:class:`SimKGCSettings`), the model to build, the entity
    texts and the evaluation (SimKGC's defaults where they apply to CPU; warm-up capped at a tenth of the run)."""

    arch: Literal["bi", "tri"] = setting("tri", "bi (SimKGC) or tri (Hyper-CL tri-encoder).")
    head: Literal["hypernet", "concat", "hadamard"] = setting("hypernet", "Tri-encoder head.")
    rank: int | str | None = setting("auto", "Hypernet rank K, 'auto' (d/12, as Hyper-CL: 32 for d = 384) or 'full'.")
    freeze_encoder: bool = setting(
        False, "Train only the tri-encoder's head on cached embeddings.", "--freeze-encoder/--fine-tune"
    )
    shared_encoder: bool = setting(
        True,
        "Bi-encoder: one encoder for queries and tails, or two (as SimKGC).",
        "--shared-encoder/--separate-encoders",
    )
    max_length: int = setting(50, "Tokens per text (SimKGC: 50).")
    head_dropout: float = setting(0.0, "Tri-encoder: dropout before the head's layers.")
    head_init: Literal["scaled", "torch"] = setting(
        "scaled", "Tri-encoder head init: scaled (identity transform) or torch."
    )
    head_activation: str = setting("relu", "Tri-encoder concat head's activation.")
    batch_size: int = setting(1024, "Batch size (in-batch negatives).")
    encoder_lr: float = setting(5e-5, "Learning rate of the encoder(s) when fine-tuning (and of the temperature).")
    head_lr: float | None = setting(
        None, "Learning rate of the tri-encoder's head (default: 1e-3 frozen, the encoder's when fine-tuning)."
    )
    # derived: the loop's base rate, that of all but a separately-rated head (the name saved folders record it by)
    lr: float = field(init=False, repr=False)
    warmup_steps: int | None = setting(400, "Warm-up steps (at most a tenth of the run).")
    weight_decay: float = setting(1e-4, "AdamW weight decay (matrices only).")
    max_grad_norm: float | None = setting(10.0, "Gradient clipping norm.")
    save_steps: int | None = setting(50, "Checkpoint cadence in steps (with output_dir).")
    neighbour_names: bool | None = setting(
        None,
        "Append neighbour names to short descriptions (default: on for FB15k-237).",
        "--neighbour-names/--no-neighbour-names",
    )
    per_example_texts: bool | None = setting(
        None,
        "Training texts leave each triple's other end out of the neighbour names (SimKGC; default: bi).",
        "--per-example-texts/--per-entity-texts",
    )
    disk_cache: str | Path | bool | None = setting(
        None, "The embedding store's disk shards (None: the default folder; False: none)."
    )
    evaluate_split: str | None = setting("test", "Split to evaluate after training.")
    select_on: str | None = setting(None, "Evaluate each epoch on this split and keep the state best by MRR there.")
    track_on: str | None = setting(None, "Evaluate each epoch on this split (the history) but keep the last state.")
    rerank_n_hop: int = setting(0, "Evaluation: also report SimKGC's n-hop re-ranking.")
    neighbour_weight: float = setting(0.05, "Re-ranking: bonus of an entity within n hops.")
    trainable_layers: int | str | None = setting(
        None, "Fine-tuning: only the encoders' top N layers (None/'all': all)."
    )
    cache_dir: str | Path | None = setting(
        None, "Where partial fine-tuning keeps the bottom activations (None: memory)."
    )
    recipe: str | None = setting(None, "The named configuration applied (metadata only).")
    description: str = "train kgc"

    def __post_init__(self) -> None:
        self.lr = self.rates(self.freeze_encoder)[0]

    def rates(self, frozen: bool) -> tuple[float, float | None]:
        """The rate of every trained parameter but the head's, and the head's own (None: the same)."""
        if frozen:
            return (1e-3 if self.head_lr is None else self.head_lr), None
        return self.encoder_lr, self.head_lr


# Named configurations of released code, by architecture ("both": every architecture). ``hypercl-wn18rr`` is
# Hyper-CL's released WN18RR run (HYU-NLP/Hyper-CL, sim-kgc/scripts/train_wn.sh and the files it runs) for the
# tri-encoder; a bi-encoder takes what it shares with it, plus SimKGC's self-negatives (intfloat/SimKGC
# scripts/train_wn.sh --use-self-negative). Where each value comes from: docs/kgc.md's recipe table.
RECIPES: dict[str, dict[str, dict[str, Any]]] = {
    "hypercl-wn18rr": {
        "both": {
            "neighbour_names": True,
            "per_example_texts": True,
            "batch_size": 512,
            "encoder_lr": 5e-5,
            "margin": 0.02,
            "temperature": 0.05,
            "pre_batch": 0,
            "max_length": 50,
            "warmup_steps": 400,
            "rerank_n_hop": 5,
            "neighbour_weight": 0.05,
        },
        "tri": {
            "head": "hypernet",
            "rank": None,  # --hypernet_scaler 1: one Linear(d, d*d), a d x d matrix per relation
            "head_dropout": 0.1,
            "head_init": "torch",
            "head_activation": "gelu",
            "normalize_queries": False,
            "self_negatives": False,
            "head_lr": None,  # one AdamW param group, one learning rate
        },
        "bi": {"self_negatives": True},
    }
}


def recipe_settings(name: str, arch: str) -> dict[str, Any]:
    """The recipe's :class:`KGCTrainConfig` settings for ``arch`` (a frozen encoder ignores ``encoder_lr``: its
    head keeps the frozen default, 1e-3, as the released run never freezes the encoder)."""
    if name not in RECIPES:
        raise SubspacesError(f"unknown recipe {name!r}; choose one of {', '.join(RECIPES)}")
    return {**RECIPES[name]["both"], **RECIPES[name].get(arch, {})}
