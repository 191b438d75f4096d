"""SimCSE's poolers as one sentence-transformers module.

Names follow SimCSE (``simcse/models.py``): ``cls`` (the last layer's [CLS] and a Linear + Tanh MLP, which
unsupervised SimCSE uses only in training, ``mlp_only_train``), ``cls_before_pooler`` (the [CLS] as is), ``mean``
(SimCSE's ``avg``; loaded as sentence-transformers' own ``Pooling``), ``avg_first_last`` (the mean over tokens of the
first transformer layer's and the last layer's outputs) and ``avg_top2`` (of the last two layers').
"""

from __future__ import annotations

from typing import Any

import torch
from sentence_transformers.base.modules.module import Module
from torch import nn

from subspaces.models import LAYER_POOLERS, POOLERS


def masked_mean(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Mean over the sequence axis of ``hidden`` (B, T, H), counting only positions where the mask is 1."""
    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)


def pool(
    name: str,
    last_hidden: torch.Tensor,
    attention_mask: torch.Tensor,
    hidden_states: tuple[torch.Tensor, ...] | list[torch.Tensor] | None = None,
) -> torch.Tensor:
    """Pool token states into one vector per sequence; the MLP of ``cls`` is applied by :class:`SimCSEPooling`."""
    if name in ("cls", "cls_before_pooler"):
        return last_hidden[:, 0]
    if name == "mean":
        return masked_mean(last_hidden, attention_mask)
    if name in LAYER_POOLERS:
        if hidden_states is None or len(hidden_states) < 3:
            raise ValueError(f"pooler {name!r} needs the hidden states of every layer (output_hidden_states=True)")
        other = (
            hidden_states[1] if name == "avg_first_last" else hidden_states[-2]
        )  # the first layer's, or the one below
        return masked_mean((other + hidden_states[-1]) / 2.0, attention_mask)
    raise ValueError(f"unknown pooler {name!r}; choose one of {', '.join(POOLERS)}")


class SimCSEPooling(Module):
    """A sentence-transformers module that pools token states the SimCSE way (see the module docstring)."""

    config_keys = ["pooler", "hidden_size", "mlp_only_train"]

    def __init__(self, hidden_size: int, pooler: str = "cls", mlp_only_train: bool = False) -> None:
        super().__init__()
        if pooler not in POOLERS:
            raise ValueError(f"unknown pooler {pooler!r}; choose one of {', '.join(POOLERS)}")
        self.pooler = pooler
        self.hidden_size = hidden_size
        self.mlp_only_train = mlp_only_train
        self.mlp = nn.Sequential(nn.Linear(hidden_size, hidden_size), nn.Tanh()) if pooler == "cls" else None

    def forward(self, features: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        pooled = pool(
            self.pooler,
            features["token_embeddings"],
            features["attention_mask"],
            features.get("all_layer_embeddings"),
        )
        if self.mlp is not None and (self.training or not self.mlp_only_train):
            pooled = self.mlp(pooled)
        features["sentence_embedding"] = pooled
        return features

    def get_embedding_dimension(self) -> int:
        return self.hidden_size

    def save(self, output_path: str, *args: Any, safe_serialization: bool = True, **kwargs: Any) -> None:
        self.save_config(output_path)
        self.save_torch_weights(output_path, safe_serialization=safe_serialization)

    @classmethod
    def load(cls, model_name_or_path: str, subfolder: str = "", **kwargs: Any) -> SimCSEPooling:
        hub = {k: kwargs[k] for k in ("token", "cache_folder", "revision", "local_files_only") if k in kwargs}
        config = cls.load_config(model_name_or_path, subfolder=subfolder, **hub)
        module = cls(**config)
        if module.mlp is not None:
            cls.load_torch_weights(model_name_or_path, subfolder=subfolder, model=module, **hub)
        return module
