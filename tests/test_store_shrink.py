"""store shrink: the held-out choice of prefix basis (raw, principal axes, adapter), recorded and used by --dims."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from subspaces.errors import DimensionError, SubspacesError
from subspaces.numerics import cpu_record
from subspaces.store import Store

DIM = 32


def tail_heavy(n: int, seed: int = 0) -> np.ndarray:
    """Unit rows whose variance sits in the last 8 coordinates (clusters there); the first 24 are faint noise, so
    a raw 8-dim prefix reads noise while the principal axes find the signal."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(12, 8))
    x = np.concatenate(
        [0.05 * rng.normal(size=(n, DIM - 8)), centres[rng.integers(0, 12, n)] + 0.6 * rng.normal(size=(n, 8))], axis=1
    )
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def foreign(tmp_path, vectors: np.ndarray, name: str = "s") -> Store:
    np.save(tmp_path / f"{name}.npy", vectors)
    store = Store.create_foreign(tmp_path / name, "synthetic", DIM)
    store.import_vectors(tmp_path / f"{name}.npy")
    return store


FAST = {"epochs": 5, "hidden": 64}


def test_shrink_beats_raw_truncation_records_the_choice_and_search_uses_it(tmp_path):
    vectors = tail_heavy(400)
    store = foreign(tmp_path, vectors)
    report = store.shrink([8, 16], heldout=80, adapter_params=FAST)
    at8 = report["dims"]["8"]
    assert at8["used"] in ("pca", "adapter")
    best = max(at8["pca_overlap@10"], at8["adapter_overlap@10"])
    assert best >= at8["model_overlap@10"] + 0.3, at8  # raw truncation reads the noise
    assert at8[f"{at8['used']}_overlap@10"] == best
    recorded = Store.open(store.path).manifest.spaces["0"].shrink
    assert recorded["choice"] == {"8": at8["used"], "16": report["dims"]["16"]["used"]}
    assert recorded["report"] == report and report["fitted_on"] == cpu_record("float32")
    reopened = Store.open(store.path)
    assert reopened.default_basis("0", 8) == at8["used"]
    assert reopened.default_basis("0", 12) == "pca"  # a size not shrunk to: the previous default
    queries = vectors[:20]
    default = reopened.search_vectors(queries, 10, dims=8, rerank="none")
    chosen = reopened.search_vectors(queries, 10, dims=8, rerank="none", basis=at8["used"])
    raw = reopened.search_vectors(queries, 10, dims=8, rerank="none", basis="model")
    assert [r.ids for r in default] == [r.ids for r in chosen] != [r.ids for r in raw]
    reopened.manifest.spaces["0"].shrink["choice"]["8"] = "adapter"  # whatever is recorded is what --dims reads
    reopened.manifest.save(reopened.path)
    third = Store.open(store.path)
    default = third.search_vectors(queries, 10, dims=8, rerank="none")
    assert [r.ids for r in default] == [
        r.ids for r in third.search_vectors(queries, 10, dims=8, rerank="none", basis="adapter")
    ]


def test_adapter_basis_transforms_rows_and_queries_alike_and_a_whole_shortlist_is_exact(tmp_path):
    vectors = tail_heavy(300, seed=1)
    store = foreign(tmp_path, vectors)
    with pytest.raises(SubspacesError, match="store shrink"):
        store.search_vectors(vectors[:2], 5, dims=8, basis="adapter")
    store.shrink("8", heldout=60, adapter_params=FAST)
    assert (store.path / "shrink" / "0" / "adapter" / "adapter.json").is_file()  # kept, chosen or not
    exact = store.search_vectors(vectors[:10], 5)
    whole = store.search_vectors(vectors[:10], 5, dims=8, basis="adapter", shortlist=1000)
    assert [r.ids for r in whole] == [r.ids for r in exact]
    from subspaces.store.shrink import load_adapter

    adapter = load_adapter(store, "0")
    prefix = adapter.transform(vectors)[:, :8]
    prefix /= np.linalg.norm(prefix, axis=1, keepdims=True)
    expected = np.argsort(-(prefix[:5] @ prefix.T), axis=1)[:, :3]
    found = store.search_vectors(vectors[:5], 3, dims=8, basis="adapter", rerank="none")
    ids = store._load_rows("0").ids
    assert [list(r.ids) for r in found] == [[ids[j] for j in row] for row in expected]


def test_rows_added_or_deleted_after_shrink_go_through_it_and_mark_the_choice_stale(tmp_path):
    vectors = tail_heavy(300, seed=2)
    store = foreign(tmp_path, vectors)
    store.shrink("8", heldout=60, adapter_params=FAST)
    assert store.info()["spaces"]["0"]["shrink"]["stale"] is False
    again = store.shrink("8", heldout=60, adapter_params=FAST)  # unchanged table, same options: the record
    assert again == store.manifest.spaces["0"].shrink["report"]
    more = tail_heavy(40, seed=9)
    np.save(tmp_path / "more.npy", more)
    store.import_vectors(tmp_path / "more.npy")
    assert store.info()["spaces"]["0"]["shrink"]["stale"] is True
    found = store.search_vectors(more[:3], 1, dims=8, basis="adapter", shortlist=5)
    assert found[0].scores[0] == pytest.approx(1.0, abs=1e-5)  # a row added later is found through the adapter
    gone = found[0].ids[0]
    store.delete([gone])
    assert gone not in store.search_vectors(more[:1], 5, dims=8, basis="adapter")[0].ids


def test_refusals_are_one_line(tmp_path):
    store = foreign(tmp_path, tail_heavy(300, seed=3))
    with pytest.raises(DimensionError, match="outside 1..31"):
        store.shrink("8,32")
    with pytest.raises(DimensionError, match="integers"):
        store.shrink("eight")
    small = foreign(tmp_path, tail_heavy(12, seed=4), name="small")
    with pytest.raises(SubspacesError, match="add rows"):
        small.shrink("8")


def test_cli_shrink_prints_the_table_and_writes_json(tmp_path):
    from subspaces.cli.app import app

    store = foreign(tmp_path, tail_heavy(300, seed=5))
    out = tmp_path / "report.json"
    result = CliRunner().invoke(
        app,
        ["store", "shrink", str(store.path), "--dims", "8,16", "--heldout", "60", "--epochs", "3", "--json", str(out)],
    )
    assert result.exit_code == 0, result.output
    flat = " ".join(result.output.split())
    assert "raw truncation" in flat and "principal axes" in flat and "adapter" in flat
    report = json.loads(out.read_text())
    assert set(report["dims"]) == {"8", "16"} and report["heldout"] == 60
    info = CliRunner().invoke(app, ["store", "info", str(store.path)])
    assert info.exit_code == 0 and "shrunk: 8 dims:" in " ".join(info.output.split())
    bad = CliRunner().invoke(app, ["store", "shrink", str(store.path), "--dims", "64"])
    assert bad.exit_code == 2 and "outside 1..31" in bad.output
    searched = CliRunner().invoke(
        app, ["store", "search", str(store.path), "--query-vectors", str(tmp_path / "s.npy"), "--dims", "8", "-k", "2"]
    )
    assert searched.exit_code == 0, searched.output


def test_given_queries_judge_the_choice_and_qrels_report_what_search_returns(tmp_path, tiny_model_dir):
    from subspaces.store.migrate import _scores

    rng = np.random.default_rng(0)
    words = ["red", "green", "blue", "cat", "dog", "bird", "tree", "river", "stone", "cloud", "rain", "sun", "moon"]
    texts = [" ".join(rng.choice(words, size=6)) + f" {i}" for i in range(150)]
    store = Store.create(tmp_path / "m", str(tiny_model_dir))
    store.add(texts, ids=[f"d{i}" for i in range(150)], write_batch=64)
    queries = {f"q{i}": texts[i * 5][:-4] for i in range(20)}  # a document less its number
    qrels = {f"q{i}": {f"d{i * 5}": 1.0} for i in range(20)}
    report = store.shrink([8], heldout=30, queries=queries, qrels=qrels, adapter_params=FAST)
    assert report["metric"].endswith("20 given queries")
    vectors = store.encode(list(queries.values()), "query")
    figures = report["qrels"]

    def recall(hits, q):
        return _scores(np.arange(10), np.asarray(hits.ids), qrels[q], 10)[0]

    for basis in ("model", "pca", "adapter"):
        hits = store.search_vectors(vectors, 10, dims=8, basis=basis, rerank="none")
        expected = np.mean([recall(h, q) for h, q in zip(hits, qrels, strict=True)])
        assert figures["8"][basis]["recall@10"] == pytest.approx(expected, abs=1e-4), basis
    exact = store.search_vectors(vectors, 10)
    full = np.mean([recall(h, q) for h, q in zip(exact, qrels, strict=True)])
    assert figures["full"]["recall@10"] == pytest.approx(full, abs=1e-4)
    assert store.shrink([8], heldout=30, queries=queries, qrels=qrels, adapter_params=FAST) == report  # recorded
    by_rows = store.shrink([8], heldout=30, adapter_params=FAST)  # not the queries' record: measured on rows
    assert by_rows["metric"].endswith("held-out rows as queries") and "qrels" not in by_rows
    assert by_rows["dims"]["8"] != report["dims"]["8"]  # the queries, not held-out rows, made the figures
    more = queries | {"extra": "a query with no judgement"}  # checks the choice, is not among the judged
    with_more = store.shrink([8], heldout=30, queries=more, qrels=qrels, adapter_params=FAST)
    assert with_more["metric"].endswith("21 given queries") and with_more["qrels"]["queries"] == 20
    with pytest.raises(SubspacesError, match="--queries"):
        store.shrink([8], qrels=qrels)
    with pytest.raises(SubspacesError, match="at least 2"):
        store.shrink([8], heldout=0)
    with pytest.raises(SubspacesError, match="foreign"):
        foreign(tmp_path, tail_heavy(300, seed=6), name="f").shrink([8], queries=queries)
