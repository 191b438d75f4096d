"""End-to-end runs of the foundation commands through the typer app, on tiny data and a tiny model."""

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from subspaces.cli.app import app

runner = CliRunner()


def test_help_everywhere():
    for args in ([], ["eval"], ["train"], ["eval", "sts"], ["train", "simcse"], ["encode"]):
        result = runner.invoke(app, [*args, "--help"])
        assert result.exit_code == 0, (args, result.output)


def test_encode_writes_rows_in_input_order(tiny_model_dir, tmp_path):
    texts = ["a cat plays the guitar", "", "dog"]
    (tmp_path / "in.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
    out = tmp_path / "out.npy"
    result = runner.invoke(app, ["encode", "--model", str(tiny_model_dir), "--input", str(tmp_path / "in.txt"),
                                 "--output", str(out), "--truncate-dim", "16", "--normalize"])
    assert result.exit_code == 0, result.output
    emb = np.load(out)
    assert emb.shape == (3, 16)
    assert np.allclose(np.linalg.norm(emb, axis=1), 1, atol=1e-5)
    assert not list(tmp_path.glob(".out.npy*")), "no temporary file left behind"


def test_eval_sts_json(tiny_model_dir, tiny_data, tmp_path):
    result = runner.invoke(app, ["eval", "sts", "--model", str(tiny_model_dir), "--json", str(tmp_path / "r.json")])
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "r.json").read_text())
    assert set(data["tasks"]) == {"STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark", "SICKRelatedness"}
    assert data["avg"] == pytest.approx(np.mean(list(data["tasks"].values())))
    assert "alignment" in data and "uniformity" in data


def test_train_then_eval(tiny_model_dir, tiny_data, tmp_path):
    corpus = tiny_data / "wordnet_sentences" / "wordnet30_definitions.txt.gz"
    out = tmp_path / "run"
    result = runner.invoke(app, ["train", "simcse", "--model", str(tiny_model_dir), "--data", str(corpus),
                                 "--output", str(out), "--batch-size", "16", "--max-steps", "3", "--eval-steps", "2"])
    assert result.exit_code == 0, result.output
    state = json.loads((out / "trainer_state.json").read_text())
    assert state["steps"] == 3 and state["best_score"] is not None
    result = runner.invoke(app, ["eval", "sts", "--model", str(out), "--tasks", "STSBenchmark"])
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize(
    "args, message",
    [
        (["eval", "sts", "--model", "no-such-model"], "bundled model"),
        (["encode", "--model", "minilm-l6", "--input", "/nonexistent.txt", "--output", "x.npy"], "file not found"),
        (["train", "simcse", "--data", "/nonexistent.txt", "--output", "o"], "file not found"),
    ],
)
def test_user_errors_are_one_line_not_a_traceback(args, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert message in result.output and "Traceback" not in result.output


def test_empty_corpus_and_too_large_batch(tiny_model_dir, tmp_path):
    (tmp_path / "empty.txt").write_text("\n", encoding="utf-8")
    result = runner.invoke(app, ["train", "simcse", "--model", str(tiny_model_dir), "--data", str(tmp_path / "empty.txt"),
                                 "--output", str(tmp_path / "o")])
    assert result.exit_code == 2 and "holds no text" in result.output
    (tmp_path / "few.txt").write_text("a\nb\nc\n", encoding="utf-8")
    result = runner.invoke(app, ["train", "simcse", "--model", str(tiny_model_dir), "--data", str(tmp_path / "few.txt"),
                                 "--output", str(tmp_path / "o"), "--no-eval"])
    assert result.exit_code == 2 and "larger than the data" in result.output


def test_unsup_training_refuses_a_csv_before_loading_the_model(tmp_path):
    (tmp_path / "nli.csv").write_text("sent0,sent1\na,b\n", encoding="utf-8")
    result = runner.invoke(app, ["train", "simcse", "--model", "no-such-model", "--data", str(tmp_path / "nli.csv"),
                                 "--output", str(tmp_path / "o")])
    assert result.exit_code == 2 and "is a CSV" in " ".join(result.output.split()), result.output
