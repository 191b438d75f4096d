"""`subspaces serve --store DIR` encodes `/v1/search` queries after the store's recorded query prompt, so a served
search is `store search`'s; a request's `prompt_name` still wins, as on `/v1/embeddings`."""

from __future__ import annotations

import json
import shutil
import time

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("subspaces.store")

from fastapi.testclient import TestClient

from subspaces.serve.app import create_app
from subspaces.serve.settings import ServeSettings
from subspaces.store import Store

TEXTS = [
    "A man plays a guitar.",
    "The dog runs in the park.",
    "Small red house.",
    "A woman eats food quickly.",
    "Children sing in the choir.",
    "The cat sleeps on the warm mat.",
]
QUERIES = ["who plays music?", "an animal outside", "a small home"]


def _served(model_dir, store_dir, queries, k, **request) -> list[dict]:
    with TestClient(create_app(ServeSettings(backend="torch", model=str(model_dir), store=store_dir))) as client:
        deadline = time.monotonic() + 30
        while client.get("/health").status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.02)
        answers = [client.post("/v1/search", json={"query": q, "k": k, **request}) for q in queries]
    assert all(a.status_code == 200 for a in answers), [a.text for a in answers]
    return [a.json()["data"] for a in answers]


def _same_hits(served: list[dict], expected) -> None:
    assert [d["id"] for d in served] == expected.ids
    # This random model's rows are nearly parallel: a prompt moves scores by ~1e-5, so the tolerance is tighter.
    assert [d["score"] for d in served] == pytest.approx(expected.scores, abs=1e-6)


def test_served_search_uses_the_stores_query_prompt(tiny_model_dir, tmp_path):
    store = Store.create(tmp_path / "store", str(tiny_model_dir), query_prompt="query: ")
    store.add(TEXTS, ids=[str(i) for i in range(len(TEXTS))])
    assert store.prompt("query") == "query: "
    k = len(TEXTS)  # every row: the whole ranking and every score compared
    served = _served(tiny_model_dir, tmp_path / "store", QUERIES, k)
    for query, hits in zip(QUERIES, served, strict=True):
        _same_hits(hits, store.search(query, k))
        # The prompt matters to this model: the same query without it ranks the rows otherwise.
        assert [d["id"] for d in hits] != store.search(query, k, query_prompt="").ids


def test_a_requests_prompt_name_wins_over_the_stores(tiny_model_dir, tmp_path):
    folder = tmp_path / "prompted"
    shutil.copytree(tiny_model_dir, folder)
    config_path = folder / "config_sentence_transformers.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    config["prompts"] = {"query": "query: ", "search": "search for: "}
    config_path.write_text(json.dumps(config), encoding="utf-8")
    store = Store.create(tmp_path / "store", str(folder), query_prompt="Represent this question: ")
    store.add(TEXTS, ids=[str(i) for i in range(len(TEXTS))])
    k = len(TEXTS)
    by_store = _served(folder, tmp_path / "store", QUERIES, k)
    by_name = _served(folder, tmp_path / "store", QUERIES, k, prompt_name="search")
    for query, stored, named in zip(QUERIES, by_store, by_name, strict=True):
        _same_hits(stored, store.search(query, k))
        _same_hits(named, store.search(query, k, query_prompt="search for: "))
    assert any([d["id"] for d in s] != [d["id"] for d in n] for s, n in zip(by_store, by_name, strict=True))


def test_a_store_without_a_recorded_query_prompt_searches_as_before(tiny_model_dir, tmp_path):
    store = Store.create(tmp_path / "store", str(tiny_model_dir))
    store.add(TEXTS, ids=[str(i) for i in range(len(TEXTS))])
    assert store.prompt("query") is None
    k = len(TEXTS)
    served = _served(tiny_model_dir, tmp_path / "store", QUERIES, k)
    for query, hits in zip(QUERIES, served, strict=True):
        _same_hits(hits, store.search(query, k))
