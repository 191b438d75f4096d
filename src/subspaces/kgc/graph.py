"""Graph lookups: known tails per (head, relation) -- from training triples SimKGC's false-negative masks, from
all splits the filter of the filtered ranking -- and the undirected link graph of training neighbours."""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Sequence

import numpy as np


class KnownTails:
    """``(head, relation) -> set of tails`` over the given ``(n, 3)`` triples (include inverses yourself)."""

    def __init__(self, triples: np.ndarray) -> None:
        self._tails: dict[tuple[int, int], set[int]] = defaultdict(set)
        for h, r, t in np.asarray(triples, dtype=np.int64).tolist():
            self._tails[(h, r)].add(t)

    def __call__(self, head: int, relation: int) -> set[int]:
        return self._tails.get((head, relation), set())


class LinkGraph:
    """Undirected neighbours from training triples, sorted for reproducible texts: by entity index, or by
    ``sort_keys[entity]`` (the dataset ids, as SimKGC's ``LinkGraph.get_neighbor_ids`` sorts them)."""

    def __init__(self, triples: np.ndarray, num_entities: int, sort_keys: Sequence[str] | None = None) -> None:
        neighbours: list[set[int]] = [set() for _ in range(num_entities)]
        for h, _r, t in np.asarray(triples, dtype=np.int64).tolist():
            neighbours[h].add(t)
            neighbours[t].add(h)
        key = None if sort_keys is None else sort_keys.__getitem__
        self.neighbours: list[list[int]] = [sorted(n, key=key) for n in neighbours]

    def neighbour_ids(self, entity: int, max_to_keep: int = 10, exclude: int | None = None) -> list[int]:
        """The first ``max_to_keep`` neighbours, then ``exclude`` dropped from them (SimKGC's order of the two
        steps: a text that leaves its answer out has one name fewer, not the eleventh neighbour instead)."""
        return [n for n in self.neighbours[entity][:max_to_keep] if n != exclude]

    def n_hop(self, entity: int, n_hop: int = 2, max_nodes: int = 100_000) -> list[int]:
        """Entities within ``n_hop`` steps of ``entity``, itself included (SimKGC's breadth-first walk)."""
        seen = {entity}
        queue = deque([entity])
        for _ in range(n_hop):
            for _ in range(len(queue)):
                for node in self.neighbours[queue.popleft()]:
                    if node not in seen:
                        seen.add(node)
                        queue.append(node)
                        if len(seen) > max_nodes:
                            return []
        return sorted(seen)
