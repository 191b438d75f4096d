"""MIC: Matryoshka training plus self-distillation and two geometric regularisers on the nested prefixes.

``L_MIC = L_MRL + γ · L_align + β · L_distill``; ``L_align`` averages ``L_SCR + λ_sir · L_SIR`` over the (layer,
prefix) pairs of ``layer_prefix_mapping`` (``all``: every layer with every dim; ``paired``: i-th shallowest layer with
i-th smallest dim). SCR decorrelates prefix and residual token states with a per-dimension std floor; SIR evens the
pooled prefix's per-dimension variances and adds uniformity; distillation teaches each prefix the full embedding's
in-batch similarities. Formulas and defaults (:class:`MICSettings`): docs/matryoshka.md.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import fields
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from subspaces.errors import DimensionError
from subspaces.losses.settings import MAPPINGS, MICSettings
from subspaces.models.pooling import masked_mean
from subspaces.settings import chosen


def token_statistics(hidden: Tensor, attention_mask: Tensor, eps: float = 1e-6) -> tuple[Tensor, Tensor]:
    """R (H × H): products of ``hidden`` (B, T, H) standardised within each sequence, averaged over the real tokens;
    and std (B, H): each sequence's std of the raw states (sqrt(var + eps))."""
    mask = attention_mask.to(hidden.dtype).unsqueeze(-1)  # (B, T, 1)
    count = mask.sum(1).clamp(min=1.0)  # (B, 1)
    mean = (hidden * mask).sum(1) / count
    centred = (hidden - mean.unsqueeze(1)) * mask
    std = torch.sqrt(centred.pow(2).sum(1) / count + eps)  # (B, H)
    z = centred / std.unsqueeze(1)  # padding rows stay 0
    flat = z.reshape(-1, z.shape[-1])
    return flat.T @ flat / mask.sum().clamp(min=1.0), std


def dimension_spread(std: Tensor, relative: bool = True) -> Tensor:
    """s (H,): each dimension's per-sequence std averaged over sequences; ``relative``: over its mean (detached)."""
    spread = std.mean(0)
    return spread / spread.mean().detach() if relative else spread


def scr_terms(
    correlation: Tensor, spread: Tensor, dim: int, tau_corr: float = 0.0, var_floor: float = 0.5
) -> tuple[Tensor, Tensor]:
    """(L_corr, L_var) for prefix size ``dim`` from :func:`token_statistics` and :func:`dimension_spread`."""
    hidden_size = correlation.shape[-1]
    if not 0 < dim < hidden_size:
        raise DimensionError(f"SCR needs 0 < dim < hidden size {hidden_size}, got {dim}")
    l_corr = F.relu(correlation[:dim, dim:].abs() - tau_corr).pow(2).mean()
    hinge = F.relu(var_floor - spread)
    l_var = 0.5 * (hinge[:dim].mean() + hinge[dim:].mean())
    return l_corr, l_var


def soft_collapse_regularization(
    hidden: Tensor,
    attention_mask: Tensor,
    dim: int,
    *,
    tau_corr: float = 0.0,
    lambda_corr: float = 100.0,
    lambda_var: float = 25.0,
    var_floor: float = 0.5,
    relative_floor: bool = True,
    eps: float = 1e-6,
) -> Tensor:
    """SCR between the first ``dim`` dims and the rest of token states ``hidden`` (B, T, H); see the module doc."""
    correlation, std = token_statistics(hidden, attention_mask, eps)
    l_corr, l_var = scr_terms(correlation, dimension_spread(std, relative_floor), dim, tau_corr, var_floor)
    return lambda_corr * l_corr + lambda_var * l_var


def sir_terms(prefix: Tensor, *, t: float = 2.0, eps: float = 1e-6) -> tuple[Tensor, Tensor]:
    """(L_cv, L_unif) of pooled prefixes ``prefix`` (B, d); see the module doc."""
    if prefix.ndim != 2 or prefix.shape[0] < 2:
        raise DimensionError(f"SIR needs a (batch >= 2, d) matrix, got shape {tuple(prefix.shape)}")
    variances = prefix.var(dim=0, unbiased=False)
    l_cv = variances.std(unbiased=False) / (variances.mean() + eps)
    unit = F.normalize(prefix, dim=-1)
    cos = unit @ unit.T
    off_diagonal = ~torch.eye(len(prefix), dtype=torch.bool, device=prefix.device)
    l_unif = torch.log(torch.exp(-2 * t * (1 - cos[off_diagonal])).mean() + eps)
    return l_cv, l_unif


def spectral_isotropy_regularization(prefix: Tensor, *, t: float = 2.0, eps: float = 1e-6) -> Tensor:
    """SIR of pooled prefixes ``prefix`` (B, d): ½ (variance CV + RBF uniformity); see the module doc."""
    l_cv, l_unif = sir_terms(prefix, t=t, eps=eps)
    return 0.5 * (l_cv + l_unif)


def _similarity_rows(embeddings: Tensor, temperature: float) -> Tensor:
    """Log-softmax over each row of the cosine-similarity matrix / temperature, the diagonal left out: (B, B − 1)."""
    unit = F.normalize(embeddings, dim=-1)
    n = len(unit)
    off_diagonal = ~torch.eye(n, dtype=torch.bool, device=unit.device)
    logits = (unit @ unit.T)[off_diagonal].view(n, n - 1) / temperature
    return F.log_softmax(logits, dim=-1)


def self_distillation(embeddings: Tensor, dim: int, *, temperature: float = 0.05) -> Tensor:
    """KL(teacher ‖ student) per similarity row, averaged: the full ``embeddings`` (B, D), detached, teach their
    first ``dim`` coordinates."""
    if embeddings.ndim != 2 or embeddings.shape[0] < 2:
        raise DimensionError(f"self-distillation needs a (batch >= 2, D) matrix, got shape {tuple(embeddings.shape)}")
    if not 0 < dim <= embeddings.shape[1]:
        raise DimensionError(f"self-distillation needs 0 < dim <= {embeddings.shape[1]}, got {dim}")
    teacher = _similarity_rows(embeddings.detach(), temperature)
    student = _similarity_rows(embeddings[:, :dim], temperature)
    return F.kl_div(student, teacher, log_target=True, reduction="batchmean")


def paired_layers(num_layers: int, count: int) -> list[int]:
    """``count`` layers spread up to the last, shallowest first (1-based; a layer repeats when count > layers)."""
    return [math.ceil(num_layers * (i + 1) / count) for i in range(count)]


class MICLoss(nn.Module):
    """MRL + γ · L_align + β · L_distill around the MRL ``loss``, for a ``model`` whose first module is a transformer.

    ``dims`` to regularise and the distilled prefixes default to ``loss.matryoshka_dims`` below the hidden and the
    embedding size. ``settings`` (a :class:`MICSettings`, or a recipe extending it) with ``changes`` to single fields.
    After each forward ``last_terms`` holds every term's size (unweighted means over passes, layers and dims).
    """

    def __init__(
        self,
        model: nn.Module,
        loss: nn.Module,
        dims: Sequence[int] | None = None,
        *,
        settings: MICSettings | None = None,
        **changes: Any,
    ) -> None:
        super().__init__()
        mic = chosen(MICSettings, settings, changes)
        self.model = model
        self.loss = loss
        config = self._transformer().model.config
        hidden_size = int(config.hidden_size)
        num_layers = int(config.num_hidden_layers)
        mrl_dims = [int(d) for d in getattr(loss, "matryoshka_dims", ())]
        if dims is None:
            dims = [d for d in mrl_dims if d < hidden_size]
        self.dims = sorted({int(d) for d in dims})
        if not self.dims:
            raise DimensionError(f"MIC needs at least one prefix size below the hidden size {hidden_size}")
        if any(not 0 < d < hidden_size for d in self.dims):
            raise DimensionError(f"MIC dims {self.dims} must lie in 1..{hidden_size - 1}")
        mapping = mic.layer_prefix_mapping
        if mapping not in MAPPINGS:
            raise ValueError(f"layer_prefix_mapping must be one of {MAPPINGS}, got {mapping!r}")
        if mic.layers is not None:
            layers = [self._layer_index(layer, num_layers) for layer in mic.layers]
        elif mapping == "paired":
            layers = paired_layers(num_layers, len(self.dims))
        else:
            layers = [(num_layers + 1) // 2, num_layers]
        if mapping == "paired":
            if len(layers) != len(self.dims):
                raise DimensionError(
                    f"the paired mapping needs one layer per dim: {len(layers)} layer(s) for dims {self.dims}"
                )
            self.layers = sorted(layers)
            self.pairs = list(zip(self.layers, self.dims, strict=True))
        else:
            self.layers = sorted(set(layers))
            self.pairs = [(layer, d) for layer in self.layers for d in self.dims]
        get_size = getattr(model, "get_embedding_dimension", None)
        embedding_size = int(get_size()) if callable(get_size) else None
        self.distill_dims = sorted({d for d in mrl_dims if embedding_size is None or d < embedding_size})
        weights = ("gamma", "tau_corr", "lambda_var", "lambda_corr", "var_floor", "lambda_sir", "lambda_distill")
        negative = [name for name in weights if getattr(mic, name) < 0]
        if negative or mic.t <= 0 or mic.distill_temperature <= 0:
            raise ValueError(f"MIC weights must be >= 0 (got {negative}) and t, distill_temperature > 0")
        self.mic, self.eps = mic, 1e-6  # the numerical floor in stds and logs
        self.last_terms: dict[str, float] = {}

    def _transformer(self) -> Any:
        first = self.model[0]
        if not hasattr(first, "model") or not hasattr(first.model, "config"):
            raise DimensionError(f"MIC needs a transformer as the model's first module, got {type(first).__name__}")
        return first

    @staticmethod
    def _layer_index(layer: int, num_layers: int) -> int:
        index = layer + num_layers + 1 if layer < 0 else layer  # hidden_states[0] is the embedding layer
        if not 1 <= index <= num_layers:
            raise DimensionError(f"layer {layer} is outside 1..{num_layers} (or -{num_layers}..-1)")
        return index

    def alignment_terms(self, passes: Iterable[tuple[Sequence[Tensor], Tensor]]) -> dict[str, Tensor]:
        """Means of L_corr, L_var, L_cv and L_unif over passes x (layer, dim) pairs; ``passes`` = (states, mask)."""
        terms: dict[str, list[Tensor]] = {"scr_corr": [], "scr_var": [], "sir_cv": [], "sir_unif": []}
        for hidden_states, mask in passes:
            for layer in self.layers:
                layer_dims = [d for pair_layer, d in self.pairs if pair_layer == layer]
                hidden = hidden_states[layer]
                if hidden is None:  # partial fine-tuning runs only the top layers (subspaces.models.partial)
                    raise DimensionError(f"layer {layer} is frozen under partial fine-tuning: MIC needs trained layers")
                correlation, std = token_statistics(hidden, mask, self.eps)
                spread = dimension_spread(std, self.mic.relative_floor)
                pooled = masked_mean(hidden, mask)
                for d in layer_dims:
                    l_corr, l_var = scr_terms(correlation, spread, d, self.mic.tau_corr, self.mic.var_floor)
                    l_cv, l_unif = sir_terms(pooled[:, :d], t=self.mic.t, eps=self.eps)
                    for name, value in zip(terms, (l_corr, l_var, l_cv, l_unif), strict=True):
                        terms[name].append(value)
        return {name: torch.stack(values).mean() for name, values in terms.items()}

    def distillation(self, embeddings: Sequence[Tensor]) -> Tensor:
        """Mean self-distillation over passes x student dims (0 without student dims or with a batch of one)."""
        values = [
            self_distillation(e, d, temperature=self.mic.distill_temperature)
            for e in embeddings
            if len(e) > 1
            for d in self.distill_dims
            if d < e.shape[1]
        ]
        return torch.stack(values).mean() if values else embeddings[0].new_zeros(())

    def forward(self, sentence_features: Iterable[dict[str, Tensor]], labels: Tensor | None = None) -> Tensor:
        transformer = self._transformer()
        passes: list[tuple[Sequence[Tensor], Tensor]] = []
        embeddings: list[Tensor] = []

        def capture_states(module: nn.Module, args: Any, output: dict[str, Any]) -> None:
            passes.append((output["all_layer_embeddings"], output["attention_mask"]))

        def capture_embedding(module: nn.Module, args: Any, output: dict[str, Any]) -> None:
            # The full-size tensor, read before MatryoshkaLoss's cache replaces the dict entry with its prefixes.
            if "sentence_embedding" in output:
                embeddings.append(output["sentence_embedding"])

        config = transformer.model.config
        previous = config.output_hidden_states
        config.output_hidden_states = True  # only while this loss runs: the saved config is left as it was
        handles = [transformer.register_forward_hook(capture_states)]
        if self.mic.lambda_distill > 0:
            last = list(self.model.children())[-1]  # the module that writes the final sentence embedding
            handles.append(last.register_forward_hook(capture_embedding))
        try:
            main = self.loss(sentence_features, labels)
        finally:
            for handle in handles:
                handle.remove()
            config.output_hidden_states = previous
        if not passes:
            raise RuntimeError("MICLoss saw no transformer forward pass inside the wrapped loss")
        terms = self.alignment_terms(passes)
        mic = self.mic
        scr = mic.lambda_corr * terms["scr_corr"] + mic.lambda_var * terms["scr_var"]
        sir = 0.5 * (terms["sir_cv"] + terms["sir_unif"])
        distill = self.distillation(embeddings) if embeddings else main.new_zeros(())
        total = main + mic.gamma * (scr + mic.lambda_sir * sir) + mic.lambda_distill * distill
        values = {"mrl": main, **terms, "scr": scr, "sir": sir, "distill": distill, "total": total}
        self.last_terms = {name: float(value.detach()) for name, value in values.items()}
        return total

    @property
    def citation(self) -> str:
        return (
            "MIC: Maximizing Informational Capacity in Adaptive Representations via Isotropic Subspace Alignment. "
            "ICML 2026, arXiv:2605.29987."
        )

    def get_config_dict(self) -> dict[str, Any]:
        own = {f.name: getattr(self.mic, f.name) for f in fields(MICSettings) if not f.name.startswith("layer")}
        return {
            "loss": type(self.loss).__name__,
            "dims": self.dims,
            "layers": self.layers,
            "layer_prefix_mapping": self.mic.layer_prefix_mapping,
            **own,
            "distill_dims": self.distill_dims,
        }
