"""Query and entity vectors for ranking, through the model's embedding store; its hit rates are the efficiency story.

A bi-encoder encodes one ``(head text, relation)`` pair per query (almost every query a miss); a tri-encoder
finds the head's entity text already cached and encodes each relation once, so nothing per query reaches the encoder.

``stats()`` reports lookups, hits, hit rate and the number of texts actually encoded.
"""

from __future__ import annotations

import numpy as np
import torch

from subspaces.kgc.texts import KGCTexts
from subspaces.models.conditional import ConditionalModel


class KGCInference:
    """Vectors for ranking with ``model`` (its store: memory, and disk shards if the model was built with them)."""

    def __init__(self, model: ConditionalModel, texts: KGCTexts, *, label: str = "kgc") -> None:
        self.model = model.eval()
        self.texts = texts
        self.label = label  # names the task and dataset in progress lines, e.g. "kgc wn18rr"

    def entity_vectors(self) -> torch.Tensor:
        n = len(self.texts.entities)
        return self.model.store.embed("sentence", self.texts.entities, f"{self.label}: encoding {n:,} entities").cpu()

    @torch.no_grad()
    def query_vectors(self, queries: np.ndarray) -> torch.Tensor:
        queries = np.asarray(queries)
        heads = [self.texts.entities[h] for h in queries[:, 0].tolist()]
        relations = [self.texts.relations[r] for r in queries[:, 1].tolist()]
        description = f"{self.label}: encoding {len(queries):,} queries"  # the bi-encoder's (head, relation) pairs
        return self.model.project(heads, relations, description if self.model.arch == "bi" else None).cpu()

    def stats(self) -> dict:
        store = self.model.store
        text = [c.stats() for c in store.memory.values()]
        lookups, hits = sum(s.lookups for s in text), sum(s.hits for s in text)
        params = getattr(self.model, "params_cache", None)
        condition = params.stats() if params is not None else None
        return {
            "cache_hit_rate": hits / lookups if lookups else 0.0,
            "text_lookups": lookups,
            "text_hits": hits,
            "encoded_texts": store.encoded_texts,
            "encode_seconds": store.encode_seconds,
            "condition_lookups": condition.lookups if condition else 0,
            "condition_hit_rate": condition.hit_rate if condition else 0.0,
        }
