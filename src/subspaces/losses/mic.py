"""MIC: Matryoshka training with two geometric regularisers on the nested prefixes (SCR and SIR).

``L_MIC = L_MRL + γ · L_align``, where ``L_align`` averages, over the chosen transformer layers ``l``, the nested
dims ``d`` (those smaller than the hidden size) and the forward passes of the step (e.g. both dropout views)::

    L_SCR(l, d) + L_SIR(l, d)

**Soft Collapse Regularisation** (on the token states X (B, T, H) of layer l, padding excluded): every dimension
is standardised per sequence over that sequence's tokens, so the prefix block (first d dims) and the residual block
(the other H − d) are each zero-mean, unit-variance within a sequence. C (d × (H − d)) is their cross-correlation,
averaged over all real tokens of all sequences::

    L_corr = 1/(d (H − d)) Σ_uv max(0, |C_uv| − τ_corr)²
    L_var  = max(0, 1 − σ̄_pre) + ½ max(0, 1 − σ̄_res)        σ̄ = mean per-sequence std of the raw states
    L_SCR  = L_corr + λ_var · L_var

The threshold τ_corr leaves weak correlations alone; the variance floor keeps the decorrelation from being met by
shrinking dimensions to constants.

**Spectral Isotropy Regularisation** (on the mask-aware mean-pooled prefix Z (B × d) of layer l)::

    L_cv   = std(v) / (mean(v) + ε)           v = per-dimension variance of Z over the batch
    L_unif = log( mean_{i≠j} exp(−2t (1 − cos(z_i, z_j))) + ε )
    L_SIR  = ½ (L_cv + L_unif)

L_cv asks the prefix to spread its variance evenly over its d dimensions; L_unif is Wang & Isola's uniformity
(2(1 − cos) is the squared distance of unit vectors) and spreads the prefixes over the sphere.

Variances and standard deviations are population ones (divide by n). The regularisers read hidden states that the
forward pass computes anyway: :class:`MICLoss` switches ``output_hidden_states`` on only while it runs, so the
saved model has MRL's architecture, config and encode speed.

Defaults (γ = 0.1, τ_corr = 0.1, λ_var = 1, t = 2, layers = the middle and the last) are ours; t = 2 follows the
issue, the rest were set so that γ·L_align's gradient is a fraction of MRL's (see ``docs/matryoshka.md``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from subspaces.errors import DimensionError
from subspaces.models.pooling import masked_mean


def token_statistics(hidden: Tensor, attention_mask: Tensor, eps: float = 1e-6) -> tuple[Tensor, Tensor]:
    """Correlation of every dimension pair over the real tokens, and the per-sequence stds.

    Each dimension of ``hidden`` (B, T, H) is standardised within its own sequence (mean and std over that
    sequence's unmasked tokens). Returns R (H × H) = the standardised products averaged over all real tokens, and
    std (B, H) = the per-sequence std of the raw states (sqrt(var + eps)).
    """
    mask = attention_mask.to(hidden.dtype).unsqueeze(-1)  # (B, T, 1)
    count = mask.sum(1).clamp(min=1.0)  # (B, 1)
    mean = (hidden * mask).sum(1) / count
    centred = (hidden - mean.unsqueeze(1)) * mask
    std = torch.sqrt(centred.pow(2).sum(1) / count + eps)  # (B, H)
    z = centred / std.unsqueeze(1)  # padding rows stay 0
    flat = z.reshape(-1, z.shape[-1])
    return flat.T @ flat / mask.sum().clamp(min=1.0), std


def scr_from_statistics(
    correlation: Tensor, std: Tensor, dim: int, tau_corr: float = 0.1, lambda_var: float = 1.0
) -> Tensor:
    """L_SCR for prefix size ``dim`` from :func:`token_statistics` (shared by all dims of one layer)."""
    hidden_size = correlation.shape[-1]
    if not 0 < dim < hidden_size:
        raise DimensionError(f"SCR needs 0 < dim < hidden size {hidden_size}, got {dim}")
    cross = correlation[:dim, dim:]
    l_corr = F.relu(cross.abs() - tau_corr).pow(2).mean()
    l_var = F.relu(1 - std[:, :dim].mean()) + 0.5 * F.relu(1 - std[:, dim:].mean())
    return l_corr + lambda_var * l_var


def soft_collapse_regularization(
    hidden: Tensor,
    attention_mask: Tensor,
    dim: int,
    *,
    tau_corr: float = 0.1,
    lambda_var: float = 1.0,
    eps: float = 1e-6,
) -> Tensor:
    """SCR between the first ``dim`` dims and the rest of token states ``hidden`` (B, T, H); see the module doc."""
    correlation, std = token_statistics(hidden, attention_mask, eps)
    return scr_from_statistics(correlation, std, dim, tau_corr, lambda_var)


def spectral_isotropy_regularization(prefix: Tensor, *, t: float = 2.0, eps: float = 1e-6) -> Tensor:
    """SIR of pooled prefixes ``prefix`` (B, d): ½ (variance CV + RBF uniformity); see the module doc."""
    if prefix.ndim != 2 or prefix.shape[0] < 2:
        raise DimensionError(f"SIR needs a (batch >= 2, d) matrix, got shape {tuple(prefix.shape)}")
    variances = prefix.var(dim=0, unbiased=False)
    l_cv = variances.std(unbiased=False) / (variances.mean() + eps)
    unit = F.normalize(prefix, dim=-1)
    cos = unit @ unit.T
    off_diagonal = ~torch.eye(len(prefix), dtype=torch.bool, device=prefix.device)
    l_unif = torch.log(torch.exp(-2 * t * (1 - cos[off_diagonal])).mean() + eps)
    return 0.5 * (l_cv + l_unif)


class MICLoss(nn.Module):
    """MRL + γ · L_align, as a sentence-transformers loss modifier.

    Args:
        model: the ``SentenceTransformer`` being trained; its first module must be a transformer.
        loss: the MRL loss (e.g. :func:`subspaces.losses.matryoshka.matryoshka_simcse_loss`); any ST loss works.
        dims: the prefix sizes to regularise; default: ``loss.matryoshka_dims`` below the hidden size.
        layers: transformer layers whose token states are regularised, 1-based (1 = first layer, -1 = last);
            default: the middle and the last layer.
        gamma: weight of L_align.
        tau_corr: SCR's correlation threshold (|C_uv| below it is free).
        lambda_var: weight of SCR's variance floor.
        t: SIR's uniformity temperature.
        eps: numerical floor in stds and logs.
    """

    def __init__(
        self,
        model: nn.Module,
        loss: nn.Module,
        dims: Sequence[int] | None = None,
        layers: Sequence[int] | None = None,
        gamma: float = 0.1,
        tau_corr: float = 0.1,
        lambda_var: float = 1.0,
        t: float = 2.0,
        eps: float = 1e-6,
    ) -> None:
        super().__init__()
        self.model = model
        self.loss = loss
        config = self._transformer().model.config
        hidden_size = int(config.hidden_size)
        num_layers = int(config.num_hidden_layers)
        if dims is None:
            dims = [d for d in getattr(loss, "matryoshka_dims", ()) if d < hidden_size]
        self.dims = sorted({int(d) for d in dims})
        if not self.dims:
            raise DimensionError(f"MIC needs at least one prefix size below the hidden size {hidden_size}")
        if any(not 0 < d < hidden_size for d in self.dims):
            raise DimensionError(f"MIC dims {self.dims} must lie in 1..{hidden_size - 1}")
        if layers is None:
            layers = sorted({(num_layers + 1) // 2, num_layers})
        self.layers = sorted({self._layer_index(layer, num_layers) for layer in layers})
        if gamma < 0 or tau_corr < 0 or lambda_var < 0 or t <= 0:
            raise ValueError("gamma, tau_corr and lambda_var must be >= 0 and t > 0")
        self.gamma, self.tau_corr, self.lambda_var, self.t, self.eps = gamma, tau_corr, lambda_var, t, eps
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

    def alignment(self, passes: Iterable[tuple[Sequence[Tensor], Tensor]]) -> tuple[Tensor, Tensor]:
        """Mean L_SCR and mean L_SIR over forward passes x layers x dims; ``passes`` = (hidden states, mask)."""
        scr, sir = [], []
        for hidden_states, mask in passes:
            for layer in self.layers:
                hidden = hidden_states[layer]
                correlation, std = token_statistics(hidden, mask, self.eps)
                pooled = masked_mean(hidden, mask)
                for d in self.dims:
                    scr.append(scr_from_statistics(correlation, std, d, self.tau_corr, self.lambda_var))
                    sir.append(spectral_isotropy_regularization(pooled[:, :d], t=self.t, eps=self.eps))
        return torch.stack(scr).mean(), torch.stack(sir).mean()

    def forward(self, sentence_features: Iterable[dict[str, Tensor]], labels: Tensor | None = None) -> Tensor:
        transformer = self._transformer()
        passes: list[tuple[Sequence[Tensor], Tensor]] = []

        def capture(module: nn.Module, args: Any, output: dict[str, Any]) -> None:
            passes.append((output["all_layer_embeddings"], output["attention_mask"]))

        config = transformer.model.config
        previous = config.output_hidden_states
        config.output_hidden_states = True  # only while this loss runs: the saved config is left as it was
        handle = transformer.register_forward_hook(capture)
        try:
            main = self.loss(sentence_features, labels)
        finally:
            handle.remove()
            config.output_hidden_states = previous
        if not passes:
            raise RuntimeError("MICLoss saw no transformer forward pass inside the wrapped loss")
        scr, sir = self.alignment(passes)
        align = scr + sir
        self.last_terms = {"mrl": float(main.detach()), "scr": float(scr.detach()), "sir": float(sir.detach())}
        return main + self.gamma * align

    @property
    def citation(self) -> str:
        return (
            "MIC: Maximizing Informational Capacity in Adaptive Representations via Isotropic Subspace Alignment. "
            "ICML 2026, arXiv:2605.29987."
        )

    def get_config_dict(self) -> dict[str, Any]:
        return {
            "loss": type(self.loss).__name__,
            "dims": self.dims,
            "layers": self.layers,
            "gamma": self.gamma,
            "tau_corr": self.tau_corr,
            "lambda_var": self.lambda_var,
            "t": self.t,
        }
