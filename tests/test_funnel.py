"""Funnel search over .npy vectors: equal to exact search when the shortlist is the whole corpus; quantized search
with rescoring; `subspaces vectors search`."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from subspaces.cli.app import app
from subspaces.errors import DimensionError
from subspaces.store.search import search_quantized, search_vectors


def vectors(n: int, dim: int = 48, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, dim)).astype(np.float32)


def test_funnel_over_the_whole_corpus_is_exact():
    corpus, queries = vectors(200), vectors(30, seed=1)
    exact_scores, exact_rows = search_vectors(corpus, queries, k=10)
    # shortlist 20 x 10 = the whole corpus, at a prefix of 4 dims that alone would rank badly
    scores, rows = search_vectors(corpus, queries, k=10, dims=4, shortlist_factor=20)
    np.testing.assert_array_equal(rows, exact_rows)
    np.testing.assert_allclose(scores, exact_scores, atol=1e-5)
    _, short = search_vectors(corpus, queries, k=10, dims=4, shortlist_factor=1)
    assert (short != exact_rows).any()  # a 4-d shortlist of 10 is not exact: the test above can fail


def test_a_pca_funnel_is_exact_over_the_whole_corpus_and_better_on_a_short_list():
    rng = np.random.default_rng(0)
    scale = np.r_[np.full(40, 0.05), np.full(8, 1.0)]  # the variance in the last coordinates
    corpus, queries = rng.normal(size=(400, 48)) * scale, rng.normal(size=(40, 48)) * scale
    exact_scores, exact_rows = search_vectors(corpus, queries, k=10)
    scores, rows = search_vectors(corpus, queries, k=10, dims=8, shortlist_factor=40, basis="pca")
    np.testing.assert_array_equal(rows, exact_rows)
    np.testing.assert_allclose(scores, exact_scores, atol=1e-5)

    def recall(found):
        return np.mean([len(set(a) & set(b)) / 10 for a, b in zip(found, exact_rows, strict=True)])

    _, raw = search_vectors(corpus, queries, k=10, dims=8, shortlist_factor=3)
    _, pca = search_vectors(corpus, queries, k=10, dims=8, shortlist_factor=3, basis="pca")
    assert recall(pca) > 0.9 and recall(raw) < 0.5, (recall(pca), recall(raw))


def test_search_cli_pca_basis(tmp_path):
    exact_rows, common = saved_corpus(tmp_path)
    out = str(tmp_path / "r.json")
    result = CliRunner().invoke(app, [*common, "--dims", "8", "--basis", "pca", "--shortlist-factor", "40", "-o", out])
    assert result.exit_code == 0, result.output
    assert np.array_equal(json.loads((tmp_path / "r.json").read_text())["rows"], exact_rows)
    result = CliRunner().invoke(app, [*common, "--basis", "pca", "-o", out])
    assert result.exit_code == 2 and "--dims" in result.output, result.output


def test_search_rejects_bad_shapes():
    with pytest.raises(DimensionError, match="dimensions"):
        search_vectors(vectors(50), vectors(5, dim=32), k=3)
    with pytest.raises(DimensionError, match="outside"):
        search_vectors(vectors(50), vectors(5), k=3, dims=49)
    bad = vectors(50)
    bad[9] = 0
    with pytest.raises(DimensionError, match="row 9"):
        search_vectors(bad, vectors(5), k=3)


def saved_corpus(tmp_path) -> tuple[np.ndarray, list[str]]:
    """A 200-row corpus and 30 queries saved as .npy, their exact top-5 rows, and the `search` arguments on them."""
    corpus, queries = vectors(200), vectors(30, seed=1)
    np.save(tmp_path / "c.npy", corpus)
    np.save(tmp_path / "q.npy", queries)
    _, exact_rows = search_vectors(corpus, queries, k=5)
    return exact_rows, [
        "vectors",
        "search",
        "--corpus",
        str(tmp_path / "c.npy"),
        "--queries",
        str(tmp_path / "q.npy"),
        "-k",
        "5",
    ]


def test_search_cli(tmp_path):
    exact_rows, common = saved_corpus(tmp_path)
    result = CliRunner().invoke(
        app, [*common, "--dims", "8", "--shortlist-factor", "40", "--output", str(tmp_path / "r.json")]
    )
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["shortlist"] == 200 and np.array_equal(report["rows"], exact_rows)
    result = CliRunner().invoke(app, [*common, "--output", str(tmp_path / "r.npy")])
    assert result.exit_code == 0, result.output
    np.testing.assert_array_equal(np.load(tmp_path / "r.npy"), exact_rows)
    result = CliRunner().invoke(app, [*common, "--output", str(tmp_path / "r.txt")])
    assert result.exit_code == 2 and ".json or .npy" in result.output


def recall(rows: np.ndarray, truth: np.ndarray) -> float:
    return float(np.mean([len(set(r) & set(t)) / len(t) for r, t in zip(rows, truth, strict=True)]))


def test_binary_codes_rescored_over_the_whole_corpus_against_the_floats_are_exact():
    corpus, queries = vectors(200), vectors(30, seed=1)
    exact_scores, exact_rows = search_vectors(corpus, queries, k=10)
    scores, rows, against = search_quantized(corpus, queries, k=10, kind="binary", rescore=20)
    assert against == "float corpus"
    np.testing.assert_array_equal(rows, exact_rows)
    np.testing.assert_allclose(scores, exact_scores, atol=1e-5)
    _, hamming, against = search_quantized(corpus, queries, k=10, kind="binary", rescore=None)
    assert against is None and recall(hamming, exact_rows) < 0.9  # bits alone are not exact: the test can fail


def test_int8_codes_rescored_from_the_codes_keep_the_recall():
    corpus, queries = vectors(2000), vectors(50, seed=1)
    _, exact_rows = search_vectors(corpus, queries, k=10)
    _, rows, against = search_quantized(corpus, queries, k=10, kind="int8", rescore=4, calibration_rows=500)
    assert against == "dequantized codes"
    assert recall(rows, exact_rows) >= 0.95


def test_int8_calibrated_on_a_sample_gives_non_zero_codes_for_one_query():
    from subspaces.quantize import calibrate_int8, calibration_sample, quantize

    corpus = vectors(300)
    sample = calibration_sample(corpus, 100)
    assert sample.shape == (100, 48) and np.array_equal(sample, calibration_sample(corpus, 100))  # seeded
    codes = quantize(vectors(1, seed=1), "int8", calibrate_int8(sample))
    assert np.count_nonzero(codes) > 0.9 * codes.size


def test_search_cli_quantized(tmp_path):
    exact_rows, common = saved_corpus(tmp_path)
    out = str(tmp_path / "r.json")
    result = CliRunner().invoke(app, [*common, "--quantize", "binary", "--rescore", "40", "--output", out])
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["quantize"] == "binary" and report["rescored_against"] == "float corpus"
    assert report["shortlist"] == 200 and np.array_equal(report["rows"], exact_rows)
    args = [*common, "--quantize", "int8", "--rescore", "0", "--calibration-rows", "50", "--output", out]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["rescored_against"] is None and report["shortlist"] is None and len(report["rows"]) == 30
    result = CliRunner().invoke(app, [*common, "--quantize", "int8", "--dims", "8", "--output", out])
    assert result.exit_code != 0 and "not both" in result.output
