"""The two KGC architectures: SimKGC's bi-encoder and Hyper-CL's tri-encoder (:mod:`subspaces.models.triencoder`).

Both turn a query ``(h, r, ?)`` into a vector and score every entity by cosine with it:

* :class:`BiEncoderKGC` (SimKGC): ``hr = enc_hr("head text", "relation")`` encoded as a text pair, tails
  ``enc_t("tail text")``; two encoders as in SimKGC or one shared. A query needs its own encoder pass, since
  the relation is inside the input.
* :class:`~subspaces.models.triencoder.TriEncoder` (Hyper-CL): one backbone encodes entities (its "sentences")
  and relation names (its "conditions") separately; the head conditions the head entity on the relation,
  ``hr = head(e_h, e_r)``. Tails are the plain entity embeddings, so a query costs no encoder pass.

:func:`embed_batch` gives ``(hr, tail, head)`` of a batch of triples for SimKGC's loss (``head`` feeds the
self-negatives). Both save as folders of :mod:`subspaces.models.folder`'s format.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from subspaces.errors import SubspacesError
from subspaces.kgc.texts import KGCTexts
from subspaces.models.store import EmbeddingStore
from subspaces.models.triencoder import TriEncoder, build_tri_encoder

ARCHS = ("bi", "tri")
KGCModel = Any  # BiEncoderKGC | TriEncoder


class BiEncoderKGC(nn.Module):
    """SimKGC: ``hr`` from the (head text, relation) pair, tails from the entity text; cosine scores."""

    arch = "bi"
    task = "kgc"

    def __init__(
        self,
        hr_encoder: Any,
        tail_encoder: Any = None,
        *,
        disk: str | Path | None | bool = False,
        show_progress: bool = False,
    ) -> None:
        super().__init__()
        self.hr_encoder = hr_encoder
        self.tail_encoder = tail_encoder if tail_encoder is not None else hr_encoder
        self.shared = tail_encoder is None or tail_encoder is hr_encoder
        self.freeze_encoder = False
        self.metadata: dict[str, Any] = {}
        self.store = EmbeddingStore(
            {"sentence": self.tail_encoder, "query": hr_encoder}, disk=disk, show_progress=show_progress
        )

    @property
    def dim(self) -> int:
        return int(self.tail_encoder.get_embedding_dimension())

    def train(self, mode: bool = True) -> BiEncoderKGC:
        super().train(mode)
        if mode:
            self.store.clear(reset_stats=False)  # the encoders are about to change
        return self

    def query_inputs(self, kg_texts: KGCTexts, triples: np.ndarray, training: bool = False) -> list[tuple[str, str]]:
        """``(head text, relation)`` pairs; ``training`` takes the head texts of :meth:`KGCTexts.training_texts`."""
        triples = np.asarray(triples)
        heads = kg_texts.training_texts(triples)[0] if training else [kg_texts.entities[h] for h in triples[:, 0]]
        return [(text, kg_texts.relations[r]) for text, r in zip(heads, triples[:, 1].tolist(), strict=True)]

    def embed_batch(self, triples: np.ndarray, kg_texts: KGCTexts) -> tuple[torch.Tensor, ...]:
        from subspaces.models.forward import embed_with_grad

        head_texts, tail_texts = kg_texts.training_texts(triples)
        relations = [kg_texts.relations[r] for r in np.asarray(triples)[:, 1].tolist()]
        hr = embed_with_grad(self.hr_encoder, list(zip(head_texts, relations, strict=True)))
        tails = embed_with_grad(self.tail_encoder, tail_texts)
        heads = embed_with_grad(self.tail_encoder, head_texts)
        return hr, tails, heads

    def save(self, folder: str | Path) -> None:
        from subspaces.models.folder import save_encoder, write_config

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        save_encoder(self.hr_encoder, folder / "hr_encoder")
        if not self.shared:
            save_encoder(self.tail_encoder, folder / "tail_encoder")
        write_config(
            folder,
            {
                "task": self.task,
                "arch": self.arch,
                "encoder": "hr_encoder",
                "tail_encoder": None if self.shared else "tail_encoder",
                "freeze_encoder": False,
                "max_seq_length": getattr(self.hr_encoder, "max_seq_length", None),
                "metadata": self.metadata,
            },
        )


def embed_batch(model: KGCModel, triples: np.ndarray, texts: KGCTexts) -> tuple[torch.Tensor, ...]:
    """``(hr, tail, head)`` vectors of a batch of ``(h, r, t)`` triples, with gradients where the model trains."""
    if isinstance(model, BiEncoderKGC):
        return model.embed_batch(triples, texts)
    triples = np.asarray(triples)
    n = len(triples)
    head_texts, tail_texts = texts.training_texts(triples)
    # One encoder pass over the batch's distinct texts (heads and tails share the backbone).
    vectors = model.embed_sentences([*head_texts, *tail_texts])
    heads, tails = vectors[:n], vectors[n:]
    return model.condition(heads, [texts.relations[r] for r in triples[:, 1].tolist()]), tails, heads


def build_model(
    model: str,
    arch: str = "tri",
    *,
    head: str = "hypernet",
    rank: int | str | None = "auto",
    freeze_encoder: bool = False,
    max_length: int | None = 50,
    shared_encoder: bool = True,
    disk_cache: str | Path | None | bool = False,
    device: str = "cpu",
    show_progress: bool = False,
    head_options: dict[str, Any] | None = None,
) -> KGCModel:
    """A fresh KGC model on ``model`` (a bundled name or a folder): encoder first, then the architecture, as
    :func:`subspaces.cond.models.build_model`. ``disk_cache``: where the model's embedding store keeps shards;
    ``head_options``: the tri-encoder head's ``dropout``, ``init`` and ``activation``."""
    from subspaces.models.encoder import load_encoder

    if arch not in ARCHS:
        hint = " (the encoder comes first: build_model(model, arch))" if model in ARCHS else ""
        raise SubspacesError(f"unknown arch {arch!r}; choose one of {', '.join(ARCHS)}{hint}")
    if arch == "bi":
        encoder = load_encoder(model, max_seq_length=max_length, device=device)
        tail = None if shared_encoder else load_encoder(model, max_seq_length=max_length, device=device)
        return BiEncoderKGC(encoder, tail, disk=disk_cache, show_progress=show_progress)
    return build_tri_encoder(
        model,
        head=head,
        rank=rank,
        freeze_encoder=freeze_encoder,
        max_seq_length=max_length,
        task="kgc",
        device=device,
        disk=disk_cache,
        show_progress=show_progress,
        head_options=head_options,
    )


def load_kgc_model(
    folder: str | Path,
    max_seq_length: int | None = None,
    *,
    disk_cache: str | Path | None | bool = False,
    device: str = "cpu",
    show_progress: bool = False,
) -> KGCModel:
    """Rebuild a model saved by ``kgc train`` (the current format or the earlier ``kgc_model.json``)."""
    from subspaces.models.folder import load_referenced_encoder, read_config

    folder = Path(folder)
    config = read_config(folder, task="kgc")
    if config["arch"] == "tri":
        return TriEncoder.load(
            folder, config, max_seq_length=max_seq_length, device=device, disk=disk_cache, show_progress=show_progress
        )
    length = max_seq_length or config.get("max_seq_length")
    hr = load_referenced_encoder(folder, config["encoder"], length, device)
    tail = (
        load_referenced_encoder(folder, config["tail_encoder"], length, device) if config.get("tail_encoder") else None
    )
    model = BiEncoderKGC(hr, tail, disk=disk_cache, show_progress=show_progress)
    model.metadata = dict(config.get("metadata", {}))
    return model.eval()
