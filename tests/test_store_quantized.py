"""A store's quantized copy: written by `store index --quantize`, searched with rescoring, refused when missing
or stale."""

from __future__ import annotations

import json

import numpy as np
import pytest

from subspaces.errors import SubspacesError
from subspaces.numerics import cpu_record
from subspaces.quantize import load_codes
from subspaces.store import Store
from test_store import LookupEncoder, cli, sentences


@pytest.fixture
def store(tmp_path, tiny_model, tiny_model_dir):
    made = Store.create(tmp_path / "store", str(tiny_model_dir))
    made.add(sentences(60), ids=range(60), write_batch=16)
    return made


def test_the_copy_is_written_beside_the_floats(store):
    copy = store.quantize("int8", calibration_rows=40)
    assert copy["rows"] == 60 and copy["bytes_per_vector"] == 32 and copy["calibration_rows"] == 40
    assert copy["fitted_on"] == cpu_record("float32")  # the precision and the CPU it was made on (issue 51)
    codes, kind, dim, cal = load_codes(store.path / "quantized" / "0" / copy["codes"])
    assert kind == "int8" and dim == 32 and codes.shape == (60, 32) and np.count_nonzero(codes) > 0.9 * codes.size
    store.quantize("binary")  # replaces the int8 copy, whose files go
    files = sorted(p.name for p in (store.path / "quantized" / "0").iterdir())
    assert len(files) == 3 and files[0].startswith("binary-v") and files[2] == "copy.json"
    info = Store.open(store.path).info()["spaces"]["0"]["quantized"]
    assert info["kind"] == "binary" and info["bytes_per_vector"] == 4 and info["stale"] is False


@pytest.fixture
def spread(tmp_path):
    """A store of 150 spread-out synthetic vectors, and 50 query texts: a random BERT's vectors are near-parallel,
    and their float ties (or int8's half-step error) would decide the order."""
    texts = [f"text {i}" for i in range(200)]
    encoder = LookupEncoder(texts, np.random.default_rng(0).normal(size=(200, 32)))
    made = Store.create(tmp_path / "s", encoder)
    made.add(texts[:150], ids=range(150))
    return made, encoder, texts


def test_binary_copy_rescored_over_the_whole_store_equals_exact_search(spread):
    made, encoder, texts = spread
    exact = made.search(texts[150:], k=5, model=encoder)
    made.quantize("binary")
    full = made.search(texts[150:], k=5, model=encoder, quantized=True, rescore=30)  # 30 x 5 = the whole store
    assert [h["ids"] for h in full] == [h["ids"] for h in exact]
    assert [h["texts"] for h in full] == [h["texts"] for h in exact]
    np.testing.assert_allclose([h["scores"] for h in full], [h["scores"] for h in exact], atol=1e-5)
    bits = made.search(texts[150:], k=5, model=encoder, quantized=True, rescore=None)
    assert [h["ids"] for h in bits] != [h["ids"] for h in exact]  # Hamming alone differs: the test can fail


def test_int8_copy_rescored_from_its_codes_keeps_the_recall(spread):
    made, encoder, texts = spread
    exact = made.search(texts[150:], k=10, model=encoder)
    made.quantize("int8")
    hits = made.search(texts[150:], k=10, model=encoder, quantized=True)
    recall = np.mean([len(set(a["ids"]) & set(b["ids"])) / 10 for a, b in zip(hits, exact, strict=True)])
    assert recall >= 0.95
    own = made.search(texts[:10], k=1, model=encoder, quantized=True)
    assert [h["ids"] for h in own] == [[str(i)] for i in range(10)]
    assert own[0]["scores"][0] == pytest.approx(1.0, abs=0.02)  # rescored from the codes: nearly the cosine


def test_a_missing_or_stale_copy_is_refused(store):
    with pytest.raises(SubspacesError, match="no quantized copy.*--quantize"):
        store.search("a query", quantized=True)
    store.quantize("int8")
    store.add(sentences(65)[60:], ids=range(60, 65))
    with pytest.raises(
        SubspacesError, match="stale \\(the table holds 65 rows, the copy 60.*store index DIR --quantize int8"
    ):
        store.search("a query", quantized=True)
    assert Store.open(store.path).info()["spaces"]["0"]["quantized"]["stale"] is True
    store.quantize("int8")
    assert len(store.search("a query", k=65, quantized=True)["ids"]) == 65
    with pytest.raises(SubspacesError, match="drop ann, dims"):
        store.search("a query", quantized=True, dims=8)


def test_cli_index_quantize_info_and_search(store, tmp_path):
    result = cli("store", "index", store.path, "--quantize", "int8", "--calibration-rows", "30")
    assert result.exit_code == 0 and "32 bytes a vector" in result.output, result.output
    result = cli("store", "info", store.path)
    assert result.exit_code == 0 and "128 float32, 32 int8" in result.output, result.output
    out = tmp_path / "hits.json"
    result = cli("store", "search", store.path, sentences(60)[4], "-k", "2", "--quantized", "--json", out)
    assert result.exit_code == 0, result.output
    assert len(json.loads(out.read_text())["results"][0]["ids"]) == 2
    store.add(sentences(61)[60:], ids=[60])
    result = cli("store", "search", store.path, "a query", "--quantized")
    assert result.exit_code != 0 and "run `subspaces store index DIR --quantize int8` again" in result.output
    result = cli("store", "index", store.path, "--quantize", "binary", "--partitions", "4")
    assert result.exit_code != 0 and "IVF-PQ" in result.output


def test_an_ann_index_build_keeps_the_copy_current(tmp_path):
    texts = [f"text {i}" for i in range(256)]
    encoder = LookupEncoder(texts, np.random.default_rng(0).normal(size=(256, 16)))
    made = Store.create(tmp_path / "s", encoder)
    made.add(texts, ids=range(256))
    made.quantize("binary")
    version = made.info()["spaces"]["0"]["version"]
    made.index(num_partitions=1, num_sub_vectors=2)  # a new table version, the same rows
    assert made.info()["spaces"]["0"]["version"] > version
    assert made.search(texts[3], k=1, model=encoder, quantized=True)["ids"] == ["3"]
