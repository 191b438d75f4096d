"""Entity texts as SimKGC builds them: ``"name: description"``, plus neighbour names when the description is short.

SimKGC appends the names of up to 10 training neighbours to descriptions under 20 words (its ``--use-link-graph``).
That is what gives FB15k-237 entities, which have no descriptions here, something beyond their name. During
fine-tuning SimKGC leaves the example's own tail out of the head's neighbours (it would leak the label); a text
per *entity*, which is what can be cached, cannot do that, so :func:`entity_texts` takes the test-time view (all
training neighbours) and :func:`entity_text` takes ``exclude`` for the per-example view. :class:`KGCTexts` holds a
graph's entity and relation texts for the models; :func:`neighbour_graph` decides whether neighbour names are used.
"""

from __future__ import annotations

from dataclasses import dataclass

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

    ``neighbour_names`` defaults to on where the dataset has no descriptions (FB15k-237).
    """
    if neighbour_names is None:
        neighbour_names = not any(kg.entity_descriptions)
    return LinkGraph(kg.splits["train"], kg.num_entities) if neighbour_names else None


def entity_texts(kg: KnowledgeGraph, neighbour_names: bool | None = None) -> list[str]:
    """One text per entity (the test-time view: all training neighbours); see :func:`neighbour_graph`."""
    return KGCTexts.build(kg, neighbour_names).entities


@dataclass
class KGCTexts:
    """The texts a model reads for one graph: one per entity and one per relation (inverses included).

    ``link_graph`` set means SimKGC's neighbour names are used; then training texts leave each example's own
    tail out of its head's neighbours (:meth:`head_text`), as SimKGC does against label leakage.
    """

    kg: KnowledgeGraph
    entities: list[str]
    relations: list[str]
    link_graph: LinkGraph | None = None

    @classmethod
    def build(cls, kg: KnowledgeGraph, neighbour_names: bool | None = None) -> KGCTexts:
        """Entity texts (the test-time view), relation names, and the link graph if neighbour names are used."""
        graph = neighbour_graph(kg, neighbour_names)
        return cls(kg, [entity_text(kg, e, graph) for e in range(kg.num_entities)], kg.relation_texts(), graph)

    def head_text(self, head: int, tail: int) -> str:
        if self.link_graph is None:
            return self.entities[head]
        return entity_text(self.kg, head, self.link_graph, exclude=tail)
