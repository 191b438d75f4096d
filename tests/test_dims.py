"""Classification readers, probes at truncated dims, STS at truncated dims, the plot and `eval dims`."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
from typer.testing import CliRunner

from subspaces.data import classification as cd
from subspaces.errors import DataError
from subspaces.eval.dims import DimsEvaluator, classification_scores, pair_features, plot_dims
from subspaces.vectors import unit_prefix as prefix
from vocabulary import WORDS as VOCABULARY

WORDS = VOCABULARY[:-1]  # without "quickly": the draws this module's expectations were written for


def _text(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(5))


@pytest.fixture(scope="session")
def probe_data_dir(tiny_data_dir, tmp_path_factory):
    """The shared tiny STS data plus Banking77, Emotion, TweetEval, MRPC and WiC laid out like ../shared/data."""
    root = tmp_path_factory.mktemp("probe-data")
    for child in tiny_data_dir.iterdir():
        (root / child.name).symlink_to(child)
    rng = random.Random(1)
    b = root / "banking77"
    b.mkdir()
    (b / "categories.json").write_text(json.dumps(["card_arrival", "age_limit", "top_up"]))
    for split, n in (("train", 60), ("test", 30)):
        rows = "".join(f'"{_text(rng)}, ok?",{rng.choice(["card_arrival", "age_limit", "top_up"])}\n' for _ in range(n))
        (b / f"{split}.csv").write_text("text,category\n" + rows, encoding="utf-8")
    e = root / "emotion"
    e.mkdir()
    for split in ("train", "validation", "test"):
        rows = [json.dumps({"text": _text(rng), "label": rng.randrange(6)}) for _ in range(40)]
        (e / f"{split}.jsonl").write_text("\n".join(rows) + "\n", encoding="utf-8")
    for task, names in (
        ("emotion", ["anger", "joy", "optimism", "sadness"]),
        ("sentiment", ["negative", "neutral", "positive"]),
    ):
        t = root / "tweeteval" / task
        t.mkdir(parents=True)
        (t / "mapping.txt").write_text("".join(f"{i}\t{n}\n" for i, n in enumerate(names)), encoding="utf-8")
        for split in ("train", "val", "test"):
            labels = [rng.randrange(len(names)) for _ in range(40)]
            (t / f"{split}_labels.txt").write_text("".join(f"{x}\n" for x in labels))
            if not (task == "sentiment" and split == "train"):  # as in the real copy
                (t / f"{split}_text.txt").write_text("".join(f"@user {_text(rng)}\n" for _ in labels), encoding="utf-8")
    m = root / "mrpc"
    m.mkdir()
    for split in ("train", "test"):
        rows = ["Quality\t#1 ID\t#2 ID\t#1 String\t#2 String"]
        rows += [f'{rng.randrange(2)}\t{i}\t{i + 1}\tHe said " {_text(rng)} .\t{_text(rng)} "' for i in range(40)]
        (m / f"msr_paraphrase_{split}.txt").write_text("\ufeff" + "\n".join(rows) + "\n", encoding="utf-8")
    w = root / "wic"
    w.mkdir()
    for split in ("train", "dev", "test"):
        data = [f"cat\tN\t1-2\t{_text(rng)}\t{_text(rng)}" for _ in range(30)]
        (w / f"{split}.data.txt").write_text("\n".join(data) + "\n", encoding="utf-8")
        (w / f"{split}.gold.txt").write_text("\n".join(rng.choice("TF") for _ in data) + "\n", encoding="utf-8")
    return root


@pytest.fixture
def probe_data(probe_data_dir, monkeypatch):
    monkeypatch.setenv("SUBSPACES_DATA", str(probe_data_dir))
    return probe_data_dir


def test_readers(probe_data):
    bank = cd.load_banking77("train")
    assert len(bank) == 60 and bank.label_names == ["age_limit", "card_arrival", "top_up"]  # sorted names
    assert bank.texts[0].endswith(", ok?")  # a quoted comma stays in the text
    mrpc = cd.load_mrpc("test")
    assert len(mrpc) == 40 and mrpc.texts1[0].startswith('He said "')  # BOM stripped, quotes kept as text
    assert set(mrpc.labels) <= {0, 1}
    assert len(cd.load_tweeteval("emotion", "val")) == 40
    assert len(cd.load_wic_pairs("dev")) == 30
    assert len(cd.load_emotion("validation")) == 40


def test_reader_errors_name_file_and_line(probe_data, tmp_path):
    with pytest.raises(DataError, match="sentiment training texts are missing"):
        cd.load_tweeteval("sentiment", "train")
    bad = tmp_path / "banking77"
    bad.mkdir()
    (bad / "categories.json").write_text('["a"]')
    (bad / "train.csv").write_text("text,category\nhello,a\nbye,zzz\n")
    with pytest.raises(DataError, match=r"train.csv, line 3: unknown intent 'zzz'"):
        cd.load_banking77("train", bad)
    mrpc = tmp_path / "mrpc"
    mrpc.mkdir()
    (mrpc / "msr_paraphrase_train.txt").write_text(
        "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n1\t2\tonly three\n"
    )
    with pytest.raises(DataError, match="line 2"):
        cd.load_mrpc("train", mrpc)


def test_probe_can_tell_informative_from_random_features():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, 16))
    y = (x[:, 0] > 0).astype(int)  # the label lives in the first coordinate only
    evaluator = DimsEvaluator(tasks=["Banking77"], dims=[16])
    good = evaluator._probe(prefix(x[:300], 4), y[:300], prefix(x[300:], 4), y[300:])
    bad = evaluator._probe(prefix(x[:300, 4:], 4), y[:300], prefix(x[300:, 4:], 4), y[300:])
    assert good["accuracy"] > 90
    assert bad["accuracy"] < 70


def test_pair_features_and_scores():
    u, v = np.array([[1.0, 2.0]]), np.array([[3.0, -1.0]])
    np.testing.assert_allclose(pair_features(u, v), [[1, 2, 3, -1, 2, 3, 3, -2]])
    s = classification_scores([0, 1, 1, 0], [0, 1, 0, 0])
    assert s["accuracy"] == 75.0 and s["f1"] == pytest.approx(100 * 2 / 3)
    assert s["macro_recall"] == pytest.approx(75.0)


def test_evaluator_end_to_end(tiny_model, probe_data, tmp_path):
    tasks = ["Banking77", "TweetEval-emotion", "TweetEval-sentiment", "MRPC", "WiC", "STSBenchmark"]
    evaluator = DimsEvaluator(tasks=tasks, dims=[4, 16, None], max_train=50)
    report = evaluator.report(tiny_model, name="tiny").to_dict()
    assert report["dims"] == [4, 16, 32]
    assert set(report["scores"]) == set(tasks)
    for task in tasks:
        assert list(report["scores"][task]) == ["4", "16", "32"]
        assert all(np.isfinite(v) for v in report["scores"][task].values())
    assert all(0 <= v <= 100 for v in report["scores"]["Banking77"].values())
    assert report["metrics"]["TweetEval-sentiment"] == "macro_recall"
    assert "val" in report["notes"]["TweetEval-sentiment"]
    png = plot_dims([report, {**report, "model": "copy"}], tmp_path / "dims.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _static_model(tiny_model):
    """A real ST model whose embeddings are spread out (random static token vectors, mean-pooled).

    A random BERT's sentence cosines all sit near 0.99999, so 1e-8 of float noise reorders them and two correct
    Spearman computations disagree; this model's do not tie.
    """
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import StaticEmbedding

    tokenizer = tiny_model.tokenizer.backend_tokenizer
    weights = torch.randn(tokenizer.get_vocab_size(), 24, generator=torch.Generator().manual_seed(0))
    return SentenceTransformer(modules=[StaticEmbedding(tokenizer, embedding_weights=weights)], device="cpu")


def test_sts_at_a_dim_matches_the_sts_evaluator(tiny_model, probe_data):
    from subspaces.eval.sts import STSEvaluator

    model = _static_model(tiny_model)
    ours = DimsEvaluator(tasks=["STSBenchmark", "SICKRelatedness"], dims=[8, 24]).report(model).scores
    for dim in (8, 24):
        theirs = STSEvaluator(tasks=["STSBenchmark", "SICKRelatedness"], truncate_dim=dim, geometry=False)(model)
        for task in ("STSBenchmark", "SICKRelatedness"):
            assert ours[task][str(dim)] == pytest.approx(theirs[task], abs=1e-4)
    assert ours["STSBenchmark"]["8"] != pytest.approx(ours["STSBenchmark"]["24"], abs=1e-4)  # dims really differ


def test_the_evaluator_returns_named_metrics_and_its_primary_one(tiny_model, probe_data):
    from subspaces.eval.base import Evaluator

    model = _static_model(tiny_model)
    evaluator = DimsEvaluator(tasks=["STSBenchmark", "SICKRelatedness"], dims=[8, None])
    evaluator.check()
    metrics = evaluator(model)
    scores = evaluator.report(model).scores
    assert isinstance(evaluator, Evaluator) and evaluator.primary_metric == "mean"
    assert list(metrics) == ["STSBenchmark@8", "STSBenchmark@24", "SICKRelatedness@8", "SICKRelatedness@24", "mean"]
    assert metrics["SICKRelatedness@24"] == scores["SICKRelatedness"]["24"]
    assert evaluator.score(metrics) == pytest.approx(
        np.mean([s for by_dim in scores.values() for s in by_dim.values()])
    )


def test_evaluator_rejects_bad_arguments(tiny_model, probe_data):
    from subspaces.errors import DimensionError, SubspacesError

    with pytest.raises(SubspacesError, match="unknown task"):
        DimsEvaluator(tasks=["NoSuchTask"])
    with pytest.raises(DimensionError):
        DimsEvaluator(tasks=["STSBenchmark"], dims=[64])(tiny_model)


def test_eval_dims_cli_help_names_the_default_tasks():
    """--tasks' help says what the default leaves out (--list-tasks prints every task, not the default set)."""
    import typer

    from subspaces.cli.app import app
    from subspaces.eval.dims import DEFAULT_TASKS, known_tasks

    command = typer.main.get_command(app).commands["matryoshka"].commands["eval"]  # type: ignore[attr-defined]
    help_text = next(p.help for p in command.params if p.name == "tasks")
    assert set(known_tasks()) - set(DEFAULT_TASKS) == {"TweetEval-emoji", "STS12", "STS13", "STS14", "STS15", "STS16"}
    assert "all but TweetEval-emoji and STS12-16" in help_text


def test_eval_dims_cli(tiny_model_dir, probe_data, tmp_path):
    from subspaces.cli.app import app

    target = tmp_path / "out" / "dims.json"
    args = [
        "matryoshka",
        "eval",
        "--model",
        str(tiny_model_dir),
        "--dims",
        "8,full",
        "--tasks",
        "Banking77,MRPC,STSBenchmark",
        "--json",
        str(target),
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    report = json.loads(target.read_text())
    assert report["model"] == str(tiny_model_dir) and report["dims"] == [8, 32]
    assert set(report["scores"]["MRPC"]) == {"8", "32"}
    assert target.with_suffix(".png").is_file()
    bad = CliRunner().invoke(app, ["matryoshka", "eval", "--model", str(tiny_model_dir), "--dims", "8,x"])
    assert bad.exit_code == 2 and "bad dimension" in bad.output


@pytest.mark.slow
def test_real_datasets_match_their_source_counts():
    """The counts each SOURCE.md states (needs ../shared/data)."""
    assert (len(cd.load_banking77("train")), len(cd.load_banking77("test"))) == (10003, 3080)
    assert len(cd.load_banking77("test").label_names) == 77
    assert [len(cd.load_emotion(s)) for s in ("train", "validation", "test")] == [16000, 2000, 2000]
    assert [len(cd.load_tweeteval("emotion", s)) for s in ("train", "val", "test")] == [3257, 374, 1421]
    assert [len(cd.load_tweeteval("sentiment", s)) for s in ("val", "test")] == [2000, 12284]
    mrpc = cd.load_mrpc("train")
    assert (len(mrpc), sum(mrpc.labels)) == (4076, 2753)
    assert (len(cd.load_mrpc("test")), sum(cd.load_mrpc("test").labels)) == (1725, 1147)
    assert [len(cd.load_wic_pairs(s)) for s in ("train", "dev", "test")] == [5428, 638, 1400]


def test_progress_names_the_model_and_shows_off_a_terminal(tiny_model, probe_data, capsys):
    DimsEvaluator(tasks=["Banking77"], dims=[4], max_train=50, show_progress=True).report(tiny_model, name="tiny")
    err = capsys.readouterr().err
    assert "eval dims tiny: 1/1 tasks (100%)" in err and "\r" not in err  # plain lines, not a redrawn bar


def test_eval_dims_cli_onnx_backend_matches_torch(tiny_model_dir, probe_data, tmp_path):
    """`--backend onnx` reaches the encoder: the report names it and its STS scores are torch's."""
    from subspaces.cli.app import app

    reports = {}
    for backend in ("torch", "onnx"):
        target = tmp_path / f"{backend}.json"
        args = ["matryoshka", "eval", "--model", str(tiny_model_dir), "--dims", "8,full", "--tasks", "STSBenchmark"]
        result = CliRunner().invoke(app, [*args, "--backend", backend, "--json", str(target)])
        assert result.exit_code == 0, result.output
        reports[backend] = json.loads(target.read_text())
    assert reports["onnx"]["backend"] == "onnx" and reports["torch"]["backend"] == "torch"
    # a few dozen pairs scored by a random model: near-tied cosines can swap ranks between the two fp32 kernels,
    # so Spearman x 100 agrees to a few points, not to rounding (embedding closeness is tests/test_backends.py's)
    for dim, score in reports["torch"]["scores"]["STSBenchmark"].items():
        assert reports["onnx"]["scores"]["STSBenchmark"][dim] == pytest.approx(score, abs=3)


def test_sts_predictions_are_the_rows_behind_the_table(tiny_model, probe_data):
    from subspaces.eval.sts import STSEvaluator, spearman_x100

    evaluator = STSEvaluator(tasks=["STSBenchmark", "SICKRelatedness"], geometry=False)
    model = _static_model(tiny_model)
    predicted = evaluator.predictions(model)
    table = evaluator(model)
    for task, rows in predicted.items():
        assert rows.shape == evaluator.gold(task).shape
        assert spearman_x100(rows, evaluator.gold(task)) == pytest.approx(table[task], abs=1e-9)
        assert np.array_equal(evaluator.predicted_[task], rows)


def test_kept_predictions_are_the_rows_behind_the_scores(tiny_model, probe_data):
    from subspaces.eval.dims import classification_scores

    model = _static_model(tiny_model)
    report = DimsEvaluator(tasks=["Banking77"], dims=[8, None], keep_predictions=True).report(model).to_dict()
    details = report["details"]["Banking77"]
    for dim in ("8", "24"):
        again = classification_scores(details["gold"], details[dim]["predictions"])
        assert again["accuracy"] == pytest.approx(details[dim]["accuracy"])
    assert "predictions" not in DimsEvaluator(tasks=["Banking77"], dims=[8]).report(model).details["Banking77"]["8"]
