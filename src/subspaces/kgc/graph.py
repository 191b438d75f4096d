"""Graph lookups: known tails per (head, relation), and the undirected link graph of training neighbours.

``KnownTails`` serves two purposes with different triple sets: built from *training* triples (with inverses) it
gives SimKGC's false-negative masks; built from *all* splits it gives the filter of the filtered ranking protocol.
``LinkGraph`` holds the training neighbours of each entity (both directions, relation ignored); SimKGC uses it
to append neighbour names to short entity texts and for the optional n-hop re-ranking.
"""

from __future__ import annotations

from collections import defaultdict, deque

import numpy as np


class KnownTails:
    """``(head, relation) -> set of tails`` over the given ``(n, 3)`` triples (include inverses yourself)."""

    def __init__(self, triples: np.ndarray) -> None:
        self._tails: dict[tuple[int, int], set[int]] = defaultdict(set)
        for h, r, t in np.asarray(triples, dtype=np.int64).tolist():
            self._tails[(h, r)].add(t)

    def __call__(self, head: int, relation: int) -> set[int]:
        return self._tails.get((head, relation), set())

    def __len__(self) -> int:
        return len(self._tails)


class LinkGraph:
    """Undirected neighbours from training triples, sorted by entity index for reproducible texts."""

    def __init__(self, triples: np.ndarray, num_entities: int) -> None:
        neighbours: list[set[int]] = [set() for _ in range(num_entities)]
        for h, _r, t in np.asarray(triples, dtype=np.int64).tolist():
            neighbours[h].add(t)
            neighbours[t].add(h)
        self.neighbours: list[list[int]] = [sorted(n) for n in neighbours]

    def neighbour_ids(self, entity: int, max_to_keep: int = 10, exclude: int | None = None) -> list[int]:
        return [n for n in self.neighbours[entity] if n != exclude][:max_to_keep]

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
