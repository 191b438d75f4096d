"""The KGC recipe, :class:`KGCTrainConfig` (every setting of ``kgc train`` with its help; the CLI derives its
options from it; no torch here), and named configurations of released code (:data:`RECIPES`), which a caller's
explicit values override."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from subspaces.errors import SubspacesError
from subspaces.train.recipes import FitConfig

Ties = Literal["realistic", "optimistic", "pessimistic"]  # how tied scores rank in evaluation (kgc.ranking)


@dataclass
class KGCTrainConfig(FitConfig):
    """A KGC run: the model to build, SimKGC's objective, the entity texts, the evaluation, and the loop's settings
    (SimKGC's defaults where they apply to CPU; warm-up capped at a tenth of the run)."""

    arch: Literal["bi", "tri"] = field(default="tri", metadata={"help": "bi (SimKGC) or tri (Hyper-CL tri-encoder)."})
    head: Literal["hypernet", "concat", "hadamard"] = field(default="hypernet", metadata={"help": "Tri-encoder head."})
    rank: int | str | None = field(
        default="auto", metadata={"help": "Hypernet rank K, 'auto' (d/12, as Hyper-CL: 32 for d = 384) or 'full'."}
    )
    freeze_encoder: bool = field(
        default=False,
        metadata={
            "help": "Train only the tri-encoder's head on cached embeddings.",
            "flags": ("--freeze-encoder/--fine-tune",),
        },
    )
    shared_encoder: bool = field(
        default=True,
        metadata={
            "help": "Bi-encoder: one encoder for queries and tails, or two (as SimKGC).",
            "flags": ("--shared-encoder/--separate-encoders",),
        },
    )
    max_length: int = field(default=50, metadata={"help": "Tokens per text (SimKGC: 50)."})
    head_dropout: float = field(default=0.0, metadata={"help": "Tri-encoder: dropout before the head's layers."})
    head_init: Literal["scaled", "torch"] = field(
        default="scaled", metadata={"help": "Tri-encoder head init: scaled (identity transform) or torch."}
    )
    head_activation: str = field(default="relu", metadata={"help": "Tri-encoder concat head's activation."})
    batch_size: int = field(default=1024, metadata={"help": "Batch size (in-batch negatives)."})
    encoder_lr: float = field(
        default=5e-5, metadata={"help": "Learning rate of the encoder(s) when fine-tuning (and of the temperature)."}
    )
    head_lr: float | None = field(
        default=None,
        metadata={
            "help": "Learning rate of the tri-encoder's head (default: 1e-3 frozen, the encoder's when fine-tuning)."
        },
    )
    # derived: the loop's base rate, that of all but a separately-rated head (the name saved folders record it by)
    lr: float = field(init=False, repr=False)
    warmup_steps: int | None = field(default=400, metadata={"help": "Warm-up steps (at most a tenth of the run)."})
    weight_decay: float = field(default=1e-4, metadata={"help": "AdamW weight decay (matrices only)."})
    max_grad_norm: float | None = field(default=10.0, metadata={"help": "Gradient clipping norm."})
    save_steps: int | None = field(default=50, metadata={"help": "Checkpoint cadence in steps (with output_dir)."})
    margin: float = field(default=0.02, metadata={"help": "Additive margin on the positive."})
    temperature: float = field(default=0.05, metadata={"help": "Initial temperature (learnable)."})
    pre_batch: int = field(
        default=0, metadata={"help": "Pre-batch queue size in batches (SimKGC: 0 on WN18RR, 2 on FB15k-237)."}
    )
    pre_batch_weight: float = field(default=0.5, metadata={"help": "Factor on the pre-batch negatives' logits."})
    self_negatives: bool = field(default=True, metadata={"help": "Count the head entity itself as a negative."})
    normalize_queries: bool = field(
        default=True, metadata={"help": "Score cos(hr, t); off: the raw projection against unit tails (Hyper-CL)."}
    )
    neighbour_names: bool | None = field(
        default=None,
        metadata={
            "help": "Append neighbour names to short descriptions (default: on for FB15k-237).",
            "flags": ("--neighbour-names/--no-neighbour-names",),
        },
    )
    per_example_texts: bool | None = field(
        default=None,
        metadata={
            "help": "Training texts leave each triple's other end out of the neighbour names (SimKGC; default: bi).",
            "flags": ("--per-example-texts/--per-entity-texts",),
        },
    )
    disk_cache: str | Path | bool | None = field(
        default=None, metadata={"help": "The embedding store's disk shards (None: the default folder; False: none)."}
    )
    evaluate_split: str | None = field(default="test", metadata={"help": "Split to evaluate after training."})
    select_on: str | None = field(
        default=None, metadata={"help": "Evaluate each epoch on this split and keep the state best by MRR there."}
    )
    track_on: str | None = field(
        default=None, metadata={"help": "Evaluate each epoch on this split (the history) but keep the last state."}
    )
    rerank_n_hop: int = field(default=0, metadata={"help": "Evaluation: also report SimKGC's n-hop re-ranking."})
    neighbour_weight: float = field(default=0.05, metadata={"help": "Re-ranking: bonus of an entity within n hops."})
    trainable_layers: int | str | None = field(
        default=None, metadata={"help": "Fine-tuning: only the encoders' top N layers (None/'all': all)."}
    )
    cache_dir: str | Path | None = field(
        default=None, metadata={"help": "Where partial fine-tuning keeps the bottom activations (None: memory)."}
    )
    recipe: str | None = field(default=None, metadata={"help": "The named configuration applied (metadata only)."})
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
