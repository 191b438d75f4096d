"""The two KGC architectures: SimKGC's bi-encoder and Hyper-CL's tri-encoder.

Both turn a query ``(h, r, ?)`` into a vector and score every entity by cosine with it:

* :class:`BiEncoderKGC` (SimKGC): ``hr = enc_hr("head text", "relation")`` encoded as a text pair, tails
  ``enc_t("tail text")``; two encoders as in SimKGC or one shared. A query needs its own encoder pass, since
  the relation is inside the input.
* :class:`TriEncoderKGC` (Hyper-CL): one backbone encodes entities and relation names separately; a condition
  head (:mod:`subspaces.models.heads`) conditions the head entity on the relation, ``hr = head(e_h, e_r)`` --
  for ``hypernet``, ``W_r e_h`` with ``W_r`` made from ``e_r``. Tails are the plain entity embeddings, so a
  query costs no encoder pass: every entity and every relation is encoded once.

Both expose ``embed_batch(triples, texts)`` -> ``(hr, tail, head)`` for SimKGC's loss (``head`` feeds the
self-negatives), and save/load as a folder (``kgc_model.json`` + encoder folders + ``head.pt``).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from torch import nn

from subspaces.errors import ModelNotFoundError, SubspacesError
from subspaces.io import atomic_path, save_json
from subspaces.kgc.texts import KGCTexts
from subspaces.models.forward import embed_with_grad

ARCHS = ("bi", "tri")
CONFIG_NAME = "kgc_model.json"


class BiEncoderKGC(nn.Module):
    """SimKGC: ``hr`` from the (head text, relation) pair, tails from the entity text; cosine scores."""

    arch = "bi"

    def __init__(self, hr_encoder, tail_encoder=None) -> None:
        super().__init__()
        self.hr_encoder = hr_encoder
        self.tail_encoder = tail_encoder if tail_encoder is not None else hr_encoder
        self.shared = tail_encoder is None or tail_encoder is hr_encoder

    @property
    def dim(self) -> int:
        return int(self.tail_encoder.get_embedding_dimension())

    def query_inputs(self, kg_texts: KGCTexts, triples: np.ndarray, training: bool = False) -> list[tuple[str, str]]:
        return [
            (kg_texts.head_text(h, t) if training else kg_texts.entities[h], kg_texts.relations[r])
            for h, r, t in np.asarray(triples).tolist()
        ]

    def embed_batch(self, triples: np.ndarray, kg_texts: KGCTexts) -> tuple[torch.Tensor, ...]:
        hr = embed_with_grad(self.hr_encoder, self.query_inputs(kg_texts, triples, training=True))
        tails = embed_with_grad(self.tail_encoder, [kg_texts.entities[t] for t in triples[:, 2]])
        heads = embed_with_grad(self.tail_encoder, [kg_texts.entities[h] for h in triples[:, 0]])
        return hr, tails, heads

    def save(self, folder: str | Path, extra: dict | None = None) -> None:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        self.hr_encoder.save(str(folder / "hr_encoder"))
        if not self.shared:
            self.tail_encoder.save(str(folder / "tail_encoder"))
        save_json(folder / CONFIG_NAME, {"arch": self.arch, "shared": self.shared, **(extra or {})})


class TriEncoderKGC(nn.Module):
    """Hyper-CL: entities and relations encoded separately by one backbone; ``hr = head(e_h, e_r)``."""

    arch = "tri"
    max_relation_groups = 32  # above this many distinct relations in a batch, condition row by row

    def __init__(self, encoder, head: nn.Module) -> None:
        super().__init__()
        self.encoder = encoder
        self.head = head

    @property
    def dim(self) -> int:
        return int(self.encoder.get_embedding_dimension())

    def condition(self, head_vectors: torch.Tensor, relation_vectors: torch.Tensor) -> torch.Tensor:
        return self.head(head_vectors, relation_vectors)

    def condition_by_relation(self, head_vectors: torch.Tensor, relation_ids, relation_vectors: torch.Tensor) -> torch.Tensor:
        """``head(e_h, e_r)`` computing each distinct relation's parameters (``W_r``) once, not once per row.

        ``relation_vectors[k]`` is the embedding of relation ``k``; ``relation_ids[i]`` is row i's relation.
        """
        ids = torch.as_tensor(relation_ids, dtype=torch.long, device=head_vectors.device)
        distinct, inverse = torch.unique(ids, return_inverse=True)
        if len(distinct) > self.max_relation_groups:  # many relations, few rows each: one batched call is faster
            return self.condition(head_vectors, relation_vectors[ids])
        params = self.head.condition_params(relation_vectors[distinct])
        out = head_vectors.new_empty(len(head_vectors), self.head.out_dim)
        for k in range(len(distinct)):
            rows = (inverse == k).nonzero(as_tuple=True)[0]
            out[rows] = self.project_shared(head_vectors[rows], tuple(p[k : k + 1] for p in params))
        return out

    def project_shared(self, head_vectors: torch.Tensor, params: tuple[torch.Tensor, ...]) -> torch.Tensor:
        """Project rows that all share one relation's parameters (each of batch size 1)."""
        if getattr(self.head, "kind", "") == "hypernet":
            if len(params) == 2:  # W_r = W1 W2ᵀ: (h W2) W1ᵀ as two matrix products, no per-row copies of W_r
                return (head_vectors @ params[1][0]) @ params[0][0].T
            return head_vectors @ params[0][0].T
        return self.head.project(head_vectors, tuple(p.expand(len(head_vectors), *p.shape[1:]) for p in params))

    def embed_batch(self, triples: np.ndarray, kg_texts: KGCTexts) -> tuple[torch.Tensor, ...]:
        # One backbone pass over the batch's distinct entities and relations (shared, as in a tri-encoder).
        entities = sorted(set(triples[:, 0].tolist()) | set(triples[:, 2].tolist()))
        relations = sorted(set(triples[:, 1].tolist()))
        vectors = embed_with_grad(self.encoder, [kg_texts.entities[e] for e in entities] + [kg_texts.relations[r] for r in relations])
        e_row = {e: i for i, e in enumerate(entities)}
        r_row = {r: len(entities) + i for i, r in enumerate(relations)}
        heads = vectors[[e_row[h] for h in triples[:, 0].tolist()]]
        tails = vectors[[e_row[t] for t in triples[:, 2].tolist()]]
        rels = vectors[[r_row[r] for r in triples[:, 1].tolist()]]
        return self.condition(heads, rels), tails, heads

    def save(self, folder: str | Path, extra: dict | None = None, save_encoder: bool = True) -> None:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        if save_encoder:
            self.encoder.save(str(folder / "encoder"))
        with atomic_path(folder / "head.pt") as tmp:
            torch.save(self.head.state_dict(), tmp)
        save_json(folder / CONFIG_NAME, {"arch": self.arch, "head": self.head.config(), **(extra or {})})


class FrozenTriEncoder(nn.Module):
    """A tri-encoder trained on cached embeddings: only the head learns (``--freeze-encoder``).

    ``entity_vectors`` and ``relation_vectors`` are the frozen backbone's outputs for every entity and relation.
    """

    def __init__(self, model: TriEncoderKGC, entity_vectors: torch.Tensor, relation_vectors: torch.Tensor) -> None:
        super().__init__()
        self.model = model
        self.register_buffer("entity_vectors", entity_vectors.float(), persistent=False)
        self.register_buffer("relation_vectors", relation_vectors.float(), persistent=False)
        for p in model.encoder.parameters():
            p.requires_grad_(False)

    def embed_batch(self, triples: np.ndarray, kg_texts: KGCTexts | None = None) -> tuple[torch.Tensor, ...]:
        index = torch.as_tensor(triples, dtype=torch.long, device=self.entity_vectors.device)
        heads = self.entity_vectors[index[:, 0]]
        hr = self.model.condition_by_relation(heads, index[:, 1], self.relation_vectors)
        return hr, self.entity_vectors[index[:, 2]], heads


def read_config(folder: str | Path) -> dict:
    path = Path(folder) / CONFIG_NAME
    if not path.is_file():
        raise ModelNotFoundError(f"{folder} is not a KGC model folder (no {CONFIG_NAME}); train one with `subspaces kgc train`")
    try:
        return json.loads(path.read_text())
    except ValueError as exc:
        raise ModelNotFoundError(f"{path} is not valid JSON: {exc}") from exc


def load_kgc_model(folder: str | Path, max_seq_length: int | None = None) -> BiEncoderKGC | TriEncoderKGC:
    """Rebuild a model saved by :meth:`BiEncoderKGC.save` / :meth:`TriEncoderKGC.save`."""
    from subspaces.models.encoder import load_encoder
    from subspaces.models.heads import head_from_config

    folder = Path(folder)
    config = read_config(folder)
    if config.get("arch") == "bi":
        hr = load_encoder(folder / "hr_encoder", max_seq_length=max_seq_length)
        tail = None if config.get("shared", True) else load_encoder(folder / "tail_encoder", max_seq_length=max_seq_length)
        return BiEncoderKGC(hr, tail)
    if config.get("arch") == "tri":
        encoder_path = folder / "encoder" if (folder / "encoder").is_dir() else config.get("base_model")
        if encoder_path is None:
            raise ModelNotFoundError(f"{folder} has no encoder/ folder and names no base_model")
        encoder = load_encoder(encoder_path, max_seq_length=max_seq_length)
        head = head_from_config(config["head"])
        head.load_state_dict(torch.load(folder / "head.pt", map_location="cpu", weights_only=True))
        return TriEncoderKGC(encoder, head)
    raise SubspacesError(f"{folder / CONFIG_NAME}: unknown arch {config.get('arch')!r}; expected one of {ARCHS}")
