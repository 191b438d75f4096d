"""A space too large for memory (issue 52 item 3): searched from its per-version vector file, a block at a time,
with the same results as from memory in every mode; the file follows the table's version and is written
atomically; exact search over it holds less than the whole array."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from subspaces import quantize as codes_module
from subspaces.store import Store, vectorfile
from subspaces.store.core import import_vectors
from subspaces.store.table import Table

LANGS = ("en", "de", "fr")


def unit_rows(n: int, dim: int, seed: int = 0) -> np.ndarray:
    x = np.random.default_rng(seed).normal(size=(n, dim))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def parquet(path, vectors: np.ndarray, first: int = 0) -> str:
    n = len(vectors)
    table = pa.table(
        {
            "id": [f"r{first + i}" for i in range(n)],
            "vector": pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), vectors.shape[1]),
            "lang": [LANGS[(first + i) % 3] for i in range(n)],
            "year": [2000 + (first + i) % 7 for i in range(n)],
        }
    )
    pq.write_table(table, path)
    return str(path)


def made(tmp_path, n: int, dim: int) -> Store:
    store, _ = import_vectors(tmp_path / "s", parquet(tmp_path / "rows.parquet", unit_rows(n, dim)), foreign="synth")
    return store


@pytest.fixture
def streamed(monkeypatch):
    """Every space is searched from its vector file, whatever its size."""
    monkeypatch.setattr(vectorfile, "IN_MEMORY_BYTES", 0)


MODES = [
    {},
    {"dims": 8, "basis": "model"},
    {"dims": 8, "basis": "pca", "shortlist": 3},
    {"dims": 8, "rerank": "none"},
    {"quantized": True},
    {"quantized": True, "rescore": None},
]


def results(store: Store, queries: np.ndarray, **options) -> list[tuple[list[str], list[float], list, list]]:
    return [(r.ids, r.scores, r.texts, r.metadata) for r in store.search_vectors(queries, 10, **options)]


def test_streamed_search_gives_the_in_memory_results_in_every_mode(tmp_path, monkeypatch):
    store = made(tmp_path, 3000, 32)
    store.quantize("int8")
    queries = unit_rows(5, 32, seed=1)
    assert store._load_rows("0").file is None  # a small space: in memory
    want = {
        (i, where): results(store, queries, where=where, **mode)
        for i, mode in enumerate(MODES)
        for where in (None, "lang = 'de' AND year > 2002")
    }
    monkeypatch.setattr(vectorfile, "IN_MEMORY_BYTES", 0)
    reopened = Store.open(store.path)
    rows = reopened._load_rows("0")
    assert rows.file is not None and "ids" not in rows.__dict__  # the floats mapped, the ids never read
    for (i, where), expected in want.items():
        assert results(reopened, queries, where=where, **MODES[i]) == expected, (MODES[i], where)
    assert "ids" not in rows.__dict__ and "texts" not in rows.__dict__  # only the hits' were read
    # the blockwise scan of the codes is today's quantize.search, row for row
    codes, kind, dim, cal = codes_module.load_codes(next((store.path / "quantized" / "0").glob("*.npy")))
    old = codes_module.search(queries, codes, kind=kind, k=10, calibration=cal, rescore=4, dim=dim)
    new = [r.ids for r in reopened.search_vectors(queries, 10, quantized=True)]
    assert [[f"r{j}" for j in row] for row in old[1]] == new


def test_the_vector_file_is_rebuilt_for_every_table_version(tmp_path, streamed):
    store = made(tmp_path, 1500, 16)
    query = unit_rows(1, 16, seed=2)
    first = store.search_vectors(query, 3)[0]
    folder = store.path / vectorfile.FOLDER / "space_0"
    assert [p.name for p in folder.iterdir()] == [f"v{store._table('0').version}.npy"]
    store.delete([first.ids[0]])
    after_delete = store.search_vectors(query, 3)[0]
    assert first.ids[0] not in after_delete.ids and after_delete.ids[:2] == first.ids[1:]
    # an upsert that moves a row onto the query: found at once, with its new vector's score
    moved = tmp_path / "moved.parquet"
    parquet(moved, query, first=700)
    store.import_vectors(str(moved), upsert=True)
    top = store.search_vectors(query, 1)[0]
    assert top.ids == ["r700"] and top.scores[0] == pytest.approx(1.0, abs=1e-6)
    more = tmp_path / "more.parquet"
    parquet(more, -query, first=5000)
    store.import_vectors(str(more))
    assert store.search_vectors(-query, 1)[0].ids == ["r5000"]
    assert [p.name for p in folder.iterdir()] == [f"v{store._table('0').version}.npy"]  # old versions removed
    file = store._load_rows("0").file
    assert file.shape == (1500, 16)  # one deleted, one replaced, one added
    rows = np.array([[5, 6, 7], [1499, -1, 5], [0, 0, 900]])  # runs, repeats, -1 (the last row), any shape
    assert np.array_equal(file[rows], file.array[rows])


def test_a_killed_build_of_the_vector_file_leaves_nothing_to_read(tmp_path, streamed, monkeypatch):
    store = made(tmp_path, 1200, 16)
    query = unit_rows(1, 16, seed=3)
    batches = Table.batches

    def dies_midway(self, names, size):
        for i, batch in enumerate(batches(self, names, 256)):
            if i == 2:
                raise KeyboardInterrupt  # as a kill would stop it: after some rows were written
            yield batch

    monkeypatch.setattr(Table, "batches", dies_midway)
    with pytest.raises(KeyboardInterrupt):
        store.search_vectors(query, 3)
    folder = store.path / vectorfile.FOLDER / "space_0"
    assert list(folder.iterdir()) == []  # neither a partial file under its name nor the temporary one
    # what a SIGKILL leaves (a temporary file) is never read, and goes with the next build
    (folder / ".v9.npy.1-ab.tmp").write_bytes(b"partial")
    monkeypatch.setattr(Table, "batches", batches)
    got = store.search_vectors(query, 3)[0]
    monkeypatch.setattr(vectorfile, "IN_MEMORY_BYTES", 2**30)
    assert got.ids == Store.open(store.path).search_vectors(query, 3)[0].ids
    assert [p.name for p in folder.iterdir()] == [f"v{store._table('0').version}.npy"]


def test_exact_search_over_the_vector_file_holds_less_than_the_array(tmp_path, streamed):
    n, dim = 50_000, 64
    store = made(tmp_path, n, dim)
    query = unit_rows(2, dim, seed=4)
    store.search_vectors(query, 10)  # the file is written
    tracemalloc.start()
    try:
        found = Store.open(store.path).search_vectors(query, 10)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < n * dim * 4 / 2, f"exact search allocated {peak:,} bytes, the array is {n * dim * 4:,}"
    assert [r.ids for r in found] == [r.ids for r in store.search_vectors(query, 10)]


def test_the_int8_index_ranks_as_the_block_scan_ties_included(tmp_path):
    from subspaces.store.quantized import Codes, search_codes

    rng = np.random.default_rng(5)
    x = unit_rows(3000, 16, seed=5)
    cal = codes_module.calibrate_int8(x[:500])
    # 40 distinct rows, each many times: whole groups tie on the first ranking, where faiss's own order is not ours
    codes = codes_module.quantize(x[rng.integers(0, 40, 3000)], "int8", cal)
    codes_module.save_codes(tmp_path / "c.npy", codes, "int8", 16, cal)
    held = Codes.open(tmp_path / "c.npy")
    queries = unit_rows(6, 16, seed=6)
    subset = np.sort(rng.choice(3000, 900, replace=False))
    for rescore in (None, 4):
        want = codes_module.search(queries, codes, kind="int8", k=10, calibration=cal, rescore=rescore, dim=16)
        options = {"kind": "int8", "k": 10, "calibration": cal, "rescore": rescore}
        for index in (None, held.index):
            got = search_codes(queries, held.codes, index=index, **options)
            assert np.array_equal(got[1], want[1]) and np.array_equal(got[0], want[0])
            part = codes_module.search(queries, codes[subset], kind="int8", k=10, calibration=cal, rescore=rescore)
            got = search_codes(queries, held.codes, index=index, subset=subset, **options)
            assert np.array_equal(got[1], subset[part[1]]) and np.array_equal(got[0], part[0])


def test_conditional_search_over_the_vector_file_gives_the_in_memory_results(tmp_path, monkeypatch):
    import torch

    from subspaces.models.heads import make_head
    from subspaces.models.triencoder import TriEncoder
    from test_store import LookupEncoder

    texts = [f"text {i}" for i in range(620)] + ["the colour"]
    encoder = LookupEncoder(texts, unit_rows(621, 32, seed=7))
    store = Store.create(tmp_path / "s", encoder)
    store.add(texts[:600], ids=range(600), metadata=[{"lang": LANGS[i % 3]} for i in range(600)])
    torch.manual_seed(0)
    tri = TriEncoder(encoder, make_head("hypernet", 32, 4)).eval()
    queries = encoder.encode(texts[600:620]).numpy()
    want = {w: results(store, queries, condition="the colour", head=tri, where=w) for w in (None, "lang = 'fr'")}
    monkeypatch.setattr(vectorfile, "IN_MEMORY_BYTES", 0)
    reopened = Store.open(store.path)
    assert reopened._load_rows("0").file is not None
    for where, expected in want.items():
        assert results(reopened, queries, condition="the colour", head=tri, where=where) == expected


def test_shrink_of_a_streamed_space_equals_the_in_memory_one(tmp_path, monkeypatch):
    store = made(tmp_path, 600, 32)
    fast = {"epochs": 2, "hidden": 32}
    in_memory = store.shrink([8], heldout=60, adapter_params=fast)
    queries = unit_rows(5, 32, seed=1)
    want = [r.ids for r in store.search_vectors(queries, 10, dims=8, basis="adapter", rerank="none")]
    monkeypatch.setattr(vectorfile, "IN_MEMORY_BYTES", 0)
    streamed = Store.open(store.path)
    streamed.shrink([8], heldout=60, seed=1, adapter_params=fast)  # other options: the record is replaced
    assert streamed._load_rows("0").file is not None
    again = streamed.shrink([8], heldout=60, adapter_params=fast)  # the first options, fitted from the file
    assert again["dims"] == in_memory["dims"] and again["rows"] == 600
    assert [r.ids for r in streamed.search_vectors(queries, 10, dims=8, basis="adapter", rerank="none")] == want
