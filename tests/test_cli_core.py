"""End-to-end runs of the foundation commands through the typer app, on tiny data and a tiny model."""

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from subspaces.cli.app import app

runner = CliRunner()


def test_help_everywhere():
    for args in (
        [],
        ["model"],
        ["simcse"],
        ["matryoshka"],
        ["model", "eval"],
        ["simcse", "train"],
        ["model", "encode"],
    ):
        result = runner.invoke(app, [*args, "--help"])
        assert result.exit_code == 0, (args, result.output)


def test_encode_writes_rows_in_input_order(tiny_model_dir, tmp_path):
    texts = ["a cat plays the guitar", "", "dog"]
    (tmp_path / "in.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
    out = tmp_path / "out.npy"
    result = runner.invoke(
        app,
        [
            "model",
            "encode",
            "--model",
            str(tiny_model_dir),
            "--input",
            str(tmp_path / "in.txt"),
            "--output",
            str(out),
            "--truncate-dim",
            "16",
            "--normalize",
        ],
    )
    assert result.exit_code == 0, result.output
    emb = np.load(out)
    assert emb.shape == (3, 16)
    assert np.allclose(np.linalg.norm(emb, axis=1), 1, atol=1e-5)
    assert not list(tmp_path.glob(".out.npy*")), "no temporary file left behind"


def test_eval_sts_json(tiny_model_dir, tiny_data, tmp_path):
    result = runner.invoke(app, ["model", "eval", "--model", str(tiny_model_dir), "--json", str(tmp_path / "r.json")])
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "r.json").read_text())
    assert set(data["tasks"]) == {"STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark", "SICKRelatedness"}
    assert data["avg"] == pytest.approx(np.mean(list(data["tasks"].values())))
    assert "alignment" in data and "uniformity" in data


def test_eval_sts_runs_in_the_dtype_asked_and_records_it(tiny_model_dir, tiny_data, tmp_path):
    """--dtype bfloat16 evaluates bfloat16 weights (figures close to float32's, not equal), says so and records it
    in the JSON; on an exported graph it is refused before anything loads."""
    args = ["model", "eval", "--model", str(tiny_model_dir), "--tasks", "STSBenchmark"]
    runs = {}
    for dtype in ("float32", "bfloat16"):
        result = runner.invoke(app, [*args, "--dtype", dtype, "--json", str(tmp_path / f"{dtype}.json")])
        assert result.exit_code == 0, result.output
        runs[dtype] = json.loads((tmp_path / f"{dtype}.json").read_text())
    assert "evaluating in bfloat16 (--dtype bfloat16)" in result.output
    assert (runs["float32"]["dtype"], runs["bfloat16"]["dtype"]) == ("float32", "bfloat16")
    assert runs["bfloat16"]["alignment"] != runs["float32"]["alignment"]
    assert runs["bfloat16"]["uniformity"] == pytest.approx(runs["float32"]["uniformity"], abs=0.05)
    refused = runner.invoke(app, [*args, "--dtype", "bfloat16", "--backend", "onnx"])
    assert refused.exit_code == 2 and "runs on --backend torch" in refused.output


def test_train_then_eval(tiny_model_dir, tiny_data, tmp_path):
    corpus = tiny_data / "wordnet_sentences" / "wordnet30_definitions.txt.gz"
    out = tmp_path / "run"
    result = runner.invoke(
        app,
        [
            "simcse",
            "train",
            "--model",
            str(tiny_model_dir),
            "--data",
            str(corpus),
            "--output",
            str(out),
            "--batch-size",
            "16",
            "--max-steps",
            "3",
            "--eval-steps",
            "2",
        ],
    )
    assert result.exit_code == 0, result.output
    state = json.loads((out / "trainer_state.json").read_text())
    assert state["steps"] == 3 and state["best_score"] is not None
    result = runner.invoke(app, ["model", "eval", "--model", str(out), "--tasks", "STSBenchmark"])
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["model", "eval", "--model", "no-such-model"], "bundled model"),
        (
            ["model", "encode", "--model", "minilm-l6", "--input", "/nonexistent.txt", "--output", "x.npy"],
            "file not found",
        ),
        (["simcse", "train", "--data", "/nonexistent.txt", "--output", "o"], "file not found"),
    ],
)
def test_user_errors_are_one_line_not_a_traceback(args, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert message in result.output and "Traceback" not in result.output


def test_empty_corpus_and_too_large_batch(tiny_model_dir, tmp_path):
    (tmp_path / "empty.txt").write_text("\n", encoding="utf-8")
    result = runner.invoke(
        app,
        [
            "simcse",
            "train",
            "--model",
            str(tiny_model_dir),
            "--data",
            str(tmp_path / "empty.txt"),
            "--output",
            str(tmp_path / "o"),
        ],
    )
    assert result.exit_code == 2 and "holds no text" in result.output
    (tmp_path / "few.txt").write_text("a\nb\nc\n", encoding="utf-8")
    result = runner.invoke(
        app,
        [
            "simcse",
            "train",
            "--model",
            str(tiny_model_dir),
            "--data",
            str(tmp_path / "few.txt"),
            "--output",
            str(tmp_path / "o"),
            "--no-eval",
        ],
    )
    assert result.exit_code == 2 and "larger than the data" in result.output


def test_unsup_training_refuses_a_csv_before_loading_the_model(tmp_path):
    (tmp_path / "nli.csv").write_text("sent0,sent1\na,b\n", encoding="utf-8")
    result = runner.invoke(
        app,
        [
            "simcse",
            "train",
            "--model",
            "no-such-model",
            "--data",
            str(tmp_path / "nli.csv"),
            "--output",
            str(tmp_path / "o"),
        ],
    )
    assert result.exit_code == 2 and "is a CSV" in " ".join(result.output.split()), result.output


def _encode(tiny_model_dir, tmp_path, out_name, *extra, texts=("a cat plays the guitar", "", "dog"), stdin=None):
    source = "-" if stdin is not None else str(tmp_path / "in.txt")
    if stdin is None:
        (tmp_path / "in.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
    out = tmp_path / out_name
    result = runner.invoke(
        app,
        ["model", "encode", "--model", str(tiny_model_dir), "--input", source, "--output", str(out), *extra],
        input=stdin,
    )
    return result, out


def test_encode_writes_the_format_its_suffix_names(tiny_model_dir, tmp_path):
    from subspaces.io import read_embedding_file

    reference, npy = _encode(tiny_model_dir, tmp_path, "out.npy")
    assert reference.exit_code == 0, reference.output
    expected = np.load(npy)
    result, parquet = _encode(tiny_model_dir, tmp_path, "out.parquet")
    assert result.exit_code == 0, result.output
    got, column = read_embedding_file(parquet)  # the reader align apply uses
    assert column == "embedding" and np.allclose(got, expected)
    result, jsonl = _encode(tiny_model_dir, tmp_path, "out.jsonl")
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in jsonl.read_text(encoding="utf-8").splitlines()]
    assert [r["text"] for r in records] == ["a cat plays the guitar", "", "dog"]
    assert np.allclose([r["embedding"] for r in records], expected, atol=1e-6)


@pytest.mark.parametrize("name", ["x.txt", "x"])
def test_encode_refuses_a_suffix_it_cannot_write_before_loading(tmp_path, name):
    (tmp_path / "in.txt").write_text("a\n", encoding="utf-8")
    result = runner.invoke(
        app,
        [
            "model",
            "encode",
            "--model",
            "no-such-model",
            "--input",
            str(tmp_path / "in.txt"),
            "--output",
            str(tmp_path / name),
        ],
    )
    assert result.exit_code == 2 and ".npy, .parquet, .jsonl" in result.output, result.output
    assert not (tmp_path / name).exists()


@pytest.mark.parametrize("args", [["model", "encode", "--input", "in.txt", "--output", "o.npy"], ["model", "eval"]])
@pytest.mark.parametrize("value", ["0", "-1"])
def test_batch_size_below_one_is_a_one_line_error(tmp_path, monkeypatch, args, value):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "in.txt").write_text("a\n", encoding="utf-8")
    result = runner.invoke(app, [*args, "--model", "no-such-model", "--batch-size", value])
    assert result.exit_code == 2, result.output
    assert result.output.strip() == f"error: --batch-size must be at least 1, got {value}"


def test_encode_reads_stdin_and_counts_truncated_texts(tiny_model_dir, tmp_path):
    texts = ["a cat plays the guitar in the park with a dog", "dog"]
    result, out = _encode(tiny_model_dir, tmp_path, "o.npy", "--max-seq-length", "5", stdin="\n".join(texts) + "\n")
    assert result.exit_code == 0, result.output
    assert np.load(out).shape[0] == 2
    assert "1 of 2 texts are longer than 5 tokens" in " ".join(result.output.split())
    result, _ = _encode(tiny_model_dir, tmp_path, "o.npy", stdin="\n".join(texts) + "\n")
    assert "longer than" not in result.output  # the tiny model reads 64 tokens


@pytest.mark.parametrize(("device", "message"), [("nonsense", "unknown device"), ("cuda:99", "CUDA device")])
def test_encode_checks_the_device(tiny_model_dir, tmp_path, device, message):
    result, _ = _encode(tiny_model_dir, tmp_path, "o.npy", "--device", device)
    assert result.exit_code == 2 and message in result.output, result.output


@pytest.mark.parametrize(
    "command",
    [
        ["cond", "train", "--output", "{out}", "--model", "{model}"],
        ["cond", "eval", "{model}"],
        ["cond", "bench", "--model", "{model}"],
        ["kgc", "train", "--output", "{out}", "--model", "{model}", "--dataset", "{out}"],
        ["kgc", "eval", "{model}", "--dataset", "{out}"],
        ["matryoshka", "eval", "--model", "{model}"],
        ["align", "fit", "-o", "{out}", "--source", "{model}", "--source-texts", "{texts}", "--target-emb", "{emb}"],
    ],
    ids=lambda c: " ".join(c[:2]),
)
def test_model_loading_commands_check_the_device_first(tiny_model_dir, tmp_path, command):
    (tmp_path / "t.txt").write_text("a cat\n")
    np.save(tmp_path / "e.npy", np.ones((1, 4), dtype=np.float32))
    values = {"out": tmp_path / "out", "model": tiny_model_dir, "texts": tmp_path / "t.txt", "emb": tmp_path / "e.npy"}
    args = [part.format(**values) for part in command]
    result = runner.invoke(app, [*args, "--device", "cuda:99"])
    assert result.exit_code == 2 and "CUDA device" in result.output, result.output
    assert not (tmp_path / "out").exists()  # nothing loaded, nothing written


def test_ctrl_c_during_encode_says_what_is_true(tiny_model_dir, tmp_path, monkeypatch):
    import subspaces.models.encoder as encoder

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(encoder, "encode", interrupted)
    result, out = _encode(tiny_model_dir, tmp_path, "o.npy")
    assert result.exit_code == 130 and "no embeddings were written" in result.output, result.output
    assert "checkpoint" not in result.output and not out.exists()


def test_eval_sts_without_data_fails_before_loading_the_model(tmp_path, monkeypatch):
    import subspaces.models.encoder as encoder

    monkeypatch.chdir(tmp_path)  # no ../shared/data or ./data here
    monkeypatch.delenv("SUBSPACES_DATA", raising=False)
    monkeypatch.setattr(encoder, "load_encoder", lambda *a, **k: pytest.fail("loaded the model before the data"))
    result = runner.invoke(app, ["model", "eval", "--model", "minilm-l6"])
    assert result.exit_code == 2 and "no data folder found" in result.output, result.output


def test_models_lists_full_paths_off_a_terminal_and_says_what_is_not_installed():
    from subspaces.models import registry

    result = runner.invoke(app, ["model", "list"])
    assert result.exit_code == 0, result.output
    from subspaces.models.registry import resolve

    assert str(resolve("minilm-l6")) in result.output  # whole, on one line, though CliRunner is no terminal
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        distribution(registry.MPNET_PARTS[0])
    except PackageNotFoundError:
        assert "not installed: make install-mpnet" in result.output


def test_every_command_takes_threads():
    import typer.main

    def commands(group, prefix=()):
        for name, cmd in group.commands.items():
            if hasattr(cmd, "commands"):  # a group
                yield from commands(cmd, (*prefix, name))
            else:
                yield (*prefix, name), cmd

    found = dict(commands(typer.main.get_command(app)))
    assert len(found) >= 14
    missing = [
        " ".join(name) for name, cmd in found.items() if "--threads" not in [o for p in cmd.params for o in p.opts]
    ]
    assert not missing, f"commands without --threads: {missing}"


def test_threads_option_sets_every_pool(tiny_model_dir, tmp_path):
    import torch
    from threadpoolctl import threadpool_info, threadpool_limits

    with threadpool_limits(limits=1):  # on exit, the limits from before the test come back
        result, _ = _encode(tiny_model_dir, tmp_path, "o.npy", "--threads", "2")
        assert result.exit_code == 0, result.output
        assert torch.get_num_threads() == 2
        assert all(pool["num_threads"] == 2 for pool in threadpool_info())
    result, _ = _encode(tiny_model_dir, tmp_path, "o.npy", "--threads", "0")
    assert result.exit_code == 2 and "threads must be at least 1" in result.output, result.output


def test_tests_use_a_temporary_cache(temporary_cache):
    from pathlib import Path

    from subspaces.config import cache_dir

    assert cache_dir() == temporary_cache and Path.home() not in cache_dir().parents
