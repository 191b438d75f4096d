"""`subspaces serve`: every route on the tiny model, the batcher, limits, auth, metrics, and the real OpenAI client."""

from __future__ import annotations

import base64
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

pytest.importorskip("fastapi")

from fastapi.testclient import TestClient

from live_server import live_server
from subspaces.serve.app import create_app
from subspaces.serve.batcher import Batcher, BatchInfo, QueueFull
from subspaces.serve.engine import Engine
from subspaces.serve.settings import ServeSettings

TEXTS = ["A man plays a guitar.", "The dog runs in the park.", "Small red house.", "A woman eats food quickly."]


@pytest.fixture(scope="module")
def matryoshka_dir(tiny_model_dir, tmp_path_factory):
    """The tiny model, its folder saying it was trained for truncation (a model card naming MatryoshkaLoss, as
    the store reads it): ``dimensions`` reads its own prefix. The folder is still named ``st``."""
    import shutil

    folder = tmp_path_factory.mktemp("matryoshka") / "st"
    shutil.copytree(tiny_model_dir, folder)
    (folder / "README.md").write_text("Trained with MatryoshkaLoss.\n", encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def engine(matryoshka_dir) -> Engine:
    return Engine(ServeSettings(backend="torch", model=str(matryoshka_dir)))


@pytest.fixture
def serve(engine, matryoshka_dir):
    """``serve(**settings)``: a test client of an app over the shared engine, ready as soon as it starts."""

    def make(**options) -> TestClient:
        return TestClient(
            create_app(ServeSettings(backend="torch", model=str(matryoshka_dir), **options), engine=engine)
        )

    return make


def metric(text: str, name: str, **labels: str) -> float:
    """The value of one sample in Prometheus' text format (0 when absent)."""
    for line in text.splitlines():
        if not line.startswith(name):
            continue
        match = re.fullmatch(rf"{re.escape(name)}(?:\{{(.*)\}})? (\S+)", line)
        if match is None:
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', match.group(1) or ""))
        if found == labels:
            return float(match.group(2))
    return 0.0


def blocked(client: TestClient) -> threading.Event:
    """Occupy the worker until the returned event is set (so requests pile up in the queue)."""
    gate, started = threading.Event(), threading.Event()

    def hold() -> None:
        started.set()
        gate.wait(10)

    client.app.state.serve.batcher.call(hold)
    assert started.wait(5)
    return gate


def wait_for_depth(client: TestClient, depth: int) -> None:
    batcher = client.app.state.serve.batcher
    deadline = time.monotonic() + 5
    while batcher.depth < depth and time.monotonic() < deadline:
        time.sleep(0.005)
    assert batcher.depth == depth


# --- /v1/embeddings -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dimensions", [None, 16])
def test_embeddings_equal_encode_output(serve, engine, dimensions):
    from subspaces.models.encoder import encode

    with serve() as client:
        response = client.post("/v1/embeddings", json={"input": TEXTS, "model": "st", "dimensions": dimensions})
    assert response.status_code == 200, response.text
    body = response.json()
    got = np.array([row["embedding"] for row in body["data"]])
    want = encode(engine.model, TEXTS, normalize=True, truncate_dim=dimensions)
    assert got.shape == (len(TEXTS), dimensions or 32)
    assert [row["index"] for row in body["data"]] == list(range(len(TEXTS)))
    np.testing.assert_allclose(got, want, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)  # re-normalised after truncation
    tokens = sum(engine.token_counts(TEXTS))
    assert body["usage"] == {"prompt_tokens": tokens, "total_tokens": tokens} and tokens > len(TEXTS)
    assert body["model"] == "st" and body["object"] == "list"


def test_one_string_input_and_base64_round_trip(serve):
    with serve() as client:
        floats = client.post("/v1/embeddings", json={"input": TEXTS[0], "dimensions": 8}).json()["data"]
        packed = client.post(
            "/v1/embeddings", json={"input": TEXTS[0], "dimensions": 8, "encoding_format": "base64"}
        ).json()["data"]
    assert len(floats) == len(packed) == 1
    decoded = np.frombuffer(base64.b64decode(packed[0]["embedding"]), dtype="<f4")
    np.testing.assert_array_equal(decoded, np.array(floats[0]["embedding"], dtype=np.float32))


@pytest.mark.parametrize(
    "body",
    [
        {"input": [1, 2]},  # numbers are not texts (nor token ids here)
        {"input": "a", "dimensions": "8"},  # a string is not a number
        {"input": "a", "dimensions": 33},  # over the model's 32
        {"input": "a", "dimensions": 0},
        {"input": "a", "encoding_format": "hex"},
        {"input": []},
        {"text": "a"},  # no input at all
        ["a"],  # not an object
    ],
)
def test_wrong_requests_are_422_with_a_json_error(serve, body):
    with serve() as client:
        response = client.post("/v1/embeddings", json=body)
    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] == 422 and response.json()["error"]["message"]


def test_malformed_json_is_422_not_500(serve):
    with serve() as client:
        response = client.post(
            "/v1/embeddings", content=b'{"input": ["a",', headers={"content-type": "application/json"}
        )
    assert response.status_code == 422
    assert response.json()["error"]["type"] == "invalid_request_error"


def test_unknown_model_is_404_and_models_lists_the_served_one(serve):
    with serve(model_id="tiny") as client:
        assert client.post("/v1/embeddings", json={"input": "a", "model": "gpt-9"}).status_code == 404
        assert client.post("/v1/embeddings", json={"input": "a", "model": "tiny"}).status_code == 200
        listed = client.get("/v1/models").json()["data"]
    assert [(m["id"], m["dimensions"]) for m in listed] == [("tiny", 32)]


# --- limits, backpressure, timeouts ---------------------------------------------------------------------------
def test_too_many_inputs_and_too_large_bodies_are_413(serve):
    with serve(max_inputs=2, max_body_bytes=300) as client:
        assert client.post("/v1/embeddings", json={"input": ["a", "b", "c"]}).status_code == 413
        big = '{"input": "' + "word " * 100 + '"}'
        declared = client.post("/v1/embeddings", content=big, headers={"content-type": "application/json"})
        chunked = client.post(  # no Content-Length: counted as it arrives
            "/v1/embeddings",
            content=iter([big[:200].encode(), big[200:].encode()]),
            headers={"content-type": "application/json"},
        )
        assert client.post("/v1/embeddings", json={"input": ["a", "b"]}).status_code == 200
    for response in (declared, chunked):
        assert response.status_code == 413 and "bytes" in response.json()["error"]["message"]


def test_full_queue_is_503_with_retry_after_then_recovers(serve):
    with serve(max_queue=1) as client:
        gate = blocked(client)
        with ThreadPoolExecutor(1) as pool:
            waiting = pool.submit(client.post, "/v1/embeddings", json={"input": "first"})
            wait_for_depth(client, 1)
            refused = client.post("/v1/embeddings", json={"input": "second"})
            gate.set()
            assert waiting.result().status_code == 200
        assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
        assert "busy" in refused.json()["error"]["message"]
        assert client.post("/v1/embeddings", json={"input": "third"}).status_code == 200
        assert metric(client.get("/metrics").text, "subspaces_requests_total", route="/v1/embeddings", code="503") == 1
        assert metric(client.get("/metrics").text, "subspaces_rejected_total") == 1


def test_a_request_past_its_timeout_is_504_and_is_never_run(serve):
    # 1 s, not less: the request after it must finish within the same timeout on busy cores
    with serve(request_timeout_s=1.0) as client:
        gate = blocked(client)
        response = client.post("/v1/embeddings", json={"input": "late"})
        gate.set()
        after = client.post("/v1/embeddings", json={"input": "after"})
        assert after.status_code == 200, after.text
        batches = metric(client.get("/metrics").text, "subspaces_batch_texts_count")
    assert response.status_code == 504 and response.json()["error"]["code"] == 504
    assert batches == 1  # only "after" was encoded: the timed-out job was dropped from the queue


def test_health_is_ready_only_once_the_model_loaded(tmp_path):
    with TestClient(create_app(ServeSettings(backend="torch", model=str(tmp_path / "missing")))) as client:
        deadline = time.monotonic() + 30  # the first import of torch alone can take 10 s on busy cores
        while client.get("/health").json()["status"] == "loading" and time.monotonic() < deadline:
            time.sleep(0.02)
        health = client.get("/health")
        embed = client.post("/v1/embeddings", json={"input": "a"})
    assert health.status_code == 503 and health.json()["status"] == "failed"
    assert embed.status_code == 503 and "failed to load" in embed.json()["error"]["message"]


def test_health_loads_in_the_background(tiny_model_dir):
    with TestClient(create_app(ServeSettings(backend="torch", model=str(tiny_model_dir)))) as client:
        first = client.get("/health").status_code
        deadline = time.monotonic() + 30
        while client.get("/health").status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert client.get("/health").json() == {"status": "ok", "model": "st", "backend": "torch"}
        assert client.post("/v1/embeddings", json={"input": "a"}).status_code == 200
    assert first in (200, 503)  # answered while loading, never blocked by it


# --- batching -------------------------------------------------------------------------------------------------
def _rows(texts: list[str]) -> np.ndarray:
    return np.array([[len(t), i] for i, t in enumerate(texts)], dtype=np.float32)


def test_batcher_coalesces_waiting_jobs_within_the_token_budget():
    seen: list[BatchInfo] = []
    batcher = Batcher(_rows, max_batch_tokens=4 * 3, max_wait=0.0, max_queue=16, on_batch=seen.append)
    gate = threading.Event()
    batcher.call(lambda: gate.wait(5))
    futures = [batcher.encode([f"text {i}"], [3]) for i in range(6)]  # 4 texts x 3 tokens fit the budget, 5 do not
    gate.set()
    results = [f.result(5) for f in futures]
    batcher.close()
    assert [(b.requests, b.texts, b.padded_tokens) for b in seen] == [(4, 4, 12), (2, 2, 6)]
    assert [r.shape for r in results] == [(1, 2)] * 6
    assert [r[0, 1] for r in results] == [0, 1, 2, 3, 0, 1]  # each job got its own row of its batch


def test_a_batch_is_counted_before_its_callers_get_their_rows_and_a_failing_hook_strands_nobody():
    """A client holding its reply must find its batch in /metrics; a metrics hook that raises loses no result."""
    done_when_counted: list[bool] = []
    futures: list = []

    def hook(info: BatchInfo) -> None:
        done_when_counted.append(futures[0].done())
        raise RuntimeError("broken hook")

    batcher = Batcher(_rows, max_batch_tokens=1000, max_wait=0.0, max_queue=4, on_batch=hook)
    gate = threading.Event()
    batcher.call(lambda: gate.wait(5))
    futures.append(batcher.encode(["a"], [1]))
    gate.set()
    assert futures[0].result(5).shape == (1, 2)
    assert batcher.encode(["b"], [1]).result(5).shape == (1, 2)  # the worker lives on
    batcher.close()
    assert done_when_counted[0] is False and len(done_when_counted) == 2


def test_batcher_waits_for_company_and_reports_errors_to_every_caller():
    seen: list[BatchInfo] = []

    def fail(texts: list[str]) -> np.ndarray:
        if "bad" in texts:
            raise ValueError("cannot encode")
        return _rows(texts)

    batcher = Batcher(fail, max_batch_tokens=1000, max_wait=0.3, max_queue=2, on_batch=seen.append)
    first, second = batcher.encode(["a"], [1]), batcher.encode(["b", "c"], [1, 1])  # the first waits; both go
    assert [len(f.result(5)) for f in (first, second)] == [1, 2] and seen[0].requests == 2
    bad, good = batcher.encode(["bad"], [1]), batcher.encode(["x"], [1])
    with pytest.raises(ValueError, match="cannot encode"):
        bad.result(5)
    with pytest.raises(ValueError):
        good.result(5)  # it shared the failing batch
    assert batcher.encode(["after"], [1]).result(5).shape == (1, 2)  # the worker lives on
    gate = threading.Event()
    batcher.call(lambda: gate.wait(5))
    time.sleep(0.05)
    batcher.encode(["q1"], [1])
    batcher.encode(["q2"], [1])
    with pytest.raises(QueueFull):
        batcher.encode(["q3"], [1])
    gate.set()
    batcher.close()


def test_concurrent_http_requests_share_one_forward_pass(serve, engine):
    from subspaces.models.encoder import encode

    with serve(max_wait_ms=0) as client:
        gate = blocked(client)
        with ThreadPoolExecutor(6) as pool:
            futures = [pool.submit(client.post, "/v1/embeddings", json={"input": [t]}) for t in TEXTS + TEXTS[:2]]
            wait_for_depth(client, 6)
            gate.set()
            responses = [f.result() for f in futures]
        text = client.get("/metrics").text
    got = np.array([r.json()["data"][0]["embedding"] for r in responses])
    np.testing.assert_allclose(got, encode(engine.model, TEXTS + TEXTS[:2], normalize=True), atol=1e-5)
    assert metric(text, "subspaces_batches_total") == 1
    assert metric(text, "subspaces_batch_requests_sum") == 6 and metric(text, "subspaces_batch_texts_sum") == 6


# --- /v1/similarity, /v1/search -------------------------------------------------------------------------------
def test_similarity_is_the_cosine_of_the_served_embeddings(serve, engine):
    from subspaces.models.encoder import encode

    pairs = [[TEXTS[0], TEXTS[1]], [TEXTS[2], TEXTS[2]]]
    with serve() as client:
        body = client.post("/v1/similarity", json={"pairs": pairs, "dimensions": 16}).json()
        no_head = client.post("/v1/similarity", json={"pairs": pairs, "condition": "colour"})
        bad = client.post("/v1/similarity", json={"pairs": [["only one"]]})
    a, b = (encode(engine.model, [p[i] for p in pairs], normalize=True, truncate_dim=16) for i in (0, 1))
    np.testing.assert_allclose([d["score"] for d in body["data"]], (a * b).sum(axis=1), atol=1e-5)
    assert body["data"][1]["score"] == pytest.approx(1.0, abs=1e-5)
    assert no_head.status_code == 422 and "--head" in no_head.json()["error"]["message"]
    assert bad.status_code == 422


def test_conditioned_similarity_uses_the_head_and_caches_its_matrices(tiny_model_dir, tmp_path):
    from subspaces.models.conditional import build_model
    from subspaces.models.triencoder import TriEncoder

    build_model(str(tiny_model_dir), head="hypernet", rank=4, seed=0).save(tmp_path / "head")
    expected = TriEncoder.load(tmp_path / "head").similarity([TEXTS[0], TEXTS[1]], [TEXTS[2], TEXTS[3]], ["colour"] * 2)
    pairs = [[TEXTS[0], TEXTS[2]], [TEXTS[1], TEXTS[3]]]
    with TestClient(
        create_app(ServeSettings(backend="torch", model=str(tiny_model_dir), head=tmp_path / "head"))
    ) as client:
        deadline = time.monotonic() + 30
        while client.get("/health").status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.02)
        first = client.post("/v1/similarity", json={"pairs": pairs, "condition": "colour"}).json()
        client.post("/v1/similarity", json={"pairs": pairs, "condition": "colour"})
        refused = client.post("/v1/similarity", json={"pairs": pairs, "condition": "colour", "dimensions": 8})
        text = client.get("/metrics").text
    np.testing.assert_allclose([d["score"] for d in first["data"]], expected, atol=1e-5)
    assert first["condition"] == "colour" and refused.status_code == 422
    assert metric(text, "subspaces_cache_hits_total", cache="condition_params") >= 2  # the second request's rows
    assert 0 < metric(text, "subspaces_cache_hit_ratio", cache="condition_params") < 1


def test_search_over_a_store(tiny_model_dir, tmp_path):
    store_module = pytest.importorskip("subspaces.store")
    store = store_module.Store.create(tmp_path / "store", str(tiny_model_dir))
    store.add(TEXTS, ids=["a", "b", "c", "d"])
    with TestClient(
        create_app(ServeSettings(backend="torch", model=str(tiny_model_dir), store=tmp_path / "store"))
    ) as client:
        deadline = time.monotonic() + 30
        while client.get("/health").status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.02)
        full = client.post("/v1/search", json={"query": TEXTS[2], "k": 2}).json()
        funnel = client.post("/v1/search", json={"query": TEXTS[2], "k": 2, "dimensions": 8}).json()
        bad = client.post("/v1/search", json={"query": TEXTS[2], "k": 0})
        blanks = [client.post("/v1/search", json={"query": q, "k": 2}) for q in ("", " \t", "\x01\x02")]
    assert [d["id"] for d in full["data"]][0] == "c" and full["data"][0]["score"] == pytest.approx(1.0, abs=1e-5)
    assert len(full["data"]) == 2 and funnel["data"][0]["id"] == "c" and bad.status_code == 422
    assert [r.status_code for r in blanks] == [422] * 3  # a query with nothing to embed is refused, not searched
    assert "no visible character" in blanks[0].text


def _ready(client: TestClient) -> None:
    deadline = time.monotonic() + 30
    while client.get("/health").status_code != 200 and time.monotonic() < deadline:
        time.sleep(0.02)


def test_conditioned_search_ranks_by_the_heads_similarity(tiny_model_dir, tmp_path):
    pytest.importorskip("subspaces.store")
    from subspaces.models.conditional import build_model
    from subspaces.models.triencoder import TriEncoder
    from subspaces.store import Store

    build_model(str(tiny_model_dir), head="hypernet", rank=4, seed=0).save(tmp_path / "head")
    Store.create(tmp_path / "store", str(tiny_model_dir)).add(TEXTS, ids=["a", "b", "c", "d"])
    query = "A red guitar in a small house."
    # What the head says of the query and each row under the condition: the order the search must give.
    want = TriEncoder.load(tmp_path / "head").similarity([query] * 4, TEXTS, ["colour"] * 4)
    order = np.argsort(-want, kind="stable")
    settings = ServeSettings(
        backend="torch", model=str(tiny_model_dir), store=tmp_path / "store", head=tmp_path / "head"
    )
    with TestClient(create_app(settings)) as client:
        _ready(client)
        first = client.post("/v1/search", json={"query": query, "k": 4, "condition": "colour"}).json()
        again = client.post("/v1/search", json={"query": query, "k": 4, "condition": "colour"}).json()
        plain = client.post("/v1/search", json={"query": query, "k": 4}).json()
        mixed = client.post("/v1/search", json={"query": query, "condition": "colour", "dimensions": 8})
        text = client.get("/metrics").text
        listed = client.get("/v1/models").json()["data"][0]
    assert [d["id"] for d in first["data"]] == ["abcd"[i] for i in order]
    np.testing.assert_allclose([d["score"] for d in first["data"]], want[order], atol=1e-5)
    assert again["data"] == first["data"] and plain["data"] != first["data"]
    assert mixed.status_code == 422 and "dimensions" in mixed.json()["error"]["message"]
    assert metric(text, "subspaces_cache_hits_total", cache="condition_params") >= 1  # the second request's matrix
    assert listed["search"] is True and listed["conditions"] is True


def test_conditioned_search_without_a_head_is_422(tiny_model_dir, tmp_path):
    store_module = pytest.importorskip("subspaces.store")
    store_module.Store.create(tmp_path / "store", str(tiny_model_dir)).add(TEXTS)
    with TestClient(
        create_app(ServeSettings(backend="torch", model=str(tiny_model_dir), store=tmp_path / "store"))
    ) as client:
        _ready(client)
        refused = client.post("/v1/search", json={"query": TEXTS[0], "condition": "colour"})
        listed = client.get("/v1/models").json()["data"][0]
    assert refused.status_code == 422 and "--head" in refused.json()["error"]["message"]
    assert listed["search"] is True and listed["conditions"] is False


def test_onnx_backend_serves_what_torch_encodes(tiny_model_dir, engine):
    from subspaces.models.encoder import encode

    settings = ServeSettings(model=str(tiny_model_dir), backend="onnx")
    with TestClient(create_app(settings)) as client:
        _ready(client)
        served = client.post("/v1/embeddings", json={"input": TEXTS}).json()["data"]
        listed = client.get("/v1/models").json()["data"][0]
        health = client.get("/health").json()
    assert type(client.app.state.serve.engine.model[0].model).__name__ == "RuntimeModel"
    np.testing.assert_allclose([d["embedding"] for d in served], encode(engine.model, TEXTS, normalize=True), atol=1e-5)
    assert (listed["backend"], listed["precision"], health["backend"]) == ("onnx", "fp32", "onnx")


def test_bfloat16_serves_float32_rows_near_float32s_and_says_so(tiny_model_dir, engine, serve):
    from subspaces.models.encoder import encode

    with TestClient(create_app(ServeSettings(backend="torch", model=str(tiny_model_dir), dtype="bfloat16"))) as client:
        _ready(client)
        served = np.array([d["embedding"] for d in client.post("/v1/embeddings", json={"input": TEXTS}).json()["data"]])
        listed = client.get("/v1/models").json()["data"][0]
    assert listed["dtype"] == "bfloat16"
    assert (served * encode(engine.model, TEXTS, normalize=True)).sum(1).min() >= 0.99
    with serve() as client:
        assert client.get("/v1/models").json()["data"][0]["dtype"] == "float32"


def test_a_length_sorted_batch_gives_each_text_its_own_row_in_input_order(engine):
    """The worker sorts a batch by length and runs passes of similar lengths; rows come back in the batch's order
    and equal each text encoded alone (no padding at all)."""
    from subspaces.serve.engine import passes

    rng = np.random.default_rng(0)
    texts = [" ".join(["word"] * int(n)) for n in rng.integers(1, 40, size=69)]
    requests = [engine.tokenize(texts[i : i + 4]) for i in range(0, len(texts), 4)]
    rows = engine.forward(engine.join([r.inputs for r in requests]))
    alone = np.concatenate([engine.forward(engine.tokenize([t]).inputs) for t in texts])
    np.testing.assert_allclose(rows, alone, atol=1e-5)
    lengths = sorted(engine.token_counts(texts), reverse=True)
    cut = passes(list(range(len(texts))), lengths)
    assert len(cut) > 1 and sum(map(len, cut)) == len(texts)
    assert all(2 * lengths[p[-1]] >= lengths[p[0]] for p in cut)  # no pass pads a text to over twice its length


def test_auto_runs_what_served_fastest_on_this_kind_of_cpu(monkeypatch, tmp_path):
    """auto: OpenVINO's static int8 graph where the CPU has int8 dot products and OpenVINO is installed, else torch
    in bfloat16 where native, else ONNX Runtime's int8 graph; torch where a dtype, fp32 or another device is named;
    int8 asked where torch would run is refused."""
    from subspaces.errors import SubspacesError
    from subspaces.models import backends

    for vnni, bf16, installed, want in (
        (True, True, True, ("openvino", "int8", "float32")),
        (False, True, True, ("torch", "fp32", "bfloat16")),
        (True, True, False, ("torch", "fp32", "bfloat16")),
        (False, False, True, ("onnx", "int8", "float32")),
        (True, False, False, ("onnx", "int8", "float32")),
    ):
        monkeypatch.setattr(backends, "native_int8", lambda vnni=vnni: vnni)
        monkeypatch.setattr(backends, "native_bfloat16", lambda bf16=bf16: bf16)
        monkeypatch.setattr(
            "importlib.util.find_spec", lambda name, installed=installed: object() if installed else None
        )
        assert backends.fastest_runtime("cpu") == want
        assert ServeSettings(model="minilm-l6").runtime == want
        graph = "openvino" if vnni and installed else "onnx"
        assert backends.fastest_runtime("cpu", precision="int8") == (graph, "int8", "float32")
        assert backends.fastest_runtime("cpu", dtype="float32") == ("torch", "fp32", "float32")
        assert backends.fastest_runtime("cpu", precision="fp32") == ("torch", "fp32", "float32")
        assert backends.fastest_runtime("cuda") == ("torch", "fp32", "float32")
        assert ServeSettings(model="minilm-l6", store=tmp_path).runtime == want  # int8 queries lose no recall
    for options in ({"device": "cuda"}, {"dtype": "bfloat16"}):
        with pytest.raises(SubspacesError, match="drop --dtype or --device"):
            ServeSettings(model="minilm-l6", precision="int8", **options)


def test_auto_serves_on_torch_a_model_with_no_graph_and_says_what_runs(monkeypatch, tmp_path, tiny_model_dir):
    """/health and /v1/models name what runs: the graph auto picked, or torch where the model has none."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import StaticEmbedding
    from tokenizers import Tokenizer, models

    from subspaces.serve import settings

    monkeypatch.setattr(settings, "fastest_runtime", lambda *args: ("onnx", "int8", "float32"))
    tokenizer = Tokenizer(models.WordLevel({"[UNK]": 0, "cat": 1, "dog": 2}, unk_token="[UNK]"))
    weights = np.random.default_rng(0).normal(size=(3, 8))
    SentenceTransformer(modules=[StaticEmbedding(tokenizer, embedding_weights=weights)], device="cpu").save(
        str(tmp_path / "static")
    )
    for folder, want in ((tmp_path / "static", ("torch", "fp32")), (tiny_model_dir, ("onnx", "int8"))):
        with TestClient(create_app(ServeSettings(model=str(folder)))) as client:
            _ready(client)
            served = client.post("/v1/embeddings", json={"input": ["cat", "dog"]})
            listed = client.get("/v1/models").json()["data"][0]
            health = client.get("/health").json()
        assert served.status_code == 200, served.text
        assert (listed["backend"], listed["precision"], health["backend"]) == (*want, want[0])


def test_bad_backend_settings_are_refused_before_loading(tiny_model_dir):
    from subspaces.errors import SubspacesError

    for options, message in (
        ({"backend": "tensorrt"}, "unknown backend"),
        ({"backend": "torch", "precision": "int8"}, "needs --backend onnx"),
        ({"backend": "onnx", "device": "cuda"}, "runs on the CPU"),
        ({"precision": "int8", "dtype": "bfloat16"}, "drop --dtype or --device"),  # auto: a dtype is torch's
        ({"dtype": "float16"}, "unknown dtype"),
        ({"backend": "onnx", "dtype": "bfloat16"}, "runs on --backend torch"),
    ):
        with pytest.raises(SubspacesError, match=message):
            ServeSettings(model=str(tiny_model_dir), **options)


def test_the_page_is_served_without_the_key_and_locked_down(serve):
    with serve(api_key="s3cret") as client:
        page = client.get("/")
        assert client.get("/v1/models").status_code == 401  # what the page calls still needs the key
    policy = page.headers["content-security-policy"]
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "default-src 'none'" in policy and "script-src 'sha256-" in policy and "connect-src 'self'" in policy
    assert "http" not in page.text.replace("http-equiv", "")  # self-contained: no CDN, nothing from elsewhere
    assert 'id="query"' in page.text and 'id="dims"' in page.text and 'id="condition"' in page.text


def test_no_search_route_without_a_store(serve):
    with serve() as client:
        assert client.post("/v1/search", json={"query": "a"}).status_code == 404


# --- auth and metrics -----------------------------------------------------------------------------------------
def test_api_key_guards_every_route_but_health(serve):
    with serve(api_key="s3cret") as client:
        assert client.get("/health").status_code == 200
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret"}):
            response = client.post("/v1/embeddings", json={"input": "a"}, headers=headers)
            assert response.status_code == 401 and response.headers["www-authenticate"] == "Bearer"
        assert client.get("/metrics").status_code == 401 and client.get("/v1/models").status_code == 401
        ok = {"Authorization": "Bearer s3cret"}
        assert client.post("/v1/embeddings", json={"input": "a"}, headers=ok).status_code == 200
        assert client.get("/metrics", headers=ok).status_code == 200
    with serve() as client:  # no key: open
        assert client.post("/v1/embeddings", json={"input": "a"}).status_code == 200


def test_metrics_count_requests_errors_latency_batches_and_tokens(serve, engine):
    with serve() as client:
        client.post("/v1/embeddings", json={"input": TEXTS})
        client.post("/v1/embeddings", json={"input": 3})
        client.get("/no/such/page")
        text = client.get("/metrics").text
    assert metric(text, "subspaces_requests_total", route="/v1/embeddings", code="200") == 1
    assert metric(text, "subspaces_request_errors_total", route="/v1/embeddings", code="422") == 1
    assert metric(text, "subspaces_request_errors_total", route="other", code="404") == 1  # unknown paths: one label
    assert metric(text, "subspaces_request_seconds_count", route="/v1/embeddings") == 2
    assert metric(text, "subspaces_tokens_total") == sum(engine.token_counts(TEXTS))
    assert metric(text, "subspaces_batch_texts_sum") == len(TEXTS)
    assert "subspaces_queue_depth 0.0" in text and "subspaces_batch_tokens_bucket" in text


# --- the real OpenAI client against a real server --------------------------------------------------------------
def test_openai_client_against_uvicorn(tiny_model_dir, engine):
    import openai

    from subspaces.models.encoder import encode

    app = create_app(
        ServeSettings(backend="torch", model=str(tiny_model_dir), model_id="tiny", api_key="k-123"), engine=engine
    )
    with live_server(app) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="k-123", max_retries=0, timeout=10)
        packed = client.embeddings.create(model="tiny", input=TEXTS, dimensions=8)  # the client asks for base64
        floats = client.embeddings.create(model="tiny", input=TEXTS[0], encoding_format="float")
        models = [m.id for m in client.models.list()]
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=f"{url}/v1", api_key="wrong", max_retries=0).embeddings.create(
                model="tiny", input="a"
            )
    np.testing.assert_allclose(
        [d.embedding for d in packed.data], encode(engine.model, TEXTS, normalize=True, truncate_dim=8), atol=1e-5
    )
    np.testing.assert_allclose(floats.data[0].embedding, encode(engine.model, TEXTS[:1], normalize=True)[0], atol=1e-5)
    assert packed.usage.prompt_tokens == sum(engine.token_counts(TEXTS)) and models == ["tiny"]


# --- the command ----------------------------------------------------------------------------------------------
def test_serve_command_checks_its_options_before_starting(tmp_path, tiny_model_dir):
    from typer.testing import CliRunner

    from subspaces.cli.app import app

    empty = tmp_path / "key"
    empty.write_text("\n")
    runner = CliRunner()
    for args, message in [
        (["--model", str(tmp_path / "nope")], "neither a bundled model"),
        (["--model", str(tiny_model_dir), "--api-key-file", str(empty)], "is empty"),
        (["--model", str(tiny_model_dir), "--head", str(tmp_path / "nohead")], "not a folder"),
        (["--model", str(tiny_model_dir), "--max-queue", "0"], "at least 1"),
        (["--model", str(tiny_model_dir), "--backend", "torch", "--precision", "int8"], "needs --backend onnx or"),
        (["--model", str(tiny_model_dir), "--backend", "onnx", "--dtype", "bfloat16"], "runs on --backend torch"),
    ]:
        result = runner.invoke(app, ["serve", *args])
        assert result.exit_code == 2, result.output
        assert message in " ".join(result.output.split())


def test_serve_command_reads_a_config_file_under_its_options(tmp_path, tiny_model_dir, monkeypatch):
    """--config sets any ServeSettings field; an option given on the command line wins over the file, one left
    out does not; no file gives the library's defaults."""
    import json

    import uvicorn
    from typer.testing import CliRunner

    import subspaces.serve.app
    from subspaces.cli.app import app
    from subspaces.serve.settings import ServeSettings

    built: list[ServeSettings] = []
    monkeypatch.setattr(subspaces.serve.app, "create_app", lambda settings, **_: built.append(settings))
    monkeypatch.setattr(uvicorn.Server, "run", lambda self: None)
    file = tmp_path / "serve.json"
    file.write_text(
        json.dumps(
            {"max_queue": 7, "max_body_bytes": 1000, "cors_origins": ["http://a"], "prompts": {"query": "q: "}}
            | {"dtype": "bfloat16", "request_timeout_s": 5.0, "token_ids": "model"}
        )
    )
    model = ["serve", "--model", str(tiny_model_dir)]
    given = ["--max-queue", "9", "--document-prompt", "d: ", "--served-model-name", "x", "--served-model-name", "y"]
    for args in (model, [*model, "--config", str(file), *given], [*model, "--config", str(file), "--dtype", "float32"]):
        result = CliRunner().invoke(app, [*args, "--max-body-mb", "1"] if "float32" in args else args)
        assert result.exit_code == 0, result.output
    default, from_file, overridden = built
    assert default == ServeSettings(model=str(tiny_model_dir))
    assert (from_file.max_queue, from_file.max_body_bytes, from_file.request_timeout_s) == (9, 1000, 5.0)
    assert (from_file.cors_origins, from_file.aliases, from_file.token_ids) == (("http://a",), ("x", "y"), "model")
    assert from_file.prompts == {"query": "q: ", "document": "d: "} and from_file.dtype == "bfloat16"
    assert (overridden.dtype, overridden.max_body_bytes, overridden.max_queue) == ("float32", 2**20, 7)


def test_token_counting_beside_encoding_never_corrupts_a_batch(engine):
    """Counting runs in request threads while the worker encodes: they must not share a tokenizer's settings."""
    texts = [" ".join(["word"] * (1 + i % 23)) for i in range(64)]
    stop, errors = threading.Event(), []

    def count() -> None:
        while not stop.is_set():
            engine.token_counts(texts[:7])

    counters = [threading.Thread(target=count) for _ in range(2)]
    for thread in counters:
        thread.start()
    try:
        for _ in range(30):
            try:
                engine.forward(engine.tokenize(texts).inputs)
            except ValueError as exc:  # a batch tokenised without padding
                errors.append(exc)
    finally:
        stop.set()
        for thread in counters:
            thread.join()
    assert not errors


# --- issue 51 item 4 and issue 58 items 7 and 10 --------------------------------------------------------------
def test_a_request_is_tokenised_once_for_its_count_and_its_rows(serve, engine, monkeypatch):
    """Counting the tokens (usage, batch budget) and encoding read the same tokens: one tokenizer call a request."""
    from subspaces.models.encoder import encode

    tokenizer_class = type(engine.model.tokenizer)
    inner, calls = tokenizer_class.__call__, []

    def counted(self, *args, **kwargs):
        calls.append(len(args[0]) if args else len(kwargs.get("text", ())))
        return inner(self, *args, **kwargs)

    with serve() as client:
        monkeypatch.setattr(tokenizer_class, "__call__", counted)
        body = client.post("/v1/embeddings", json={"input": TEXTS}).json()
        after_embeddings = list(calls)
        client.post("/v1/similarity", json={"pairs": [[TEXTS[0], TEXTS[1]]]})
        monkeypatch.undo()
    assert after_embeddings == [len(TEXTS)] and calls == [len(TEXTS), 2]
    np.testing.assert_allclose(
        [d["embedding"] for d in body["data"]], encode(engine.model, TEXTS, normalize=True), atol=1e-5
    )
    assert body["usage"]["prompt_tokens"] == sum(engine.token_counts(TEXTS))


def test_requests_of_different_lengths_joined_in_one_batch_give_their_own_rows(serve, engine):
    """Each request is tokenised (and padded) on its own; the worker pads them to one width and stacks them."""
    from subspaces.models.encoder import encode

    texts = ["a", " ".join(["word"] * 30), "a man plays a guitar"]
    with serve(max_wait_ms=0) as client:
        gate = blocked(client)
        with ThreadPoolExecutor(3) as pool:
            futures = [pool.submit(client.post, "/v1/embeddings", json={"input": [t]}) for t in texts]
            wait_for_depth(client, 3)
            gate.set()
            responses = [f.result() for f in futures]
        text = client.get("/metrics").text
    got = np.array([r.json()["data"][0]["embedding"] for r in responses])
    np.testing.assert_allclose(got, encode(engine.model, texts, normalize=True), atol=1e-5)
    assert metric(text, "subspaces_batches_total") == 1


@pytest.mark.parametrize(
    ("route", "body", "where"),
    [
        ("/v1/embeddings", '{"input": "\\ud800"}', "body.input: Value error, the text holds a lone surrogate"),
        ("/v1/embeddings", '{"input": ["ok", "a\\udc00b"]}', "text 1 holds a lone surrogate (U+DC00) at character 1"),
        ("/v1/similarity", '{"pairs": [["ok", "\\ud800"]]}', "body.pairs.0.1: Value error"),
        ("/v1/embeddings", '{"input": "ok", "model": "\\ud800"}', "body.model"),
    ],
)
def test_a_lone_surrogate_is_a_422_naming_the_field_not_a_500(serve, route, body, where):
    """Legal JSON (an escape of half a UTF-16 pair) that no tokenizer takes: it crashed the route with a 500."""
    with serve() as client:
        response = client.post(route, content=body, headers={"content-type": "application/json"})
        assert client.post("/v1/embeddings", json={"input": "after"}).status_code == 200
    assert response.status_code == 422, response.text
    message = response.json()["error"]["message"]
    assert where in message and "not valid Unicode" in message


def _broken_model(tmp_path):
    folder = tmp_path / "broken"
    folder.mkdir()
    (folder / "modules.json").write_text("not json")  # passes the command's check, fails to load
    return folder


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _serve_command(tmp_path) -> list[str]:
    import sys

    cli = "from subspaces.cli.app import main; main()"
    return [sys.executable, "-c", cli, "serve", "--model", str(_broken_model(tmp_path)), "--port", str(_free_port())]


def test_serve_exits_with_status_2_when_its_model_fails_to_load(tmp_path):
    """A supervisor restarts or alerts on an exit; a server answering 503 forever looks alive to it."""
    import subprocess

    try:
        done = subprocess.run(_serve_command(tmp_path), capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail("serve kept running with a model that cannot load")
    assert done.returncode == 2, done.stderr[-2000:]
    (line,) = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert "loading failed, so the server stopped" in line and "modules.json" in line and "--stay-up-on-error" in line


def test_serve_stays_up_on_error_when_asked(tmp_path):
    import os
    import signal
    import subprocess
    import urllib.error
    import urllib.request

    command = _serve_command(tmp_path)
    port = int(command[-1])
    log = tmp_path / "serve.log"
    with log.open("w") as stderr:  # a file, not a pipe nobody reads while the server logs each request
        server = subprocess.Popen([*command, "--stay-up-on-error"], stdout=subprocess.DEVNULL, stderr=stderr)
    try:
        health, deadline = None, time.monotonic() + 60
        while time.monotonic() < deadline and server.poll() is None:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
            except urllib.error.HTTPError as exc:  # 503
                health = json_of(exc)
                if health["status"] == "failed":
                    break
            except OSError:
                pass
            time.sleep(0.2)
        assert server.poll() is None, log.read_text()[-2000:]
        assert health is not None and health["status"] == "failed" and "modules.json" in health["error"]
    finally:
        os.kill(server.pid, signal.SIGINT)
        server.wait(30)


def json_of(error) -> dict:
    import json

    return json.loads(error.read().decode())
