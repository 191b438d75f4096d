"""Learned maps on pairs (issue 53 items 1, 2, 4, 6): the estimator family and its held-out choice, query-side
migration in every search mode with filters, a foreign store searched by text, the report with qrels, rollback."""

from __future__ import annotations

import json

import numpy as np
import pytest

from subspaces.errors import DataError, DimensionError, SubspacesError
from subspaces.store import Store, maps
from test_store import LookupEncoder, cli

N, DIM = 600, 16
LANGS = ("en", "de", "fr")


def structured(n: int = N, dim: int = DIM, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, dim)) * np.geomspace(3, 0.3, dim)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def affine_relation(old: np.ndarray, seed: int = 1) -> np.ndarray:
    """An affine, far from orthogonal, relation: rotation, unequal axis scales, rotation, shift."""
    from scipy.stats import ortho_group

    dim = old.shape[1]
    a = (
        ortho_group.rvs(dim, random_state=seed)
        @ np.diag(np.geomspace(3, 0.3, dim))
        @ ortho_group.rvs(dim, random_state=seed + 1)
    )
    new = old @ a + 0.2
    return new / np.linalg.norm(new, axis=1, keepdims=True)


def test_the_held_out_choice_beats_the_orthogonal_map_on_an_affine_relation():
    old = structured(1500)
    new = affine_relation(old)
    chosen, candidates, summary = maps.fit_and_choose(old[:1000], new[:1000], "rows", random_state=0)
    assert summary["chosen"] != "orthogonal" and summary["selection_pairs"] == 200
    scores = summary["candidates"]
    assert scores[summary["chosen"]]["selection@10"] == max(v["selection@10"] for v in scores.values())
    # on pairs neither the fit nor the choice saw, the chosen map (refitted on all) beats the orthogonal one
    test_old, test_new = old[1000:], new[1000:]
    orthogonal = maps.agreement(candidates["orthogonal"], test_old, test_new, "rows")
    assert maps.agreement(chosen, test_old, test_new, "rows") > orthogonal + 0.1


def test_the_query_side_choice_does_not_lose_to_the_orthogonal_map():
    """A query map cannot undo the new space's unequal row lengths (the true ranking divides by |o A + b|, which
    the stored rows do not carry), so on an anisotropic relation no map need beat Procrustes by much query-side;
    the choice must not lose to it on unseen pairs beyond the selection's noise."""
    old = structured(1500)
    new = affine_relation(old)
    chosen, candidates, summary = maps.fit_and_choose(old[:1000], new[:1000], "queries", random_state=0)
    test_old, test_new = old[1000:], new[1000:]
    orthogonal = maps.agreement(candidates["orthogonal"], test_old, test_new, "queries")
    assert maps.agreement(chosen, test_old, test_new, "queries") > orthogonal - 0.03, summary


def test_a_query_map_is_the_adjoint_of_the_row_map_and_ranks_as_the_rewrite_does():
    """A linear map's adjoint ranks the old rows for a mapped query as the query ranks the (unnormalised) rewritten
    rows: q . (o W + b) = (q W^T) . o + q . b, the last term the same for every row."""
    old = structured(800)
    new = affine_relation(old)
    rows = maps.AffineMap(alpha=0.01).fit(old, new)
    queries = maps.AffineMap(alpha=0.01, adjoint=True).fit(new, old)
    np.testing.assert_allclose(queries.weight_, rows.weight_.T, atol=1e-6)
    q = new[:20]
    by_query = np.argsort(-(queries.transform(q) @ old.T), axis=1)[:, :10]
    by_rows = np.argsort(-(q @ (old @ rows.weight_ + rows.bias_).T), axis=1)[:, :10]
    assert (by_query == by_rows).all()


def test_the_orthogonal_map_is_the_scaled_procrustes_by_hand():
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(100, 6)), rng.normal(size=(100, 6))
    fitted = maps.OrthogonalMap().fit(x, y)
    xc, yc = x - x.mean(0), y - y.mean(0)
    u, s, vt = np.linalg.svd(xc.T @ yc)
    np.testing.assert_allclose(fitted.weight_, u @ vt * (s.sum() / (xc**2).sum()), rtol=1e-5, atol=1e-6)


def test_maps_save_load_and_refuse_in_one_line(tmp_path):
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(300, 12)), rng.normal(size=(300, 10))
    for kind in maps.KINDS:
        fitted = maps.make(kind, {"epochs": 2, "hidden": 16} if kind == "mlp" else None).fit(x, y)
        fitted.save(tmp_path / kind)
        loaded = maps.load_map(tmp_path / kind)
        assert type(loaded) is type(fitted) and loaded.get_params() == fitted.get_params()
        np.testing.assert_allclose(loaded.transform(x[:5]), fitted.transform(x[:5]), atol=1e-6)
        assert np.allclose(np.linalg.norm(fitted.transform(x[:5]), axis=1), 1, atol=1e-5)
        assert fitted.transform(x[0]).shape == (1, 10)  # one vector: one row
    again = maps.make("mlp", {"epochs": 2, "hidden": 16}).fit(x, y)  # seeded: the same fit twice
    np.testing.assert_array_equal(again.w1_, maps.load_map(tmp_path / "mlp").w1_)
    config = tmp_path / "affine" / maps.CONFIG_FILE
    edited = json.loads(config.read_text())
    edited["params"]["alpha"] = 5.0
    config.write_text(json.dumps(edited))
    with pytest.raises(DataError, match="edited"):
        maps.load_map(tmp_path / "affine")
    with pytest.raises(SubspacesError, match="unknown map 'svd'"):
        maps.make("svd")
    with pytest.raises(SubspacesError, match="no parameter 'width'"):
        maps.fit_and_choose(x, y[:, :12] if False else x, "rows", params={"mlp": {"width": 3}})
    with pytest.raises(DimensionError, match="fitted on 12"):
        maps.make("affine").fit(x, y).transform(y)
    with pytest.raises(DataError, match="too few"):
        maps.fit_and_choose(x[:5], x[:5], "rows")


@pytest.fixture
def pair(tmp_path):
    """A store of N rows by an 'old' lookup model with metadata, and a 'new' model that is the old one rotated and
    scaled (a linear relation under which cosines are kept), and the same texts re-embedded into a second store."""
    from scipy.stats import ortho_group

    texts = [f"text {i}" for i in range(N + 40)]
    old = structured(N + 40)
    q = ortho_group.rvs(DIM, random_state=3)
    old_model, new_model = LookupEncoder(texts, old), LookupEncoder(texts, 2 * old @ q)
    meta = [{"lang": LANGS[i % 3], "year": 2000 + i % 10} for i in range(N)]
    store = Store.create(tmp_path / "s", old_model)
    store.add(texts[:N], ids=range(N), metadata=meta, write_batch=256)
    reembedded = Store.create(tmp_path / "r", new_model)
    reembedded.add(texts[:N], ids=range(N), metadata=meta, write_batch=256)
    return store, reembedded, old_model, new_model, texts


def test_query_side_search_equals_a_re_embed_in_every_mode_with_filters(pair):
    store, reembedded, _, new_model, texts = pair
    version = store._table("0").version
    report = store.migrate(new_model, pairs=300, heldout=100, query_side=True)
    assert report["mode"] == "query-side" and report["overlap@10"] > 0.98, report
    assert report["map_us_per_query"] > 0 and report["reembed_seconds_estimate"] > 0
    # the stored vectors stay as they are: no new space, the table untouched
    assert list(store.manifest.spaces) == ["0"] and store._table("0").version == version
    queries = texts[N:]
    for options in ({}, {"where": "lang = 'de' AND year >= 2004"}, {"dims": 8, "shortlist": 1000}):
        got = store.search(queries, k=10, model=new_model, **options)
        want = reembedded.search(queries, k=10, **options)
        for a, b in zip(got, want, strict=True):
            assert a.ids == b.ids
            np.testing.assert_allclose(a.scores, b.scores, atol=1e-4)
    store.index()  # ANN and the quantized copy read the stored vectors: a mapped query searches them too
    store.quantize("int8")
    where = "lang = 'fr'"
    for options in ({"ann": True}, {"quantized": True}):
        hits = store.search(queries[:5], k=5, model=new_model, where=where, **options)
        assert all(len(h.ids) == 5 and all(int(i) % 3 == 2 for i in h.ids) for h in hits)
    exact = store.search(queries[:5], k=5, model=new_model, where=where)
    ann = store.search(queries[:5], k=5, model=new_model, where=where, ann=True, refine_factor=100)
    assert np.mean([len(set(a.ids) & set(b.ids)) / 5 for a, b in zip(exact, ann, strict=True)]) > 0.8
    # reopened, the map is read from its folder
    assert Store.open(store.path).search(queries[0], k=3, model=new_model).ids == want[0].ids[:3]
    # a rerun with the same options returns the fitted map's report; other options refit it
    assert store.migrate(new_model, pairs=300, heldout=100, query_side=True) == report
    again = store.migrate(new_model, pairs=200, heldout=100, query_side=True)
    assert again["replaced"].startswith("the query-side map with pairs 300")
    assert len(store.manifest.spaces["0"].query_maps) == 1


def test_a_map_chosen_on_held_out_pairs_beats_procrustes_in_a_store(tmp_path):
    texts = [f"text {i}" for i in range(2000)]
    old = structured(2000)
    store = Store.create(tmp_path / "s", LookupEncoder(texts, old))
    store.add(texts, ids=range(2000), write_batch=1000)
    report = store.migrate(LookupEncoder(texts, affine_relation(old)), pairs=1000, heldout=400)
    candidates = report["candidates"]
    assert report["map"] != "orthogonal" and report["mode"] == "rewrite"
    assert report["overlap@10"] > candidates["orthogonal"]["overlap@10"] + 0.05, report


def test_a_foreign_store_with_texts_is_searched_by_text_through_a_query_map(tmp_path, pair):
    _, reembedded, old_model, new_model, texts = pair
    vectors = tmp_path / "v.npy"
    np.save(vectors, old_model.encode(texts[:N]).numpy())
    (tmp_path / "texts.txt").write_text("\n".join(texts[:N]) + "\n")
    (tmp_path / "ids.txt").write_text("\n".join(str(i) for i in range(N)) + "\n")
    foreign = Store.create_foreign(tmp_path / "f", "retired-model", DIM)
    foreign.import_vectors(vectors, ids=tmp_path / "ids.txt", texts=tmp_path / "texts.txt")
    with pytest.raises(SubspacesError, match="--query-side"):
        foreign.search("text 3")
    foreign.migrate(new_model, pairs=300, heldout=100, query_side=True)
    want = reembedded.search(texts[N:], k=10)
    got = foreign.search(texts[N:], k=10, model=new_model)
    assert [a.ids for a in got] == [b.ids for b in want]
    # without texts there are no pairs: refused in one line
    bare = Store.create_foreign(tmp_path / "b", "retired-model", DIM)
    bare.import_vectors(vectors)
    with pytest.raises(SubspacesError, match="rows with texts"):
        bare.migrate(new_model, query_side=True)


def test_the_report_with_qrels_compares_old_migrated_and_re_embedded(tmp_path, pair):
    store, _, _, new_model, texts = pair
    queries = tmp_path / "queries.tsv"
    queries.write_text("".join(f"q{i}\t{texts[N + i]}\n" for i in range(20)))
    qrels = tmp_path / "qrels.tsv"
    # each query's relevant rows: its 3 nearest rows by the new model (so a perfect re-embed scores 1)
    new = new_model.encode(texts[: N + 20]).numpy()
    new /= np.linalg.norm(new, axis=1, keepdims=True)
    top = np.argsort(-(new[N:] @ new[:N].T), axis=1)[:, :3]
    qrels.write_text("query\tdoc\tgrade\n" + "".join(f"q{i}\t{d}\t1\n" for i, row in enumerate(top) for d in row))
    report = store.migrate(new_model, pairs=300, heldout=100, query_side=True, qrels=qrels, queries=queries)
    figures = report["qrels"]
    assert figures["queries"] == 20 and figures["judged_ids_not_in_store"] == 0
    sample = figures["sample"]
    assert set(sample) == {"old", "migrated", "reembedded"} and set(figures["store"]) == {"old", "migrated"}
    assert sample["reembedded"]["recall@10"] == 1.0 and sample["migrated"]["recall@10"] > 0.95
    assert 0 <= sample["old"]["ndcg@10"] <= 1 and figures["recall@10_of_reembed"] > 0.95
    with pytest.raises(SubspacesError, match="go together"):
        store.migrate(new_model, query_side=True, qrels=qrels)


def test_rollback_restores_the_previous_space(pair):
    store, _, old_model, new_model, texts = pair
    with pytest.raises(SubspacesError, match="nothing to roll back"):
        store.rollback()
    store.migrate(new_model, pairs=300, heldout=100)
    assert store.commit() == "1"
    assert store.rollback() == "0"
    reopened = Store.open(store.path)
    assert reopened.manifest.active == "0" and reopened.manifest.spaces["1"].state == "pending"
    assert reopened.search(texts[3], k=1, model=old_model).ids == ["3"]
    assert reopened.search(texts[3], k=1, model=new_model).ids == ["3"]  # the pending space, still searchable
    assert reopened.commit() == "1"
    reopened.add([texts[N]], ids=["late"], model=new_model)
    with pytest.raises(SubspacesError, match="1 rows were added after the commit"):
        reopened.rollback()


def test_a_rollback_never_brings_back_a_row_an_upsert_replaced(pair):
    """After --commit, an upsert replaces row "3" in the new space; the retired space's old "3" must not come back
    by a rollback (it used to: rollback compared ids only). The rollback refuses instead, naming the row."""
    store, _, _, new_model, texts = pair
    store.migrate(new_model, pairs=300, heldout=100)
    store.commit()
    store.add([texts[N]], ids=["3"], model=new_model, upsert=True)
    with pytest.raises(SubspacesError, match="id '3'"):
        store.rollback()
    assert store.search(texts[N], k=1, model=new_model).ids == ["3"]


def test_cli_migrate_query_side_report_and_rollback(tmp_path, tiny_model_dir):
    from bench.random_bert import build_random_bert
    from subspaces.models.encoder import portable
    from test_store import sentences

    folder = tmp_path / "s"
    Store.create(folder, str(tiny_model_dir)).add(sentences(200), ids=range(200), write_batch=200)
    other = tmp_path / "other"
    portable(build_random_bert(tmp_path / "hf", num_layers=1, hidden_size=32, num_heads=2, seed=3)).save(str(other))
    out = tmp_path / "report.json"
    result = cli(
        "store", "migrate", folder, "--to", other, "--query-side", "--pairs", "100", "--heldout", "40",
        "--maps", "orthogonal,affine", "--json", out,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    flat = " ".join(result.output.split())
    assert "top-10 overlap with a true re-embed" in flat and "reembed_seconds_estimate" in flat
    report = json.loads(out.read_text())
    assert set(report["candidates"]) == {"orthogonal", "affine"} and report["mode"] == "query-side"
    result = cli("store", "search", folder, sentences(200)[5], "--model", other, "-k", "3")
    assert result.exit_code == 0, result.output
    result = cli("store", "migrate", folder, "--to", other, "--maps", "svd")
    assert result.exit_code == 2 and "unknown map 'svd'" in result.output, result.output
    result = cli("store", "migrate", folder, "--rollback")
    assert result.exit_code == 2 and "nothing to roll back" in " ".join(result.output.split()), result.output
    result = cli("store", "migrate", folder, "--to", other, "--pairs", "100", "--heldout", "40", "--maps", "affine")
    assert result.exit_code == 0, result.output
    assert cli("store", "migrate", folder, "--commit").exit_code == 0
    result = cli("store", "migrate", folder, "--rollback")
    assert result.exit_code == 0 and "pending again" in result.output, result.output


def test_reembed_replaces_mapped_rows_oldest_first_resumably(pair):
    from subspaces.store.backfill import native_ids

    store, reembedded, _, new_model, texts = pair
    with pytest.raises(SubspacesError, match="nothing mapped"):
        store.reembed(budget=10)
    store.migrate(new_model, pairs=300, heldout=100, maps=["affine"])  # not exact: mapped rows differ from true
    first = store.reembed(budget=250, batch=100)
    assert first["space"] == "1" and first["reembedded"] == 250 and first["native"] == 250
    assert first["mapped"] == N - 250 and native_ids(store, "1") == {str(i) for i in range(250)}  # table order
    truth = dict(zip(reembedded._load_rows("0").ids, reembedded._load_rows("0").vectors, strict=True))
    rows = store._load_rows("1")
    by_id = dict(zip(rows.ids, rows.vectors, strict=True))
    np.testing.assert_allclose(by_id["3"], truth["3"], atol=1e-5)
    assert not np.allclose(by_id[str(N - 1)], truth[str(N - 1)], atol=1e-3)
    assert store.count("1") == N and len(set(rows.ids)) == N  # replaced, not doubled
    rest = store.reembed(budget=10_000)
    assert rest["reembedded"] == N - 250 and rest["mapped"] == 0 and rest["native_fraction"] == 1.0
    assert store.reembed(budget=5)["reembedded"] == 0  # idempotent: nothing left
    store.commit()  # the pending space, now all native, becomes active
    assert store.search(texts[N], k=10, model=new_model).ids == reembedded.search(texts[N], k=10).ids


def test_cli_reembed(tmp_path, tiny_model_dir):
    from bench.random_bert import build_random_bert
    from subspaces.models.encoder import portable
    from test_store import sentences

    folder = tmp_path / "s"
    Store.create(folder, str(tiny_model_dir)).add(sentences(120), ids=range(120), write_batch=120)
    other = tmp_path / "other"
    portable(build_random_bert(tmp_path / "hf", num_layers=1, hidden_size=32, num_heads=2, seed=3)).save(str(other))
    result = cli("store", "reembed", folder, "--budget", "5")
    assert result.exit_code == 2 and "nothing mapped" in " ".join(result.output.split()), result.output
    assert (
        cli("store", "migrate", folder, "--to", other, "--pairs", "60", "--heldout", "20", "--maps", "affine").exit_code
        == 0
    )
    result = cli("store", "reembed", folder, "--budget", "50")
    flat = " ".join(result.output.split())
    assert result.exit_code == 0 and "50 of 120 rows are native" in flat and "70 still mapped" in flat, result.output
    result = cli("store", "reembed", folder)
    assert result.exit_code == 2 and "--budget" in result.output, result.output


def test_rows_that_change_leave_the_record_of_re_embedded_rows(pair):
    """An upserted row is mapped again, a deleted row is gone, and a refit's new space reuses the number of the one
    it replaced: none of them may still count as re-embedded (native/<space>.ids)."""
    from subspaces.store.backfill import native_ids

    store, _, _, new_model, texts = pair
    store.migrate(new_model, pairs=300, heldout=100, maps=["affine"])
    store.reembed(budget=50)
    assert {"3", "5"} <= native_ids(store, "1")
    store.add([texts[N]], ids=["3"], upsert=True)  # mapped anew into the pending space
    store.delete(["5"])
    assert not {"3", "5"} & native_ids(store, "1") and len(native_ids(store, "1")) == 48
    store.reembed(budget=10_000)
    want = new_model.encode([texts[N]]).numpy()[0]
    rows = store._load_rows("1")
    np.testing.assert_allclose(rows.vectors[list(rows.ids).index("3")], want / np.linalg.norm(want), atol=1e-5)
    store.migrate(new_model, pairs=200, heldout=100, maps=["affine"])  # a refit: space 1 again, all mapped
    assert native_ids(store, "1") == set() and store.reembed(budget=1)["native"] == 1


def test_stored_rows_teach_a_query_map_the_old_space_ranking():
    """With few pairs, the query map's extra term (the old vector's ranking of the stored rows, distilled into the
    mapped query) brings held-out queries' top 10 among the stored rows closer to the old model's own; without
    the term, giving the rows changes nothing."""
    old = structured(3000, dim=32, seed=3)
    bent = np.tanh(2 * affine_relation(old, seed=4)) + 0.3 * old[:, ::-1]
    new = bent / np.linalg.norm(bent, axis=1, keepdims=True)
    fit, held = np.arange(300), np.arange(2000, 2500)
    stored = np.concatenate([old[:2000], old[2500:]])  # the held-out pairs' rows are not among them

    def top10(queries):
        return np.argsort(-(queries @ stored.T), axis=1)[:, :10]

    def agreement_with_old(fitted):
        got, want = top10(fitted.transform(new[held])), top10(old[held])
        return np.mean([len(set(a) & set(b)) / 10 for a, b in zip(got, want, strict=True)])

    kw = {"objective": "query-similarity", "epochs": 30, "random_state": 0}
    plain = maps.ResidualMLPMap(**kw).fit(new[fit], old[fit])
    np.testing.assert_array_equal(maps.ResidualMLPMap(**kw).fit(new[fit], old[fit], stored).w1_, plain.w1_)
    taught = maps.ResidualMLPMap(rows_weight=3.0, **kw).fit(new[fit], old[fit], stored)
    assert agreement_with_old(taught) > agreement_with_old(plain) + 0.1  # seeds 0-2: 0.26 -> 0.55


def test_stored_rows_are_refused_where_they_cannot_apply():
    old = structured(200)
    new = affine_relation(old)
    with pytest.raises(SubspacesError, match="query-side map only"):
        maps.fit_and_choose(old, new, "rows", rows=old)
    with pytest.raises(DimensionError):
        maps.ResidualMLPMap(objective="query-similarity", rows_weight=1.0).fit(new, old, old[:, :8])
    with pytest.raises(SubspacesError, match="query-similarity objective"):
        maps.ResidualMLPMap(rows_weight=1.0).fit(new, old, old)


def test_the_pairs_that_choose_are_not_among_the_candidates_rows(monkeypatch):
    """Query-side candidates get the stored rows less the held-out pairs' old vectors (they rank among those);
    empty rows leave the map as it is without them."""
    old = structured(300)
    new = affine_relation(old)
    seen: list[np.ndarray] = []
    real_fit = maps.ResidualMLPMap.fit

    def spy(self, x, y, rows=None):
        seen.append(rows)
        return real_fit(self, x, y, rows)

    monkeypatch.setattr(maps.ResidualMLPMap, "fit", spy)
    params = {"mlp": {"epochs": 1, "rows_weight": 1.0}}
    maps.fit_and_choose(old, new, "queries", kinds=["mlp"], params=params, rows=old, random_state=0)
    held = np.random.default_rng(0).permutation(len(old))[:60]
    candidate_rows = {row.tobytes() for row in seen[0]}
    assert len(seen[0]) == 240 and not {row.tobytes() for row in old[held]} & candidate_rows
    assert len(seen[1]) == 300  # the final map, refitted on every pair, reads every row
    kw = {"objective": "query-similarity", "rows_weight": 3.0, "epochs": 2}
    empty = maps.ResidualMLPMap(**kw).fit(new, old, old[:0])
    np.testing.assert_array_equal(empty.w1_, maps.ResidualMLPMap(**kw).fit(new, old).w1_)
