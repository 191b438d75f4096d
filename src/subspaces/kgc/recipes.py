"""Named training configurations: each setting with the file and flag of the released code it comes from.

``hypercl-wn18rr`` is Hyper-CL's released WN18RR run (HYU-NLP/Hyper-CL, ``sim-kgc/scripts/train_wn.sh`` and the
files it runs), for the tri-encoder; with ``arch="bi"`` the settings a bi-encoder shares with it, plus SimKGC's own
self-negatives (intfloat/SimKGC ``scripts/train_wn.sh``), so the two train at equal batches.

    settings = recipe_settings("hypercl-wn18rr", "tri")       # {"rank": None, "batch_size": 512, ...}
    train_pipeline(output=..., **settings, recipe="hypercl-wn18rr")

Settings are fields of :class:`subspaces.kgc.train.KGCTrainConfig`; a caller's explicit value wins over a
recipe's (the CLI applies a recipe to the options left at their defaults).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from subspaces.errors import SubspacesError

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
        "neighbour_order",
        "id",
        HYPERCL + "triplet.py LinkGraph.get_neighbor_ids: sorted(ids)[:10]",
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
