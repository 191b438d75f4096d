"""The losses' settings, declared once: the losses take their defaults here, the training recipes extend these
classes, and the CLI derives its options from them (no torch here)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from subspaces.settings import setting

LayerPrefixMapping = Literal["all", "paired"]
MAPPINGS: tuple[LayerPrefixMapping, ...] = ("all", "paired")
Objective = Literal["mse", "quadruplet", "infonce_mse"]
OBJECTIVES: tuple[Objective, ...] = ("mse", "quadruplet", "infonce_mse")


@dataclass
class InfoNCESettings:
    """The objective's settings, declared once: :class:`SimCSELoss` and the recipes on it take their defaults here."""

    temperature: float = setting(0.05, "InfoNCE temperature.")
    hard_negative_weight: float = setting(0.0, "Log-weight added to each anchor's own hard-negative logit (triplets).")


@dataclass
class MICSettings:
    """MIC's weights and choices, declared once: :class:`MICLoss` and ``matryoshka train`` take their defaults
    from here (what each multiplies: the module docstring; the defaults are our reading, reasoned there)."""

    gamma: float = setting(0.1, "MIC: weight of L_align (SCR + SIR).")
    tau_corr: float = setting(0.0, "MIC/SCR: correlations below this are free.")
    lambda_corr: float = setting(100.0, "MIC/SCR: weight of the prefix-residual decorrelation.")
    lambda_var: float = setting(25.0, "MIC/SCR: weight of the per-dimension variance floor.")
    var_floor: float = setting(0.5, "MIC/SCR: the floor under each dimension's token std.")
    relative_floor: bool = setting(
        True,
        "MIC/SCR: the floor is a fraction of the layer's mean std, or an absolute std (VICReg).",
        "--relative-floor/--absolute-floor",
    )
    lambda_sir: float = setting(1.0, "MIC: weight of SIR inside L_align.")
    t: float = setting(2.0, "MIC/SIR: uniformity temperature.")
    lambda_distill: float = setting(
        0.1, "MIC: weight of self-distillation (prefixes learn the full vector's similarities)."
    )
    distill_temperature: float = setting(0.05, "MIC: softmax temperature of self-distillation.")
    layers: Sequence[int] | None = setting(
        None,
        "MIC: transformer layers to regularise, 1-based (-1 = last). Default: middle,last (all), "
        "one per dim up to the last (paired).",
    )
    layer_prefix_mapping: LayerPrefixMapping = setting(
        "all", "MIC: all = every layer x every dim; paired = shallower layer <-> smaller dim."
    )


@dataclass
class SimKGCSettings:
    """SimKGC's objective, declared once: :class:`SimKGCLoss` and ``kgc train`` take their defaults here."""

    margin: float = setting(0.02, "Additive margin on the positive.")
    temperature: float = setting(0.05, "Initial temperature (learnable).")
    pre_batch: int = setting(0, "Pre-batch queue size in batches (SimKGC: 0 on WN18RR, 2 on FB15k-237).")
    pre_batch_weight: float = setting(0.5, "Factor on the pre-batch negatives' logits.")
    self_negatives: bool = setting(True, "Count the head entity itself as a negative.")
    normalize_queries: bool = setting(True, "Score cos(hr, t); off: the raw projection against unit tails (Hyper-CL).")


@dataclass
class ConditionalSettings:
    """The conditional objectives' settings, declared once: :class:`ConditionalLoss` and ``cond train`` take their
    defaults here."""

    objective: Objective = setting("mse", "mse; quadruplet and infonce_mse need pairs under two conditions.")
    temperature: float = setting(1.7, "τ of infonce_mse.")
    margin: float = setting(1.0, "Margin of the quadruplet loss.")
    in_batch_negatives: bool = setting(False, "infonce_mse: other pairs of the batch as negatives.")
