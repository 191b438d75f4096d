import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from subspaces.cond.metrics import choose_threshold, conditional_metrics
from subspaces.cond.sampler import PairSampler, RowSampler
from subspaces.cond.tasks import get_task
from subspaces.cond.train import CondTrainConfig, evaluate, fit, predict
from subspaces.data.csts import ConditionalPair, read_csts, write_predictions
from subspaces.data.wic import load_wic, read_wic
from subspaces.errors import DataError, SubspacesError
from subspaces.losses.conditional import ConditionalLoss
from subspaces.models.conditional import BiEncoder, TriEncoder, load_model
from subspaces.models.heads import make_head

FIXTURES = Path(__file__).parent / "fixtures"
CSTS = FIXTURES / "csts_mini.csv"


@pytest.fixture(scope="module")
def tiny_encoder(tmp_path_factory):
    from bench.random_bert import build_random_bert

    folder = tmp_path_factory.mktemp("bert")
    model = build_random_bert(folder, num_layers=2, hidden_size=32, num_heads=2, pooler="mean", dropout=0.0)
    model.save(str(folder / "st"))
    return str(folder / "st")


def row(s1, s2, c, y, i=0):
    return ConditionalPair(s1, s2, c, y, i)


# --- data -------------------------------------------------------------------------------------------------


def test_read_csts_fixture():
    rows = read_csts(CSTS)
    assert len(rows) == 15
    assert rows[0].condition == "The color of clothing." and rows[0].label == 5.0 and rows[0].idx == 0
    test = read_csts(FIXTURES / "csts_mini_test.csv")
    assert all(r.label is None for r in test)


def test_csts_errors_name_file_and_line(tmp_path):
    bad = tmp_path / "csts_train.csv"
    bad.write_text("sentence1,sentence2,condition,label\na,b,c,3\na,b,c,seven\n")
    with pytest.raises(DataError, match=r"csts_train.csv, line 3: label 'seven'"):
        read_csts(bad)
    bad.write_text("sentence1,sentence2,label\na,b,3\n")
    with pytest.raises(DataError, match="lacks column.*condition"):
        read_csts(bad)
    bad.write_text("sentence1,sentence2,condition,label\na,b,c,9\n")
    with pytest.raises(DataError, match="outside 1..5"):
        read_csts(bad)


def test_prediction_file(tmp_path):
    rows = read_csts(FIXTURES / "csts_mini_test.csv")
    write_predictions(tmp_path / "pred.json", rows, [4.5, 1.0, 3.25])
    assert json.loads((tmp_path / "pred.json").read_text()) == {"0": 4.5, "1": 1.0, "2": 3.25}


def test_wic_conversion(tmp_path):
    (tmp_path / "dev.data.txt").write_text(
        "carry\tV\t2-1\tYou must carry your camping gear .\tSound carries well over water .\n"
        "bank\tN\t1-1\tThe bank closed .\tA river bank .\n"
    )
    (tmp_path / "dev.gold.txt").write_text("F\nT\n")
    rows = load_wic("validation", tmp_path)
    assert [r.condition for r in rows] == ["carry (verb)", "bank (noun)"]
    assert [r.label for r in rows] == [0.0, 1.0]
    assert rows[0].sentence1 == "You must carry your camping gear ."
    (tmp_path / "dev.gold.txt").write_text("F\nX\n")
    with pytest.raises(DataError, match="line 2"):
        read_wic(tmp_path / "dev.data.txt", tmp_path / "dev.gold.txt")


# --- sampler ----------------------------------------------------------------------------------------------


def test_pair_sampler_on_hand_made_rows():
    rows = [
        row("a", "b", "c1", 5.0),
        row("b", "a", "c2", 1.0),  # same pair, reversed order
        row("x", "y", "c1", 3.0),  # one condition only
        row("p", "q", "c1", 2.0),
        row("p", "q", "c2", 2.0),  # equal labels
        row("m", "n", "c1", 4.0),
        row("m", "n", "c2", 2.0),
        row("m", "n", "c3", 1.0),  # third condition
        row("u", "v", "c1", None),
    ]
    sampler = PairSampler(rows, batch_size=4, seed=0)
    assert sorted(sampler.units) == [(0, 1), (5, 7)]
    assert sampler.dropped == {
        "pair under one condition only": 1,
        "pair with equal labels under all its conditions": 2,
        "extra conditions beyond the highest and lowest": 1,
        "no label": 1,
    }
    batches = list(sampler.epoch(0))
    assert len(batches) == len(sampler) == 1
    flat = batches[0]
    assert {tuple(flat[i : i + 2]) for i in (0, 2)} == {(0, 1), (5, 7)}
    assert "dropped 1 row(s): pair under one condition only" in sampler.summary()


def test_pair_sampler_refuses_unpaired_data():
    with pytest.raises(SubspacesError, match="use --objective mse"):
        PairSampler([row("a", "b", "c", 1.0), row("c", "d", "c", 0.0)], batch_size=2)
    with pytest.raises(SubspacesError, match="even batch size"):
        PairSampler([row("a", "b", "c", 1.0)], batch_size=3)


def test_row_sampler_covers_each_row_once():
    rows = [row(str(i), "b", "c", float(i % 2)) for i in range(10)] + [row("z", "b", "c", None)]
    sampler = RowSampler(rows, batch_size=3, seed=1)
    seen = [i for b in sampler.epoch(0) for i in b]
    assert sorted(seen) == list(range(10)) and len(sampler) == 4


# --- losses -----------------------------------------------------------------------------------------------


def test_losses_by_hand():
    # Two rows = one (high, low) pair. z vectors chosen so that cos_high = 1 and cos_low = 0.
    z1 = torch.tensor([[1.0, 0.0], [1.0, 0.0]])
    z2 = torch.tensor([[2.0, 0.0], [0.0, 3.0]])
    y = torch.tensor([0.75, 0.25])
    mse = ConditionalLoss(objective="mse")(z1, z2, y)
    assert mse.item() == pytest.approx(((1 - 0.75) ** 2 + 0.25**2) / 2)
    quad = ConditionalLoss(objective="quadruplet", margin=1.0)(z1, z2, y)
    assert quad.item() == pytest.approx(0.0)  # cos_high - cos_low = 1 = margin
    quad_reversed = ConditionalLoss(objective="quadruplet", margin=1.0)(z1, z2.flip(0), y)
    assert quad_reversed.item() == pytest.approx(2.0)
    tau = 1.5
    info = ConditionalLoss(objective="infonce_mse", temperature=tau)(z1, z2, y)
    contrast = -math.log(math.exp(1 / tau) / (math.exp(1 / tau) + math.exp(0)))
    assert info.item() == pytest.approx(contrast + ((1 - 0.75) ** 2 + 0.25**2) / 2, rel=1e-5)


def test_infonce_in_batch_negatives_add_terms():
    torch.manual_seed(0)
    z1, z2 = torch.randn(4, 3), torch.randn(4, 3)
    y = torch.tensor([1.0, 0.0, 1.0, 0.0])
    plain = ConditionalLoss(objective="infonce_mse")(z1, z2, y)
    extra = ConditionalLoss(objective="infonce_mse", in_batch_negatives=True)(z1, z2, y)
    assert extra.item() > plain.item()  # more negatives can only raise the cross-entropy


# --- metrics ----------------------------------------------------------------------------------------------


def test_threshold_and_metrics():
    scores = np.array([0.1, 0.2, 0.35, 0.4, 0.8, 0.9])
    labels = np.array([0, 0, 1, 0, 1, 1])
    t = choose_threshold(scores, labels)
    assert ((scores >= t) == labels).mean() == pytest.approx(5 / 6)
    result = conditional_metrics(scores, labels, binary=True, threshold=t, seen=np.array([1, 1, 1, 0, 0, 0], bool))
    assert result["metrics"]["accuracy"] == pytest.approx(5 / 6)
    assert result["metrics"]["auc"] == pytest.approx(8 / 9)
    assert result["seen"]["n"] == 3 and "pearson" not in result["metrics"]
    graded = conditional_metrics(scores, scores * 0.5, binary=False)
    assert graded["metrics"]["spearman"] == pytest.approx(1.0) and "accuracy" not in graded["metrics"]


# --- models -----------------------------------------------------------------------------------------------


def test_tri_encoder_caches_and_matches_head(tiny_encoder):
    from subspaces.models.encoder import load_encoder

    enc = load_encoder(tiny_encoder)
    torch.manual_seed(0)
    model = TriEncoder(enc, make_head("hypernet", 32, 4), encoder_name=tiny_encoder)
    s1 = ["a dog runs", "a cat sleeps", "a dog runs"]
    s2 = ["a cat sleeps", "a dog runs", "a bird sings"]
    c = ["the animal", "the animal", "the action"]
    sims = model.similarity(s1, s2, c)
    # By hand: encode, project with the explicit W_c, cosine.
    e1 = torch.tensor(enc.encode(s1))
    e2 = torch.tensor(enc.encode(s2))
    ec = torch.tensor(enc.encode(c))
    w = model.head.projection_matrix(ec)
    p1, p2 = torch.einsum("bij,bj->bi", w, e1), torch.einsum("bij,bj->bi", w, e2)
    assert np.allclose(sims, torch.nn.functional.cosine_similarity(p1, p2).detach().numpy(), atol=1e-5)
    stats = model.cache_stats()["caches"]
    assert stats["sentences"]["misses"] == 3 and stats["sentences"]["hits"] == 3  # 6 lookups, 3 distinct
    assert stats["condition_params"]["misses"] == 2 and stats["condition_params"]["hits"] == 1
    model.similarity(s1, s2, c)
    assert model.cache_stats()["caches"]["sentences"]["hits"] == 9


def test_bi_encoder_sees_condition(tiny_encoder):
    from subspaces.models.encoder import load_encoder

    model = BiEncoder(load_encoder(tiny_encoder), encoder_name=tiny_encoder)
    a = model.similarity(["a dog runs"], ["a cat sleeps"], ["the animal"])
    b = model.similarity(["a dog runs"], ["a cat sleeps"], ["the weather today"])
    assert a.shape == (1,) and not np.isclose(a[0], b[0])


def test_both_architectures_are_conditional_encoders_and_train_with_one_recipe(tiny_encoder):
    from subspaces.models.conditional import ConditionalEncoder, build_model

    rows = read_csts(CSTS)[:8]
    for arch in ("tri", "bi"):
        model = build_model(tiny_encoder, arch, head="hadamard", freeze_encoder=False)
        assert isinstance(model, ConditionalEncoder) and model.task == "cond"
        z = model.project(["a dog runs"], ["the animal"])
        assert z.shape == (1, model.dim)
        config = CondTrainConfig(batch_size=4, max_steps=1, head_lr=1e-2, encoder_lr=1e-3, show_progress=False)
        assert fit(model, get_task("csts"), rows, config).steps == 1
    with pytest.raises(TypeError):
        CondTrainConfig(lr=1e-3)  # one vocabulary: head_lr and encoder_lr


@pytest.mark.parametrize("objective", ["mse", "infonce_mse", "quadruplet"])
def test_train_frozen_head_on_fixture_and_round_trip(tiny_encoder, tmp_path, objective):
    from subspaces.models.conditional import build_model

    task = get_task("csts")
    rows = read_csts(CSTS)
    model = build_model(tiny_encoder, "tri", head="hypernet", rank=4, freeze_encoder=True)
    before = evaluate(model, task, rows)["metrics"]["mse"]
    enc_before = next(model.encoder.parameters()).detach().clone()
    head_before = [p.detach().clone() for p in model.head.parameters()]
    result = fit(
        model,
        task,
        rows,
        CondTrainConfig(objective=objective, batch_size=4, epochs=30, head_lr=1e-2, show_progress=False),
    )
    assert result.steps > 0
    assert torch.equal(next(model.encoder.parameters()), enc_before)  # frozen
    # Every objective steps the optimiser: the head's weights move (a loop that never stepped left them as built).
    assert any(not torch.equal(a, b) for a, b in zip(head_before, model.head.parameters(), strict=True))
    after = evaluate(model, task, rows)
    if objective == "mse":
        assert after["metrics"]["mse"] < before  # it learns the training rows
    if objective != "mse":
        sampler = model.metadata["training"]["sampler"]
        assert "(high, low) pairs" in sampler and "one condition only" in sampler
    model.save(tmp_path / "m")
    loaded = load_model(tmp_path / "m")
    assert isinstance(loaded, TriEncoder) and loaded.metadata["task"] == "csts"
    rows_text = ([r.sentence1 for r in rows], [r.sentence2 for r in rows], [r.condition for r in rows])
    assert np.allclose(loaded.similarity(*rows_text), model.similarity(*rows_text), atol=1e-6)
    assert not (tmp_path / "m" / "encoder").exists()  # frozen: a reference to the encoder, not a copy


def test_fine_tune_bi_encoder_saves_encoder(tiny_encoder, tmp_path):
    from subspaces.models.conditional import build_model

    task = get_task("csts")
    rows = read_csts(CSTS)
    model = build_model(tiny_encoder, "bi", freeze_encoder=False)
    before = next(model.encoder.parameters()).detach().clone()
    fit(model, task, rows, CondTrainConfig(batch_size=8, epochs=1, encoder_lr=1e-3, show_progress=False))
    assert not torch.equal(next(model.encoder.parameters()), before)
    model.save(tmp_path / "bi")
    loaded = load_model(tmp_path / "bi")
    args = (["a man rides"], ["a man drives"], ["the vehicle"])
    assert np.allclose(loaded.similarity(*args), model.similarity(*args), atol=1e-5)


def test_load_model_errors(tmp_path):
    from subspaces.errors import ModelNotFoundError

    with pytest.raises(ModelNotFoundError, match="not a conditional model folder"):
        load_model(tmp_path, task="cond")


def test_auto_rank_is_d_over_12(tiny_encoder):
    from subspaces.models.conditional import build_model
    from subspaces.models.heads import auto_rank

    assert (auto_rank(768), auto_rank(1024), auto_rank(384)) == (64, 85, 32)
    model = build_model(tiny_encoder, "tri", head="hypernet")
    assert model.head.rank == 3  # d = 32
    with pytest.raises(SubspacesError, match="rank must be"):
        build_model(tiny_encoder, "tri", head="hypernet", rank="big")


def test_binary_threshold_is_chosen_on_validation_not_on_the_scored_split(tiny_encoder):
    from subspaces.models.conditional import build_model

    task = get_task("wic")
    model = build_model(tiny_encoder, "tri", head="hadamard", freeze_encoder=True)
    pairs = [
        (f"the {w} runs fast", f"a {w} sleeps", w) for w in ("dog", "cat", "man", "bird", "car", "tree", "boy", "fish")
    ]
    raw = [row(a, b, c, 0.0, i) for i, (a, b, c) in enumerate(pairs)]
    scores = predict(model, raw)
    order = np.argsort(scores)
    # dev: the higher half is positive; test: the opposite, so the two splits' best thresholds differ.
    dev = [
        row(r.sentence1, r.sentence2, r.condition, float(rank >= 4), r.idx)
        for r, rank in zip(raw, np.argsort(order), strict=True)
    ]
    test = [
        row(r.sentence1, r.sentence2, r.condition, float(rank < 4), r.idx)
        for r, rank in zip(raw, np.argsort(order), strict=True)
    ]
    dev_threshold = choose_threshold(scores, np.array(task.scaled_labels(dev)))
    assert dev_threshold != choose_threshold(scores, np.array(task.scaled_labels(test)))
    report = evaluate(model, task, test, dev_rows=dev)
    assert report["threshold"] == pytest.approx(dev_threshold)
    assert report["metrics"]["accuracy"] == pytest.approx(0.0)  # the dev cut is exactly wrong on this test split


def test_pipeline_scores_test_at_the_validation_threshold(tiny_encoder, tmp_path):
    from subspaces.cond.pipeline import evaluate_conditional
    from subspaces.models.conditional import build_model

    words = ("dog", "cat", "man", "bird", "car", "tree", "boy", "fish")
    for name in ("dev", "test", "train"):
        (tmp_path / f"{name}.data.txt").write_text(
            "".join(f"{w}\tN\t1-1\tthe {w} runs fast\ta {w} sleeps\n" for w in words)
        )
    model = build_model(tiny_encoder, "tri", head="hadamard")
    scores = model.similarity(
        [f"the {w} runs fast" for w in words], [f"a {w} sleeps" for w in words], [f"{w} (noun)" for w in words]
    )
    high = set(np.argsort(scores)[4:].tolist())
    for name, flip in (("dev", False), ("test", True), ("train", False)):
        gold = ["T" if (i in high) != flip else "F" for i in range(len(words))]
        (tmp_path / f"{name}.gold.txt").write_text("\n".join(gold) + "\n")
    report = evaluate_conditional(model, "wic", split="test", data_dir=tmp_path)
    dev_threshold = choose_threshold(scores, np.array([float(i in high) for i in range(len(words))]))
    assert report.threshold == pytest.approx(dev_threshold) and report.metrics["accuracy"] == pytest.approx(0.0)


def test_frozen_bi_encoder_is_refused_with_the_reason(tiny_encoder):
    from subspaces.cond.pipeline import train_conditional
    from subspaces.models.conditional import build_model

    with pytest.raises(SubspacesError, match="nothing to train"):
        fit(build_model(tiny_encoder, "bi"), get_task("csts"), read_csts(CSTS), CondTrainConfig(show_progress=False))
    with pytest.raises(SubspacesError, match="--fine-tune"):
        train_conditional("csts", tiny_encoder, output="never-written", arch="bi", data_dir=FIXTURES)


def test_builders_take_the_encoder_first(tiny_encoder):
    from subspaces.models.conditional import build_model

    with pytest.raises(SubspacesError, match="encoder comes first"):
        build_model("tri", tiny_encoder)


def test_trainable_layers_train_only_the_top_of_the_encoder(tiny_encoder):
    from subspaces.models.conditional import build_model

    task = get_task("csts")
    rows = read_csts(CSTS)
    model = build_model(tiny_encoder, "tri", head="hadamard", freeze_encoder=False)
    before = {n: p.detach().clone() for n, p in model.encoder.named_parameters()}
    config = CondTrainConfig(batch_size=8, epochs=1, encoder_lr=1e-2, trainable_layers=1, show_progress=False)
    fit(model, task, rows, config)
    changed = {n for n, p in model.encoder.named_parameters() if not torch.equal(p, before[n])}
    assert changed and all(".layer.1." in n or "pooler" in n for n in changed), changed  # top layer of 2 only
    assert all(p.requires_grad for p in model.encoder.parameters())  # detached again: the model is whole
    with pytest.raises(SubspacesError, match="depth, 2"):
        fit(model, task, rows, CondTrainConfig(batch_size=8, epochs=1, trainable_layers=3, show_progress=False))
    frozen = build_model(tiny_encoder, "tri", head="hadamard")
    with pytest.raises(SubspacesError, match="--fine-tune"):
        fit(frozen, task, rows, CondTrainConfig(trainable_layers=1, show_progress=False))


def _write_wic(folder: Path) -> Path:
    words = ("dog", "cat", "man", "bird", "car", "tree", "boy", "fish")
    folder.mkdir(exist_ok=True)
    for name in ("dev", "test", "train"):
        (folder / f"{name}.data.txt").write_text(
            "".join(f"{w}\tN\t1-1\tthe {w} runs fast\ta {w} sleeps\n" for w in words)
        )
        (folder / f"{name}.gold.txt").write_text("\n".join("TF"[i % 2] for i in range(len(words))) + "\n")
    return folder


def test_pipelines_return_results_that_save_as_json(tiny_encoder, tmp_path):
    from subspaces.cond.pipeline import (
        ConditionalEvalResult,
        ConditionalTrainResult,
        evaluate_conditional,
        train_conditional,
    )

    data = _write_wic(tmp_path / "wic")
    cfg = CondTrainConfig(batch_size=4, epochs=1, show_progress=False)
    summary = train_conditional("wic", tiny_encoder, output=tmp_path / "m", head="hadamard", data_dir=data, config=cfg)
    assert isinstance(summary, ConditionalTrainResult) and summary.steps == 2
    saved = json.loads((tmp_path / "m" / "train_result.json").read_text())
    assert saved == json.loads(json.dumps(summary.to_dict()))  # the file is the object's JSON form, same keys
    assert list(saved) == [
        "task", "model", "arch", "freeze_encoder", "head", "objective", "train_rows", "sampler", "steps",
        "train_seconds", "total_seconds", "best_epoch", "best_dev_auc", "history", "config",
    ]  # fmt: skip
    report = evaluate_conditional(tmp_path / "m", "wic", split="test", data_dir=data)
    assert isinstance(report, ConditionalEvalResult) and report.metrics is not None and report.threshold is not None
    report.save(tmp_path / "r.json")
    saved = json.loads((tmp_path / "r.json").read_text())
    assert list(saved) == [
        "task", "split", "arch", "freeze_encoder", "head", "metrics", "seen", "threshold", "n", "seconds", "cache",
    ]  # fmt: skip
    assert report.metrics == saved["metrics"]


def test_device_reaches_every_encoder_load(tiny_encoder, tmp_path, monkeypatch):
    import subspaces.models.encoder as encoder
    from subspaces.cond.pipeline import evaluate_conditional
    from subspaces.models.conditional import build_model

    devices: list[str | None] = []
    real = encoder.load_encoder

    def recording(*args, **kwargs):
        devices.append(kwargs.get("device"))
        return real(*args, **kwargs)

    monkeypatch.setattr(encoder, "load_encoder", recording)
    # "cpu:0" is a device name distinct from the default that this CPU-only machine still has.
    build_model(tiny_encoder, "tri", head="hadamard", device="cpu:0").save(tmp_path / "tri")
    build_model(tiny_encoder, "bi", device="cpu:0")
    load_model(tmp_path / "tri", device="cpu:0")
    evaluate_conditional(tiny_encoder, "wic", split="test", data_dir=_write_wic(tmp_path / "wic"), device="cpu:0")
    assert len(devices) == 4 and set(devices) == {"cpu:0"}
    with pytest.raises(SubspacesError, match="CUDA device"):
        evaluate_conditional(tiny_encoder, "wic", data_dir=tmp_path / "missing", device="cuda:99")  # before the data


def test_tri_encoder_forgets_embeddings_when_trainable_encoder_weights_are_loaded(tiny_encoder):
    # fit() ends by loading the best state back: a fine-tuned encoder's cached vectors are then stale.
    from subspaces.models.encoder import load_encoder

    torch.manual_seed(0)
    model = TriEncoder(load_encoder(tiny_encoder), make_head("hypernet", 32, 4), freeze_encoder=False).eval()
    before = model.embed_sentences(["a dog runs"])
    state = {k: v.clone() for k, v in model.state_dict().items()}
    for k, v in state.items():
        if k.startswith("encoder.") and v.is_floating_point():
            v.add_(0.5 * torch.randn_like(v))
    model.load_state_dict(state)
    after = model.embed_sentences(["a dog runs"])
    expected = torch.tensor(model.encoder.encode(["a dog runs"]))
    assert not torch.allclose(before, after) and torch.allclose(after, expected, atol=1e-5)


def test_embedding_store_key_separates_models_that_share_weights_but_differ_in_settings(tiny_model_dir):
    """Same weights, other vectors (a Normalize module added, a truncation): another cache key, no shared shards."""
    from sentence_transformers.models import Normalize

    from subspaces.fingerprint import model_fingerprint
    from subspaces.models.encoder import load_encoder

    base = model_fingerprint(load_encoder(str(tiny_model_dir)))
    assert base == model_fingerprint(load_encoder(str(tiny_model_dir)))
    normalised = load_encoder(str(tiny_model_dir))
    normalised.append(Normalize())
    assert model_fingerprint(normalised) != base
    truncated = load_encoder(str(tiny_model_dir))
    truncated.truncate_dim = 16
    assert model_fingerprint(truncated) != base


# --- conditional search over stored vectors ------------------------------------------------------------------


@pytest.mark.parametrize("rank", [4, None])
def test_tri_encoder_search_equals_brute_force_and_caches_the_condition(tiny_encoder, rank):
    from subspaces.models.encoder import load_encoder

    enc = load_encoder(tiny_encoder)
    torch.manual_seed(0)
    model = TriEncoder(enc, make_head("hypernet", 32, rank), encoder_name=tiny_encoder).eval()
    corpus = np.random.default_rng(0).normal(size=(40, 32)).astype(np.float32)
    model.index_corpus(corpus)
    query = "a dog runs in the park"
    hits = model.search(query, "the animal", k=5)
    # brute force: the explicit d×d W_c applied to the query and to every document, cosine
    with torch.no_grad():
        w = model.head.projection_matrix(torch.tensor(enc.encode(["the animal"])))[0]
        q = torch.nn.functional.normalize(torch.tensor(enc.encode([query])) @ w.T, dim=1)
        want = (q @ torch.nn.functional.normalize(torch.from_numpy(corpus) @ w.T, dim=1).T)[0]
    order = torch.argsort(want, descending=True)[:5]
    assert hits.rows.tolist() == [order.tolist()] and np.allclose(hits.scores[0], want[order], atol=1e-5)
    assert hits.seen is None and hits.note is None  # an untrained model records no training conditions

    model.search([query, "a cat sleeps"], "the animal", k=3)
    model.search(model.embed_sentences([query]).numpy(), "the action", k=3)  # vectors as queries
    stats = model.cache_stats()["caches"]["conditioned_corpus"]
    assert stats["misses"] == 2 and stats["hits"] == 1  # each condition's view of the corpus made once
    model.index_corpus(["a dog runs", "a bird sings", "the sun is hot"])  # texts are embedded
    assert model.search("a dog runs", "the animal", k=1).rows.tolist() == [[0]]


def test_search_notes_an_unseen_condition_and_refuses_a_corpus_of_another_dimension(tiny_encoder):
    from subspaces.errors import DimensionError
    from subspaces.models.encoder import load_encoder

    model = TriEncoder(load_encoder(tiny_encoder), make_head("hypernet", 32, 4)).eval()
    with pytest.raises(SubspacesError, match="index_corpus"):
        model.search("a dog", "the animal")
    with pytest.raises(DimensionError, match="the corpus has 16-dimensional rows, but the head's encoder produces 32"):
        model.index_corpus(np.zeros((5, 16), dtype=np.float32))
    model.index_corpus(np.random.default_rng(1).normal(size=(5, 32)))
    model.metadata["seen_conditions"] = ["the animal"]
    assert model.search("a dog", "the animal", k=2).seen is True
    unseen = model.search("a dog", "the weather", k=2)  # projected anyway: the hypernet maps any condition
    assert unseen.seen is False and "'the weather' was not seen in training" in unseen.note
    assert unseen.rows.shape == (1, 2)


def test_training_records_its_conditions(tiny_encoder):
    from subspaces.models.conditional import build_model

    model = build_model(tiny_encoder, "tri", head="hypernet", rank=4)
    rows = read_csts(CSTS)
    fit(model, get_task("csts"), rows, CondTrainConfig(max_steps=1, batch_size=4, show_progress=False))
    assert model.metadata["seen_conditions"] == sorted({r.condition for r in rows})
