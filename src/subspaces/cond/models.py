"""Conditional similarity models: the Hyper-CL tri-encoder (:mod:`subspaces.models.triencoder`) and the C-STS
bi-encoder baseline, built and loaded as folders of :mod:`subspaces.models.folder`'s format.

- :class:`~subspaces.models.triencoder.TriEncoder`: sentences and conditions encoded *independently*, then a
  condition head projects each sentence under the condition; ``cos(head(s1, c), head(s2, c))``.
- :class:`BiEncoder`: each sentence is encoded *together with* the condition as a text pair ``(s, c)``; the score
  is the cosine of the two. Only identical (sentence, condition) pairs can be reused.

Both expose ``similarity(sentences1, sentences2, conditions) -> np.ndarray`` (no gradients, cached) and
``forward(sentences1, sentences2, conditions) -> (z1, z2)`` (projected embeddings, with gradients, for training).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from subspaces.cache import LRUCache
from subspaces.errors import SubspacesError
from subspaces.models.store import DEFAULT_MEMORY_BYTES, EmbeddingStore
from subspaces.models.triencoder import TriEncoder, build_tri_encoder, cache_stats, pair_similarity

ARCHS = ("tri", "bi")
DEFAULT_CACHE_BYTES = DEFAULT_MEMORY_BYTES
__all__ = ["ARCHS", "BiEncoder", "ConditionalModel", "TriEncoder", "build_model", "load_model"]


class BiEncoder(nn.Module):
    """C-STS bi-encoder: ``cos(E(s1, c), E(s2, c))`` with each sentence and the condition as one text pair."""

    arch = "bi"
    task = "cond"

    def __init__(
        self,
        encoder: Any,
        *,
        freeze_encoder: bool = True,
        encoder_name: str | None = None,
        cache_bytes: int | None = DEFAULT_CACHE_BYTES,
        encode_batch_size: int = 64,
    ) -> None:
        super().__init__()
        self.encoder = encoder
        self.freeze_encoder = freeze_encoder
        self.encoder_name = encoder_name
        self.encode_batch_size = encode_batch_size
        self.metadata: dict[str, Any] = {}
        for p in encoder.parameters():
            p.requires_grad_(not freeze_encoder)
        self.store = EmbeddingStore({"pair": encoder}, memory_bytes=cache_bytes, batch_size=encode_batch_size)

    @property
    def dim(self) -> int:
        return int(self.encoder.get_embedding_dimension())

    def caches(self) -> dict[str, LRUCache]:
        return {"sentence_condition_pairs": self.store.memory["pair"]}

    def cache_stats(self) -> dict[str, Any]:
        return cache_stats(self.caches())

    def clear_caches(self, reset_stats: bool = True) -> None:
        self.store.clear(reset_stats)

    def train(self, mode: bool = True) -> BiEncoder:
        super().train(mode)
        if self.freeze_encoder:
            self.encoder.eval()
        elif mode:
            self.store.clear(reset_stats=False)  # the encoder is about to change
        return self

    def project_pairs(
        self, s1: Sequence[str], s2: Sequence[str], c: Sequence[str]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        from subspaces.models.forward import embed_with_grad

        texts = [(s, cond) for s, cond in zip(s1, c, strict=True)] + [(s, cond) for s, cond in zip(s2, c, strict=True)]
        if self.freeze_encoder or not self.training:
            emb = self.store.embed("pair", texts)
        else:
            emb = embed_with_grad(self.encoder, texts)
        n = len(s1)
        return emb[:n], emb[n:]

    def forward(self, s1: Sequence[str], s2: Sequence[str], c: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        return self.project_pairs(s1, s2, c)

    def similarity(
        self, sentences1: Sequence[str], sentences2: Sequence[str], conditions: Sequence[str], *, batch_size: int = 256
    ) -> np.ndarray:
        return pair_similarity(self, sentences1, sentences2, conditions, batch_size=batch_size)

    def save(self, path: str | Path) -> None:
        from subspaces.models.folder import save_encoder, write_config

        folder = Path(path)
        folder.mkdir(parents=True, exist_ok=True)
        if self.freeze_encoder and self.encoder_name is not None:
            ref = self.encoder_name  # unchanged weights: a reference, not a copy
        else:
            save_encoder(self.encoder, folder / "encoder")
            ref = "encoder"
        write_config(
            folder,
            {
                "task": self.task,
                "arch": self.arch,
                "encoder": ref,
                "freeze_encoder": self.freeze_encoder,
                "max_seq_length": getattr(self.encoder, "max_seq_length", None),
                "encode_batch_size": self.encode_batch_size,
                "metadata": self.metadata,
            },
        )


ConditionalModel = TriEncoder | BiEncoder


def build_model(
    model: str,
    arch: str = "tri",
    *,
    head: str = "hypernet",
    rank: int | str | None = "auto",
    freeze_encoder: bool = True,
    condition_encoder: str | None = None,
    cache_bytes: int | None = DEFAULT_CACHE_BYTES,
    max_seq_length: int | None = None,
    seed: int = 0,
    device: str = "cpu",
) -> TriEncoder | BiEncoder:
    """A fresh conditional model on ``model`` (a bundled name or a folder); the same order as
    :func:`subspaces.kgc.models.build_model`: the encoder first, then the architecture.

    ``rank``: the hypernet's K; ``None`` is full rank; ``"auto"`` is ``round(d / 12)``. ``device``: where the
    encoder(s) and head live (a torch device name).
    """
    from subspaces.models.encoder import load_encoder
    from subspaces.models.folder import encoder_reference

    if arch not in ARCHS:
        hint = " (the encoder comes first: build_model(model, arch))" if model in ARCHS else ""
        raise SubspacesError(f"unknown architecture {arch!r}; choose one of {', '.join(ARCHS)}{hint}")
    if arch == "bi":
        if condition_encoder is not None:
            raise SubspacesError("a separate condition encoder applies to the tri-encoder only")
        return BiEncoder(
            load_encoder(model, max_seq_length=max_seq_length, device=device),
            freeze_encoder=freeze_encoder,
            encoder_name=encoder_reference(model),
            cache_bytes=cache_bytes,
        )
    return build_tri_encoder(
        model,
        head=head,
        rank=rank,
        condition_encoder=condition_encoder,
        freeze_encoder=freeze_encoder,
        max_seq_length=max_seq_length,
        task="cond",
        seed=seed,
        memory_bytes=cache_bytes,
        device=device,
    )


def load_model(
    path: str | Path, *, cache_bytes: int | None = DEFAULT_CACHE_BYTES, device: str = "cpu"
) -> TriEncoder | BiEncoder:
    """Load a folder written by ``cond train`` (either the current format or the earlier ``cond_config.json``)
    onto ``device``."""
    from subspaces.models.folder import is_saved_here, load_referenced_encoder, read_config

    folder = Path(path)
    config = read_config(folder, task="cond")
    if config["arch"] == "tri":
        return TriEncoder.load(folder, config, memory_bytes=cache_bytes, device=device)
    encoder = load_referenced_encoder(folder, config["encoder"], config.get("max_seq_length"), device)
    model = BiEncoder(
        encoder,
        freeze_encoder=bool(config.get("freeze_encoder", True)),
        encoder_name=None if is_saved_here(folder, config["encoder"]) else config["encoder"],
        cache_bytes=cache_bytes,
        encode_batch_size=int(config.get("encode_batch_size", 64)),
    )
    model.metadata = dict(config.get("metadata", {}))
    return model.eval()
