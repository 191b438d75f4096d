"""Query and entity vectors for evaluation, through content-keyed caches whose hit rates are the efficiency story.

Every encoder input is looked up in an in-memory :class:`~subspaces.cache.LRUCache` keyed by (model, kind,
text) before it is encoded; misses go through the on-disk :class:`EmbeddingShardCache` when one is given.

* bi-encoder: every entity text, then one ``(head text, relation)`` pair per query -- a pair recurs only when
  the same ``(h, r)`` is asked twice, so almost every query is a miss and costs an encoder pass;
* tri-encoder: every entity text, then per query the head's entity text (already there: a hit) and the
  relation's name (a miss once per relation); the relation's head parameters (``W_r`` for ``hypernet``) are kept
  in a second cache. Nothing per query reaches the encoder.

``stats()`` reports lookups, hits, hit rate and the number of texts actually encoded.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np
import torch

from subspaces.cache import LRUCache, content_key
from subspaces.kgc.embedding_cache import EmbeddingShardCache, model_fingerprint
from subspaces.kgc.models import BiEncoderKGC, TriEncoderKGC
from subspaces.kgc.texts import KGCTexts


class KGCInference:
    """Vectors for ranking. ``disk_cache`` is a folder, ``None`` for the default cache folder, or ``False``."""

    def __init__(
        self,
        model: BiEncoderKGC | TriEncoderKGC,
        texts: KGCTexts,
        *,
        disk_cache=None,
        memory_bytes: int = 1 << 30,
        batch_size: int = 64,
        show_progress: bool = True,
    ) -> None:
        self.model = model.eval()
        self.texts = texts
        self.batch_size = batch_size
        self.show_progress = show_progress
        self.text_cache = LRUCache(max_bytes=memory_bytes, name="texts")
        self.condition_cache = LRUCache(max_bytes=memory_bytes, name="conditions")
        self.encoded_texts = 0
        self.encode_seconds = 0.0
        self._shards: dict[int, EmbeddingShardCache] = {}
        self._fingerprints: dict[int, str] = {}
        self.disk_cache = disk_cache

    # -- encoders -----------------------------------------------------------------------------------------
    def _fingerprint(self, encoder) -> str:
        if id(encoder) not in self._fingerprints:
            self._fingerprints[id(encoder)] = model_fingerprint(encoder)
        return self._fingerprints[id(encoder)]

    def _encode(self, encoder, inputs: Sequence, description: str) -> np.ndarray:
        from subspaces.models.encoder import encode

        started = time.perf_counter()
        self.encoded_texts += len(inputs)
        if self.disk_cache is False:
            vectors = encode(encoder, list(inputs), batch_size=self.batch_size, show_progress=self.show_progress and len(inputs) > 2048)
        else:
            if id(encoder) not in self._shards:
                self._shards[id(encoder)] = EmbeddingShardCache(
                    encoder, self.disk_cache, batch_size=self.batch_size, fingerprint=self._fingerprint(encoder), show_progress=self.show_progress
                )
            shards = self._shards[id(encoder)]
            before = shards.stats.hit_texts
            vectors = shards.encode(inputs, description)
            self.encoded_texts -= shards.stats.hit_texts - before  # read from disk, not encoded
        self.encode_seconds += time.perf_counter() - started
        return np.asarray(vectors, dtype=np.float32)

    def _lookup(self, encoder, kind: str, inputs: Sequence, description: str) -> torch.Tensor:
        fingerprint = self._fingerprint(encoder)
        keys = [content_key(fingerprint, kind, *(x if isinstance(x, tuple) else (x,))) for x in inputs]
        rows = self.text_cache.get_many(keys, lambda missing: list(self._encode(encoder, [inputs[i] for i in missing], description)))
        if not rows:
            return torch.zeros(0, int(encoder.get_embedding_dimension()))
        return torch.from_numpy(np.stack(rows))

    def seed_entities(self, vectors: np.ndarray | torch.Tensor) -> None:
        """Put precomputed entity vectors in the memory cache without counting lookups (timing the query side)."""
        encoder = self.model.tail_encoder if isinstance(self.model, BiEncoderKGC) else self.model.encoder
        fingerprint = self._fingerprint(encoder)
        for text, vector in zip(self.texts.entities, np.asarray(vectors, dtype=np.float32)):
            self.text_cache.put(content_key(fingerprint, "entity", text), vector)

    # -- what ranking needs -------------------------------------------------------------------------------
    def entity_vectors(self) -> torch.Tensor:
        encoder = self.model.tail_encoder if isinstance(self.model, BiEncoderKGC) else self.model.encoder
        return self._lookup(encoder, "entity", self.texts.entities, "entity embeddings")

    @torch.no_grad()
    def query_vectors(self, queries: np.ndarray) -> torch.Tensor:
        queries = np.asarray(queries)
        if isinstance(self.model, BiEncoderKGC):
            pairs = self.model.query_inputs(self.texts, queries)
            return self._lookup(self.model.hr_encoder, "pair", pairs, "query embeddings")
        encoder = self.model.encoder
        heads = self._lookup(encoder, "entity", [self.texts.entities[h] for h in queries[:, 0]], "head embeddings")
        relation_names = [self.texts.relations[r] for r in queries[:, 1]]
        relations = self._lookup(encoder, "relation", relation_names, "relation embeddings")
        return self._condition(heads, relations, relation_names)

    def _condition(self, heads: torch.Tensor, relations: torch.Tensor, names: list[str]) -> torch.Tensor:
        head = self.model.head
        if not hasattr(head, "condition_params"):
            return head(heads, relations)
        device = next(head.parameters()).device
        heads, relations = heads.to(device), relations.to(device)
        # One lookup per query, so the hit rate counts queries; W_r is computed once per distinct relation.
        keys = [content_key(id(head), name) for name in names]
        params = self.condition_cache.get_many(keys, lambda missing: [head.condition_params(relations[i : i + 1]) for i in missing])
        out = torch.empty(len(heads), head.out_dim)
        groups: dict[str, list[int]] = {}
        for i, name in enumerate(names):
            groups.setdefault(name, []).append(i)
        for rows in groups.values():
            out[rows] = self.model.project_shared(heads[rows], params[rows[0]]).cpu()
        return out

    def stats(self) -> dict:
        text = self.text_cache.stats()
        condition = self.condition_cache.stats()
        return {
            "cache_hit_rate": text.hit_rate,
            "text_lookups": text.lookups,
            "text_hits": text.hits,
            "encoded_texts": self.encoded_texts,
            "encode_seconds": self.encode_seconds,
            "condition_lookups": condition.lookups,
            "condition_hit_rate": condition.hit_rate,
        }
