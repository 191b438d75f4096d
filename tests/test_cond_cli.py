import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from subspaces.cli.app import app

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    from bench.random_bert import build_random_bert

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
            "cond",
            "bench",
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


def test_search_ranks_a_stored_corpus_under_a_condition(setup, tmp_path):
    import numpy as np

    from subspaces.models.conditional import build_model
    from subspaces.models.triencoder import TriEncoder

    build_model(str(setup / "enc"), head="hypernet", rank=4, seed=0).save(tmp_path / "head")
    texts = ["a red car", "a blue sea", "a small dog", "a large house", "a green tree"]
    (tmp_path / "corpus.txt").write_text("\n".join(texts) + "\n")
    model = TriEncoder.load(tmp_path / "head")
    np.save(tmp_path / "corpus.npy", model.embed_sentences(texts).numpy())
    runner = CliRunner()
    base = ["cond", "search", "--head", str(tmp_path / "head"), "--query", "a red car", "--condition", "the colour"]
    res = runner.invoke(
        app, [*base, "--corpus-texts", str(tmp_path / "corpus.txt"), "-k", "3", "--json", str(tmp_path / "hits.json")]
    )
    assert res.exit_code == 0, res.output
    report = json.loads((tmp_path / "hits.json").read_text())
    model.index_corpus(texts)
    want = model.search("a red car", "the colour", k=3)
    assert [h["row"] for h in report["results"][0]["hits"]] == want.rows[0].tolist()
    assert report["results"][0]["hits"][0]["text"] == texts[want.rows[0][0]]
    assert report["seen"] is None and report["cache"]["misses"] == 1
    # the stored vectors give the same ranking, without encoding the corpus
    res = runner.invoke(
        app, [*base, "--corpus", str(tmp_path / "corpus.npy"), "-k", "3", "--json", str(tmp_path / "v.json")]
    )
    assert res.exit_code == 0, res.output
    from_vectors = json.loads((tmp_path / "v.json").read_text())["results"][0]["hits"]
    assert [h["row"] for h in from_vectors] == want.rows[0].tolist() and "text" not in from_vectors[0]
    assert np.allclose([h["score"] for h in from_vectors], want.scores[0], atol=1e-5)

    np.save(tmp_path / "wide.npy", np.zeros((3, 48), dtype=np.float32))
    res = runner.invoke(app, [*base, "--corpus", str(tmp_path / "wide.npy")])
    assert res.exit_code != 0 and "48-dimensional rows, but the head's encoder produces 32" in " ".join(
        res.output.split()
    )
    res = runner.invoke(app, base)
    assert res.exit_code != 0 and "--corpus" in res.output


def test_search_notes_a_condition_unseen_in_training(setup, tmp_path):
    from subspaces.models.conditional import build_model

    model = build_model(str(setup / "enc"), head="hypernet", rank=4, seed=0)
    model.metadata["seen_conditions"] = ["the colour"]
    model.save(tmp_path / "head")
    (tmp_path / "corpus.txt").write_text("a red car\na blue sea\n")
    args = ["cond", "search", "--head", str(tmp_path / "head"), "--corpus-texts", str(tmp_path / "corpus.txt")]
    res = CliRunner().invoke(app, [*args, "-q", "a car", "-c", "the price", "--json", str(tmp_path / "h.json")])
    assert res.exit_code == 0, res.output
    assert "'the price' was not seen in training" in " ".join(res.output.split())
    report = json.loads((tmp_path / "h.json").read_text())
    assert report["seen"] is False and len(report["results"][0]["hits"]) == 2
