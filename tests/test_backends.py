"""ONNX Runtime / OpenVINO backends on the tiny random BERT: same embeddings as torch, one cached export."""

import importlib.util

import numpy as np
import pytest
from typer.testing import CliRunner

from subspaces.errors import SubspacesError
from subspaces.models import backends
from subspaces.models.encoder import encode, load_encoder

TEXTS = ["a cat plays the guitar", "the big dog runs quickly in the park near the house", "", "dog"] * 3
needs_openvino = pytest.mark.skipif(
    importlib.util.find_spec("openvino") is None or importlib.util.find_spec("nncf") is None,
    reason="the openvino extra is not installed",
)
# fp32 graphs compute what torch computes, up to summation order. int8 on a random 32-d model moves values by a few
# hundredths (the rows' norms are about 5), so int8 is held to the direction: cosine to torch's row >= 0.995.
FP32_ATOL = 1e-5
INT8_MIN_COSINE = 0.995
CASES = [
    ("onnx", "fp32"),
    ("onnx", "int8"),
    pytest.param("openvino", "fp32", marks=needs_openvino),
    pytest.param("openvino", "int8", marks=needs_openvino),
]


@pytest.fixture(scope="module")
def reference(tiny_model_dir):
    return encode(load_encoder(tiny_model_dir), TEXTS)


@pytest.mark.parametrize(("backend", "precision"), CASES)
def test_backend_matches_torch(tiny_model_dir, reference, backend, precision):
    model = load_encoder(tiny_model_dir, backend=backend, precision=precision)
    assert type(model[0].model).__name__ == "RuntimeModel"
    emb = encode(model, TEXTS, batch_size=5)  # batches mix lengths: padding must not change a row
    if precision == "fp32":
        np.testing.assert_allclose(emb, reference, atol=FP32_ATOL)
    else:
        cos = (emb * reference).sum(1) / np.linalg.norm(emb, axis=1) / np.linalg.norm(reference, axis=1)
        assert cos.min() >= INT8_MIN_COSINE, cos.min()
        assert not np.allclose(emb, reference, atol=FP32_ATOL), "int8 ran the fp32 graph"


def _graph(tiny_model_dir, backend="onnx", precision="fp32"):
    return backends.graph_folder(backends.weights_hash(load_encoder(tiny_model_dir)[0].model), backend, precision)


def test_second_load_exports_nothing(tiny_model_dir, monkeypatch):
    load_encoder(tiny_model_dir, backend="onnx")
    folder = _graph(tiny_model_dir)
    before = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}

    def no_export(*args, **kwargs):
        raise AssertionError("exported again")

    monkeypatch.setattr(backends, "_export_onnx", no_export)
    load_encoder(tiny_model_dir, backend="onnx")
    assert {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} == before


def test_truncated_graph_is_rebuilt(tiny_model_dir, reference):
    load_encoder(tiny_model_dir, backend="onnx")
    folder = _graph(tiny_model_dir)
    graph = folder / "model.onnx"
    whole = graph.stat().st_size
    with open(graph, "r+b") as fh:
        fh.truncate(whole // 2)
    weights = backends.weights_hash(load_encoder(tiny_model_dir)[0].model)
    assert not backends.is_valid(folder, weights)
    emb = encode(load_encoder(tiny_model_dir, backend="onnx"), TEXTS)
    assert graph.stat().st_size == whole and backends.is_valid(folder, weights)
    np.testing.assert_allclose(emb, reference, atol=FP32_ATOL)


def test_other_weights_get_another_graph(tiny_model_dir):
    model = load_encoder(tiny_model_dir)
    with_other = load_encoder(tiny_model_dir)
    with_other[0].model.encoder.layer[0].output.dense.bias.data += 1.0
    assert backends.weights_hash(model[0].model) != backends.weights_hash(with_other[0].model)


def test_interrupted_export_leaves_nothing_that_loads(tiny_model_dir, monkeypatch):
    real = backends._export_onnx
    weights = backends.weights_hash(load_encoder(tiny_model_dir)[0].model)
    folder = backends.graph_folder(weights, "onnx", "fp32")
    if folder.exists():
        import shutil

        shutil.rmtree(folder)

    def half_then_interrupt(hf_model, path):
        real(hf_model, path)
        with open(path, "r+b") as fh:
            fh.truncate(100)
        raise KeyboardInterrupt

    monkeypatch.setattr(backends, "_export_onnx", half_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        load_encoder(tiny_model_dir, backend="onnx")
    assert not folder.exists()
    assert not list(folder.parent.glob(f".{folder.name}.*")), "the temporary build folder was left behind"
    monkeypatch.setattr(backends, "_export_onnx", real)
    load_encoder(tiny_model_dir, backend="onnx")
    assert backends.is_valid(folder, weights)


def test_static_embedding_is_refused_clearly(tmp_path):
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import StaticEmbedding
    from tokenizers import Tokenizer, models

    tokenizer = Tokenizer(models.WordLevel({"[UNK]": 0, "cat": 1}, unk_token="[UNK]"))
    static = SentenceTransformer(modules=[StaticEmbedding(tokenizer, embedding_weights=np.eye(2, 4))], device="cpu")
    with pytest.raises(SubspacesError, match="static embedding such as wordllama"):
        backends.with_backend(static, "onnx")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"backend": "tensorrt"}, "unknown backend"),
        ({"backend": "onnx", "precision": "fp16"}, "unknown precision"),
        ({"precision": "int8"}, "needs --backend onnx or openvino"),
        ({"backend": "onnx", "device": "cuda"}, "runs on the CPU"),
        ({"dtype": "float16"}, "unknown dtype"),
        ({"backend": "onnx", "dtype": "bfloat16"}, "runs on --backend torch"),
    ],
)
def test_bad_options(tiny_model_dir, kwargs, message):
    with pytest.raises(SubspacesError, match=message):
        load_encoder(tiny_model_dir, **kwargs)


def test_layer_pooler_is_refused(tiny_model_dir):
    with pytest.raises(SubspacesError, match="last layer only"):
        load_encoder(tiny_model_dir, pooler="avg_first_last", backend="onnx")


def test_cli_encode_and_eval_sts_on_onnx(tiny_model_dir, tiny_data, tmp_path, reference):
    from subspaces.cli.app import app

    runner = CliRunner()
    (tmp_path / "in.txt").write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    out = tmp_path / "out.npy"
    args = [
        "model",
        "encode",
        "-m",
        str(tiny_model_dir),
        "-i",
        str(tmp_path / "in.txt"),
        "-o",
        str(out),
        "--backend",
        "onnx",
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    np.testing.assert_allclose(np.load(out), reference, atol=FP32_ATOL)
    result = runner.invoke(app, [*args[:-2], "--precision", "int8"])  # torch backend, int8: one line, exit 2
    assert result.exit_code == 2 and "needs --backend onnx or openvino" in result.output
    sts = ["model", "eval", "-m", str(tiny_model_dir), "--tasks", "STSBenchmark", "--json", str(tmp_path / "r.json")]
    result = runner.invoke(app, [*sts, "--backend", "onnx", "--precision", "int8"])
    assert result.exit_code == 0, result.output
    assert '"precision": "int8"' in (tmp_path / "r.json").read_text()


def test_auto_dtype_is_bfloat16_only_where_the_cpu_multiplies_it_natively(monkeypatch):
    for native, want in ((True, "bfloat16"), (False, "float32")):
        monkeypatch.setattr(backends, "native_bfloat16", lambda native=native: native)
        assert backends.resolve_dtype("auto") == want
        assert backends.resolve_dtype("auto", "onnx") == "float32"  # a graph runs fp32 or int8
        assert backends.resolve_dtype("bfloat16") == "bfloat16"  # explicit: honoured (emulated where not native)
    assert backends.resolve_dtype("float32") == "float32"


def test_bfloat16_encodes_float32_rows_close_to_float32s(tiny_model_dir, reference, caplog, monkeypatch):
    import torch

    monkeypatch.setattr(backends, "native_bfloat16", lambda: False)
    caplog.set_level("WARNING", logger=backends.__name__)
    model = load_encoder(tiny_model_dir, dtype="bfloat16")
    assert next(model.parameters()).dtype == torch.bfloat16
    assert "no native bfloat16" in caplog.text  # emulated: said, not refused
    rows = encode(model, TEXTS)
    assert rows.dtype == np.float32 and rows.shape == reference.shape
    cosine = (rows * reference).sum(1) / np.linalg.norm(rows, axis=1) / np.linalg.norm(reference, axis=1)
    assert cosine.min() >= 0.99, cosine


def test_cli_encode_says_its_dtype_and_refuses_bfloat16_on_a_graph(tiny_model_dir, tmp_path, reference):
    from subspaces.cli.app import app

    (tmp_path / "in.txt").write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    args = ["model", "encode", "-m", str(tiny_model_dir), "-i", str(tmp_path / "in.txt"), "-o", str(tmp_path / "o.npy")]
    result = CliRunner().invoke(app, [*args, "--dtype", "bfloat16"])
    assert result.exit_code == 0, result.output
    assert "encoding in bfloat16" in result.output
    assert np.load(tmp_path / "o.npy").dtype == np.float32
    result = CliRunner().invoke(app, [*args, "--dtype", "bfloat16", "--backend", "onnx"])
    assert result.exit_code == 2 and "runs on --backend torch" in result.output
