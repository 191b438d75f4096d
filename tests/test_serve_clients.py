"""`subspaces serve` with the clients people use (LangChain, LlamaIndex) and what they send: token ids, their own
model names, prompts, `dimensions` only where it is honest, and the OpenAPI schema of the typed responses."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

pytest.importorskip("fastapi")

from fastapi.testclient import TestClient

from live_server import live_server
from subspaces.serve.app import create_app
from subspaces.serve.engine import Engine
from subspaces.serve.settings import ServeSettings

TEXTS = ["A man plays a guitar.", "The dog runs in the park.", "Small red house.", "Naïve café crème."]
PROMPTS = {"query": "query: ", "document": "passage: "}


@pytest.fixture(scope="module")
def prompted_dir(tiny_model_dir, tmp_path_factory):
    """The tiny model (not trained for truncation) with sentence-transformers prompts in its folder."""
    folder = tmp_path_factory.mktemp("prompted") / "st"
    shutil.copytree(tiny_model_dir, folder)
    config_path = folder / "config_sentence_transformers.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    config["prompts"] = PROMPTS
    config_path.write_text(json.dumps(config), encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def engine(prompted_dir) -> Engine:
    return Engine(ServeSettings(backend="torch", model=str(prompted_dir)))


@pytest.fixture
def serve(engine, prompted_dir):
    def make(**options) -> TestClient:
        return TestClient(create_app(ServeSettings(backend="torch", model=str(prompted_dir), **options), engine=engine))

    return make


@pytest.fixture
def byte_tiktoken(monkeypatch, engine):
    """tiktoken's cl100k_base needs a download (this machine is offline, and its file is not cached), so the
    encoding object is replaced by a real ``tiktoken.Encoding`` with one token per byte: LangChain tokenises with
    it and the server decodes with it, as both would with the real one. The engine forgets what it loaded."""
    import tiktoken

    encoding = tiktoken.Encoding(
        name="cl100k_base",
        pat_str=r"""\S+|\s+""",
        mergeable_ranks={bytes([i]): i for i in range(256)},
        special_tokens={},
    )
    monkeypatch.setattr(tiktoken, "get_encoding", lambda name: encoding)
    monkeypatch.setattr(tiktoken, "encoding_for_model", lambda name: encoding)
    monkeypatch.setattr(engine, "_tiktoken", None)
    monkeypatch.setattr(engine, "_tiktoken_failure", None)
    return encoding


def served(client: TestClient, **body) -> np.ndarray:
    response = client.post("/v1/embeddings", json=body)
    assert response.status_code == 200, response.text
    return np.array([row["embedding"] for row in response.json()["data"]])


def error(response) -> str:
    assert response.status_code in (404, 422), response.text
    message = response.json()["error"]["message"]
    assert "\n" not in message  # one line
    return message


# --- token ids ------------------------------------------------------------------------------------------------
def test_openai_token_ids_are_decoded_and_served_as_their_texts(serve, byte_tiktoken):
    ids = [byte_tiktoken.encode(t) for t in TEXTS]
    with serve() as client:
        want = served(client, input=TEXTS)
        np.testing.assert_allclose(served(client, input=ids), want, atol=1e-6)
        np.testing.assert_allclose(served(client, input=ids[1]), want[1:2], atol=1e-6)  # one list of ids
        bad = client.post("/v1/embeddings", json={"input": [[10**9]]})
        negative = client.post("/v1/embeddings", json={"input": [-1]})
    assert "token id" in error(bad) and negative.status_code == 422


def test_token_ids_without_tiktokens_encoding_are_a_422_that_says_what_to_do(serve, engine, monkeypatch):
    import tiktoken

    def offline(name):
        raise ConnectionError("no network")

    monkeypatch.setattr(tiktoken, "get_encoding", offline)
    monkeypatch.setattr(engine, "_tiktoken", None)
    monkeypatch.setattr(engine, "_tiktoken_failure", None)
    with serve() as client:
        message = error(client.post("/v1/embeddings", json={"input": [[1, 2, 3]]}))
        assert "check_embedding_ctx_length=False" in message and "ConnectionError" in message
        assert client.post("/v1/embeddings", json={"input": TEXTS}).status_code == 200  # texts still work


def test_the_models_own_token_ids_with_token_ids_model(prompted_dir):
    engine = Engine(ServeSettings(backend="torch", model=str(prompted_dir), token_ids="model"))
    ids = [engine.model.tokenizer.encode(t) for t in TEXTS]  # with [CLS] and [SEP], as a client would send
    with TestClient(
        create_app(ServeSettings(backend="torch", model=str(prompted_dir), token_ids="model"), engine=engine)
    ) as client:
        np.testing.assert_allclose(served(client, input=ids), served(client, input=TEXTS), atol=1e-6)
        assert "vocabulary" in error(client.post("/v1/embeddings", json={"input": [10**6]}))


# --- model names ------------------------------------------------------------------------------------------------
def test_served_model_names_and_accepting_any_name(serve):
    with serve(aliases=("text-embedding-3-small",)) as client:
        assert client.post("/v1/embeddings", json={"input": "a", "model": "text-embedding-3-small"}).status_code == 200
        message = error(client.post("/v1/embeddings", json={"input": "a", "model": "text-embedding-ada-002"}))
        assert "'st', 'text-embedding-3-small'" in message and "--accept-any-model-name" in message
        assert client.post("/v1/embeddings", json={"input": "a", "model": "text-embedding-ada-002"}).status_code == 404
        listed = [m["id"] for m in client.get("/v1/models").json()["data"]]
        assert listed == ["st", "text-embedding-3-small"]
    with serve(accept_any_model=True) as client:
        body = client.post("/v1/embeddings", json={"input": "a", "model": "text-embedding-ada-002"}).json()
        assert body["model"] == "st"


# --- prompts ------------------------------------------------------------------------------------------------
def test_prompts_from_the_model_folder(serve, engine):
    import torch.nn.functional as F

    model = engine.model
    assert model.prompts.get("query") == "query: "  # read from config_sentence_transformers.json
    with serve() as client:
        plain = served(client, input=TEXTS)
        query = served(client, input=TEXTS, prompt_name="query")
        document = served(client, input=TEXTS, prompt_name="document")
        models = client.get("/v1/models").json()["data"][0]
        unknown = client.post("/v1/embeddings", json={"input": TEXTS, "prompt_name": "passage"})
    want = F.normalize(model.encode(TEXTS, prompt_name="query", convert_to_tensor=True), dim=-1).numpy()
    np.testing.assert_allclose(query, want, atol=1e-5)
    # (the random tiny model moves little with a prompt, but well beyond float noise)
    assert np.abs(query - plain).max() > 1e-4 and np.abs(query - document).max() > 1e-4
    assert models["prompts"] == PROMPTS
    message = error(unknown)
    assert unknown.status_code == 422 and "'passage'" in message and "'query'" in message


def test_query_prompt_on_the_command_line_overrides_the_folders(prompted_dir):
    import torch.nn.functional as F

    settings = ServeSettings(
        backend="torch", model=str(prompted_dir), prompts={"query": "search for: ", "document": "doc: "}
    )
    engine = Engine(settings)
    with TestClient(create_app(settings, engine=engine)) as client:
        got = served(client, input=TEXTS, prompt_name="query")
    want = F.normalize(engine.model.encode(TEXTS, prompt="search for: ", convert_to_tensor=True), dim=-1).numpy()
    np.testing.assert_allclose(got, want, atol=1e-5)


def test_requests_with_different_prompts_in_one_batch_get_their_own_rows(engine):
    parts = [engine.tokenize(TEXTS[:2], "query"), engine.tokenize(TEXTS[2:], None), engine.tokenize(TEXTS, "query")]
    joined = engine.forward(engine.join([p.inputs for p in parts]))
    alone = np.concatenate([engine.forward(p.inputs) for p in parts])
    np.testing.assert_allclose(joined, alone, atol=1e-5)


# --- dimensions ---------------------------------------------------------------------------------------------
def test_dimensions_on_a_model_not_trained_for_truncation_is_refused_with_the_reason(serve):
    with serve() as client:
        message = error(client.post("/v1/embeddings", json={"input": TEXTS, "dimensions": 8}))
        full = client.post("/v1/embeddings", json={"input": TEXTS, "dimensions": 32})
        basis = client.get("/v1/models").json()["data"][0]["dimensions_basis"]
    assert "not trained for truncation" in message and "--adapter" in message
    assert full.status_code == 200 and basis is None


def test_dimensions_with_an_adapter_reads_the_adapted_prefix(prompted_dir, engine, tmp_path):
    from subspaces.adapt import MatryoshkaAdapter
    from subspaces.models.encoder import encode
    from subspaces.vectors import unit_prefix

    rows = np.random.default_rng(0).normal(size=(64, 32)).astype(np.float32)
    MatryoshkaAdapter(dims=(8, 16), hidden=0, epochs=1, batch_size=32).fit(rows).save(tmp_path / "adapter")
    settings = ServeSettings(backend="torch", model=str(prompted_dir), adapter=tmp_path / "adapter")
    adapted_engine = Engine(settings)
    adapter = MatryoshkaAdapter.load(tmp_path / "adapter")
    with TestClient(create_app(settings, engine=adapted_engine)) as client:
        got = served(client, input=TEXTS, dimensions=8)
        basis = client.get("/v1/models").json()["data"][0]["dimensions_basis"]
    import torch

    raw = encode(engine.model, TEXTS)
    want = unit_prefix(torch.from_numpy(adapter.transform(raw)), 8).numpy()
    assert basis == "adapter" and got.shape == (4, 8)
    np.testing.assert_allclose(got, want, atol=1e-5)
    assert not np.allclose(got, unit_prefix(torch.from_numpy(raw), 8).numpy(), atol=1e-3)
    # The full size, asked for or not, is the model's own vectors (not the adapted ones): one set of coordinates.
    with TestClient(create_app(settings, engine=adapted_engine)) as client:
        full, default = served(client, input=TEXTS, dimensions=32), served(client, input=TEXTS)
    np.testing.assert_allclose(full, default, atol=1e-6)
    np.testing.assert_allclose(default, unit_prefix(torch.from_numpy(raw), None).numpy(), atol=1e-5)


def test_an_adapter_of_another_size_is_refused(prompted_dir, tmp_path):
    from subspaces.adapt import MatryoshkaAdapter
    from subspaces.errors import SubspacesError

    rows = np.random.default_rng(0).normal(size=(64, 16)).astype(np.float32)
    MatryoshkaAdapter(dims=(8,), hidden=0, epochs=1, batch_size=32).fit(rows).save(tmp_path / "adapter")
    with pytest.raises(SubspacesError, match="16-d rows; the model gives 32"):
        Engine(ServeSettings(backend="torch", model=str(prompted_dir), adapter=tmp_path / "adapter"))


def test_dimensions_with_a_store_reads_its_principal_axes(prompted_dir, tmp_path):
    store_module = pytest.importorskip("subspaces.store")
    import torch

    from subspaces.models.encoder import encode
    from subspaces.vectors import principal_axes, unit_prefix

    store = store_module.Store.create(tmp_path / "store", str(prompted_dir))
    store.add([f"{t} {i}" for i in range(10) for t in TEXTS])
    settings = ServeSettings(backend="torch", model=str(prompted_dir), store=tmp_path / "store")
    with TestClient(create_app(settings)) as client:
        import time

        deadline = time.monotonic() + 30
        while client.get("/health").status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.02)
        got = served(client, input=TEXTS, dimensions=8)
        assert client.get("/v1/models").json()["data"][0]["dimensions_basis"] == "pca"
        engine = client.app.state.serve.engine
        search = client.post("/v1/search", json={"query": TEXTS[0], "k": 3, "dimensions": 8, "basis": "model"})
        assert search.status_code == 200, search.text
        assert error(client.post("/v1/search", json={"query": "a", "basis": "other"}))
    np.testing.assert_allclose(
        engine.axes, principal_axes(engine.store._load_rows(engine.store.manifest.active).vectors)
    )
    raw = encode(engine.model, TEXTS)
    want = unit_prefix(torch.from_numpy(raw @ engine.axes), 8).numpy()
    np.testing.assert_allclose(got, want, atol=1e-5)


# --- OpenAPI ------------------------------------------------------------------------------------------------
def test_openapi_schema_types_the_embeddings_route(serve):
    with serve() as client:
        response = client.get("/openapi.json")
    assert response.status_code == 200
    schema = response.json()
    route = schema["paths"]["/v1/embeddings"]["post"]
    ok = route["responses"]["200"]["content"]["application/json"]["schema"]
    assert ok == {"$ref": "#/components/schemas/EmbeddingResponse"}
    components = schema["components"]["schemas"]
    assert set(components["EmbeddingResponse"]["required"]) == {"data", "model", "usage"}
    assert components["EmbeddingResponse"]["properties"]["data"]["items"] == {"$ref": "#/components/schemas/Embedding"}
    assert route["responses"]["422"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/ErrorResponse"
    }
    request = components["EmbeddingRequest"]["properties"]["input"]["anyOf"]
    assert {"type": "array", "items": {"type": "integer", "minimum": 0}} in request
    for path in ("/v1/models", "/v1/similarity", "/health"):
        assert "$ref" in json.dumps(schema["paths"][path])


# --- the real client packages, against a live server --------------------------------------------------------
def test_langchain_openai_embeddings_with_its_defaults(engine, prompted_dir, byte_tiktoken, monkeypatch):
    langchain_openai = pytest.importorskip("langchain_openai")
    decoded: list[int] = []
    real = engine.decode_ids
    monkeypatch.setattr(engine, "decode_ids", lambda rows: decoded.append(len(rows)) or real(rows))
    # LangChain names its own default model (text-embedding-ada-002): the server accepts any name.
    app = create_app(ServeSettings(backend="torch", model=str(prompted_dir), accept_any_model=True), engine=engine)
    with live_server(app) as url:
        client = langchain_openai.OpenAIEmbeddings(base_url=f"{url}/v1", api_key="anything", max_retries=0)
        assert client.check_embedding_ctx_length and client.tiktoken_enabled  # the defaults: token ids
        documents = np.array(client.embed_documents(TEXTS))
        query = np.array(client.embed_query(TEXTS[0]))
    from subspaces.models.encoder import encode

    want = encode(engine.model, TEXTS, normalize=True)
    np.testing.assert_allclose(documents, want, atol=1e-5)
    np.testing.assert_allclose(query, want[0], atol=1e-5)
    assert decoded == [len(TEXTS), 1]  # it sent token ids, and the server read them


def test_llama_index_openai_embedding(engine, prompted_dir):
    llama_openai = pytest.importorskip("llama_index.embeddings.openai")
    app = create_app(
        ServeSettings(backend="torch", model=str(prompted_dir), aliases=("text-embedding-ada-002",)), engine=engine
    )
    with live_server(app) as url:
        client = llama_openai.OpenAIEmbedding(api_base=f"{url}/v1", api_key="anything", max_retries=0)
        documents = np.array(client.get_text_embedding_batch(TEXTS))
        query = np.array(client.get_query_embedding(TEXTS[1]))
    from subspaces.models.encoder import encode

    want = encode(engine.model, TEXTS, normalize=True)
    np.testing.assert_allclose(documents, want, atol=1e-5)
    np.testing.assert_allclose(query, want[1], atol=1e-5)
