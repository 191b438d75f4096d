"""Content-keyed, memory-bounded LRU caches with hit statistics.

cache = LRUCache(max_bytes=256 * 2**20)
key = content_key("minilm-l6", "sentence", text)     # subspaces.fingerprint: the content, not the position
vectors = cache.get_many(keys, compute)               # computes only the misses, in one batch
cache.stats()  # -> CacheStats(hits, misses, evictions, items, bytes, max_bytes, hit_rate)
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from subspaces.errors import SubspacesError


def nbytes(value: Any) -> int:
    """Memory held by a cached value: arrays, tensors, and tuples/lists of them (others count as 64 bytes)."""
    if isinstance(value, np.ndarray):
        return int(value.nbytes)
    if isinstance(value, (tuple, list)):
        return sum(nbytes(v) for v in value)
    numel = getattr(value, "numel", None)
    if callable(numel) and hasattr(value, "element_size"):
        return int(numel() * value.element_size())
    return 64


@dataclass(frozen=True)
class CacheStats:
    hits: int
    misses: int
    evictions: int
    items: int
    bytes: int
    max_bytes: int | None

    @property
    def lookups(self) -> int:
        return self.hits + self.misses

    @property
    def hit_rate(self) -> float:
        return self.hits / self.lookups if self.lookups else 0.0

    def to_dict(self) -> dict:
        # No lookups: the hit rate is undefined (None), not 0.
        return {**asdict(self), "lookups": self.lookups, "hit_rate": self.hit_rate if self.lookups else None}


class LRUCache:
    """A least-recently-used cache bounded by total bytes (and optionally by item count).

    ``get``/``get_many`` count a hit or a miss per lookup; ``put`` evicts the least recently used entries
    until the new one fits. A value larger than ``max_bytes`` on its own is returned but not stored.
    Thread-safe (one lock), so a data loader and a model may share it.
    """

    def __init__(self, max_bytes: int | None = 256 * 2**20, max_items: int | None = None, name: str = "cache") -> None:
        if max_bytes is not None and max_bytes < 0:
            raise SubspacesError(f"cache size must be non-negative, got {max_bytes} bytes")
        if max_items is not None and max_items < 0:
            raise SubspacesError(f"cache item bound must be non-negative, got {max_items}")
        self.max_bytes = max_bytes
        self.max_items = max_items
        self.name = name
        self._data: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.RLock()
        self.hits = self.misses = self.evictions = 0

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: Hashable) -> bool:  # a peek: neither counted nor refreshed
        return key in self._data

    @property
    def bytes(self) -> int:
        return self._bytes

    def _lookup(self, key: Hashable) -> tuple[Any, int] | None:
        """The entry of ``key``, counted as a hit (and made the most recent) or a miss; call under the lock."""
        entry = self._data.get(key)
        if entry is None:
            self.misses += 1
        else:
            self.hits += 1
            self._data.move_to_end(key)
        return entry

    def get(self, key: Hashable, default: Any = None) -> Any:
        with self._lock:
            entry = self._lookup(key)
            return default if entry is None else entry[0]

    def put(self, key: Hashable, value: Any) -> None:
        size = nbytes(value)
        with self._lock:
            if key in self._data:
                self._bytes -= self._data.pop(key)[1]
            if (self.max_bytes is not None and size > self.max_bytes) or self.max_items == 0:
                return
            self._data[key] = (value, size)
            self._bytes += size
            while (self.max_bytes is not None and self._bytes > self.max_bytes) or (
                self.max_items is not None and len(self._data) > self.max_items
            ):
                _, (_, evicted) = self._data.popitem(last=False)
                self._bytes -= evicted
                self.evictions += 1

    def get_many(self, keys: Sequence[Hashable], compute: Callable[[list[int]], Sequence[Any]]) -> list[Any]:
        """Values for ``keys`` in order; ``compute(indices)`` is called once with the positions of the distinct
        misses' first occurrences. Lookups count as if made one by one (a repeated key hits after its miss)."""
        out: list[Any] = [None] * len(keys)
        first_miss: dict[Hashable, int] = {}
        with self._lock:
            for i, key in enumerate(keys):
                if key in first_miss:  # a repeat of a miss in this call: its value is computed once
                    self.hits += 1
                elif (entry := self._lookup(key)) is not None:
                    out[i] = entry[0]
                else:
                    first_miss[key] = i
        if not first_miss:
            return out
        computed = dict(zip(first_miss, compute(list(first_miss.values())), strict=True))  # one value per miss
        for key, value in computed.items():
            self.put(key, value)
        return [computed.get(key, value) for key, value in zip(keys, out, strict=True)]

    def clear(self) -> None:
        """Drop every entry (the counters stay; see :meth:`reset_stats`)."""
        with self._lock:
            self._data.clear()
            self._bytes = 0

    def reset_stats(self) -> None:
        with self._lock:
            self.hits = self.misses = self.evictions = 0

    def stats(self) -> CacheStats:
        return CacheStats(self.hits, self.misses, self.evictions, len(self._data), self._bytes, self.max_bytes)

    def __repr__(self) -> str:
        s = self.stats()
        return f"LRUCache({self.name!r}, items={s.items}, bytes={s.bytes}, hit_rate={s.hit_rate:.3f})"
