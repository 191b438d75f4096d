"""Quantized embeddings: calibrated int8, packed binary, and search with rescoring."""

import numpy as np
import pytest
from typer.testing import CliRunner

from subspaces.errors import DataError, DimensionError, SubspacesError
from subspaces.quantize import calibrate_int8, dequantize, load_codes, quantize, save_codes, search


def _unit(rng, n, d=48):
    x = rng.standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.fixture
def corpus():
    return _unit(np.random.default_rng(0), 300)


def _exact(queries, corpus, k):
    scores = queries @ corpus.T
    return np.argsort(-scores, axis=1, kind="stable")[:, :k]


def test_int8_codes_of_a_single_query_are_not_zero(corpus):
    # sentence-transformers' uncalibrated int8 takes the ranges from the batch itself: one row -> all zeros.
    cal = calibrate_int8(corpus[:100])
    codes = quantize(corpus[:1], "int8", cal)
    assert codes.dtype == np.int8 and np.count_nonzero(codes) > 0.9 * codes.size
    assert len(np.unique(quantize(corpus, "int8", cal))) > 200


def test_int8_round_trip_error_is_half_a_step(corpus):
    cal = calibrate_int8(corpus)
    back = dequantize(quantize(corpus, "int8", cal), "int8", corpus.shape[1], cal)
    assert np.abs(back - corpus).max() <= cal.step().max() / 2 + 1e-6


def test_binary_codes_are_packed_bits(corpus):
    codes = quantize(corpus[:, :44], "binary")
    assert codes.dtype == np.uint8 and codes.shape == (300, 6)
    assert np.array_equal(dequantize(codes, "binary", 44) > 0, corpus[:, :44] > 0)


@pytest.mark.parametrize("kind", ["binary", "int8"])
def test_full_rescoring_with_float_rows_equals_float_search(corpus, kind):
    queries = _unit(np.random.default_rng(1), 20)
    cal = calibrate_int8(corpus) if kind == "int8" else None
    codes = quantize(corpus, kind, cal)
    scores, ids = search(queries, codes, kind=kind, k=10, calibration=cal, rescore=30, corpus=corpus)  # 30 x 10 = all
    assert np.array_equal(ids, _exact(queries, corpus, 10))
    np.testing.assert_allclose(scores, np.take_along_axis(queries @ corpus.T, ids, axis=1), rtol=1e-5)


def test_rescoring_helps_binary_and_int8_is_close(corpus):
    queries = corpus[:30] + 0.3 * _unit(np.random.default_rng(2), 30)
    truth = _exact(queries, corpus, 10)

    def recall(ids):
        return np.mean([len(set(a) & set(b)) / 10 for a, b in zip(ids, truth, strict=True)])

    cal = calibrate_int8(corpus)
    bits = quantize(corpus, "binary")
    plain = recall(search(queries, bits, kind="binary", k=10, rescore=None)[1])
    rescored = recall(search(queries, bits, kind="binary", k=10, rescore=4)[1])
    assert rescored > plain
    assert recall(search(queries, quantize(corpus, "int8", cal), kind="int8", k=10, calibration=cal)[1]) >= 0.95


def test_save_and_load_codes(corpus, tmp_path):
    cal = calibrate_int8(corpus)
    save_codes(tmp_path / "c.npy", quantize(corpus, "int8", cal), "int8", 48, cal)
    codes, kind, dim, loaded = load_codes(tmp_path / "c.npy")
    assert (
        kind == "int8" and dim == 48 and np.array_equal(loaded.low, cal.low) and np.array_equal(loaded.high, cal.high)
    )
    assert np.array_equal(codes, quantize(corpus, "int8", loaded))
    (tmp_path / "c.npy.quant.json").write_text("{")
    with pytest.raises(DataError, match="quantization description"):
        load_codes(tmp_path / "c.npy")


def test_bad_inputs(corpus):
    cal = calibrate_int8(corpus)
    with pytest.raises(SubspacesError, match="needs calibration"):
        quantize(corpus, "int8")
    with pytest.raises(DimensionError, match="calibration is 48-d"):
        quantize(corpus[:, :10], "int8", cal)
    with pytest.raises(DataError, match="at least 2 rows"):
        calibrate_int8(corpus[:1])
    with pytest.raises(DimensionError, match="NaN"):
        quantize(np.full((2, 4), np.nan), "binary")
    with pytest.raises(SubspacesError, match="unknown quantization"):
        quantize(corpus, "int4")
    with pytest.raises(DimensionError, match="queries are 10-d"):
        search(corpus[:2, :10], quantize(corpus, "int8", cal), kind="int8", calibration=cal, dim=48)
    with pytest.raises(DimensionError, match="corpus is"):
        search(corpus[:2], quantize(corpus, "binary"), kind="binary", corpus=corpus[:5])


def test_cli_encode_quantize(tiny_model_dir, tmp_path):
    from subspaces.cli.app import app

    runner = CliRunner()
    (tmp_path / "in.txt").write_text("\n".join(f"sentence number {i} about a cat" for i in range(20)) + "\n")
    base = ["model", "encode", "-m", str(tiny_model_dir), "-i", str(tmp_path / "in.txt"), "--normalize"]
    assert runner.invoke(app, [*base, "-o", str(tmp_path / "f.npy")]).exit_code == 0
    for kind in ("int8", "binary"):
        out = tmp_path / f"{kind}.npy"
        result = runner.invoke(app, [*base, "-o", str(out), "--quantize", kind])
        assert result.exit_code == 0, result.output
        codes, got_kind, dim, cal = load_codes(out)
        assert got_kind == kind and dim == 32 and len(codes) == 20
        assert np.array_equal(codes, quantize(np.load(tmp_path / "f.npy"), kind, cal))
    result = runner.invoke(app, [*base, "-o", str(tmp_path / "q.parquet"), "--quantize", "int8"])
    assert result.exit_code == 2 and "writes a .npy file" in result.output
