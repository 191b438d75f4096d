"""The store's basics (issue 52 item 2): typed metadata columns and where= in every search mode, delete, derived
artefacts across deletes and upserts, ANN refine_factor, the typed SearchResult."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest
import torch

from subspaces.errors import DataError, SubspacesError
from subspaces.store import Store
from subspaces.store.results import SearchResult
from test_store import LookupEncoder

N, DIM = 400, 16
LANGS = ("en", "de", "fr", "ja")


def spread(n: int = N, dim: int = DIM, seed: int = 0) -> np.ndarray:
    x = np.random.default_rng(seed).normal(size=(n, dim))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


@pytest.fixture
def made(tmp_path):
    """400 spread-out rows (a lookup 'model'), metadata lang (a quarter 'ja') and year."""
    texts = [f"text {i}" for i in range(N + 20)]
    encoder = LookupEncoder(texts, spread(N + 20))
    store = Store.create(tmp_path / "s", encoder)
    meta = [{"lang": LANGS[i % 4], "year": 2000 + i % 10, "tags": ["a"]} for i in range(N)]
    store.add(texts[:N], ids=range(N), metadata=meta, write_batch=128)
    return store, encoder, texts


def brute(store: Store, queries: np.ndarray, k: int, keep) -> list[list[str]]:
    loaded = store._load_rows("0")
    ok = np.array([keep(json.loads(m)) for m in loaded.metadata])
    scores = queries @ loaded.vectors.T
    scores[:, ~ok] = -np.inf
    return [loaded.ids[np.argsort(-row, kind="stable")[:k]].tolist() for row in scores]


def test_typed_columns_and_where_in_every_mode_return_k_matching_rows(made):
    store, encoder, texts = made
    schema = store._table("0").schema
    assert str(schema.field("lang").type) == "string" and str(schema.field("year").type) == "int64"
    assert "tags" not in schema.names  # a list stays in the JSON
    queries = texts[N:]
    vectors = encoder.encode(queries).numpy()
    where, keep = "lang = 'ja' AND year >= 2005", lambda m: m["lang"] == "ja" and m["year"] >= 2005
    want = brute(store, vectors, 10, keep)
    exact = store.search(queries, k=10, model=encoder, where=where)
    assert [r.ids for r in exact] == want
    funnel = store.search(queries, k=10, model=encoder, where=where, dims=4, shortlist=50)  # shortlist: all matches
    assert [r.ids for r in funnel] == want
    for basis in ("model", "pca"):
        small = store.search(queries, k=10, model=encoder, where=where, dims=4, shortlist=2, basis=basis)
        assert all(len(r.ids) == 10 and all(keep(m) for m in r.metadata) for r in small)
    store.index(num_partitions=2, num_sub_vectors=4)
    ann = store.search(queries, k=10, model=encoder, where=where, nprobes=2)
    assert all(len(r.ids) == 10 and all(keep(m) for m in r.metadata) for r in ann)
    for kind in ("int8", "binary"):
        store.quantize(kind)
        quantized = store.search(queries, k=10, model=encoder, where=where, quantized=True, rescore=50)
        assert all(len(r.ids) == 10 and all(keep(m) for m in r.metadata) for r in quantized), kind
        if kind == "binary":  # rescored against the floats over every match: the exact answer
            assert [r.ids for r in quantized] == want
    # a filter few rows pass: all of them, no padding
    assert sorted(store.search(queries[0], k=10, model=encoder, where="year = 2001 AND lang = 'en'").ids) == []
    assert len(store.search(queries[0], k=10, model=encoder, where="id = '7'").ids) == 1
    with pytest.raises(SubspacesError, match="the filter 'nope = 1' cannot be applied: .*nope"):
        store.search(queries[0], model=encoder, where="nope = 1")


def test_where_in_conditional_search(made):
    from subspaces.models.heads import make_head
    from subspaces.models.triencoder import TriEncoder

    store, encoder, texts = made
    torch.manual_seed(0)
    tri = TriEncoder(encoder, make_head("hypernet", DIM, 4)).eval()
    encoder.row["the colour"] = 0  # the condition's text, looked up like the rows
    hits = store.search(texts[N : N + 3], k=8, condition="the colour", head=tri, where="lang = 'de'")
    every = store.search(texts[N : N + 3], k=N, condition="the colour", head=tri)
    for hit, whole in zip(hits, every, strict=True):
        assert hit.ids == [i for i, m in zip(whole.ids, whole.metadata, strict=True) if m["lang"] == "de"][:8]


def test_a_mistyped_field_is_refused_before_writing_and_old_json_stores_get_columns_by_repair(made, tmp_path):
    store, encoder, texts = made
    with pytest.raises(DataError, match="row 1: metadata field 'year' holds a str .* int64"):
        store.add(texts[N : N + 2], ids=["x", "y"], metadata=[{"year": 1}, {"year": "soon"}])
    assert store.count() == N
    store.add([texts[N]], ids=["z"], metadata=[{"score": 1}])  # the first write types the column: int64
    with pytest.raises(DataError, match="row 0: metadata field 'score' holds a float .* int64"):
        store.add([texts[N + 1]], ids=["w"], metadata=[{"score": 2.5}])
    store.add([texts[N + 1]], ids=["w"], metadata=[{"rank": 1}, {"rank": 2.5}][:1])
    assert store.count() == N + 2
    mixed = Store.create(tmp_path / "mixed", encoder)
    mixed.add(texts[:2], ids=["a", "b"], metadata=[{"rank": 1}, {"rank": 2.5}])  # ints and floats at once: float
    assert str(mixed._table("0").schema.field("rank").type) == "double"
    # an old store: metadata as JSON only, as every store before typed columns
    old = Store.create(tmp_path / "old2", encoder)
    table = old._table("0").handle
    table.add(
        pa.table(
            {
                "id": ["a", "b"],
                "text": [texts[0], texts[1]],
                "vector": pa.FixedSizeListArray.from_arrays(pa.array(spread()[:2].ravel()), DIM),
                "metadata": [json.dumps({"lang": "en"}), json.dumps({"lang": "de"})],
            }
        )
    )
    with pytest.raises(SubspacesError, match="cannot be applied"):
        old.search(texts[0], k=1, where="lang = 'de'")
    assert old.repair()["0"]["columns"] == 1
    assert Store.open(old.path).search(texts[0], k=2, model=encoder, where="lang = 'de'").ids == ["b"]


def test_repair_fills_a_typed_column_that_a_killed_write_left_empty(made, tmp_path):
    _, encoder, texts = made
    store = Store.create(tmp_path / "killed", encoder)
    table = store._table("0").handle
    vectors = pa.FixedSizeListArray.from_arrays(pa.array(spread()[:3].ravel()), DIM)
    meta = [json.dumps({"lang": "en"}), json.dumps({"lang": "de"}), None]
    table.add(pa.table({"id": ["a", "b", "c"], "text": texts[:3], "vector": vectors, "metadata": meta}))
    table.add_columns([pa.field("lang", pa.string())])  # the column made, the kill before its rows were filled
    assert store.search(texts[0], k=3, where="lang = 'de'").ids == []
    assert store.repair()["0"]["columns"] == 1
    assert Store.open(store.path).search(texts[0], k=3, model=encoder, where="lang = 'de'").ids == ["b"]
    assert store.repair()["0"]["columns"] == 0


def test_delete_keeps_every_derived_artefact_correct_or_stale(made):
    store, encoder, texts = made
    store.index(num_partitions=2, num_sub_vectors=4)
    store.quantize("int8")
    queries = texts[:5]  # their own rows rank first
    axes_before = store.principal_axes().copy()
    assert store.delete(["0", "1", "nope"]) == {"deleted": 2, "missing": 1}
    assert store.count() == N - 2
    for options in ({}, {"ann": True}, {"dims": 4, "shortlist": 400}, {"dims": 4, "basis": "pca"}):
        hits = store.search(queries, k=3, model=encoder, **options)
        assert all(not {"0", "1"} & set(h.ids) for h in hits), options
        assert [h.ids[0] for h in hits[2:]] == ["2", "3", "4"], options
    assert not np.allclose(store.principal_axes(), axes_before)  # refitted
    with pytest.raises(SubspacesError, match="stale .*deleted"):
        store.search(queries, model=encoder, quantized=True)
    assert Store.open(store.path).info()["spaces"]["0"]["quantized"]["stale"]
    store.quantize("int8")
    assert store.search(texts[3], k=1, model=encoder, quantized=True).ids == ["3"]


def test_delete_and_upsert_reach_a_pending_migration(made):
    store, encoder, texts = made
    rotated = LookupEncoder(list(encoder.row), encoder.table.numpy()[:, ::-1].copy())
    store.migrate(rotated, pairs=200, heldout=20)
    store.delete(["5"])
    assert store.count("0") == store.count("1") == N - 1
    store.add([texts[N]], ids=["6"], upsert=True)  # "6" now holds another text: replaced in both spaces
    assert store.search(texts[N], k=1, model=rotated).ids == ["6"]
    assert store.commit() == "1" and store.count() == N - 1


def test_ann_refine_factor_reranks_and_improves_recall(tmp_path):
    x = spread(3000, 32, seed=1)
    texts = [f"t{i}" for i in range(3000)]
    store = Store.create(tmp_path / "s", LookupEncoder(texts, x))
    store.add(texts, ids=range(3000), write_batch=1000)
    store.index(num_partitions=16, num_sub_vectors=8)
    queries = spread(50, 32, seed=2)
    exact = store.search_vectors(queries, k=10)

    def recall(found):
        return np.mean([len(set(a.ids) & set(b.ids)) / 10 for a, b in zip(exact, found, strict=True)])

    plain = store.search_vectors(queries, k=10, ann=True, refine_factor=None, nprobes=16)
    refined = store.search_vectors(queries, k=10, ann=True, nprobes=16)  # default: refine_factor 4
    assert recall(refined) > recall(plain) + 0.1, (recall(refined), recall(plain))
    for result in refined:  # the scores are exact cosines, best first
        np.testing.assert_allclose(result.scores, sorted(result.scores, reverse=True))
    with pytest.raises(SubspacesError, match="refine_factor must be at least 1"):
        store.search_vectors(queries, ann=True, refine_factor=0)


def test_search_result_is_typed_and_reads_as_the_old_dict(made):
    store, encoder, texts = made
    hit = store.search(texts[2], k=2, model=encoder)
    assert isinstance(hit, SearchResult) and hit.query == texts[2]
    assert hit["ids"] == hit.ids and hit["texts"][0] == texts[2] and hit.metadata[0]["lang"] == "fr"
    assert {**hit}["scores"] == hit.scores and set(hit) == {"query", "ids", "scores", "texts", "metadata"}
    assert hit == hit.to_dict() and json.loads(json.dumps(hit.to_dict()))["ids"] == hit.ids


def test_dims_defaults_to_the_principal_axes_unless_the_model_was_trained_for_truncation(tmp_path, tiny_model_dir):
    from subspaces.store.fingerprint import ModelFingerprint
    from subspaces.store.matryoshka import trained

    plain = ModelFingerprint(str(tiny_model_dir), "w", 32, "Pooling(cls)", True)
    assert not trained(plain) and not trained(ModelFingerprint.of_foreign("ada", 8))
    run = tmp_path / "mrl"
    run.mkdir()
    (run / "trainer_state.json").write_text(json.dumps({"settings": {"dims": [16, 32, None]}}), encoding="utf-8")
    assert trained(ModelFingerprint(str(run), "w", 32, "Pooling(cls)", True))
    store = Store.create(tmp_path / "s", str(tiny_model_dir))
    assert store.default_basis() == "pca"
    store.manifest.spaces["0"] = type(store.manifest.spaces["0"])(
        table="space_0", model=ModelFingerprint(str(run), "w", 32, "Pooling(cls)", True)
    )
    assert store.default_basis() == "model"


def test_a_plan_is_the_value_the_options_choose(made):
    from subspaces.store import plans

    store, encoder, texts = made
    queries = spread(N + 20)[N:]
    where = "lang = 'en'"
    chosen = plans.plan(DIM, dims=4, shortlist=3, basis="pca", where=where)
    assert chosen == plans.Funnel(dims=4, shortlist=3, basis="pca", where=where)
    by_plan = store.search_vectors(queries, 5, plan=chosen)
    assert [r.ids for r in by_plan] == [
        r.ids for r in store.search_vectors(queries, 5, dims=4, shortlist=3, where=where)
    ]
    assert (
        store.search(texts[N], 5, model=encoder, plan=plans.Exact(where)).ids
        == brute(store, queries[:1], 5, lambda m: m["lang"] == "en")[0]
    )
    with pytest.raises(SubspacesError, match="quantized search reads the quantized copy alone"):
        plans.plan(DIM, quantized=True, dims=4)
    with pytest.raises(SubspacesError, match="give a plan or its options"):
        store.search_vectors(queries, 5, plan=chosen, ann=True)
