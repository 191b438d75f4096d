"""Entity texts as SimKGC builds them: ``"name: description"``, plus neighbour names when the description is short.

SimKGC's ``--use-link-graph`` appends the names of the first 10 training neighbours (by dataset id) to descriptions
under 20 words; in training it leaves the example's other end out of each side's neighbours, which a cacheable text
per entity cannot. :class:`KGCTexts` holds both views: ``entities`` (all training neighbours) and, with
``per_example``, :meth:`KGCTexts.training_texts`.
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


def neighbour_graph(kg: KnowledgeGraph, neighbour_names: bool | None = None) -> LinkGraph | None:
    """The training link graph whose neighbour names extend short descriptions, or None without them.

    ``neighbour_names`` defaults to on where the dataset has no descriptions (FB15k-237). A well-connected entity
    shows its first 10 neighbours by dataset id, as SimKGC's.
    """
    if neighbour_names is None:
        neighbour_names = not any(kg.entity_descriptions)
    if not neighbour_names:
        return None
    return LinkGraph(kg.splits["train"], kg.num_entities, kg.entity_ids)


def entity_texts(kg: KnowledgeGraph, neighbour_names: bool | None = None) -> list[str]:
    """One text per entity (the test-time view: all training neighbours); see :func:`neighbour_graph`."""
    return KGCTexts.build(kg, neighbour_names).entities


@dataclass
class KGCTexts:
    """The texts a model reads for one graph: one per entity and one per relation (inverses included).

    ``link_graph`` set means SimKGC's neighbour names are used; ``per_example`` then makes :meth:`training_texts`
    leave each example's other end out of both sides' neighbours (against label leakage, as SimKGC).
    """

    kg: KnowledgeGraph
    entities: list[str]
    relations: list[str]
    link_graph: LinkGraph | None = None
    per_example: bool = False

    @classmethod
    def build(cls, kg: KnowledgeGraph, neighbour_names: bool | None = None, *, per_example: bool = False) -> KGCTexts:
        """Entity texts (the test-time view), relation names, and the link graph if neighbour names are used."""
        graph = neighbour_graph(kg, neighbour_names)
        entities = [entity_text(kg, e, graph) for e in range(kg.num_entities)]
        return cls(kg, entities, kg.relation_texts(), graph, per_example)

    def head_text(self, head: int, tail: int) -> str:
        """``head``'s text with ``tail`` left out of its neighbours (either end of a training triple)."""
        if self.link_graph is None:
            return self.entities[head]
        return entity_text(self.kg, head, self.link_graph, exclude=tail)

    def training_texts(self, triples: np.ndarray) -> tuple[list[str], list[str]]:
        """Head and tail texts of training triples: per example (each without the other) or per entity."""
        rows = np.asarray(triples).tolist()
        if self.per_example and self.link_graph is not None:
            return [self.head_text(h, t) for h, _r, t in rows], [self.head_text(t, h) for h, _r, t in rows]
        return [self.entities[h] for h, _r, _t in rows], [self.entities[t] for _h, _r, t in rows]

    def distinct_training_texts(self, triples: np.ndarray) -> list[str]:
        """Every text training can read, each once (what a frozen or partly frozen encoder caches up front)."""
        heads, tails = self.training_texts(triples)
        return list(dict.fromkeys([*self.entities, *heads, *tails]))
