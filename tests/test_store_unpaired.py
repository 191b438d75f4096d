"""A query-side map fitted without pairs (issue 53 item 3): mini-vec2vec from domain texts the user gives and the
stored vectors; recorded when the aligner trusts it (then searched like a paired query map, filters included),
refused with its reason when not (nothing recorded), and one-line errors on bad input."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
from scipy.stats import ortho_group

from subspaces.errors import DataError, SubspacesError
from subspaces.store import Store, unpaired
from test_store import LookupEncoder, cli

DIM, ROWS, DOMAIN, QUERIES = 8, 2500, 2000, 40
LANGS = ("en", "de", "fr")
# Small but complete aligner settings (every stage runs), as tests/test_align.py's FAST.
PARAMS = {
    "anchors": {"n_runs": 6, "n_clusters": 10, "sample": 1000, "kmeans_redo": 3, "n_pseudo_pairs": 1000},
    "refine": {"n_iter": 30, "sample": 500, "centroid_clusters": 40},
    "search": {"probe_size": 500},
    "n_restarts": 4,
    "max_seconds": None,
}
# For a map that is to be refused: one pass, judged by the agreement check without searching for a second.
QUICK = PARAMS | {"n_restarts": 1, "agreement_search": 0}


def clustered(n: int, seed: int) -> np.ndarray:
    """Anisotropic Gaussian clusters of unequal weight (one layout for every call): a shape that survives rotation."""
    layout = np.random.default_rng(0)
    scale = np.geomspace(4, 0.5, DIM)
    centers = layout.normal(size=(10, DIM)) * scale
    weights = layout.dirichlet(np.full(10, 2.0))
    rng = np.random.default_rng(seed)
    return centers[rng.choice(10, n, p=weights)] + 0.3 * rng.normal(size=(n, DIM)) * scale


@pytest.fixture
def world(tmp_path):
    """A store of ROWS texts by an 'old' model; a 'new' model that is the old one rotated (plus a little noise) on
    the store's texts, on DOMAIN other texts (the user's sample) and on QUERIES; a store re-embedded with it."""
    n = ROWS + DOMAIN + QUERIES
    texts = [f"text {i}" for i in range(n)]
    old = clustered(n, seed=1)
    q = ortho_group.rvs(DIM, random_state=1)
    new = old @ q + 0.02 * np.random.default_rng(2).normal(size=old.shape)
    old_model, new_model = LookupEncoder(texts, old), LookupEncoder(texts, new)
    meta = [{"lang": LANGS[i % 3]} for i in range(ROWS)]
    store = Store.create(tmp_path / "s", old_model)
    store.add(texts[:ROWS], ids=range(ROWS), metadata=meta, write_batch=2500)
    reembedded = Store.create(tmp_path / "r", new_model)
    reembedded.add(texts[:ROWS], ids=range(ROWS), metadata=meta, write_batch=2500)
    domain = tmp_path / "domain.txt"
    domain.write_text("\n".join(texts[ROWS : ROWS + DOMAIN]) + "\n")
    return store, reembedded, old_model, new_model, texts, domain


def overlap(got, want) -> float:
    return float(np.mean([len(set(a.ids) & set(b.ids)) / len(b.ids) for a, b in zip(got, want, strict=True)]))


def test_an_unpaired_query_map_searches_like_a_re_embed_with_filters(world):
    store, reembedded, old_model, new_model, texts, domain = world
    version = store._table("0").version
    report = store.migrate(new_model, query_side=True, unpaired=True, texts=domain, params=PARAMS, heldout=500)
    assert report["anchors"] == "unpaired" and report["mode"] == "query-side", report
    assert report["trust"]["trusted"] and not report["trust"]["problems"] and report["texts"] == DOMAIN
    assert report["overlap@10"] > 0.8 and report["fit_seconds"] > 0 and report["map_us_per_query"] > 0, report
    spread = report["trust"]["spread"]  # texts drawn as the rows were
    assert spread["mismatch"] - spread["floor"] < unpaired.MISMATCH_LIMIT, report
    assert list(store.manifest.spaces) == ["0"] and store._table("0").version == version  # rows untouched
    queries = texts[-QUERIES:]
    for options in ({"where": "lang = 'de'"}, {}):
        got = store.search(queries, k=10, model=new_model, **options)
        want = reembedded.search(queries, k=10, **options)
        # the ceiling: the old model's own queries (the true inverse of the rotation) against the re-embed's,
        # below 1 by the new model's noise alone
        ceiling = store.search(queries, k=10, model=old_model, **options)
        assert overlap(got, want) > max(0.8, overlap(ceiling, want) - 0.05), options
        if options:
            assert all(int(i) % 3 == 1 for hit in got for i in hit.ids)
        assert all(abs(s) <= 1 + 1e-5 for hit in got for s in hit.scores)  # cosines: the mapped queries are unit
    # recorded as a paired query map is: reopened, the map is read back from its folder
    entry = Store.open(store.path).manifest.spaces["0"].query_maps["1"]
    assert entry["options"]["anchors"] == "unpaired" and entry["report"]["trust"]["trusted"]
    assert Store.open(store.path).search(queries[0], k=3, model=new_model).ids == got[0].ids[:3]
    # a rerun with the same texts returns the recorded map
    again = store.migrate(new_model, query_side=True, unpaired=True, texts=domain, params=PARAMS, heldout=500)
    assert again == report


def test_unrelated_spaces_are_refused_with_the_reason_and_nothing_is_recorded(world, tmp_path):
    store, _, _, _, texts, domain = world
    unrelated = LookupEncoder(texts, np.random.default_rng(5).normal(size=(len(texts), DIM)))
    before = (store.path / "store.json").read_text()
    with pytest.raises(SubspacesError, match="not trusted") as refused:
        store.migrate(unrelated, query_side=True, unpaired=True, texts=domain, params=QUICK, heldout=200)
    assert "\n" not in str(refused.value) and "nothing was recorded" in str(refused.value)
    assert (store.path / "store.json").read_text() == before
    assert not (store.path / "query_maps").exists()
    with pytest.raises(SubspacesError):  # no map: that model's queries are still refused
        store.search(texts[-1], model=unrelated)


def test_a_foreign_store_without_texts_becomes_searchable_by_text(world, tmp_path):
    store, reembedded, old_model, new_model, texts, domain = world
    vectors = tmp_path / "v.npy"
    np.save(vectors, old_model.encode(texts[:ROWS]).numpy())
    (tmp_path / "ids.txt").write_text("".join(f"{i}\n" for i in range(ROWS)))
    bare = Store.create_foreign(tmp_path / "f", "retired-model", DIM)
    bare.import_vectors(vectors, ids=tmp_path / "ids.txt")
    with pytest.raises(SubspacesError, match="--unpaired --texts"):  # paired: no texts to re-embed
        bare.migrate(new_model, query_side=True)
    qrels = tmp_path / "qrels.tsv"
    queries = tmp_path / "queries.tsv"
    want = reembedded.search(texts[-QUERIES:], k=10)
    qrels.write_text("".join(f"q{i}\t{hit.ids[0]}\n" for i, hit in enumerate(want)))
    queries.write_text("".join(f"q{i}\t{t}\n" for i, t in enumerate(texts[-QUERIES:])))
    report = bare.migrate(
        new_model, query_side=True, unpaired=True, texts=domain, params=PARAMS, qrels=qrels, queries=queries
    )
    assert report["overlap@10"] is None and "holds 0" in report["overlap_note"]
    assert "reembed_seconds_estimate" not in report  # no texts: a re-embed is not possible
    figures = report["qrels"]
    assert figures["recall@10_of_reembed"] is None and set(figures["store"]) == {"migrated"}
    assert figures["store"]["migrated"]["recall@10"] > 0.8
    got = bare.search(texts[-QUERIES:], k=10)  # a foreign store: its query map's model, without --model
    ceiling = store.search(texts[-QUERIES:], k=10, model=old_model)  # the rotation's true inverse
    assert overlap(got, want) > max(0.8, overlap(ceiling, want) - 0.05)


def test_bad_input_is_refused_in_one_line(world, tmp_path):
    store, _, _, new_model, texts, domain = world
    empty = tmp_path / "empty.txt"
    empty.write_text("\n  \n")
    few = tmp_path / "few.txt"
    few.write_text("\n".join(texts[ROWS : ROWS + 20]) + "\n")
    cases = [
        ({"texts": tmp_path / "missing.txt"}, DataError, "file not found"),
        ({"texts": empty}, DataError, "holds no text"),
        ({"texts": few}, DataError, r"holds 20 distinct texts; .* needs at least 32"),
        ({"texts": domain, "query_side": False}, SubspacesError, "add --query-side"),
        ({"unpaired": False}, SubspacesError, "add --unpaired"),
        ({"texts": None}, SubspacesError, "needs --texts FILE"),
        ({"texts": domain, "pairs": 100}, SubspacesError, "drop --pairs"),
    ]
    before = (store.path / "store.json").read_text()
    for options, error, message in cases:
        asked = {"query_side": True, "unpaired": True, "texts": domain} | options
        with pytest.raises(error, match=message) as refused:
            store.migrate(new_model, **asked)
        assert "\n" not in str(refused.value)
    assert (store.path / "store.json").read_text() == before


def test_read_domain_texts_keeps_distinct_texts_of_lines_or_jsonl(tmp_path):
    lines = tmp_path / "t.txt"
    lines.write_text("a\n\nb\na\n c \n")
    assert unpaired.read_domain_texts(lines) == ["a", "b", "c"]
    jsonl = tmp_path / "t.jsonl"
    jsonl.write_text("".join(json.dumps({"text": t}) + "\n" for t in "abcdef"))
    sample = unpaired.read_domain_texts(jsonl, limit=3, seed=0)
    assert len(sample) == 3 and set(sample) <= set("abcdef")


def test_cli_migrate_unpaired(tmp_path, tiny_model_dir):
    """The command line: a store without texts is refused paired, pointing at --unpaired --texts; with a texts
    file too small for the model's dims, the one-line error."""
    rng = np.random.default_rng(0)
    vectors = tmp_path / "v.npy"
    np.save(vectors, rng.normal(size=(200, 32)).astype(np.float32))
    folder = tmp_path / "f"
    assert cli("store", "import", folder, "--vectors", vectors, "--foreign", "other-model").exit_code == 0
    result = cli("store", "migrate", folder, "--to", tiny_model_dir, "--query-side")
    assert result.exit_code != 0 and "--unpaired --texts" in result.output
    few = tmp_path / "few.txt"
    few.write_text("".join(f"sentence number {i}\n" for i in range(10)))
    result = cli("store", "migrate", folder, "--to", tiny_model_dir, "--query-side", "--unpaired", "--texts", few)
    assert result.exit_code != 0 and "distinct texts" in result.output, result.output


def unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def test_spread_tells_texts_drawn_like_the_rows_from_texts_of_one_part_of_the_store():
    stored = unit(clustered(4000, seed=1))
    alike = unit(clustered(2000, seed=3))  # another sample of the same distribution
    part = alike[alike[:, 0] > np.quantile(alike[:, 0], 0.6)]  # texts of one side of the store only
    same, one_side = (unpaired.spread(x, stored, seed=0) for x in (alike, part))
    assert same["mismatch"] - same["floor"] < unpaired.MISMATCH_LIMIT / 2 and same["mismatch"] < 3 * same["floor"], same
    assert one_side["mismatch"] - one_side["floor"] > 2 * unpaired.MISMATCH_LIMIT, one_side
    assert unpaired.spread(alike, stored, seed=0) == same  # seeded


def test_a_trusted_map_whose_texts_spread_unlike_the_rows_is_refused_in_one_line():
    trusted = SimpleNamespace(converged_=True)  # the aligner's own verdict: trusted (its checks are tested above)
    assert unpaired.refusal(trusted, "the map", {"mismatch": unpaired.MISMATCH_LIMIT + 0.03, "floor": 0.03}) is None
    reason = unpaired.refusal(trusted, "the map", {"mismatch": 0.3, "floor": 0.03})
    assert (
        reason.startswith("the map is not used, so nothing was recorded: the mapped texts spread")
        and "\n" not in reason
    )
    assert "0.300" in reason and "the same sources, in the same proportions" in reason
