import numpy as np
import pytest
import torch

from subspaces.cache import LRUCache, content_key, nbytes
from subspaces.errors import SubspacesError


def vec(n=4, value=0.0):
    return np.full(n, value, dtype=np.float32)  # 4 bytes per entry


def test_content_key_is_stable_and_unambiguous():
    assert content_key("m", "text") == content_key("m", "text")
    assert content_key("ab", "c") != content_key("a", "bc")
    assert content_key("m", "text") != content_key("n", "text")


def test_nbytes():
    assert nbytes(vec(4)) == 16
    assert nbytes((torch.zeros(2, 3), vec(1))) == 24 + 4


def test_hits_misses_and_lru_order():
    cache = LRUCache(max_bytes=3 * 16)
    assert cache.get("a") is None
    for k in "abc":
        cache.put(k, vec())
    assert cache.get("a") is not None  # a is now the most recent
    cache.put("d", vec())  # evicts b, the least recently used
    assert "b" not in cache and "a" in cache and "d" in cache
    s = cache.stats()
    assert (s.hits, s.misses, s.evictions, s.items, s.bytes) == (1, 1, 1, 3, 48)
    assert s.hit_rate == pytest.approx(0.5)


def test_byte_bound_is_respected_with_mixed_sizes():
    cache = LRUCache(max_bytes=100)
    rng = np.random.default_rng(0)
    for i in range(200):
        cache.put(i, vec(int(rng.integers(1, 10))))
        assert cache.bytes <= 100
    assert cache.bytes == sum(nbytes(cache.get(k)) for k in list(cache._data))
    cache.put("huge", vec(100))  # larger than the whole cache: not stored
    assert "huge" not in cache and cache.bytes <= 100


def test_item_bound():
    cache = LRUCache(max_bytes=None, max_items=2)
    for k in "abc":
        cache.put(k, vec())
    assert len(cache) == 2 and "a" not in cache


def test_get_many_computes_only_distinct_misses():
    cache = LRUCache()
    cache.put("x", vec(value=1))
    calls = []

    def compute(positions):
        calls.append(positions)
        return [vec(value=10 + p) for p in positions]

    keys = ["a", "x", "a", "b"]
    values = cache.get_many(keys, compute)
    assert calls == [[0, 3]]  # "a" once (first occurrence) and "b"
    assert [float(v[0]) for v in values] == [10, 1, 10, 13]
    s = cache.stats()
    assert (s.hits, s.misses) == (2, 2)  # x, second a; first a, b
    cache.get_many(keys, compute)
    assert len(calls) == 1 and cache.stats().hits == 6


def test_bad_bounds():
    with pytest.raises(SubspacesError):
        LRUCache(max_bytes=-1)


def test_hit_rate_is_undefined_without_lookups():
    cache = LRUCache()
    cache.put("a", vec())
    assert cache.stats().to_dict()["hit_rate"] is None
    cache.get("a")
    assert cache.stats().to_dict()["hit_rate"] == 1.0
