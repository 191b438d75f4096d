"""Knowledge-graph completion: loaders, filtered ranking, SimKGC's masks/queue/loss, caches, train+eval end to end."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from subspaces.errors import DataError, SubspacesError
from subspaces.kgc.data import fb15k237_relation, load_fb15k237, load_kg, load_wn18rr, wn18rr_name
from subspaces.kgc.graph import KnownTails, LinkGraph
from subspaces.kgc.ranking import filtered_ranks, rank_metrics
from subspaces.kgc.texts import KGCTexts, join_name_description
from subspaces.losses.simkgc import MASKED, SimKGCLoss, false_negative_mask, self_negative_mask

WORDS = ["dog", "cat", "animal", "tree", "oak", "plant", "car", "wheel", "vehicle", "house", "roof", "building"]


def write_wn18rr(folder: Path) -> Path:
    """A 12-entity graph in SimKGC's WN18RR layout: hypernyms and parts of three small families."""
    folder.mkdir(parents=True, exist_ok=True)
    ids = [f"{i:08d}" for i in range(len(WORDS))]
    definitions = [f"{ids[i]}\t__{w}_NN_1\ta {w} of the kind people call {w}" for i, w in enumerate(WORDS)]
    (folder / "wordnet-mlj12-definitions.txt").write_text("\n".join(definitions) + "\n")
    hyper = [(0, 2), (1, 2), (4, 3), (3, 5), (6, 8), (9, 11)]
    part = [(6, 7), (9, 10), (3, 4), (0, 1)]
    train = [(ids[h], "_hypernym", ids[t]) for h, t in hyper] + [(ids[h], "_has_part", ids[t]) for h, t in part]
    valid = [(ids[1], "_has_part", ids[0]), (ids[10], "_hypernym", ids[11])]
    test = [(ids[7], "_hypernym", ids[8]), (ids[5], "_has_part", ids[3]), (ids[2], "_hypernym", ids[5])]
    for name, rows in (("train", train), ("valid", valid), ("test", test)):
        (folder / f"{name}.txt").write_text("".join("\t".join(r) + "\n" for r in rows))
    return folder


# -- data ------------------------------------------------------------------------------------------------------
def test_wn18rr_loader_names_texts_and_inverses(tmp_path):
    kg = load_wn18rr(write_wn18rr(tmp_path / "wn"))
    assert kg.num_entities == 12 and kg.num_relations == 2
    assert [len(kg.splits[s]) for s in ("train", "valid", "test")] == [10, 2, 3]
    assert kg.entity_names[0] == "dog" and kg.relation_names == ["hypernym", "has part"]
    assert kg.relation_text(2) == "inverse hypernym"
    both = kg.with_inverses("train")
    assert len(both) == 20 and tuple(both[10]) == (2, 2, 0)  # (dog hypernym animal) -> (animal inverse-hypernym dog)
    assert KGCTexts.build(kg).entities[0] == "dog: a dog of the kind people call dog"


def test_name_and_relation_normalisation():
    assert wn18rr_name("__land_reform_NN_1") == "land reform"
    assert wn18rr_name("__raise_VB_8") == "raise"
    assert join_name_description("oak", "oak tree of the genus Quercus") == "oak: tree of the genus Quercus"
    assert join_name_description("oak", "") == "oak"
    assert (
        fb15k237_relation("/people/person/spouse_s./people/marriage/type_of_union")
        == "type of union marriage spouse s person people"
    )


@pytest.mark.parametrize(
    ("split", "content", "message"),
    [
        ("train", "00000000\t_hypernym\n", "line 1"),
        ("valid", "00000001\t_has_part\t00000000\n00000001\t_has_part\t99999999\n", "line 2"),
        ("test", "00000007\t_unseen_relation\t00000008\n", "never occurs in train"),
    ],
)
def test_wn18rr_broken_files_name_file_and_line(tmp_path, split, content, message):
    folder = write_wn18rr(tmp_path / "wn")
    (folder / f"{split}.txt").write_text(content)
    with pytest.raises(DataError, match=message) as info:
        load_wn18rr(folder)
    assert f"{split}.txt" in str(info.value)


def test_missing_definitions_and_unknown_dataset(tmp_path):
    folder = write_wn18rr(tmp_path / "wn")
    (folder / "wordnet-mlj12-definitions.txt").write_text("00000000\t__dog_NN_1\ta dog\nbroken-line-without-tabs\n")
    with pytest.raises(DataError, match="line 2"):
        load_wn18rr(folder)
    with pytest.raises(DataError, match="unknown dataset"):
        load_kg("no-such-graph")


def test_fb15k237_names_and_neighbour_texts(tmp_path):
    folder = tmp_path / "fb"
    folder.mkdir()
    (folder / "FB15k_mid2name.txt").write_text("/m/a\tAda_Lovelace\n/m/b\tLondon\n/m/c\tMathematics\n")
    (folder / "train.txt").write_text(
        "/m/a\t/people/person/place_of_birth\t/m/b\n/m/a\t/people/person/profession\t/m/c\n"
    )
    (folder / "valid.txt").write_text("/m/b\t/people/person/place_of_birth\t/m/a\n")
    (folder / "test.txt").write_text("/m/c\t/people/person/profession\t/m/b\n")
    kg = load_fb15k237(folder)
    assert kg.entity_names == ["Ada Lovelace", "London", "Mathematics"]
    assert kg.relation_names[0] == "place of birth person people"
    # No descriptions: neighbour names stand in for them (SimKGC's link-graph text).
    assert KGCTexts.build(kg).entities == [
        "Ada Lovelace: London Mathematics",
        "London: Ada Lovelace",
        "Mathematics: Ada Lovelace",
    ]
    (folder / "test.txt").write_text("/m/c\t/people/person/profession\t/m/zzz\n")
    with pytest.raises(DataError, match=r"test.txt, line 1: entity '/m/zzz' has no name"):
        load_fb15k237(folder)


def test_link_graph_neighbours_and_hops():
    graph = LinkGraph(np.array([[0, 0, 1], [1, 0, 2], [3, 1, 2]]), 5)
    assert graph.neighbour_ids(1) == [0, 2]
    assert graph.neighbour_ids(1, exclude=2) == [0]
    assert graph.n_hop(0, 1) == [0, 1] and graph.n_hop(0, 2) == [0, 1, 2] and graph.n_hop(4, 3) == [4]


# -- filtered ranking -----------------------------------------------------------------------------------------
def test_filtered_ranks_on_hand_made_scores_with_ties():
    scores = torch.tensor([[0.9, 0.5, 0.7, 0.7, 0.1], [0.2, 0.3, 0.1, 0.4, 0.25]])
    targets = [2, 4]
    filtered = [{0, 2}, set()]  # row 0: entity 0 is another true answer (filtered); 2 is the target (kept)
    # row 0: nothing better once 0 is filtered, one tie (entity 3); row 1: entities 1 and 3 are better.
    assert filtered_ranks(scores, targets, filtered, "optimistic").tolist() == [1.0, 3.0]
    assert filtered_ranks(scores, targets, filtered, "pessimistic").tolist() == [2.0, 3.0]
    assert filtered_ranks(scores, targets, filtered, "realistic").tolist() == [1.5, 3.0]
    # unfiltered, entity 0 beats the target
    assert filtered_ranks(scores, targets, [set(), set()], "optimistic").tolist() == [2.0, 3.0]
    metrics = rank_metrics(np.array([1.0, 3.0]))
    assert metrics["mrr"] == pytest.approx((1 + 1 / 3) / 2) and metrics["mr"] == 2.0
    assert metrics["hits@1"] == 0.5 and metrics["hits@3"] == 1.0


def test_filtered_ranking_on_hand_made_graph_embeddings(tmp_path):
    """Embeddings built so the right ranks are known; the head ranks itself first unless it is filtered."""
    from subspaces.kgc.ranking import rank_queries

    entities = torch.eye(4)
    # query (0, r0, 1): closest to entity 0 (itself), then 1, then 2; entity 2 is another known answer.
    query = torch.tensor([[1.0, 0.8, 0.6, 0.0]])
    known = KnownTails(np.array([[0, 0, 1], [0, 0, 2]]))
    ranks, top = rank_queries(query, entities, np.array([[0, 0, 1]]), known, top_k=3)
    assert ranks.tolist() == [2.0]  # entity 0 (the head itself) is not filtered; entity 2 is
    assert top[0].tolist()[:2] == [0, 1]


# -- SimKGC's masks, queue and loss -------------------------------------------------------------------------
def test_false_negative_and_self_negative_masks():
    known = KnownTails(np.array([[0, 0, 1], [0, 0, 3], [5, 1, 5]]))
    batch = np.array([[0, 0, 1], [2, 0, 1], [0, 0, 3]])
    mask = false_negative_mask(batch, batch[:, 2], known, diagonal=True)
    expected = torch.tensor([[True, False, False], [False, True, True], [False, False, True]])
    assert torch.equal(mask, expected)
    assert self_negative_mask(np.array([[0, 0, 1], [5, 1, 5]]), known).tolist() == [True, False]


class _FixedVectors(torch.nn.Module):
    """A stand-in model whose batch vectors are given (the loss, not the model, is under test here)."""

    def __init__(self, hr, tails, heads):
        super().__init__()
        self.hr, self.tails, self.heads = hr, tails, heads

    def embed_batch(self, triples, texts=None):
        return self.hr, self.tails, self.heads


def test_loss_margin_and_temperature_against_hand_computation():
    hr = torch.tensor([[1.0, 0.0], [0.6, 0.8]])
    tails = torch.tensor([[0.8, 0.6], [0.0, 1.0]])
    heads = torch.tensor([[1.0, 0.0], [1.0, 0.0]])
    triples = np.array([[0, 0, 1], [2, 0, 3]])
    known = KnownTails(triples)
    loss = SimKGCLoss(_FixedVectors(hr, tails, heads), known, margin=0.1, temperature=0.5, self_negatives=True)
    loss.train()
    value = loss(triples)
    cos = [[0.8, 0.0], [0.48 + 0.48, 0.8]]
    inv_t = 2.0
    z = [[(cos[0][0] - 0.1) * inv_t, cos[0][1] * inv_t], [cos[1][0] * inv_t, (cos[1][1] - 0.1) * inv_t]]
    self_z = [1.0 * inv_t, 0.6 * inv_t]
    row = [-z[i][i] + math.log(math.exp(z[i][0]) + math.exp(z[i][1]) + math.exp(self_z[i])) for i in range(2)]
    col = [-z[j][j] + math.log(math.exp(z[0][j]) + math.exp(z[1][j])) for j in range(2)]
    assert value.item() == pytest.approx(sum(row) / 2 + sum(col) / 2, rel=1e-5)
    value.backward()
    assert loss.log_inv_t.grad is not None and loss.log_inv_t.grad.abs() > 0  # the temperature learns
    loss.eval()  # no margin and no extra negatives at evaluation
    logits = loss.logits(hr, tails, heads, triples)
    assert logits.shape == (2, 2)
    # The margin is training-only: at evaluation the positive's logit is its plain scaled cosine.
    assert torch.diagonal(logits).tolist() == pytest.approx([cos[0][0] * inv_t, cos[1][1] * inv_t], rel=1e-5)


def test_pre_batch_queue_holds_earlier_tails_and_masks_false_negatives():
    known = KnownTails(np.array([[0, 0, 1], [2, 0, 3], [4, 0, 1], [6, 0, 7]]))
    loss = SimKGCLoss(
        _FixedVectors(None, None, None), known, pre_batch=1, pre_batch_weight=0.5, self_negatives=False, batch_size=2
    )
    loss.train()
    hr1 = F.normalize(torch.tensor([[1.0, 0.0], [0.0, 1.0]]), dim=-1)
    tails1 = F.normalize(torch.tensor([[1.0, 1.0], [1.0, -1.0]]), dim=-1)
    first = loss.logits(hr1, tails1, None, np.array([[0, 0, 1], [2, 0, 3]]))
    assert first.shape == (2, 4) and (first[:, 2:] == MASKED).all()  # the queue starts empty: nothing to use
    hr2 = F.normalize(torch.tensor([[1.0, 0.0], [1.0, 2.0]]), dim=-1)
    second = loss.logits(hr2, tails1, None, np.array([[4, 0, 1], [6, 0, 7]]))
    inv_t = 20.0
    # row 0's tail (entity 1) equals the first queued tail: a false negative, masked; the rest are scaled by 0.5.
    assert second[0, 2] == MASKED
    assert second[0, 3].item() == pytest.approx(float(hr2[0] @ tails1[1]) * inv_t * 0.5, rel=1e-5)
    assert second[1, 2].item() == pytest.approx(float(hr2[1] @ tails1[0]) * inv_t * 0.5, rel=1e-5)


# -- caches -----------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_encoder_dir(tmp_path_factory):
    from bench.random_bert import build_random_bert

    folder = tmp_path_factory.mktemp("tiny-bert")
    build_random_bert(folder, num_layers=2, hidden_size=32, num_heads=2, dropout=0.0, max_position=64)
    return folder


def test_entity_embedding_shards_are_reused_and_keyed_by_text_and_weights(tmp_path, tiny_encoder_dir):
    from subspaces.models.embedding_cache import EmbeddingShardCache
    from subspaces.models.encoder import load_encoder

    model = load_encoder(tiny_encoder_dir, max_seq_length=32)
    texts = [f"entity number {i}" for i in range(10)]
    first = EmbeddingShardCache(model, tmp_path, shard_size=4, show_progress=False)
    a = first.encode(texts)
    assert (first.stats.miss_shards, first.stats.hit_shards) == (3, 0)
    second = EmbeddingShardCache(model, tmp_path, shard_size=4, show_progress=False)
    b = second.encode(texts)
    assert (second.stats.miss_shards, second.stats.hit_shards) == (0, 3)
    np.testing.assert_array_equal(a, b)
    changed = EmbeddingShardCache(model, tmp_path, shard_size=4, show_progress=False)
    changed.encode(texts[:5] + ["a new text"] + texts[6:])
    assert (changed.stats.miss_shards, changed.stats.hit_shards) == (1, 2)
    with torch.no_grad():
        next(model.parameters()).add_(0.01)  # other weights: another fingerprint, nothing reused
    other = EmbeddingShardCache(model, tmp_path, shard_size=4, show_progress=False)
    other.encode(texts)
    assert other.stats.hit_shards == 0


# -- end to end ------------------------------------------------------------------------------------------------
def test_frozen_tri_encoder_trains_saves_loads_and_evaluates(tmp_path, tiny_encoder_dir):
    from subspaces.kgc.pipeline import evaluate_model, train_pipeline

    data = write_wn18rr(tmp_path / "wn")
    report = train_pipeline(
        output=tmp_path / "run",
        dataset=data,
        model=str(tiny_encoder_dir),
        arch="tri",
        head="hypernet",
        rank=4,
        freeze_encoder=True,
        batch_size=8,
        epochs=40,
        head_lr=1e-2,
        max_length=32,
        disk_cache=tmp_path / "cache",
        show_progress=False,
    )
    history = report.train_result.history
    assert history[-1]["loss"] < history[0]["loss"]  # the head learns on the cached embeddings
    result = report.eval
    assert result.queries == 6 and set(result.average) == {"mrr", "mr", "hits@1", "hits@3", "hits@10"}
    assert 0 < result.average["mrr"] <= 1 and 1 <= result.forward["mr"] <= 12
    lines = (tmp_path / "run" / "predictions-test.jsonl").read_text().splitlines()
    assert len(lines) == 6 and json.loads(lines[3])["direction"] == "backward"
    assert not (tmp_path / "run" / "encoder").exists()  # a frozen encoder is referenced, not copied
    again = evaluate_model(tmp_path / "run", data, disk_cache=tmp_path / "cache", show_progress=False)
    assert again.average == pytest.approx(result.average)
    assert again.encoded_texts == 0  # entity and relation embeddings all came back from the disk cache
    assert json.loads((tmp_path / "run" / "subspaces_model.json").read_text())["metadata"]["neighbour_order"] == "id"
    from subspaces.models.triencoder import TriEncoder

    model = TriEncoder.load(tmp_path / "run")
    for old in ({"neighbour_order": "index"}, {"neighbour_order": None}):  # pre-release: "index", or not recorded
        model.metadata = dict(model.metadata, neighbour_names=True) | old
        with pytest.raises(SubspacesError, match="'index' order"):
            evaluate_model(model, data, show_progress=False)


def test_pipelines_return_results_that_save_as_json(tmp_path, tiny_encoder_dir):
    from subspaces.kgc.pipeline import KGCEvalResult, KGCResult, train_pipeline

    data = write_wn18rr(tmp_path / "wn")
    report = train_pipeline(
        output=tmp_path / "run",
        dataset=data,
        model=str(tiny_encoder_dir),
        head="hadamard",
        batch_size=8,
        max_steps=1,
        max_length=32,
        disk_cache=False,
        show_progress=False,
    )
    assert isinstance(report, KGCResult) and isinstance(report.eval, KGCEvalResult)
    assert list(report.to_dict()) == ["output", "train_result", "eval"]
    saved = json.loads((tmp_path / "run" / "eval-test.json").read_text())
    assert saved == json.loads(json.dumps(report.eval.to_dict()))  # the file is the object's JSON form
    assert list(saved) == [
        "dataset",
        "model",
        "arch",
        "head",
        "split",
        "queries",
        "ties",
        "forward",
        "backward",
        "inference_seconds",
        "cache_hit_rate",
        "text_lookups",
        "text_hits",
        "encoded_texts",
        "encode_seconds",
        "condition_lookups",
        "condition_hit_rate",
        "average",
    ]  # fmt: skip  (the keys `kgc eval --json` has always written; "rerank" only with --rerank-n-hop)
    report.eval.save(tmp_path / "again.json")
    assert json.loads((tmp_path / "again.json").read_text()) == saved
    assert report.to_dict()["eval"]["average"] == report.eval.average


def test_device_reaches_the_encoders_and_is_checked_first(tmp_path, tiny_encoder_dir, monkeypatch):
    import subspaces.models.encoder as encoder
    from subspaces.kgc.pipeline import evaluate_model, train_pipeline

    devices: list[str | None] = []
    real = encoder.load_encoder

    def recording(*args, **kwargs):
        devices.append(kwargs.get("device"))
        return real(*args, **kwargs)

    monkeypatch.setattr(encoder, "load_encoder", recording)
    data = write_wn18rr(tmp_path / "wn")
    # "cpu:0" is a device name distinct from the default that this CPU-only machine still has.
    evaluate_model(str(tiny_encoder_dir), data, disk_cache=False, show_progress=False, device="cpu:0")
    assert devices and set(devices) == {"cpu:0"}
    for run in (
        lambda: evaluate_model(str(tiny_encoder_dir), tmp_path / "missing", device="cuda:99"),
        lambda: train_pipeline(output=tmp_path / "x", dataset=tmp_path / "missing", device="cuda:99"),
    ):
        with pytest.raises(SubspacesError, match="CUDA device"):  # before the (missing) dataset is read
            run()
    assert not (tmp_path / "x").exists()


def test_bi_encoder_fine_tunes_and_tri_needs_no_encoder_pass_per_query(tmp_path, tiny_encoder_dir):
    from subspaces.kgc.pipeline import evaluate_model, train_pipeline

    data = write_wn18rr(tmp_path / "wn")
    report = train_pipeline(
        output=tmp_path / "bi",
        dataset=data,
        model=str(tiny_encoder_dir),
        arch="bi",
        freeze_encoder=False,
        batch_size=8,
        max_steps=2,
        max_length=32,
        pre_batch=1,
        disk_cache=False,
        show_progress=False,
    )
    bi = report.eval
    assert bi.arch == "bi" and (tmp_path / "bi" / "hr_encoder").is_dir()
    assert bi.encoded_texts == 12 + 6  # every entity, and one (head, relation) pair per query
    train_pipeline(
        output=tmp_path / "tri",
        dataset=data,
        model=str(tiny_encoder_dir),
        arch="tri",
        head="hadamard",
        freeze_encoder=True,
        batch_size=8,
        max_steps=2,
        max_length=32,
        disk_cache=False,
        show_progress=False,
    )
    tri = evaluate_model(tmp_path / "tri", data, disk_cache=False, show_progress=False)  # cold: a fresh process
    assert tri.encoded_texts == 12 + 4  # every entity and every relation name, nothing per query
    assert tri.cache_hit_rate > bi.cache_hit_rate
    zero_shot = evaluate_model(str(tiny_encoder_dir), data, disk_cache=False, show_progress=False)
    assert zero_shot.arch == "bi"
    with pytest.raises(SubspacesError, match="nothing to train"):
        train_pipeline(output=tmp_path / "x", dataset=data, model=str(tiny_encoder_dir), arch="bi", freeze_encoder=True)


def test_fine_tuned_tri_encoder_head_learns_at_its_own_rate(tmp_path, tiny_encoder_dir):
    from functools import partial

    from subspaces.kgc.data import load_kg
    from subspaces.kgc.graph import KnownTails
    from subspaces.kgc.texts import KGCTexts
    from subspaces.kgc.train import KGCTrainConfig, embed_batch, train_kgc
    from subspaces.losses.simkgc import SimKGCLoss
    from subspaces.models.conditional import build_model

    kg = load_kg(write_wn18rr(tmp_path / "wn"))
    examples = kg.with_inverses("train")
    model = build_model(
        str(tiny_encoder_dir), "tri", task="kgc", head="hypernet", rank=4, freeze_encoder=False, max_length=32
    )
    encoder_before = [p.detach().clone() for p in model.encoder.parameters()]
    head_before = [p.detach().clone() for p in model.head.parameters()]
    loss = SimKGCLoss(model, KnownTails(examples), batch_size=4, embed_batch=partial(embed_batch, model))
    # a tiny lr all but freezes everything but the head (the engine refuses lr 0)
    result = train_kgc(
        loss,
        examples,
        KGCTrainConfig(batch_size=4, encoder_lr=1e-12, head_lr=1e-2, max_steps=3, show_progress=False),
        texts=KGCTexts.build(kg),
    )
    assert result.steps == 3
    assert all(torch.allclose(a, b, atol=1e-9) for a, b in zip(encoder_before, model.encoder.parameters(), strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(head_before, model.head.parameters(), strict=True))
    bi = SimKGCLoss(
        build_model(str(tiny_encoder_dir), "bi", task="kgc", freeze_encoder=False, max_length=32),
        KnownTails(examples),
        batch_size=4,
    )
    with pytest.raises(SubspacesError, match="no head"):  # the loop refuses a rate it could not apply
        train_kgc(
            bi,
            examples,
            KGCTrainConfig(batch_size=4, head_lr=1e-3, max_steps=1, show_progress=False),
            texts=KGCTexts.build(kg),
        )


def test_head_lr_is_refused_where_there_is_no_head_beside_a_trained_encoder(tmp_path, tiny_encoder_dir):
    from subspaces.kgc.pipeline import train_pipeline

    data = write_wn18rr(tmp_path / "wn")
    for arch, frozen in (("bi", False),):
        with pytest.raises(SubspacesError, match="--head-lr"):
            train_pipeline(
                output=tmp_path / arch,
                dataset=data,
                model=str(tiny_encoder_dir),
                arch=arch,
                freeze_encoder=frozen,
                head_lr=1e-3,
                max_steps=1,
                show_progress=False,
            )


def test_cli_reports_bad_input_without_traceback(tmp_path):
    from typer.testing import CliRunner

    from subspaces.cli.app import app

    data = write_wn18rr(tmp_path / "wn")
    (data / "test.txt").write_text("00000001\t_hypernym\n")
    result = CliRunner().invoke(app, ["kgc", "eval", "minilm-l6", "--dataset", str(data)])
    text = " ".join(result.output.split())  # rich wraps long lines
    assert result.exit_code == 2
    assert "test.txt, line 1" in text and "Traceback" not in text
    result = CliRunner().invoke(
        app, ["kgc", "train", "--output", str(tmp_path / "o"), "--dataset", str(data), "--rank", "zero"]
    )
    assert result.exit_code == 2 and "--rank" in result.output
    result = CliRunner().invoke(app, ["kgc", "eval", str(tmp_path / "no-such-run")])
    assert result.exit_code == 2 and "neither a bundled model" in " ".join(result.output.split()), result.output


def test_grouped_conditioning_equals_per_row_head():
    from subspaces.models.heads import make_head, project_grouped

    torch.manual_seed(0)
    for kind, rank in (("hadamard", 3), ("concat", 3), ("hypernet", 3), ("hypernet", None)):
        head = make_head(kind, 8, rank)
        heads, relations = torch.randn(48, 8), torch.randn(4, 8)
        ids = torch.randint(0, 4, (48,))
        grouped = project_grouped(head, heads, head.condition_params(relations), ids)
        torch.testing.assert_close(grouped, head(heads, relations[ids]))


def test_shards_hold_distinct_texts_so_repeats_share_them(tmp_path, tiny_encoder_dir):
    from subspaces.models.embedding_cache import EmbeddingShardCache
    from subspaces.models.encoder import load_encoder

    model = load_encoder(tiny_encoder_dir, max_seq_length=32)
    texts = ["a", "b", "a", "c", "d", "b", "e"]
    with_repeats = EmbeddingShardCache(model, tmp_path, shard_size=2, show_progress=False).encode(texts)
    np.testing.assert_array_equal(with_repeats[0], with_repeats[2])
    distinct = EmbeddingShardCache(model, tmp_path, shard_size=2, show_progress=False)
    distinct.encode(["a", "b", "c", "d", "e"])
    assert distinct.stats.miss_shards == 0 and distinct.stats.hit_shards == 3


def test_conditioning_with_many_relations_falls_back_to_rows():
    from subspaces.models.heads import make_head, project_grouped

    torch.manual_seed(0)
    head = make_head("hypernet", 8, 2)
    heads, relations, ids = torch.randn(5, 8), torch.randn(5, 8), torch.tensor([0, 1, 2, 3, 4])
    grouped = project_grouped(head, heads, head.condition_params(relations), ids, max_groups=2)
    torch.testing.assert_close(grouped, head(heads, relations[ids]))


def test_cli_train_defaults_are_the_recipe_defaults():
    import typer

    from subspaces.cli.app import app
    from subspaces.kgc.recipes import KGCTrainConfig

    kgc = typer.main.get_command(app).commands["kgc"]  # type: ignore[attr-defined]
    params = {p.name: p for p in kgc.commands["train"].params}
    library = KGCTrainConfig()
    for name in ("freeze_encoder", "batch_size", "encoder_lr", "head_lr", "epochs", "max_length", "margin", "arch"):
        assert params[name].default == getattr(library, name), name
    assert library.freeze_encoder is False and library.rates(frozen=True) == (1e-3, None)
    assert library.rates(frozen=False) == (5e-5, None)


def test_cli_train_then_eval_writes_the_documented_json(tmp_path, tiny_encoder_dir, monkeypatch):
    from typer.testing import CliRunner

    from subspaces.cli.app import app

    monkeypatch.setenv("SUBSPACES_CACHE", str(tmp_path / "cache"))
    data = write_wn18rr(tmp_path / "wn")
    run = tmp_path / "run"
    args = [
        "kgc",
        "train",
        "--dataset",
        str(data),
        "--model",
        str(tiny_encoder_dir),
        "--arch",
        "tri",
        "--head",
        "hadamard",
        "--freeze-encoder",
        "--max-steps",
        "2",
        "--batch-size",
        "8",
        "--max-length",
        "32",
        "--output",
        str(run),
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(app, ["kgc", "eval", str(run), "--split", "valid", "--json", str(tmp_path / "e.json")])
    assert result.exit_code == 0, result.output
    metrics = json.loads((tmp_path / "e.json").read_text())
    assert metrics["dataset"] == "wn18rr" and metrics["split"] == "valid" and metrics["queries"] == 4
    assert {"forward", "backward", "average", "inference_seconds", "cache_hit_rate"} <= set(metrics)
    assert set(metrics["forward"]) == {"mrr", "hits@1", "hits@3", "hits@10", "mr"}


def test_rank_parsing_and_the_validation_alias(tmp_path, tiny_encoder_dir):
    from subspaces.cli.common import parse_rank
    from subspaces.errors import SubspacesError
    from subspaces.kgc.pipeline import evaluate_model
    from subspaces.models.conditional import build_model

    assert (parse_rank("auto"), parse_rank("full"), parse_rank("7")) == ("auto", None, 7)
    for bad in ("0", "-3", "many"):
        with pytest.raises(SubspacesError, match="--rank"):
            parse_rank(bad)
    model = build_model(str(tiny_encoder_dir), "tri", task="kgc", head="hypernet", rank="auto")
    assert model.head.config()["rank"] == 3  # d = 32: round(32 / 12)
    kg = load_kg(write_wn18rr(tmp_path / "wn"))
    result = evaluate_model(model, kg, split="validation", show_progress=False)
    assert result.split == "valid"


def test_ranking_filters_the_answers_of_every_split(tmp_path, tiny_encoder_dir):
    """Other true answers from train, valid *and* test are filtered; training triples alone are not the filter."""
    from subspaces.kgc.pipeline import entity_vectors, evaluate_model, query_vectors
    from subspaces.kgc.ranking import rank_queries
    from subspaces.kgc.texts import KGCTexts
    from subspaces.models.conditional import build_model

    data = write_wn18rr(tmp_path / "wn")
    ids = [f"{i:08d}" for i in range(len(WORDS))]
    # valid answers to the test queries' (h, r): only a filter over every split removes them
    extra = [(7, 6), (2, 9), (2, 11), (7, 4), (10, 8), (1, 8)]
    with (data / "valid.txt").open("a") as handle:
        handle.writelines(f"{ids[h]}\t_hypernym\t{ids[t]}\n" for h, t in extra)
    kg = load_kg(data)
    model = build_model(str(tiny_encoder_dir), "bi", task="kgc", max_length=32)
    result = evaluate_model(model, kg, predictions=tmp_path / "p.jsonl", show_progress=False)
    ranks = [json.loads(line)["rank"] for line in (tmp_path / "p.jsonl").read_text().splitlines()]
    queries = kg.with_inverses("test")
    texts = KGCTexts.build(kg)
    query_rows, entities = query_vectors(model, texts, queries), entity_vectors(model, texts)

    def ranks_with(splits):
        known = KnownTails(np.concatenate([kg.with_inverses(s) for s in splits]))
        return rank_queries(query_rows, entities, queries, known)[0].tolist()

    assert ranks == pytest.approx(ranks_with(("train", "valid", "test")))
    assert ranks != pytest.approx(ranks_with(("train",)))  # the fixture makes the difference visible
    assert result.forward["mrr"] == pytest.approx(float(np.mean(1 / np.array(ranks[:3]))))


def test_entity_encoding_shows_progress_naming_task_and_dataset(tmp_path, tiny_encoder_dir, capsys):
    from subspaces.kgc.pipeline import evaluate_model
    from subspaces.models.conditional import build_model

    kg = load_kg(write_wn18rr(tmp_path / "wn"))
    model = build_model(str(tiny_encoder_dir), "tri", task="kgc", head="hadamard", max_length=32)
    model.store.progress_min = 1  # the fixture has 12 entities; real graphs have tens of thousands
    evaluate_model(model, kg, show_progress=True)
    err = capsys.readouterr().err  # not a terminal: plain lines, one at the end at least
    assert "kgc wn18rr: encoding 12 entities: 12/12 texts" in err


def test_kgc_trainable_layers_train_only_the_top_of_the_encoder(tmp_path, tiny_encoder_dir):
    from subspaces.kgc.pipeline import train_pipeline
    from subspaces.models.conditional import load_model as load_kgc_model
    from subspaces.models.encoder import load_encoder

    data = write_wn18rr(tmp_path / "wn")
    train_pipeline(
        output=tmp_path / "run",
        dataset=data,
        model=str(tiny_encoder_dir),
        arch="tri",
        head="hadamard",
        freeze_encoder=False,
        batch_size=8,
        max_steps=3,
        encoder_lr=1e-2,
        max_length=32,
        trainable_layers=1,
        disk_cache=False,
        evaluate_split=None,
        show_progress=False,
    )
    base = dict(load_encoder(tiny_encoder_dir).named_parameters())
    trained = load_kgc_model(tmp_path / "run").encoder
    changed = {n for n, p in trained.named_parameters() if not torch.equal(p, base[n])}
    assert changed and all(".layer.1." in n or "pooler" in n for n in changed), changed
    with pytest.raises(SubspacesError, match="--freeze-encoder"):
        train_pipeline(
            output=tmp_path / "x",
            dataset=data,
            model=str(tiny_encoder_dir),
            freeze_encoder=True,
            trainable_layers=1,
            show_progress=False,
        )


# -- Hyper-CL's released configuration (issue 18) ----------------------------------------------------------------
def _link_graph_kg():
    """Entity 0 has 12 neighbours (ids in reverse of index order) and a short description; entity 1 a long one."""
    from subspaces.kgc.data import KnowledgeGraph

    n = 14
    ids = [f"{n - i:08d}" for i in range(n)]  # id order is the reverse of index order
    names = [f"e{i}" for i in range(n)]
    descriptions = ["short gloss", " ".join(["word"] * 25)] + ["x"] * (n - 2)
    train = np.array([[0, 0, j] for j in range(2, n)] + [[1, 0, 0]])
    empty = np.zeros((0, 3), dtype=np.int64)
    return KnowledgeGraph("toy", ids, names, descriptions, ["rel"], {"train": train, "valid": empty, "test": empty})


def test_link_graph_texts_name_at_most_ten_neighbours_of_short_descriptions_only():
    from subspaces.kgc.texts import KGCTexts

    kg = _link_graph_kg()
    assert KGCTexts.build(kg).entities[0] == "e0: short gloss"  # descriptions present: off by default
    by_id = KGCTexts.build(kg, True, per_example=True)
    words = by_id.entities[0].split()
    assert words[:3] == ["e0:", "short", "gloss"] and len(words) == 3 + 10  # 13 neighbours, the first 10 kept
    assert words[3:] == ["e13", "e12", "e11", "e10", "e9", "e8", "e7", "e6", "e5", "e4"]  # SimKGC: sorted by id
    assert by_id.entities[1] == "e1: " + " ".join(["word"] * 25)  # 25 words: no neighbour names
    # In training, each side leaves the other end out (SimKGC's leakage guard): one name fewer, never an 11th.
    heads, tails = by_id.training_texts(np.array([[0, 0, 13], [13, 0, 0]]))
    assert "e13" not in heads[0].split() and len(heads[0].split()) == 12
    assert by_id.entities[13] == "e13: x e0" and tails[0] == heads[1] == "e13: x" and tails[1] == heads[0]
    assert KGCTexts.build(kg, True).training_texts(np.array([[0, 0, 13]]))[0][0] == KGCTexts.build(kg, True).entities[0]
    assert "e13: x" in by_id.distinct_training_texts(np.array([[13, 0, 0]]))


def test_full_rank_hypernet_emits_a_d_by_d_matrix_per_relation():
    from subspaces.models.heads import head_parameter_count, make_head

    d = 16
    full, low = make_head("hypernet", d, None), make_head("hypernet", d, 4)
    assert full.hyper_full.weight.shape == (d * d, d) and not hasattr(full, "hyper_w1")
    c = torch.randn(3, d)
    (matrix,) = full.condition_params(c)
    assert matrix.shape == (3, d, d)
    s = torch.randn(3, d)
    assert torch.allclose(full(s, c), torch.bmm(matrix, s[:, :, None])[:, :, 0], atol=1e-5)
    assert sum(p.numel() for p in full.parameters()) == head_parameter_count("hypernet", d, None)
    assert torch.linalg.matrix_rank(low.projection_matrix(c)[0]) <= 4 < torch.linalg.matrix_rank(matrix[0])


@pytest.mark.parametrize("kind", ["hadamard", "concat", "hypernet"])
def test_head_dropout_acts_in_training_only_and_torch_init_is_nn_linear(kind):
    from subspaces.models.heads import head_from_config, make_head

    torch.manual_seed(0)
    s, c = torch.randn(4, 16), torch.randn(4, 16)
    head = make_head(kind, 16, 4, dropout=0.5).train()
    assert not torch.equal(head(s, c), head(s, c))  # dropout draws differ
    head.eval()
    assert torch.equal(head(s, c), head(s, c))
    assert head.config()["dropout"] == 0.5 and "init" not in head.config()
    assert make_head(kind, 16, 4).config() == {k: v for k, v in head.config().items() if k != "dropout"}
    plain = make_head(kind, 16, 4, init="torch")
    assert not torch.equal(plain.condition_transform.linear.weight, torch.eye(16))  # ours starts at the identity
    assert torch.equal(make_head(kind, 16, 4).condition_transform.linear.weight, torch.eye(16))
    rebuilt = head_from_config(plain.config())
    assert rebuilt.init == "torch" and rebuilt.dropout_p == 0.0
    if kind == "hypernet":
        bound = 16**-0.5  # nn.Linear's kaiming-uniform bound for 16 inputs
        assert plain.hyper_w1.weight.abs().max() <= bound and plain.hyper_w1.bias.abs().max() > 0


def test_unnormalised_queries_scale_the_logits_by_their_norm():
    hr = torch.tensor([[3.0, 0.0], [0.0, 0.5]])
    tails = torch.tensor([[2.0, 0.0], [0.0, 1.0]])
    triples = np.array([[0, 0, 1], [2, 0, 3]])
    known = KnownTails(triples)
    raw = SimKGCLoss(_FixedVectors(hr, tails, None), known, margin=0.0, temperature=0.5, normalize_queries=False)
    unit = SimKGCLoss(_FixedVectors(hr, tails, None), known, margin=0.0, temperature=0.5)
    raw_logits, unit_logits = raw.eval().logits(hr, tails, None, triples), unit.eval().logits(hr, tails, None, triples)
    assert torch.allclose(raw_logits, (hr @ F.normalize(tails, dim=-1).T) * 2.0)
    assert torch.allclose(raw_logits, unit_logits * hr.norm(dim=1, keepdim=True))  # |hr| is the row's temperature
    assert raw.get_config_dict()["normalize_queries"] is False


def test_rerank_boosts_only_entities_within_the_hop_limit():
    from subspaces.kgc.ranking import rank_queries, rerank_by_graph

    graph = LinkGraph(np.array([[0, 0, 1], [1, 0, 2], [2, 0, 3], [3, 0, 4]]), 6)  # a path 0-1-2-3-4, 5 alone
    scores = torch.zeros(1, 6)
    boosted = rerank_by_graph(scores, [0], graph, n_hop=2, weight=0.05)
    assert boosted[0].tolist() == pytest.approx([0.05, 0.05, 0.05, 0.0, 0.0, 0.0])
    entities = torch.eye(6)
    query = torch.tensor([[0.0, 0.0, 0.0, 0.0, 0.50, 0.52]])  # entity 5 is closer, entity 4 the answer
    queries, known = np.array([[0, 0, 4]]), KnownTails(np.array([[0, 0, 4]]))
    plain, _ = rank_queries(query, entities, queries, known)
    assert plain.tolist() == [2.0]
    four_hops, _ = rank_queries(query, entities, queries, known, graph=graph, n_hop=4, neighbour_weight=0.05)
    three_hops, _ = rank_queries(query, entities, queries, known, graph=graph, n_hop=3, neighbour_weight=0.05)
    assert four_hops.tolist() == [1.0] and three_hops.tolist() == [2.0]  # 4 is 4 hops from 0
    zero, _ = rank_queries(query, entities, queries, known, graph=graph, n_hop=5, neighbour_weight=0.0)
    assert zero.tolist() == plain.tolist()
    # A raw query of norm 10: the same bonus is worth ten times less against its scores.
    raw, _ = rank_queries(10 * query, entities, queries, known, graph=graph, n_hop=4, normalize_queries=False)
    assert raw.tolist() == [2.0]


def test_recipe_sets_every_option_and_the_model_folder_records_them(tmp_path, tiny_encoder_dir, monkeypatch):
    from typer.testing import CliRunner

    from subspaces.cli.app import app
    from subspaces.kgc.recipes import recipe_settings
    from subspaces.models.conditional import load_model as load_kgc_model
    from subspaces.models.folder import read_config

    monkeypatch.setenv("SUBSPACES_CACHE", str(tmp_path / "cache"))
    data = write_wn18rr(tmp_path / "wn")
    run = tmp_path / "run"
    common = ["kgc", "train", "--dataset", str(data), "--model", str(tiny_encoder_dir), "--max-steps", "2"]
    args = [*common, "--recipe", "hypercl-wn18rr", "--freeze-encoder", "--max-length", "32", "-o", str(run)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "5-hop re-rank" in result.output  # reported beside the plain ranking
    config = read_config(run, task="kgc")
    assert config["head"] == {"kind": "hypernet", "dim": 32, "rank": None, "dropout": 0.1, "init": "torch"}
    meta = config["metadata"]
    assert meta["recipe"] == "hypercl-wn18rr" and meta["max_length"] == 32  # an explicit option wins
    assert meta["neighbour_names"] and meta["per_example_texts"]
    train = meta["train"]
    assert train["batch_size"] == 512 and train["head_lr"] is None and train["lr"] == 1e-3  # frozen: own default
    assert not train["self_negatives"] and not train["normalize_queries"] and train["pre_batch"] == 0
    assert train["margin"] == 0.02 and train["warmup_steps"] == 400
    evaluation = json.loads((run / "eval-test.json").read_text())
    assert evaluation["rerank"]["n_hop"] == 5 and evaluation["rerank"]["neighbour_weight"] == 0.05
    assert evaluation["rerank"]["normalize_queries"] is False
    model = load_kgc_model(run)
    assert model.head.rank is None and model.head.dropout_p == 0.1 and not model.training
    assert meta["seen_conditions"] and model.condition_seen(meta["seen_conditions"][0]) is True
    assert model.condition_seen("a relation never trained") is False
    # Every setting the recipe names for the tri-encoder reached the saved folder.
    saved = {**meta, **train, "rank": config["head"]["rank"], "head": config["head"]["kind"]}
    saved |= {"head_dropout": 0.1, "head_init": "torch", "head_activation": "gelu", "lr": 5e-5}
    saved |= {"rerank_n_hop": 5, "neighbour_weight": 0.05}
    for option, value in recipe_settings("hypercl-wn18rr", "tri").items():
        if option != "max_length":
            assert saved[option] == value, option
    bi = recipe_settings("hypercl-wn18rr", "bi")
    assert bi["self_negatives"] and "rank" not in bi and bi["batch_size"] == 512
    assert recipe_settings("hypercl-wn18rr", "tri")["encoder_lr"] == 5e-5
    with pytest.raises(SubspacesError, match="unknown recipe"):
        recipe_settings("nope", "tri")


def test_models_saved_before_the_recipe_options_keep_their_texts_and_head(tmp_path, tiny_encoder_dir):
    from subspaces.kgc.pipeline import evaluate_model, train_pipeline
    from subspaces.models.folder import read_config, write_config

    data = write_wn18rr(tmp_path / "wn")
    run = tmp_path / "run"
    report = train_pipeline(
        output=run,
        dataset=data,
        model=str(tiny_encoder_dir),
        head="hypernet",
        rank=4,
        batch_size=8,
        max_steps=2,
        max_length=32,
        neighbour_names=True,
        show_progress=False,
    )
    config = read_config(run, task="kgc")
    for key in ("per_example_texts", "recipe"):
        del config["metadata"][key]  # what a folder written before these options holds
    del config["metadata"]["train"]["normalize_queries"]
    assert set(config["head"]) == {"kind", "dim", "rank"}
    write_config(run, config)
    again = evaluate_model(run, show_progress=False)
    assert again.average == pytest.approx(report.eval.average)


def test_training_with_a_checkpoint_dir_resumes_where_it_stopped(tmp_path, tiny_encoder_dir, monkeypatch):
    """An interrupted fine-tuning run, called again, continues from its checkpoint and ends on the weights of a run
    that was never interrupted."""
    import torch

    import subspaces.train.engine as engine
    from subspaces.kgc.pipeline import train_pipeline

    data = write_wn18rr(tmp_path / "wn")
    common = {
        "dataset": data,
        "model": str(tiny_encoder_dir),
        "arch": "tri",
        "head": "hypernet",
        "rank": 4,
        "freeze_encoder": False,
        "batch_size": 4,
        "epochs": 2,
        "max_length": 32,
        "disk_cache": False,
        "evaluate_split": None,
        "show_progress": False,
    }
    whole = train_pipeline(output=tmp_path / "whole", **common)
    steps = whole.train_result.steps
    assert steps >= 4

    real_loop = engine.TrainingLoop

    def calling(function):  # the loop kgc builds, with ``function(step, loss)`` after each step in place of its own
        class Loop(real_loop):
            def __init__(self, *args, **kwargs):
                super().__init__(*args, **{**kwargs, "on_step": function})

        return Loop

    def interrupt(step, value):  # Ctrl-C half-way, as a user would press it
        if step == steps // 2:
            raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(engine, "TrainingLoop", calling(interrupt))
        with pytest.raises(KeyboardInterrupt):
            train_pipeline(output=tmp_path / "cut", output_dir=tmp_path / "ckpt", **common)
    assert (tmp_path / "ckpt" / "checkpoint.pt").is_file()
    seen: list[int] = []

    with monkeypatch.context() as patch:
        patch.setattr(engine, "TrainingLoop", calling(lambda step, value: seen.append(step)))
        resumed = train_pipeline(output=tmp_path / "cut", output_dir=tmp_path / "ckpt", **common)
    assert seen == list(range(steps // 2 + 1, steps + 1))  # only the steps the interrupted run had not taken
    assert resumed.train_result.steps == steps
    from subspaces.models.triencoder import TriEncoder

    a = TriEncoder.load(tmp_path / "whole").state_dict()
    b = TriEncoder.load(tmp_path / "cut").state_dict()
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key


def test_kgc_train_cli_checkpoints_where_asked(tmp_path, tiny_encoder_dir, monkeypatch):
    from typer.testing import CliRunner

    from subspaces.cli.app import app

    monkeypatch.setenv("SUBSPACES_CACHE", str(tmp_path / "cache"))
    data = write_wn18rr(tmp_path / "wn")
    args = ["kgc", "train", "--dataset", str(data), "--model", str(tiny_encoder_dir), "--max-steps", "2"]
    args += ["--max-length", "32", "--batch-size", "4", "--eval-split", "none", "-o", str(tmp_path / "run")]
    result = CliRunner().invoke(app, [*args, "--checkpoint-dir", str(tmp_path / "ckpt")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "ckpt" / "checkpoint.pt").is_file()


def test_kgc_train_json_help_says_it_is_the_evaluation():
    """``kgc train --json`` writes the evaluation only (nothing under --eval-split none): its help says so."""
    import typer

    from subspaces.cli.app import app

    command = typer.main.get_command(app).commands["kgc"].commands["train"]  # type: ignore[attr-defined]
    help_text = next(p.help for p in command.params if p.name == "json_path")
    assert "evaluation" in help_text and "--eval-split none" in help_text
