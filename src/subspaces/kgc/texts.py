"""Entity texts as SimKGC builds them: ``"name: description"``, plus neighbour names when the description is short.

SimKGC appends the names of up to 10 training neighbours to descriptions under 20 words (its ``--use-link-graph``).
That is what gives FB15k-237 entities, which have no descriptions here, something beyond their name. During
fine-tuning SimKGC leaves the example's own tail out of the head's neighbours (it would leak the label); a text
per *entity*, which is what can be cached, cannot do that, so :func:`entity_texts` takes the test-time view (all
training neighbours) and :func:`entity_text` takes ``exclude`` for the per-example view.
"""

from __future__ import annotations

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


def entity_texts(kg: KnowledgeGraph, neighbour_names: bool | None = None) -> list[str]:
    """One text per entity. ``neighbour_names`` defaults to on where the dataset has no descriptions (FB15k-237)."""
    if neighbour_names is None:
        neighbour_names = not any(kg.entity_descriptions)
    graph = LinkGraph(kg.splits["train"], kg.num_entities) if neighbour_names else None
    return [entity_text(kg, e, graph) for e in range(kg.num_entities)]
