"""The KGC recipe, :class:`KGCTrainConfig` (every setting of ``kgc train``, declared once with its help; the CLI
derives its options and defaults from it, and no torch is imported here), and named configurations of released
code: each setting with the file and flag it comes from.

``hypercl-wn18rr`` is Hyper-CL's released WN18RR run (``sim-kgc/scripts/train_wn.sh``) for the tri-encoder; with
``arch="bi"``, the settings a bi-encoder shares with it plus SimKGC's self-negatives. A caller's explicit value wins
over a recipe's: ``train_pipeline(output=..., **recipe_settings("hypercl-wn18rr", "tri"), recipe="hypercl-wn18rr")``.
"""

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
    (:class:`~subspaces.train.recipes.FitConfig`; SimKGC's defaults where they apply to CPU: weight
    decay 1e-4, clipping at 10, warm-up as a step count, capped at a tenth of the run)."""

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


HYPERCL = "HYU-NLP/Hyper-CL sim-kgc/"
SIMKGC = "intfloat/SimKGC "


@dataclass(frozen=True)
class Setting:
    option: str  # a KGCTrainConfig field
    value: Any
    source: str  # where the released code sets it
    archs: tuple[str, ...] = ("bi", "tri")


HYPERCL_WN18RR: tuple[Setting, ...] = (
    Setting("head", "hypernet", HYPERCL + "scripts/train_wn.sh --triencoder_head hypernet", ("tri",)),
    Setting(
        "rank",
        None,
        HYPERCL + "scripts/train_wn.sh --hypernet_scaler 1 (models_tri_encoder.py TriMLP: one Linear(d, d*d))",
        ("tri",),
    ),
    Setting(
        "head_dropout",
        0.1,
        HYPERCL + "models_tri_encoder.py: Dropout(hidden_dropout_prob=0.1) before condition_transform, "
        "TriMLP(dropout_rate=0.1) before the hypernetworks, before concat_transform",
        ("tri",),
    ),
    Setting(
        "head_init",
        "torch",
        HYPERCL + "models_tri_encoder.py: plain nn.Linear layers (post_init leaves them; no identity start)",
        ("tri",),
    ),
    Setting(
        "head_activation",
        "gelu",
        HYPERCL + "models_tri_encoder.py: concat_transform ends in ACT2FN[hidden_act] (gelu for BERT)",
        ("tri",),
    ),
    Setting(
        "normalize_queries",
        False,
        HYPERCL + "models_tri_encoder.py compute_logits: hr_vector.mm(tail_vector.t()), hr not normalised "
        "(Pooler normalises the encoder outputs only); evaluate.py scores it the same way",
        ("tri",),
    ),
    Setting(
        "self_negatives",
        False,
        HYPERCL + "scripts/train_wn.sh does not pass --use-self-negative (config.py: default False)",
        ("tri",),
    ),
    Setting("self_negatives", True, SIMKGC + "scripts/train_wn.sh --use-self-negative", ("bi",)),
    Setting(
        "neighbour_names",
        True,
        HYPERCL + "scripts/train_wn.sh --use-link-graph (doc.py Example.vectorize: descriptions < 20 words)",
    ),
    Setting(
        "per_example_texts",
        True,
        HYPERCL + "doc.py get_neighbor_desc: in training the other end of the triple is left out",
    ),
    Setting("batch_size", 512, HYPERCL + "scripts/train_wn.sh --batch-size 512"),
    Setting(
        "encoder_lr",
        5e-5,
        HYPERCL + "scripts/train_wn.sh --lr 5e-5; trainer.py: one AdamW over every parameter (no head rate)",
    ),
    Setting("head_lr", None, HYPERCL + "trainer.py: one AdamW param group, one learning rate", ("tri",)),
    Setting("margin", 0.02, HYPERCL + "scripts/train_wn.sh --additive-margin 0.02"),
    Setting("temperature", 0.05, HYPERCL + "config.py --t 0.05 with --finetune-t (learnable)"),
    Setting("pre_batch", 0, HYPERCL + "scripts/train_wn.sh --pre-batch 0"),
    Setting("max_length", 50, HYPERCL + "config.py --max-num-tokens 50"),
    Setting("warmup_steps", 400, HYPERCL + "config.py --warmup 400 (trainer.py caps it at a tenth of the run)"),
    Setting(
        "rerank_n_hop", 5, HYPERCL + "scripts/eval.sh: rerank_n_hop=5 for WN18RR (reported beside the plain ranking)"
    ),
    Setting("neighbour_weight", 0.05, HYPERCL + "scripts/eval.sh: neighbor_weight=0.05"),
)

RECIPES: dict[str, tuple[Setting, ...]] = {"hypercl-wn18rr": HYPERCL_WN18RR}


def recipe(name: str) -> tuple[Setting, ...]:
    if name not in RECIPES:
        raise SubspacesError(f"unknown recipe {name!r}; choose one of {', '.join(RECIPES)}")
    return RECIPES[name]


def recipe_settings(name: str, arch: str) -> dict[str, Any]:
    """The recipe's :class:`~subspaces.kgc.train.KGCTrainConfig` settings for ``arch`` (a frozen encoder ignores
    ``encoder_lr``: its head keeps the frozen default, 1e-3, as the released run never freezes the encoder)."""
    return {s.option: s.value for s in recipe(name) if arch in s.archs}
