import numpy as np
import pytest
import torch

from subspaces.cache import LRUCache, nbytes
from subspaces.errors import SubspacesError
from subspaces.fingerprint import content_key


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


def test_one_activation_cache_folder_serves_two_encoders(tiny_model_dir, tmp_path):
    """A tri-encoder with its own condition encoder under ``--cache-dir DIR``: the second encoder was refused as
    "built for another model" (issue 51). Each now has its own subfolder, reused by the next run."""
    from subspaces.models.encoder import load_encoder
    from subspaces.models.partial import partially_trained

    def encoders():
        sentence, condition = load_encoder(str(tiny_model_dir)), load_encoder(str(tiny_model_dir))
        with torch.no_grad():  # another model: its frozen bottom differs
            condition[0].auto_model.embeddings.word_embeddings.weight[100] += 1.0
        return [(sentence, ["a cat sat", "a dog ran"]), (condition, ["colour"]), (sentence, ["a third text"])]

    folder = tmp_path / "acts"
    with partially_trained(encoders(), 1, cache_dir=folder, show_progress=False) as attached:
        assert [pft.computed for pft in attached] == [3, 1]
    assert len({pft.cache.folder for pft in attached}) == 2
    assert all(pft.cache.folder.parent == folder and (pft.cache.folder / "manifest.json").is_file() for pft in attached)
    with partially_trained(encoders(), 1, cache_dir=folder, show_progress=False) as again:
        assert [pft.computed for pft in again] == [0, 0]  # each found its own states
