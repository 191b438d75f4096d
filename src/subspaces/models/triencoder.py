"""Hyper-CL's tri-encoder, for conditional similarity (:mod:`subspaces.cond`) and KGC (:mod:`subspaces.kgc`).

Texts and conditions are encoded independently and a condition head (:mod:`subspaces.models.heads`) projects each
text under its condition, ``z = head(E(text), E_c(condition))``. What does not train is cached;
:meth:`TriEncoder.search` ranks stored sentence vectors under any condition without re-encoding them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from subspaces.cache import LRUCache
from subspaces.errors import DimensionError, SubspacesError
from subspaces.fingerprint import content_key
from subspaces.io import atomic_path
from subspaces.models.embedding_cache import CacheSettings, EmbeddingCache
from subspaces.models.folder import (
    load_referenced_encoder,
    read_config,
    save_encoder,
    write_config,
)
from subspaces.models.forward import embed_with_grad
from subspaces.models.heads import (
    ConditionHead,
    CorpusView,
    conditional_search,
    corpus_view,
    head_from_config,
    project_grouped,
)


@dataclass(frozen=True)
class ConditionalHits:
    """The ``k`` best corpus rows of each query under ``condition``, best first."""

    condition: str
    rows: np.ndarray  # (B, k) row numbers of the corpus
    scores: np.ndarray  # (B, k) cos(W_c q, W_c d)
    seen: bool | None  # the condition occurs in training (None: the model does not record its conditions)
    note: str | None = None  # why the result deserves a second look (an unseen condition)


class ConditionalCorpus:
    """Sentence vectors ``(N, d)`` searched by ``cos(h(q, c), h(d, c))`` under any condition ``c``; each
    condition's :func:`~subspaces.models.heads.corpus_view` is computed once and kept in ``cache``."""

    def __init__(self, head: ConditionHead, vectors: np.ndarray | torch.Tensor, cache: LRUCache | None = None) -> None:
        corpus = _tensor(vectors)
        if corpus.ndim != 2 or len(corpus) == 0:
            raise DimensionError(f"the corpus must be a non-empty (N, d) matrix, got shape {tuple(corpus.shape)}")
        if corpus.shape[1] != head.dim:
            raise DimensionError(
                f"the corpus has {corpus.shape[1]}-dimensional rows, but the head's encoder produces {head.dim}"
            )
        if not torch.isfinite(corpus).all():
            raise DimensionError("the corpus holds NaN or inf")
        self.head = head
        self.vectors = corpus.float()
        self.cache = cache if cache is not None else LRUCache(max_bytes=None, max_items=8, name="conditioned corpus")

    def view(self, key: Any, params: tuple[torch.Tensor, ...]) -> CorpusView:
        """The corpus under the condition ``key`` whose head parameters are ``params`` (batch axis 1)."""
        return self.cache.get_many([key], lambda _: [corpus_view(self.head, self.vectors, params)])[0]

    def search(
        self, queries: np.ndarray | torch.Tensor, key: Any, params: tuple[torch.Tensor, ...], k: int = 10
    ) -> tuple[np.ndarray, np.ndarray]:
        """Scores and row numbers ``(B, k)`` of the best rows for each query vector (B, d) under ``key``."""
        return conditional_search(self.head, _tensor(queries), params, self.vectors, k, view=self.view(key, params))


#: ``encoder_at(key)``: the encoder a saved config names under ``key`` (None if none) and its reference (None: its
#: weights are saved in the folder).
EncoderAt = Callable[[str], tuple[Any, str | None]]


def _tensor(vectors: np.ndarray | torch.Tensor) -> torch.Tensor:
    """A tensor as it is; an array as a float32 tensor."""
    return torch.as_tensor(np.asarray(vectors, dtype=np.float32)) if isinstance(vectors, np.ndarray) else vectors


class ConditionalEncoder(nn.Module):
    """What tasks read of a conditional model: texts under conditions (``project``), plain texts
    (``embed_sentences``), the :class:`EmbeddingCache` behind them (``store``) and a folder (``save``, ``load``)."""

    arch = ""  # "tri" or "bi"
    store: EmbeddingCache

    def __init__(
        self, encoder: Any, task: str, freeze_encoder: bool, encoder_name: str | None, encode_batch_size: int
    ) -> None:
        super().__init__()
        self.encoder = encoder
        self.task = task  # "cond" or "kgc", recorded in the saved folder
        self.freeze_encoder = freeze_encoder
        self.encoder_name = encoder_name
        self.encode_batch_size = encode_batch_size
        self.metadata: dict[str, Any] = {}  # set by the task's training: label range, seen conditions, dataset, ...

    def _freeze_encoders(self) -> None:
        for enc in self.encoders():
            for p in enc.parameters():
                p.requires_grad_(not self.freeze_encoder)

    def encoders(self) -> list[Any]:
        raise NotImplementedError

    def _embed(self, kind: str, texts: Sequence[Any], description: str | None) -> torch.Tensor:
        raise NotImplementedError

    def embed_sentences(self, texts: Sequence[Any], description: str | None = None) -> torch.Tensor:
        return self._embed("sentence", texts, description)

    def project_pairs(
        self, s1: Sequence[str], s2: Sequence[str], c: Sequence[str]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    def _forget_weights(self) -> None:
        """Drop what was computed from weights that are about to change (training) or were replaced (loading)."""
        if not self.freeze_encoder:
            self.store.clear(reset_stats=False)  # a trainable encoder's vectors

    def train(self, mode: bool = True) -> Self:
        super().train(mode)
        if self.freeze_encoder:
            for enc in self.encoders():
                enc.eval()  # a frozen encoder keeps dropout off: its cached embeddings stay valid
        if mode:
            self._forget_weights()
        return self

    def caches(self) -> dict[str, LRUCache]:
        raise NotImplementedError

    def clear_caches(self, reset_stats: bool = True) -> None:
        self.store.clear(reset_stats)
        for cache in self.caches().values():
            cache.clear()
            if reset_stats:
                cache.reset_stats()

    def forward(self, s1: Sequence[str], s2: Sequence[str], c: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        return self.project_pairs(s1, s2, c)

    def similarity(
        self, sentences1: Sequence[str], sentences2: Sequence[str], conditions: Sequence[str], *, batch_size: int = 256
    ) -> np.ndarray:
        """``cos`` of the two sentences under each condition, in input order (in batches, :meth:`_inference`)."""
        if not len(sentences1) == len(sentences2) == len(conditions):
            raise SubspacesError(
                f"sentences1, sentences2 and conditions differ in length "
                f"({len(sentences1)}, {len(sentences2)}, {len(conditions)})"
            )
        out = []
        with self._inference():
            for start in range(0, len(conditions), batch_size):
                sl = slice(start, start + batch_size)
                z1, z2 = self.project_pairs(sentences1[sl], sentences2[sl], conditions[sl])
                out.append(F.cosine_similarity(z1, z2, dim=-1).cpu())
        return torch.cat(out).numpy() if out else np.zeros(0, dtype=np.float32)

    @contextmanager
    def _inference(self) -> Iterator[None]:
        """Eval mode (no dropout, the caches in use) and no gradients; the previous mode afterwards."""
        was_training = self.training
        self.eval()
        try:
            with torch.no_grad():
                yield
        finally:
            self.train(was_training)

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

    # --- the folder (subspaces.models.folder) ------------------------------------------------------------
    def _saved(self, folder: Path, encoder: Any, name: str | None, sub: str) -> str:
        """``name`` for a frozen encoder loaded by name (a reference, not a copy); else ``sub``, written there."""
        if self.freeze_encoder and name is not None:
            return name
        save_encoder(encoder, folder / sub)
        return sub

    def _write_config(self, folder: Path, parts: dict[str, Any]) -> None:
        """The folder's config: the fields both architectures have around ``parts`` (encoders, head)."""
        write_config(
            folder,
            {
                "task": self.task,
                "arch": self.arch,
                **parts,
                "freeze_encoder": self.freeze_encoder,
                "max_seq_length": getattr(self.encoder, "max_seq_length", None),
                "encode_batch_size": self.encode_batch_size,
                "metadata": self.metadata,
            },
        )

    @classmethod
    def load(
        cls,
        path: str | Path,
        config: dict[str, Any] | None = None,
        *,
        max_length: int | None = None,
        device: str = "cpu",
        **options: Any,
    ) -> Self:
        """Rebuild a saved model of this architecture (``config``: the folder's, read when not given)."""
        folder = Path(path)
        config = config or read_config(folder)
        if config["arch"] != cls.arch:
            raise SubspacesError(f"{folder} holds a {config['arch']}-encoder, not a {cls.arch}-encoder")
        length = max_length or config.get("max_seq_length")

        def encoder_at(key: str) -> tuple[Any, str | None]:
            return load_referenced_encoder(folder, config[key], length, device) if config.get(key) else (None, None)

        model = cls._rebuild(
            folder,
            config,
            encoder_at,
            device=device,
            freeze_encoder=bool(config.get("freeze_encoder", True)),
            task=config.get("task", "cond"),
            encode_batch_size=int(config.get("encode_batch_size", 64)),
            **options,
        )
        model.metadata = dict(config.get("metadata", {}))
        return model.eval()

    @classmethod
    def _rebuild(
        cls, folder: Path, config: dict[str, Any], encoder_at: EncoderAt, *, device: str, **options: Any
    ) -> Self:
        """The model of a saved ``config``: its encoders from ``encoder_at``, its own parts, and ``options``."""
        raise NotImplementedError


class TriEncoder(ConditionalEncoder):
    """Encoder + condition head (of the encoder's dimension) + one embedding store. ``condition_encoder``: a
    separate encoder for conditions; ``freeze_encoder``: train the head only, on cached embeddings;
    ``encoder_name``/``condition_encoder_name``: how a frozen encoder is referenced when saved (not copied)."""

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
        task: str = "cond",
        encode_batch_size: int = 64,
        cache: CacheSettings = CacheSettings(),
    ) -> None:
        super().__init__(encoder, task, freeze_encoder, encoder_name, encode_batch_size)
        self.head = head
        self.condition_encoder = condition_encoder
        self.condition_encoder_name = condition_encoder_name
        for enc in self.encoders():
            if int(enc.get_embedding_dimension()) != head.dim:
                raise SubspacesError(
                    f"head dimension {head.dim} does not match the encoder's {enc.get_embedding_dimension()}"
                )
        self._freeze_encoders()
        encoders = {"sentence": encoder, "condition": condition_encoder if condition_encoder is not None else encoder}
        self.store = EmbeddingCache(encoders, cache, encode_batch_size)
        self.params_cache = LRUCache(cache.memory_bytes, name="condition matrices")  # valid while the head is unchanged
        self.corpus_cache = LRUCache(cache.memory_bytes, name="conditioned corpus")  # each condition's view of corpus
        self.corpus: ConditionalCorpus | None = None  # what search() ranks (index_corpus)
        # Loading weights (a checkpoint, the best state of a run) changes the head, and a trainable encoder: their
        # cached W_c and vectors are stale.
        self._register_load_state_dict_pre_hook(lambda *_args, **_kw: self._forget_weights())

    @property
    def dim(self) -> int:
        return self.head.dim

    @property
    def head_device(self) -> torch.device:
        return next(self.head.parameters()).device

    def encoders(self) -> list[Any]:
        return [e for e in (self.encoder, self.condition_encoder) if e is not None]

    # --- caches ------------------------------------------------------------------------------------------
    def caches(self) -> dict[str, LRUCache]:
        return {
            "sentences": self.store.memory["sentence"],
            "conditions": self.store.memory["condition"],
            "condition_params": self.params_cache,
            "conditioned_corpus": self.corpus_cache,
        }

    def _forget_weights(self) -> None:
        self.params_cache.clear()  # the head's W_c and corpus views
        self.corpus_cache.clear()
        super()._forget_weights()

    # --- embeddings --------------------------------------------------------------------------------------
    def _embed(self, kind: str, texts: Sequence[Any], description: str | None) -> torch.Tensor:
        if self.freeze_encoder or not self.training:
            return self.store.embed(kind, texts, description).to(self.head_device)
        encoder = self.store.encoders[kind]
        distinct = list(dict.fromkeys(texts))  # one forward pass per distinct text of the batch
        vectors = embed_with_grad(encoder, distinct)
        if len(distinct) == len(texts):
            return vectors
        row = {t: i for i, t in enumerate(distinct)}
        return vectors[[row[t] for t in texts]]

    def embed_conditions(self, texts: Sequence[str], description: str | None = None) -> torch.Tensor:
        return self._embed("condition", texts, description)

    def condition_params(self, conditions: Sequence[str]) -> tuple[tuple[torch.Tensor, ...], torch.Tensor]:
        """The head's parameters of each *distinct* condition and, per row, the index of its condition (cached
        outside training)."""
        distinct = list(dict.fromkeys(conditions))
        position = {c: i for i, c in enumerate(distinct)}
        index = torch.tensor([position[c] for c in conditions], dtype=torch.long)
        if self.training:
            return self.head.condition_params(self.embed_conditions(distinct)), index
        keys = [content_key("condition-params", c) for c in conditions]

        def compute(positions: list[int]) -> list[tuple[torch.Tensor, ...]]:
            params = self.head.condition_params(self.embed_conditions([conditions[i] for i in positions]))
            return [tuple(p[j].detach().clone() for p in params) for j in range(len(positions))]

        rows = self.params_cache.get_many(keys, compute)
        by_condition = dict(zip(conditions, rows, strict=True))
        return tuple(torch.stack(parts) for parts in zip(*(by_condition[c] for c in distinct), strict=True)), index

    def condition(self, vectors: torch.Tensor, conditions: Sequence[str], repeat: int = 1) -> torch.Tensor:
        """``head(vectors[i], E_c(conditions[i % n]))`` over ``repeat`` blocks of ``n = len(conditions)`` rows."""
        params, index = self.condition_params(conditions)
        device = vectors.device
        return project_grouped(self.head, vectors, tuple(p.to(device) for p in params), index.repeat(repeat).to(device))

    def project(self, texts: Sequence[str], conditions: Sequence[str], description: str | None = None) -> torch.Tensor:
        """``head(E(text), E_c(condition))`` for aligned texts and conditions."""
        return self.condition(self.embed_sentences(texts, description), conditions)

    def project_pairs(
        self, s1: Sequence[str], s2: Sequence[str], c: Sequence[str]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        n = len(s1)
        emb = self.embed_sentences(list(s1) + list(s2))  # one encoder call for both sides
        z = self.condition(emb, c, repeat=2)
        return z[:n], z[n:]

    # --- conditional search ------------------------------------------------------------------------------
    def index_corpus(self, corpus: np.ndarray | torch.Tensor | Sequence[str]) -> None:
        """Set what :meth:`search` ranks: sentence vectors (N, d) of this model's encoder, or texts to embed."""
        if isinstance(corpus, (np.ndarray, torch.Tensor)):
            vectors = _tensor(corpus)
        else:
            with self._inference():
                vectors = self.embed_sentences(list(corpus))
        self.corpus_cache.clear()  # views of the previous corpus
        self.corpus = ConditionalCorpus(self.head, vectors.to(self.head_device), self.corpus_cache)

    def search(
        self, query: str | Sequence[str] | np.ndarray | torch.Tensor, condition: str, k: int = 10
    ) -> ConditionalHits:
        """The ``k`` corpus rows (:meth:`index_corpus`) most similar to each query (a text, texts, or vectors (B, d))
        under ``condition``; a condition not seen in training is still projected, and ``note`` says so."""
        if self.corpus is None:
            raise SubspacesError("no corpus to search: call index_corpus(vectors or texts) first")
        with self._inference():
            if isinstance(query, (np.ndarray, torch.Tensor)):
                vectors = query
            else:
                vectors = self.embed_sentences([query] if isinstance(query, str) else list(query))
            params, _ = self.condition_params([condition])
        scores, rows = self.corpus.search(vectors, content_key("conditioned-corpus", condition), params, k)
        seen = self.condition_seen(condition)
        note = None
        if seen is False:
            note = (
                f"condition {condition!r} was not seen in training: its projection is the {self.head.kind} head's "
                "zero-shot mapping of the condition's embedding"
            )
        return ConditionalHits(condition, rows, scores, seen, note)

    def condition_seen(self, condition: str) -> bool | None:
        """Whether ``condition`` occurs among the training conditions (None when the model does not record them:
        the ``seen_conditions`` of its metadata, written by ``cond train`` and ``kgc train``)."""
        seen = self.metadata.get("seen_conditions")
        return None if seen is None else condition in set(seen)

    # --- persistence -------------------------------------------------------------------------------------
    def save(self, path: str | Path) -> None:
        """Write the folder: ``head.pt``, and the encoders unless frozen and loaded by name (then a reference)."""
        folder = Path(path)
        folder.mkdir(parents=True, exist_ok=True)
        parts: dict[str, Any] = {
            "encoder": self._saved(folder, self.encoder, self.encoder_name, "encoder"),
            "condition_encoder": None
            if self.condition_encoder is None
            else self._saved(folder, self.condition_encoder, self.condition_encoder_name, "condition_encoder"),
            "head": self.head.config(),
        }
        with atomic_path(folder / "head.pt") as tmp:
            torch.save(self.head.state_dict(), tmp)
        self._write_config(folder, parts)

    @classmethod
    def _rebuild(
        cls, folder: Path, config: dict[str, Any], encoder_at: EncoderAt, *, device: str, **options: Any
    ) -> Self:
        encoder, name = encoder_at("encoder")
        condition_encoder, condition_name = encoder_at("condition_encoder")
        head = head_from_config(config["head"])
        head.load_state_dict(torch.load(folder / "head.pt", map_location="cpu", weights_only=True))
        return cls(
            encoder,
            head.to(device),
            condition_encoder=condition_encoder,
            encoder_name=name,
            condition_encoder_name=condition_name,
            **options,
        )
