"""The losses' settings, declared once: the losses take their defaults here, the training recipes extend these
classes, and the CLI derives its options from them (no torch here)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

LayerPrefixMapping = Literal["all", "paired"]
MAPPINGS: tuple[LayerPrefixMapping, ...] = ("all", "paired")


@dataclass
class InfoNCESettings:
    """The objective's settings, declared once: :class:`SimCSELoss` and the recipes on it take their defaults here."""

    temperature: float = field(default=0.05, metadata={"help": "InfoNCE temperature."})
    hard_negative_weight: float = field(
        default=0.0, metadata={"help": "Log-weight added to each anchor's own hard-negative logit (triplets)."}
    )


@dataclass
class MICSettings:
    """MIC's weights and choices, declared once: :class:`MICLoss` and ``matryoshka train`` take their defaults
    from here (what each multiplies: the module docstring; the defaults are our reading, reasoned there)."""

    gamma: float = field(default=0.1, metadata={"help": "MIC: weight of L_align (SCR + SIR)."})
    tau_corr: float = field(default=0.0, metadata={"help": "MIC/SCR: correlations below this are free."})
    lambda_corr: float = field(
        default=100.0, metadata={"help": "MIC/SCR: weight of the prefix-residual decorrelation."}
    )
    lambda_var: float = field(default=25.0, metadata={"help": "MIC/SCR: weight of the per-dimension variance floor."})
    var_floor: float = field(default=0.5, metadata={"help": "MIC/SCR: the floor under each dimension's token std."})
    relative_floor: bool = field(
        default=True,
        metadata={
            "help": "MIC/SCR: the floor is a fraction of the layer's mean std, or an absolute std (VICReg).",
            "flags": ("--relative-floor/--absolute-floor",),
        },
    )
    lambda_sir: float = field(default=1.0, metadata={"help": "MIC: weight of SIR inside L_align."})
    t: float = field(default=2.0, metadata={"help": "MIC/SIR: uniformity temperature."})
    lambda_distill: float = field(
        default=0.1,
        metadata={"help": "MIC: weight of self-distillation (prefixes learn the full vector's similarities)."},
    )
    distill_temperature: float = field(
        default=0.05, metadata={"help": "MIC: softmax temperature of self-distillation."}
    )
    layers: Sequence[int] | None = field(
        default=None,
        metadata={
            "help": "MIC: transformer layers to regularise, 1-based (-1 = last). Default: middle,last (all), "
            "one per dim up to the last (paired)."
        },
    )
    layer_prefix_mapping: LayerPrefixMapping = field(
        default="all",
        metadata={"help": "MIC: all = every layer x every dim; paired = shallower layer <-> smaller dim."},
    )
