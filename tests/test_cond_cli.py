import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from subspaces.cli.app import app

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    from subspaces.models.encoder import build_random_bert

    root = tmp_path_factory.mktemp("cli")
    build_random_bert(root / "bert", num_layers=1, hidden_size=32, num_heads=2, pooler="mean", dropout=0.0).save(
        str(root / "enc")
    )
    data = root / "csts"
    data.mkdir()
    shutil.copy(FIXTURES / "csts_mini.csv", data / "csts_train.csv")
    shutil.copy(FIXTURES / "csts_mini.csv", data / "csts_validation.csv")
    shutil.copy(FIXTURES / "csts_mini_test.csv", data / "csts_test.csv")
    return root


def test_train_eval_predict(setup):
    runner = CliRunner()
    out = setup / "model"
    res = runner.invoke(
        app,
        [
            "cond",
            "train",
            "--task",
            "csts",
            "--data",
            str(setup / "csts"),
            "--model",
            str(setup / "enc"),
            "--head",
            "hypernet",
            "--rank",
            "4",
            "--objective",
            "infonce_mse",
            "--batch-size",
            "4",
            "--epochs",
            "2",
            "--output",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    assert (out / "subspaces_model.json").is_file() and (out / "train_result.json").is_file()
    # C-STS is graded: its validation table has no accuracy or AUC columns (they were all NaN).
    assert "validation by epoch" in res.output and "spearman" in res.output
    assert "nan" not in res.output.lower() and "auc" not in res.output and "accuracy" not in res.output
    report_path = setup / "report.json"
    res = runner.invoke(
        app,
        [
            "cond",
            "eval",
            str(out),
            "--task",
            "csts",
            "--data",
            str(setup / "csts"),
            "--split",
            "validation",
            "--json",
            str(report_path),
        ],
    )
    assert res.exit_code == 0, res.output
    report = json.loads(report_path.read_text())
    assert report["arch"] == "tri" and report["head"] == "hypernet" and report["rank"] == 4
    assert set(report["metrics"]) == {"spearman", "pearson", "mse"}  # no accuracy/AUC for graded labels
    assert report["seen"]["n"] == 15 and "unseen" not in report
    assert 0 <= report["cache"]["hit_rate"] <= 1 and report["cache"]["bytes"] > 0
    pred = setup / "pred.json"
    res = runner.invoke(
        app,
        [
            "cond",
            "eval",
            str(out),
            "--task",
            "csts",
            "--data",
            str(setup / "csts"),
            "--split",
            "test",
            "--predictions",
            str(pred),
        ],
    )
    assert res.exit_code == 0, res.output
    scores = json.loads(pred.read_text())
    assert list(scores) == ["0", "1", "2"] and all(1.0 <= v <= 5.0 for v in scores.values())


def test_cache_bench_and_user_errors(setup):
    runner = CliRunner()
    report_path = setup / "bench.json"
    res = runner.invoke(
        app,
        [
            "bench",
            "csts-cache",
            "--task",
            "csts",
            "--data",
            str(setup / "csts"),
            "--model",
            str(setup / "enc"),
            "--split",
            "validation",
            "--rank",
            "4",
            "--json",
            str(report_path),
        ],
    )
    assert res.exit_code == 0, res.output
    report = json.loads(report_path.read_text())
    tri, bi = report["runs"]["tri"], report["runs"]["bi"]
    # The fixture holds each sentence pair under two conditions: the tri-encoder reuses sentences,
    # the bi-encoder cannot.
    assert tri["cold"]["caches"]["sentences"] > 0.4 and bi["cold"]["hit_rate"] == 0.0
    assert tri["warm"]["hit_rate"] == 1.0 and bi["warm"]["hit_rate"] == 1.0
    # New conditions for known sentences: the tri-encoder reuses every sentence embedding.
    assert tri["new_conditions"]["caches"]["sentences"] == 1.0
    res = runner.invoke(app, ["cond", "train", "--task", "csts", "--output", str(setup / "x")])
    assert res.exit_code == 2 and "--data" in res.output
    res = runner.invoke(app, ["cond", "train", "--task", "csts", "--data", str(setup), "--output", str(setup / "x")])
    assert res.exit_code == 2 and "csts_train.csv" in res.output
    res = runner.invoke(
        app,
        [
            "cond",
            "train",
            "--task",
            "csts",
            "--data",
            str(setup / "csts"),
            "--model",
            str(setup / "enc"),
            "--rank",
            "zero",
            "--output",
            str(setup / "x"),
        ],
    )
    assert res.exit_code == 2 and "--rank" in res.output
    res = runner.invoke(app, ["cond", "eval", str(setup), "--task", "csts", "--data", str(setup / "csts")])
    assert res.exit_code == 2 and "not a conditional model folder" in res.output


def test_frozen_bi_encoder_training_is_refused(setup):
    out = setup / "bi-frozen"
    res = CliRunner().invoke(
        app,
        [
            "cond",
            "train",
            "--task",
            "csts",
            "--data",
            str(setup / "csts"),
            "--model",
            str(setup / "enc"),
            "--arch",
            "bi",
            "--output",
            str(out),
        ],
    )
    assert res.exit_code == 2 and "nothing to train" in " ".join(res.output.split()), res.output
    assert not out.exists()
    res = CliRunner().invoke(
        app,
        ["cond", "eval", str(setup / "enc"), "--task", "csts", "--data", str(setup / "csts"), "--split", "validation"],
    )
    assert res.exit_code == 0, res.output  # the plain encoder, zero-shot, is how a frozen bi-encoder is scored
