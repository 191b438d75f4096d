"""Entity texts as SimKGC builds them: ``"name: description"``, plus the names of the first 10 training neighbours
(by dataset id) when the description is under 20 words. In training SimKGC leaves each example's other end out of
the neighbours, which one cacheable text per entity cannot: :class:`KGCTexts` holds both views.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from subspaces.kgc.data import KnowledgeGraph
from subspaces.kgc.graph import LinkGraph

SHORT_DESCRIPTION_WORDS = 20
MAX_NEIGHBOURS = 10


def join_name_description(name: str, description: str) -> str:
    """``"name: description"``; a description that repeats the name at its start loses that prefix."""
    if description.startswith(name):
        description = description[len(name) :].strip()
    return f"{name}: {description}" if description else name


def entity_text(
    kg: KnowledgeGraph, entity: int, link_graph: LinkGraph | None = None, exclude: int | None = None
) -> str:
    description = kg.entity_descriptions[entity]
    if link_graph is not None and len(description.split()) < SHORT_DESCRIPTION_WORDS:
        neighbours = link_graph.neighbour_ids(entity, MAX_NEIGHBOURS, exclude=exclude)
        description = (description + " " + " ".join(kg.entity_names[n] for n in neighbours)).strip()
    return join_name_description(kg.entity_names[entity], description)


@dataclass
class KGCTexts:
    """The texts a model reads for one graph: one per entity and one per relation (inverses included); with a
    ``link_graph`` and ``per_example``, :meth:`training_texts` leave each example's other end out of the neighbours
    (against label leakage, as SimKGC)."""

    kg: KnowledgeGraph
    entities: list[str]
    relations: list[str]
    link_graph: LinkGraph | None = None
    per_example: bool = False

    @classmethod
    def build(cls, kg: KnowledgeGraph, neighbour_names: bool | None = None, *, per_example: bool = False) -> KGCTexts:
        """Entity texts (the test-time view), relation names, and the training link graph when neighbour names
        extend short descriptions (by default where the dataset has none: FB15k-237)."""
        if neighbour_names is None:
            neighbour_names = not any(kg.entity_descriptions)
        graph = LinkGraph(kg.splits["train"], kg.num_entities, kg.entity_ids) if neighbour_names else None
        entities = [entity_text(kg, e, graph) for e in range(kg.num_entities)]
        relations = [kg.relation_text(r) for r in range(2 * kg.num_relations)]
        return cls(kg, entities, relations, graph, per_example)

    def training_texts(self, triples: np.ndarray) -> tuple[list[str], list[str]]:
        """Head and tail texts of training triples: per example (each without the other) or per entity."""
        rows = np.asarray(triples).tolist()
        if self.per_example and self.link_graph is not None:
            kg, graph = self.kg, self.link_graph
            return [entity_text(kg, h, graph, t) for h, _r, t in rows], [
                entity_text(kg, t, graph, h) for h, _r, t in rows
            ]
        return [self.entities[h] for h, _r, _t in rows], [self.entities[t] for _h, _r, t in rows]

    def distinct_training_texts(self, triples: np.ndarray) -> list[str]:
        """Every text training can read, each once (what a frozen or partly frozen encoder caches up front)."""
        heads, tails = self.training_texts(triples)
        return list(dict.fromkeys([*self.entities, *heads, *tails]))
