"""The vector store: add/search round trips, resumable adds, funnel = exact, refusals, CLI, migration."""

from __future__ import annotations

import functools
import json
import random

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from subspaces.errors import DataError, DimensionError, SubspacesError
from subspaces.store import Store
from vocabulary import WORDS


def sentences(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 9))) + f" {i}" for i in range(n)]


@pytest.fixture
def store(tmp_path, tiny_model, tiny_model_dir):
    made = Store.create(tmp_path / "store", str(tiny_model_dir))
    made.add(sentences(60), ids=range(60), write_batch=16)
    return made


def cli(*args: str):
    from subspaces.cli.app import app

    return CliRunner().invoke(app, [str(a) for a in args])


def test_add_and_search_round_trip(store, tiny_model_dir):
    texts = sentences(60)
    hits = store.search(texts[:5], k=3)
    assert [h["query"] for h in hits] == texts[:5]  # in query order
    assert [h["ids"][0] for h in hits] == ["0", "1", "2", "3", "4"]
    assert all(len(h["ids"]) == len(h["scores"]) == 3 for h in hits)
    assert hits[0]["texts"][0] == texts[0] and hits[0]["scores"][0] == pytest.approx(1.0, abs=1e-5)
    reopened = Store.open(store.path)
    assert len(reopened) == 60
    assert reopened.search(texts[7], k=1)["ids"] == ["7"]  # the model reloads by its recorded name
    space = reopened.info()["spaces"]["0"]
    assert space["rows"] == 60 and space["model"]["dimension"] == 32 and space["model"]["name"] == str(tiny_model_dir)


def test_readding_existing_ids_adds_nothing(store):
    assert store.add(sentences(60), ids=range(60)) == {"added": 0, "skipped": 60}
    assert store.add(sentences(70)[60:], ids=range(60, 70)) == {"added": 10, "skipped": 0}
    ids = store._load_rows("0").ids.tolist()
    assert len(ids) == len(set(ids)) == 70


def test_an_add_killed_mid_run_resumes_without_lost_or_duplicated_rows(tmp_path, tiny_model_dir, monkeypatch):
    import subspaces.models.encoder as encoder_module

    texts = sentences(50)
    made = Store.create(tmp_path / "s", str(tiny_model_dir))
    real, calls = encoder_module.encode, []

    def dies_on_third_batch(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt  # as a Ctrl-C or a kill between two committed batches
        return real(*args, **kwargs)

    monkeypatch.setattr(encoder_module, "encode", dies_on_third_batch)
    with pytest.raises(KeyboardInterrupt):
        made.add(texts, ids=range(50), write_batch=10)
    monkeypatch.setattr(encoder_module, "encode", real)
    assert Store.open(made.path).count() == 20  # two whole batches, nothing of the third
    assert Store.open(made.path).add(texts, ids=range(50), write_batch=10) == {"added": 30, "skipped": 20}
    rows = Store.open(made.path)._load_rows("0")
    assert sorted(rows.ids.tolist(), key=int) == [str(i) for i in range(50)]
    fresh = real(made.model(), texts, normalize=True)
    order = np.argsort(rows.ids.astype(int))
    np.testing.assert_allclose(rows.vectors[order], fresh, atol=1e-5)


def test_funnel_with_a_full_shortlist_equals_exact_search(tmp_path):
    # Spread-out synthetic vectors: a random BERT's are near-parallel, and its ties would make the order rounding.
    texts = [f"text {i}" for i in range(200)]
    encoder = LookupEncoder(texts, np.random.default_rng(0).normal(size=(200, 32)))
    made = Store.create(tmp_path / "s", encoder)
    made.add(texts[:150], ids=range(150))
    queries = texts[150:]
    exact = made.search(queries, k=5, model=encoder)
    # the shortlist is a multiple of k: 30 x 5 = 150 rows is the whole store, and a larger one is cut to it
    for factor in (30, 1000):
        funnel = made.search(queries, k=5, model=encoder, dims=8, rerank="full", shortlist=factor)
        for a, b in zip(exact, funnel, strict=True):
            assert a["ids"] == b["ids"]
            np.testing.assert_allclose(a["scores"], b["scores"], atol=1e-5)
    short = made.search(queries, k=5, model=encoder, dims=8, shortlist=2)  # 10 candidates
    assert np.mean([set(a["ids"]) == set(b["ids"]) for a, b in zip(exact, short, strict=True)]) < 1  # it does cut
    prefix_only = made.search(queries, k=5, model=encoder, dims=8, rerank="none")
    assert all(len(r["ids"]) == 5 for r in prefix_only)
    # shortlist 1 = k candidates: the prefix ranking's top k, re-ordered by the full vectors
    same_set = made.search(queries, k=5, model=encoder, dims=8, shortlist=1)
    assert [set(a["ids"]) for a in same_set] == [set(b["ids"]) for b in prefix_only]
    with pytest.raises(SubspacesError, match="shortlist"):
        made.search(queries, k=5, model=encoder, dims=8, shortlist=0)


def test_a_large_stores_funnel_scans_8_bit_codes_for_few_queries_and_stays_exact_on_a_whole_store(
    tmp_path, monkeypatch
):
    from subspaces import topk

    monkeypatch.setattr(topk, "INT8_SCAN_ROWS", 100)  # what 50,000 rows would do, on 150
    texts = [f"text {i}" for i in range(200)]
    encoder = LookupEncoder(texts, np.random.default_rng(0).normal(size=(200, 32)))
    made = Store.create(tmp_path / "s", encoder)
    made.add(texts[:150], ids=range(150))
    exact = made.search(texts[150:], k=5, model=encoder)
    for basis in ("model", "pca"):
        funnel = made.search(texts[150:], k=5, model=encoder, dims=8, shortlist=30, basis=basis)
        assert [a["ids"] for a in exact] == [b["ids"] for b in funnel]
    assert {type(index).__name__ for index in made._load_rows("0").prefixes.values()} == {"IndexFlatIP"}  # a batch
    for basis in ("model", "pca"):  # one query at a time: the codes
        for text, expected in zip(texts[150:160], exact, strict=False):
            hit = made.search(text, k=5, model=encoder, dims=8, shortlist=30, basis=basis)
            assert hit["ids"] == expected["ids"]
    kinds = {type(index).__name__ for index in made._load_rows("0").prefixes.values()}
    assert kinds == {"IndexFlatIP", "IndexScalarQuantizer"}


def test_cli_search_with_a_pca_basis_and_its_refusals(store):
    texts = sentences(60)
    result = cli(
        "store", "search", store.path, texts[4], "-k", "3", "--dims", "8", "--basis", "pca", "--shortlist", "20"
    )
    assert result.exit_code == 0 and "4" in result.output, result.output
    result = cli("store", "search", store.path, texts[4], "--basis", "pca")
    assert result.exit_code == 2 and "give dims" in result.output, result.output
    result = cli("store", "search", store.path, texts[4], "--dims", "8", "--basis", "svd")
    assert result.exit_code == 2, result.output


def test_principal_axes_are_an_orthonormal_basis_ordered_by_variance():
    from subspaces.vectors import principal_axes

    rng = np.random.default_rng(0)
    x = rng.normal(size=(3000, 6)) * np.array([0.1, 3.0, 0.5, 2.0, 1.0, 0.2])
    axes = principal_axes(x, sample=2000, seed=1)
    np.testing.assert_allclose(axes.T @ axes, np.eye(6), atol=1e-5)
    variances = np.var(x @ axes, axis=0)
    assert np.all(np.diff(variances) < 0)  # largest first
    assert abs(axes[1, 0]) > 0.99  # the widest input coordinate is the first axis
    np.testing.assert_array_equal(axes, principal_axes(x, sample=2000, seed=1))  # same rows, same basis


def test_a_pca_funnel_keeps_exact_scores_and_shortlists_better_than_raw_coordinates(tmp_path):
    """Rows whose variance lies in their last coordinates (a model not trained for truncation, at its worst):
    the model's first 4 coordinates shortlist noise, the store's first 4 principal axes the signal."""
    rng = np.random.default_rng(0)
    scale = np.r_[np.full(12, 0.05), np.full(4, 1.0)]
    vectors = rng.normal(size=(600, 16)) * scale
    texts = [f"text {i}" for i in range(600)]
    encoder = LookupEncoder(texts, vectors)
    made = Store.create(tmp_path / "s", encoder)
    made.add(texts[:500], ids=range(500))
    queries = texts[500:]
    exact = made.search(queries, k=5, model=encoder)
    whole = made.search(queries, k=5, model=encoder, dims=4, basis="pca", shortlist=100)  # 500 rows: all of them
    for a, b in zip(exact, whole, strict=True):
        assert a["ids"] == b["ids"]
        np.testing.assert_allclose(a["scores"], b["scores"], atol=1e-5)

    def overlap(found):
        return np.mean([len(set(a["ids"]) & set(b["ids"])) / 5 for a, b in zip(exact, found, strict=True)])

    raw = made.search(queries, k=5, model=encoder, dims=4, shortlist=4, basis="model")
    pca = made.search(queries, k=5, model=encoder, dims=4, shortlist=4, basis="pca")
    assert overlap(pca) > 0.9 and overlap(raw) < 0.5, (overlap(pca), overlap(raw))
    # a model not trained for truncation: --dims reads the principal axes unless told otherwise (issue 52 item 5)
    default = made.search(queries, k=5, model=encoder, dims=4, shortlist=4)
    assert [r.ids for r in default] == [r.ids for r in pca]
    with pytest.raises(SubspacesError, match="basis"):
        made.search(queries, k=5, model=encoder, dims=4, basis="svd")


def test_ann_index_search_finds_each_row(tmp_path, tiny_model_dir):
    made = Store.create(tmp_path / "s", str(tiny_model_dir))
    texts = sentences(300)
    made.add(texts, ids=range(300))
    with pytest.raises(SubspacesError, match="no ANN index"):
        made.search(texts[0], ann=True)
    made.index()
    hits = made.search(texts[:20], k=10, ann=True, nprobes=50)
    exact = made.search(texts[:20], k=10)
    recall = np.mean([len(set(a["ids"]) & set(b["ids"])) / 10 for a, b in zip(hits, exact, strict=True)])
    assert recall > 0.5  # PQ on a random model's near-parallel vectors: approximate, but not noise
    assert made.info()["spaces"]["0"]["index"] is not None


def test_a_query_model_of_other_weights_or_dimension_is_refused(store, tmp_path):
    from bench.random_bert import build_random_bert

    other = build_random_bert(tmp_path / "other", num_layers=2, hidden_size=32, num_heads=2, max_position=64, seed=1)
    with pytest.raises(SubspacesError, match="is not the store's model"):
        store.search("a cat", model=other)
    with pytest.raises(SubspacesError, match="is not the store's model"):
        store.add(["a cat"], model=other)
    narrow = build_random_bert(tmp_path / "narrow", num_layers=1, hidden_size=16, num_heads=2, max_position=64)
    with pytest.raises(DimensionError, match="16-d"):
        store.search("a cat", model=narrow)
    with pytest.raises(DimensionError):
        store.search_vectors(np.ones((1, 16), dtype=np.float32))


def test_bad_inputs_are_refused_before_anything_is_written(store, tmp_path):
    with pytest.raises(SubspacesError, match="no such store"):
        Store.open(tmp_path / "missing")
    (tmp_path / "plain").mkdir()
    with pytest.raises(SubspacesError, match="not a subspaces store"):
        Store.open(tmp_path / "plain")
    with pytest.raises(SubspacesError, match="already exists"):
        Store.create(store.path, "unused-name")
    version = store.info()["spaces"]["0"]["version"]
    with pytest.raises(DataError, match="given twice"):
        store.add(["x", "y"], ids=["a", "a"])
    with pytest.raises(DataError, match="empty"):
        store.add(["x", " "], ids=["a", "b"])
    with pytest.raises(DataError, match="no texts"):
        store.add([])
    assert store.info()["spaces"]["0"]["version"] == version


def test_a_corrupted_table_is_one_clear_error(store):
    for data in (store.path / "lance").rglob("*.lance"):
        if data.is_file():
            data.write_bytes(b"not lance")
    with pytest.raises(SubspacesError, match="missing or corrupted"):
        Store.open(store.path).search("a cat")


def test_cli_plain_text_ids_are_text_hashes_and_search_writes_json(tmp_path, tiny_model_dir):
    from subspaces.store.inputs import text_id

    folder, texts = tmp_path / "s", tmp_path / "texts.txt"
    texts.write_text("a cat plays\n\nthe dog runs\nred house\n", encoding="utf-8")
    assert cli("store", "create", folder, "--model", tiny_model_dir).exit_code == 0
    result = cli("store", "add", folder, "--input", texts)
    assert result.exit_code == 0, result.output
    rows = Store.open(folder)._load_rows("0")
    stored = dict(zip(rows.ids, rows.texts, strict=True))
    assert stored == {text_id(t): t for t in ("a cat plays", "the dog runs", "red house")}
    assert text_id("red house") == "2b157e2fb84d6d4d"  # stable: sha256 of the UTF-8 text, first 16 hex digits
    assert "skipped 3" in cli("store", "add", folder, "--input", texts).output
    queries, out = tmp_path / "q.txt", tmp_path / "out.json"
    queries.write_text("the dog runs\nred house\n", encoding="utf-8")
    result = cli("store", "search", folder, "--queries", queries, "--json", out, "-k", "2")
    assert result.exit_code == 0, result.output
    results = json.loads(out.read_text())["results"]
    assert [r["query"] for r in results] == ["the dog runs", "red house"]
    assert [r["ids"][0] for r in results] == [text_id("the dog runs"), text_id("red house")]
    result = cli("store", "search", folder, "red house", "-k", "2", "--dims", "8", "--shortlist", "3")
    assert result.exit_code == 0 and "red house" in result.output
    assert cli("store", "info", folder).exit_code == 0


def test_cli_jsonl_fields_and_metadata(tmp_path, tiny_model_dir):
    folder, data = tmp_path / "s", tmp_path / "rows.jsonl"
    data.write_text('{"key": "x1", "body": "a cat", "lang": "en"}\n{"key": "x2", "body": "a dog"}\n')
    cli("store", "create", folder, "--model", tiny_model_dir)
    result = cli("store", "add", folder, "--input", data, "--id-field", "key", "--text-field", "body")
    assert result.exit_code == 0, result.output
    table = Store.open(folder)._table("0").handle.to_arrow().to_pylist()
    assert [(r["id"], r["text"], r["metadata"]) for r in table] == [
        ("x1", "a cat", '{"lang": "en"}'),
        ("x2", "a dog", None),
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("store", "info", "{missing}"), "no such store"),
        (("store", "add", "{store}", "--input", "{empty}"), "holds no text"),
        (("store", "search", "{store}", "a cat", "--model", "{other}"), "is not the store's model"),
        (("store", "search", "{store}", "a cat", "--dims", "64"), "outside 1..32"),
        (("store", "create", "{store}", "--model", "{other}"), "already exists"),
        (("store", "migrate", "{store}", "--commit"), "no migration is pending"),
        (("store", "migrate", "{store}"), "give --to MODEL"),
        (("store", "index", "{store}"), "at least 256 rows"),
    ],
)
def test_cli_errors_are_one_line_and_change_nothing(store, tmp_path, args, message):
    from bench.random_bert import build_random_bert
    from subspaces.models.encoder import portable

    other = tmp_path / "other"
    if not other.exists():
        portable(build_random_bert(tmp_path / "hf", num_layers=1, hidden_size=32, num_heads=2, seed=3)).save(str(other))
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    before = store.info()
    names = {"missing": tmp_path / "nope", "store": store.path, "empty": empty, "other": other}
    result = cli(*[a.format(**names) for a in args])
    assert result.exit_code == 2
    flat = " ".join(result.output.split())  # rich wraps at 80 columns off a terminal
    assert message in flat and flat.count("error:") == 1 and "Traceback" not in flat, result.output
    assert Store.open(store.path).info() == before


class LookupEncoder(torch.nn.Module):
    """A synthetic 'model': each text's vector is looked up in a table, so two of them can differ by a known map."""

    def __init__(self, texts: list[str], vectors: np.ndarray) -> None:
        super().__init__()
        self.row = {t: i for i, t in enumerate(texts)}
        self.register_buffer("table", torch.tensor(vectors, dtype=torch.float32))
        self.max_seq_length = 8

    def __iter__(self):
        return iter([self])

    def get_embedding_dimension(self) -> int:
        return int(self.table.shape[1])

    def encode(self, texts, **_):
        return self.table[[self.row[t] for t in texts]]


def test_paired_migration_recovers_a_rotation_of_structureless_vectors(tmp_path):
    """Isotropic Gaussian rows have no structure an unpaired fit can match; the re-embedded rows, used as known
    pairs, still give the rotation."""
    from scipy.stats import ortho_group

    old = np.random.default_rng(0).normal(size=(1500, 8))
    q = ortho_group.rvs(8, random_state=2)
    texts = [f"text {i}" for i in range(1500)]
    made = Store.create(tmp_path / "s", LookupEncoder(texts, old))
    made.add(texts, ids=range(1500), write_batch=1000)
    report = made.migrate(LookupEncoder(texts, old @ q), pairs=200, heldout=300, name="new")
    assert report["anchors"] == "paired" and report["overlap@10"] > 0.95, report
    with pytest.raises(SubspacesError, match=r"pending, fitted for other weights than this new \["):
        made.migrate(LookupEncoder(texts, old @ q + 1e-3), pairs=200, heldout=300, name="new")  # retrained "new"
    with pytest.raises(SubspacesError, match="map_params"):  # mini-vec2vec's params are for unpaired anchors
        made.migrate(LookupEncoder(texts, old @ q), pairs=200, params={"n_restarts": 1})


def test_paired_migration_by_default_chooses_among_the_learned_maps(tmp_path):
    """With no options the paired fit tries every map kind on 80 % of the default 2,000 pairs, keeps the best by
    held-out agreement, refits it on all and saves it as a map folder; a rotation is recovered."""
    from scipy.stats import ortho_group

    from subspaces.store.maps import KINDS, load_map

    old = np.random.default_rng(0).normal(size=(3000, 8)) * np.geomspace(3, 0.3, 8)
    q = ortho_group.rvs(8, random_state=4)
    texts = [f"text {i}" for i in range(3000)]
    made = Store.create(tmp_path / "s", LookupEncoder(texts, old))
    made.add(texts, ids=range(3000), write_batch=1000)
    report = made.migrate(LookupEncoder(texts, old @ q), heldout=500)
    assert report["pairs"] == 2000 and report["anchors"] == "paired" and report["selection_pairs"] == 400
    assert set(report["candidates"]) == set(KINDS) and report["map"] in KINDS
    assert report["overlap@10"] > 0.95 and "recall_fraction" not in report, report
    assert report["reembed_seconds_estimate"] > 0 and report["migrate_seconds"] > 0
    fitted = load_map(made.path / made.manifest.spaces["1"].aligner)
    assert fitted.kind == report["map"]


@pytest.mark.parametrize("anchors", ["paired", "unpaired"])
def test_migration_recovers_a_rotation_and_dual_reads_until_commit(tmp_path, anchors):
    from scipy.stats import ortho_group

    rng = np.random.default_rng(0)
    layout = np.random.default_rng(0)
    scale = np.geomspace(4, 0.5, 8)
    centers = layout.normal(size=(10, 8)) * scale
    labels = rng.choice(10, 2500, p=layout.dirichlet(np.full(10, 2.0)))
    old = centers[labels] + 0.3 * rng.normal(size=(2500, 8)) * scale
    q = ortho_group.rvs(8, random_state=1)
    texts = [f"text {i}" for i in range(2500)]
    old_model, new_model = LookupEncoder(texts, old), LookupEncoder(texts, old @ q)

    made = Store.create(tmp_path / "s", old_model)
    made.add(texts, ids=range(2500), write_batch=1000)
    params = {
        "anchors": {"n_runs": 6, "n_clusters": 10, "sample": 1000, "kmeans_redo": 3, "n_pseudo_pairs": 1000},
        "refine": {"n_iter": 30, "sample": 500, "centroid_clusters": 40},
        "search": {"probe_size": 500},
        "n_restarts": 4,
    }
    report = made.migrate(
        new_model, pairs=2000, anchors=anchors, heldout=500, params=params if anchors == "unpaired" else None
    )
    assert report["overlap@10"] > 0.8, report
    assert report["anchors"] == anchors
    mapped = made._load_rows("1")
    order = np.argsort(mapped.ids.astype(int))
    reembedded = new_model.encode(texts).numpy()
    reembedded /= np.linalg.norm(reembedded, axis=1, keepdims=True)
    cosine = np.sum(mapped.vectors[order] * reembedded, axis=1)
    assert np.median(cosine) > 0.99

    # dual read: the old model searches the old space, the new model the mapped one
    assert made.search(texts[3], k=1, model=old_model)["ids"] == ["3"]
    assert made.search(texts[3], k=1, model=new_model)["ids"] == ["3"]
    # an add while the migration is pending reaches both spaces
    more = LookupEncoder(["extra"], old[:1] + 0.01)
    with pytest.raises(SubspacesError, match="not the store's model"):
        made.add(["extra"], ids=["e"], model=more)
    made.add([texts[0]], ids=["again"], model=old_model)
    assert made.count("0") == made.count("1") == 2501

    assert made.commit() == "1"
    reopened = Store.open(made.path)
    assert reopened.manifest.active == "1" and reopened.manifest.spaces["0"].state == "retired"
    with pytest.raises(SubspacesError, match="retired"):
        reopened.search(texts[3], model=old_model)
    assert reopened.search(texts[3], k=1, model=new_model)["ids"] == ["3"]


def tri_encoder(model_dir, seed: int = 0):
    from subspaces.models.encoder import load_encoder
    from subspaces.models.heads import make_head
    from subspaces.models.triencoder import TriEncoder

    torch.manual_seed(seed)
    return TriEncoder(load_encoder(model_dir), make_head("hypernet", 32, 4), encoder_name=str(model_dir))


def test_conditional_search_ranks_by_the_heads_projection_and_caches_the_condition(tmp_path):
    from subspaces.models.heads import make_head
    from subspaces.models.triencoder import TriEncoder

    # Spread-out synthetic vectors (a random BERT's are near-parallel): texts and the conditions in one table.
    texts, conditions = [f"text {i}" for i in range(80)], ["the colour", "the size"]
    encoder = LookupEncoder(texts + conditions, np.random.default_rng(0).normal(size=(82, 32)))
    made = Store.create(tmp_path / "s", encoder)
    made.add(texts[:60], ids=range(60))
    torch.manual_seed(0)
    tri = TriEncoder(encoder, make_head("hypernet", 32, 4)).eval()
    queries = texts[60:]
    hits = made.search(queries, k=5, condition="the colour", head=tri)
    # by hand: every row and each query projected under the condition, ranked by cosine
    with torch.no_grad():
        rows = torch.nn.functional.normalize(tri.project(texts[:60], ["the colour"] * 60), dim=1)
        q = torch.nn.functional.normalize(tri.project(queries, ["the colour"] * 20), dim=1)
    scores, order = torch.sort(q @ rows.T, descending=True)
    assert [h["ids"] for h in hits] == [[str(int(i)) for i in row[:5]] for row in order]
    np.testing.assert_allclose([h["scores"] for h in hits], scores[:, :5].numpy(), atol=1e-5)
    plain = made.search(queries, k=5, model=encoder)
    other = made.search(queries, k=5, condition="the size", head=tri)
    assert [h["ids"] for h in hits] != [h["ids"] for h in plain] != [h["ids"] for h in other]  # conditions matter
    assert made.search(texts[7], k=1, condition="the size", head=tri)["ids"] == ["7"]

    tri.clear_caches()
    for condition in ("the colour", "the size", "the colour"):
        made.search(queries[:3], k=3, condition=condition, head=tri)
    params = tri.cache_stats()["caches"]["condition_params"]
    assert params["misses"] == 2 and params["hits"] == 1  # each condition's matrices computed once
    vectors = encoder.encode(queries).numpy()
    direct = made.search_vectors(vectors, k=5, condition="the colour", head=tri)  # the server's entry point
    assert [h["ids"] for h in direct] == [h["ids"] for h in hits]


def test_a_condition_head_folder_is_loaded_once(store, tmp_path, tiny_model_dir):
    tri_encoder(tiny_model_dir).save(tmp_path / "head")
    loaded = store.condition_head(tmp_path / "head")
    assert store.condition_head(tmp_path / "head") is loaded
    texts = sentences(60)
    assert store.search(texts[4], k=3, condition="the colour", head=tmp_path / "head")["ids"][0] == "4"


def test_conditional_search_refuses_a_head_on_another_model_and_bad_options(store, tmp_path):
    from bench.random_bert import build_random_bert
    from subspaces.models.encoder import portable

    other = tmp_path / "other"
    portable(build_random_bert(tmp_path / "hf", num_layers=1, hidden_size=32, num_heads=2, seed=3)).save(str(other))
    tri_encoder(other).save(tmp_path / "head")
    with pytest.raises(SubspacesError, match="condition head's encoder .* is not the store's model"):
        store.search("a cat", condition="size", head=tmp_path / "head")
    with pytest.raises(SubspacesError, match="needs both"):
        store.search("a cat", condition="size")
    with pytest.raises(SubspacesError, match="exact"):
        store.search("a cat", condition="size", head=tmp_path / "head", dims=8)


def test_cli_conditional_search(store, tmp_path, tiny_model_dir):
    tri_encoder(tiny_model_dir).save(tmp_path / "head")
    args = ("store", "search", store.path, "a red house", "--condition", "the colour", "--head", tmp_path / "head")
    result = cli(*args, "-k", "3")
    assert result.exit_code == 0, result.output
    assert "a red house" in result.output
    result = cli("store", "search", store.path, "a red house", "--condition", "the colour")
    assert result.exit_code == 2 and "needs both" in " ".join(result.output.split())


def test_a_store_is_searched_on_another_backend_by_the_same_weights(store):
    texts = sentences(60)
    onnx = Store.open(store.path, backend="onnx")
    hits = onnx.search(texts[:5], k=3)
    assert [h["ids"][0] for h in hits] == ["0", "1", "2", "3", "4"]  # same fingerprint: accepted, same vectors
    np.testing.assert_allclose(hits[0]["scores"], store.search(texts[0], k=3)["scores"], atol=1e-4)
    with pytest.raises(SubspacesError, match="runs on the CPU"):
        Store.open(store.path, backend="onnx", device="cuda")
    with pytest.raises(SubspacesError, match="int8 needs --backend"):
        Store.open(store.path, precision="int8")
    result = cli("store", "search", store.path, "a cat", "--backend", "torch", "--precision", "int8")
    assert result.exit_code == 2 and "int8 needs" in " ".join(result.output.split())


@pytest.fixture
def wordnet(tmp_path, monkeypatch):
    import gzip

    folder = tmp_path / "data" / "wordnet_sentences"
    folder.mkdir(parents=True)
    texts = sentences(80, seed=5)
    with gzip.open(folder / "wordnet30_definitions.txt.gz", "wt") as f:
        f.write("\n".join(texts[:50]) + "\n")
    with gzip.open(folder / "wordnet30_examples.txt.gz", "wt") as f:
        f.write("\n".join([texts[0], *texts[50:]]) + "\n")  # a repeat is kept once
    monkeypatch.setenv("SUBSPACES_DATA", str(tmp_path / "data"))
    return texts


def test_demo_builds_then_reuses_then_grows_and_rebuilds_for_another_model(wordnet, tmp_path, tiny_model_dir):
    from bench.random_bert import build_random_bert
    from subspaces.models.encoder import portable
    from subspaces.store.demo import run as run_demo

    run = functools.partial(run_demo, to=None, shrink_dims=None)  # the search part alone
    folder = tmp_path / "demo"
    first = run(folder, model=str(tiny_model_dir), n=40, k=3, dims=8, shortlist=2, show_progress=False)
    assert (first.rows, first.added, first.rebuilt) == (40, 40, False)
    assert [len(r["exact"]["ids"]) for r in first.results] == [3] * 4 and 0 <= first.results[0]["overlap"] <= 1
    again = run(folder, model=str(tiny_model_dir), n=40, k=3, dims=8, show_progress=False)
    assert (again.rows, again.added, again.rebuilt) == (40, 0, False)
    assert again.results[0]["exact"] == first.results[0]["exact"]
    assert run(folder, model=str(tiny_model_dir), n=1000, k=3, dims=8, show_progress=False).rows == 80  # all there are
    other = tmp_path / "other"
    portable(build_random_bert(tmp_path / "hf", num_layers=1, hidden_size=32, num_heads=2, seed=3)).save(str(other))
    rebuilt = run(folder, model=str(other), n=40, k=3, dims=8, show_progress=False)
    assert (rebuilt.rows, rebuilt.added, rebuilt.rebuilt) == (40, 40, True)
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "notes.txt").write_text("mine")
    with pytest.raises(SubspacesError, match="already exists"):  # a folder that is not a store is never removed
        run(tmp_path / "plain", model=str(other), n=40, show_progress=False)
    result = cli(
        "store",
        "demo",
        folder,
        "--model",
        other,
        "--n",
        "40",
        "--dims",
        "8",
        "-k",
        "3",
        "--to",
        "",
        "--shrink-dims",
        "0",
    )
    assert result.exit_code == 0, result.output
    flat = " ".join(result.output.split())
    assert "store reused" in flat and "the store lies in" in flat and "subspaces model eval" in flat


def test_demo_migrates_query_side_and_by_rewrite_and_shrinks_with_reports_and_hits(wordnet, tmp_path, tiny_model_dir):
    from bench.random_bert import build_random_bert
    from subspaces.models.encoder import portable
    from subspaces.store.demo import run

    other = tmp_path / "other"
    portable(build_random_bert(tmp_path / "hf", num_layers=1, hidden_size=32, num_heads=2, seed=3)).save(str(other))
    folder = tmp_path / "demo"
    first = run(
        folder, model=str(tiny_model_dir), n=80, k=3, dims=8, to=str(other), pairs=20, heldout=10, shrink_dims=8,
        show_progress=False,
    )  # fmt: skip
    assert first.query_side is not None and first.rewrite is not None and first.shrink is not None
    query = first.results[0]["query"]
    for step in (first.query_side, first.rewrite):
        assert step["query"] == query and step["hits"].query == query and len(step["hits"].ids) == 3
        assert 0 <= step["report"]["overlap@10"] <= 1 and step["report"]["pairs"] == 20
    assert first.query_side["report"]["mode"] == "query-side" and first.rewrite["report"]["mode"] == "rewrite"
    figures = first.shrink["report"]["dims"]["8"]
    assert set(figures) == {"model_overlap@10", "pca_overlap@10", "adapter_overlap@10", "used"}
    assert Store.open(folder).default_basis(None, 8) == figures["used"]  # the query's hits read what was chosen
    assert len(first.shrink["hits"].ids) == 3
    again = run(
        folder, model=str(tiny_model_dir), n=80, k=3, dims=8, to=str(other), pairs=20, heldout=10, shrink_dims=8,
        show_progress=False,
    )  # fmt: skip
    assert again.added == 0 and not again.rebuilt  # reused: the recorded migrations and shrink come back
    assert again.query_side["report"] == first.query_side["report"]
    assert again.shrink["report"] == first.shrink["report"]
    assert again.query_side["hits"].ids == first.query_side["hits"].ids  # the active space's map, not the rewrite
    result = cli(
        "store", "demo", folder, "--model", tiny_model_dir, "--n", "80", "--dims", "8", "-k", "3", "--to", other,
        "--pairs", "20", "--heldout", "10", "--shrink-dims", "8",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    flat = " ".join(result.output.split())
    assert "query-side migration to" in flat and "overlap@10 with a true re-embed" in flat
    assert "rewrite to" in flat and "shrink to 8 dims" in flat and "raw truncation" in flat
