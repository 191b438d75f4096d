"""Conditional similarity models: the Hyper-CL tri-encoder and the C-STS bi-encoder, saved and loaded as folders.

- :class:`TriEncoder`: sentences and conditions are encoded *independently* (shared backbone, or a separate
  condition encoder), then a condition head (:mod:`subspaces.models.heads`) projects each sentence under the
  condition; the score is ``cos(head(s1, c), head(s2, c))``. Sentence embeddings and per-condition head
  parameters (Hyper-CL's ``W_c`` factors) are content-keyed and cached, so a sentence or condition seen before
  costs a lookup.
- :class:`BiEncoder`: each sentence is encoded *together with* the condition as a text pair ``(s, c)``; the score
  is the cosine of the two. Only identical (sentence, condition) pairs can be reused.

Both expose ``similarity(sentences1, sentences2, conditions) -> np.ndarray`` (no gradients, cached) and
``forward(sentences1, sentences2, conditions) -> (z1, z2)`` (projected embeddings, with gradients, for training).

Folder layout: ``cond_config.json`` (architecture, head config, encoder reference, training metadata);
``head.pt`` (head weights); ``encoder/`` (a sentence-transformers folder) unless the encoder stayed frozen and
was loaded by bundled name, in which case the name is stored instead of a second copy of its weights.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from subspaces.cache import LRUCache, content_key
from subspaces.errors import ModelNotFoundError, SubspacesError
from subspaces.io import atomic_path, save_json
from subspaces.models.forward import embed_with_grad
from subspaces.models.heads import ConditionHead, head_from_config, make_head

ARCHS = ("tri", "bi")
CONFIG_NAME = "cond_config.json"
DEFAULT_CACHE_BYTES = 512 * 2**20


def _embed_cached(
    encoder: Any, cache: LRUCache, namespace: str, texts: Sequence[Any], batch_size: int
) -> torch.Tensor:
    """Embeddings of ``texts`` through ``cache``: only distinct unseen texts reach the encoder."""
    keys = [content_key(namespace, *(t if isinstance(t, tuple) else (t,))) for t in texts]

    def compute(positions: list[int]) -> list[np.ndarray]:
        batch = [texts[i] for i in positions]
        with torch.no_grad():
            emb = encoder.encode(batch, batch_size=batch_size, convert_to_numpy=True, show_progress_bar=len(batch) >= 2048)
        emb = np.asarray(emb, dtype=np.float32)
        if not np.isfinite(emb).all():
            raise SubspacesError(f"the encoder produced NaN/inf embeddings for {namespace} texts")
        return list(emb)

    rows = cache.get_many(keys, compute)
    return torch.from_numpy(np.stack(rows)) if rows else torch.empty(0)


class ConditionalModel(nn.Module):
    """Shared plumbing: frozen/trainable encoder, caches, batched scoring, save/load."""

    arch: str = ""

    def __init__(self, encoder: Any, *, freeze_encoder: bool = True, encoder_name: str | None = None,
                 cache_bytes: int | None = DEFAULT_CACHE_BYTES) -> None:
        super().__init__()
        self.encoder = encoder
        self.encoder_name = encoder_name
        self.freeze_encoder = freeze_encoder
        self.cache_bytes = cache_bytes
        self.metadata: dict[str, Any] = {}  # task, label range, seen conditions, dev threshold: set by training
        for p in self.encoder.parameters():
            p.requires_grad_(not freeze_encoder)

    @property
    def dim(self) -> int:
        return int(self.encoder.get_embedding_dimension())

    def caches(self) -> dict[str, LRUCache]:
        raise NotImplementedError

    def cache_stats(self) -> dict[str, Any]:
        """Per-cache statistics and the overall hit rate (hits over lookups of every cache together)."""
        per = {name: c.stats().to_dict() for name, c in self.caches().items()}
        hits = sum(s["hits"] for s in per.values())
        lookups = sum(s["lookups"] for s in per.values())
        return {
            "hit_rate": hits / lookups if lookups else None,
            "hits": hits,
            "lookups": lookups,
            "bytes": sum(s["bytes"] for s in per.values()),
            "caches": per,
        }

    def clear_caches(self, reset_stats: bool = True) -> None:
        for cache in self.caches().values():
            cache.clear()
            if reset_stats:
                cache.reset_stats()

    def train(self, mode: bool = True) -> ConditionalModel:
        super().train(mode)
        if self.freeze_encoder:
            self.encoder.eval()  # a frozen encoder also keeps dropout off: its cached embeddings stay valid
        return self

    def similarity(
        self, sentences1: Sequence[str], sentences2: Sequence[str], conditions: Sequence[str], *, batch_size: int = 256
    ) -> np.ndarray:
        """``cos`` of the two sentences under each condition, in input order (no gradients)."""
        if not len(sentences1) == len(sentences2) == len(conditions):
            raise SubspacesError(
                f"sentences1, sentences2 and conditions differ in length ({len(sentences1)}, {len(sentences2)}, {len(conditions)})"
            )
        was_training = self.training
        self.eval()
        out = []
        with torch.no_grad():
            for start in range(0, len(conditions), batch_size):
                sl = slice(start, start + batch_size)
                z1, z2 = self.project_pairs(sentences1[sl], sentences2[sl], conditions[sl])
                out.append(F.cosine_similarity(z1, z2, dim=-1))
        self.train(was_training)
        return torch.cat(out).numpy() if out else np.zeros(0, dtype=np.float32)

    def project_pairs(self, s1: Sequence[str], s2: Sequence[str], c: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    def forward(self, s1: Sequence[str], s2: Sequence[str], c: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        return self.project_pairs(s1, s2, c)

    # --- persistence -------------------------------------------------------------------------------------

    def config(self) -> dict[str, Any]:
        return {"arch": self.arch, "freeze_encoder": self.freeze_encoder, "metadata": self.metadata}

    def save(self, path: str | Path) -> None:
        folder = Path(path)
        folder.mkdir(parents=True, exist_ok=True)
        config = self.config()
        if self.freeze_encoder and self.encoder_name is not None:
            config["encoder"] = self.encoder_name  # unchanged weights: a reference, not a copy
        else:
            self._save_encoder(self.encoder, folder / "encoder")
            config["encoder"] = "encoder"
        self._save_extra(folder, config)
        save_json(folder / CONFIG_NAME, config)

    @staticmethod
    def _save_encoder(encoder: Any, folder: Path) -> None:
        import shutil

        tmp = folder.with_name(folder.name + ".saving")
        if tmp.exists():
            shutil.rmtree(tmp)
        encoder.save(str(tmp))
        if folder.exists():
            shutil.rmtree(folder)
        tmp.replace(folder)

    def _save_extra(self, folder: Path, config: dict[str, Any]) -> None:
        pass


class TriEncoder(ConditionalModel):
    """Hyper-CL tri-encoder: ``cos(head(E(s1), E_c(c)), head(E(s2), E_c(c)))`` with cached ``E(s)`` and head params."""

    arch = "tri"

    def __init__(
        self,
        encoder: Any,
        head: ConditionHead,
        *,
        condition_encoder: Any | None = None,
        freeze_encoder: bool = True,
        encoder_name: str | None = None,
        condition_encoder_name: str | None = None,
        cache_bytes: int | None = DEFAULT_CACHE_BYTES,
        encode_batch_size: int = 64,
    ) -> None:
        super().__init__(encoder, freeze_encoder=freeze_encoder, encoder_name=encoder_name, cache_bytes=cache_bytes)
        if head.dim != self.dim:
            raise SubspacesError(f"head dimension {head.dim} does not match the encoder's {self.dim}")
        self.head = head
        self.condition_encoder = condition_encoder
        self.condition_encoder_name = condition_encoder_name
        if condition_encoder is not None:
            if int(condition_encoder.get_embedding_dimension()) != self.dim:
                raise SubspacesError("the condition encoder must have the sentence encoder's dimension")
            for p in condition_encoder.parameters():
                p.requires_grad_(not freeze_encoder)
        self.encode_batch_size = encode_batch_size
        self.sentence_cache = LRUCache(cache_bytes, name="sentences")
        self.condition_cache = LRUCache(cache_bytes, name="condition embeddings")
        self.params_cache = LRUCache(cache_bytes, name="condition matrices")  # W_c factors: valid until the head changes

    def caches(self) -> dict[str, LRUCache]:
        return {"sentences": self.sentence_cache, "conditions": self.condition_cache, "condition_params": self.params_cache}

    def train(self, mode: bool = True) -> TriEncoder:
        super().train(mode)
        if self.condition_encoder is not None and self.freeze_encoder:
            self.condition_encoder.eval()
        if mode:
            self.params_cache.clear()  # the head is about to change
            if not self.freeze_encoder:
                self.sentence_cache.clear()
                self.condition_cache.clear()
        return self

    def _uses_cache(self) -> bool:
        return self.freeze_encoder or not self.training

    def embed_sentences(self, texts: Sequence[str]) -> torch.Tensor:
        if self._uses_cache():
            return _embed_cached(self.encoder, self.sentence_cache, "sentence", texts, self.encode_batch_size)
        return embed_with_grad(self.encoder, texts)

    def embed_conditions(self, texts: Sequence[str]) -> torch.Tensor:
        encoder = self.condition_encoder if self.condition_encoder is not None else self.encoder
        if self._uses_cache():
            return _embed_cached(encoder, self.condition_cache, "condition", texts, self.encode_batch_size)
        return embed_with_grad(encoder, texts)

    def condition_params(self, conditions: Sequence[str]) -> tuple[torch.Tensor, ...]:
        """The head's per-condition parameters (e.g. ``W1, W2``), row-aligned with ``conditions``.

        Outside training they come from the condition-matrix cache: one computation per distinct condition.
        """
        if self.training:
            return self.head.condition_params(self.embed_conditions(conditions))
        keys = [content_key("condition-params", c) for c in conditions]

        def compute(positions: list[int]) -> list[tuple[torch.Tensor, ...]]:
            emb = self.embed_conditions([conditions[i] for i in positions])
            params = self.head.condition_params(emb)
            return [tuple(p[j].detach().clone() for p in params) for j in range(len(positions))]

        rows = self.params_cache.get_many(keys, compute)
        return tuple(torch.stack(parts) for parts in zip(*rows))

    def project(self, sentences: Sequence[str], conditions: Sequence[str]) -> torch.Tensor:
        """``head(E(s), E_c(c))`` for aligned sentences and conditions."""
        return self.head.project(self.embed_sentences(sentences), self.condition_params(conditions))

    def project_pairs(self, s1: Sequence[str], s2: Sequence[str], c: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        params = self.condition_params(c)
        n = len(s1)
        emb = self.embed_sentences(list(s1) + list(s2))  # one encoder call for both sides
        return self.head.project(emb[:n], params), self.head.project(emb[n:], params)

    def config(self) -> dict[str, Any]:
        return {**super().config(), "head": self.head.config(), "encode_batch_size": self.encode_batch_size}

    def _save_extra(self, folder: Path, config: dict[str, Any]) -> None:
        with atomic_path(folder / "head.pt") as tmp:
            torch.save(self.head.state_dict(), tmp)
        if self.condition_encoder is not None:
            if self.freeze_encoder and self.condition_encoder_name is not None:
                config["condition_encoder"] = self.condition_encoder_name
            else:
                self._save_encoder(self.condition_encoder, folder / "condition_encoder")
                config["condition_encoder"] = "condition_encoder"


class BiEncoder(ConditionalModel):
    """C-STS bi-encoder: ``cos(E(s1, c), E(s2, c))`` with each sentence and the condition as one text pair."""

    arch = "bi"

    def __init__(self, encoder: Any, *, freeze_encoder: bool = True, encoder_name: str | None = None,
                 cache_bytes: int | None = DEFAULT_CACHE_BYTES, encode_batch_size: int = 64) -> None:
        super().__init__(encoder, freeze_encoder=freeze_encoder, encoder_name=encoder_name, cache_bytes=cache_bytes)
        self.encode_batch_size = encode_batch_size
        self.pair_cache = LRUCache(cache_bytes, name="sentence-condition pairs")

    def caches(self) -> dict[str, LRUCache]:
        return {"sentence_condition_pairs": self.pair_cache}

    def train(self, mode: bool = True) -> BiEncoder:
        super().train(mode)
        if mode and not self.freeze_encoder:
            self.pair_cache.clear()
        return self

    def project_pairs(self, s1: Sequence[str], s2: Sequence[str], c: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        texts = [(s, cond) for s, cond in zip(s1, c)] + [(s, cond) for s, cond in zip(s2, c)]
        if self.freeze_encoder or not self.training:
            emb = _embed_cached(self.encoder, self.pair_cache, "sentence+condition", texts, self.encode_batch_size)
        else:
            emb = embed_with_grad(self.encoder, texts)
        n = len(s1)
        return emb[:n], emb[n:]

    def config(self) -> dict[str, Any]:
        return {**super().config(), "encode_batch_size": self.encode_batch_size}


def build_model(
    arch: str,
    encoder: str,
    *,
    head: str = "hypernet",
    rank: int | str | None = "auto",
    freeze_encoder: bool = True,
    condition_encoder: str | None = None,
    cache_bytes: int | None = DEFAULT_CACHE_BYTES,
    max_seq_length: int | None = None,
    seed: int = 0,
) -> ConditionalModel:
    """A fresh conditional model on ``encoder`` (a bundled name or a folder).

    ``rank``: the hypernet's K; ``None`` is full rank; ``"auto"`` is ``round(d / 12)`` (Hyper-CL's K = 64 for
    d = 768 and 85 for d = 1024).
    """
    from subspaces.models.encoder import load_encoder

    if arch not in ARCHS:
        raise SubspacesError(f"unknown architecture {arch!r}; choose one of {', '.join(ARCHS)}")
    backbone = load_encoder(encoder, max_seq_length=max_seq_length)
    if arch == "bi":
        if condition_encoder is not None:
            raise SubspacesError("a separate condition encoder applies to the tri-encoder only")
        return BiEncoder(backbone, freeze_encoder=freeze_encoder, encoder_name=str(encoder), cache_bytes=cache_bytes)
    dim = int(backbone.get_embedding_dimension())
    torch.manual_seed(seed)
    cond = load_encoder(condition_encoder, max_seq_length=max_seq_length) if condition_encoder else None
    return TriEncoder(
        backbone,
        make_head(head, dim, rank),
        condition_encoder=cond,
        freeze_encoder=freeze_encoder,
        encoder_name=str(encoder),
        condition_encoder_name=condition_encoder,
        cache_bytes=cache_bytes,
    )


def load_model(path: str | Path, *, cache_bytes: int | None = DEFAULT_CACHE_BYTES) -> ConditionalModel:
    """Load a folder written by :meth:`ConditionalModel.save`."""
    from subspaces.models.encoder import load_encoder

    folder = Path(path)
    config_path = folder / CONFIG_NAME
    if not config_path.is_file():
        raise ModelNotFoundError(f"{folder} is not a conditional model folder (no {CONFIG_NAME})")
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ModelNotFoundError(f"{config_path} is not valid JSON: {exc}") from exc

    def encoder_at(ref: str) -> tuple[Any, str | None]:
        local = folder / ref
        if local.is_dir():
            return load_encoder(local), None
        return load_encoder(ref), ref

    encoder, name = encoder_at(config["encoder"])
    freeze = bool(config.get("freeze_encoder", True))
    if config["arch"] == "bi":
        model: ConditionalModel = BiEncoder(encoder, freeze_encoder=freeze, encoder_name=name, cache_bytes=cache_bytes,
                                            encode_batch_size=config.get("encode_batch_size", 64))
    elif config["arch"] == "tri":
        head = head_from_config(config["head"])
        head.load_state_dict(torch.load(folder / "head.pt", map_location="cpu", weights_only=True))
        cond, cond_name = (None, None)
        if config.get("condition_encoder"):
            cond, cond_name = encoder_at(config["condition_encoder"])
        model = TriEncoder(encoder, head, condition_encoder=cond, freeze_encoder=freeze, encoder_name=name,
                           condition_encoder_name=cond_name, cache_bytes=cache_bytes,
                           encode_batch_size=config.get("encode_batch_size", 64))
    else:
        raise ModelNotFoundError(f"{config_path}: unknown architecture {config['arch']!r}")
    model.metadata = dict(config.get("metadata", {}))
    model.eval()
    return model
