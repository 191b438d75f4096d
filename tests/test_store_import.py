"""Bring your own vectors (issue 52 item 1): import from npy/parquet/Arrow/JSONL/LanceDB, foreign spaces, the
model check, refusals before anything is written, resuming, upsert, and export round trips."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from subspaces.errors import DataError, DimensionError, SubspacesError
from subspaces.store import Store
from subspaces.store.core import import_vectors


def cli(*args):
    from subspaces.cli.app import app

    return CliRunner().invoke(app, [str(a) for a in args])


def rows(n: int = 40, dim: int = 8, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, dim)).astype(np.float32)


def unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def stored(store: Store) -> dict[str, tuple]:
    loaded = store._load_rows(store.manifest.active)
    return {
        i: (t, m, v.tobytes())
        for i, t, m, v in zip(loaded.ids, loaded.texts, loaded.metadata, loaded.vectors, strict=True)
    }


def test_a_foreign_npy_import_is_searchable_by_vector_only(tmp_path):
    x = rows()
    np.save(tmp_path / "v.npy", x)
    (tmp_path / "ids.txt").write_text("".join(f"doc-{i}\n" for i in range(40)), encoding="utf-8")
    store, report = import_vectors(tmp_path / "s", tmp_path / "v.npy", foreign="ada-002", ids=tmp_path / "ids.txt")
    assert report["added"] == 40 and report["dimension"] == 8
    hit = store.search_vectors(unit(x[:3]), k=2)
    assert [h.ids[0] for h in hit] == ["doc-0", "doc-1", "doc-2"]
    assert hit[0].scores[0] == pytest.approx(1.0, abs=1e-6)
    np.testing.assert_allclose(np.linalg.norm(store._load_rows("0").vectors, axis=1), 1.0, atol=1e-6)
    with pytest.raises(SubspacesError, match="foreign model .* cannot run.*by vector.*map"):
        Store.open(tmp_path / "s").search("a text", k=1)
    with pytest.raises(SubspacesError, match="foreign"):
        Store.open(tmp_path / "s").add(["a text"])
    result = cli("store", "search", tmp_path / "s", "a text")
    assert result.exit_code == 2 and "foreign" in result.output and len(result.output.strip().splitlines()) == 1
    np.save(tmp_path / "q.npy", x[:2] * 3)  # any length: the CLI scales query vectors to unit length
    result = cli("store", "search", tmp_path / "s", "--query-vectors", tmp_path / "q.npy", "-k", "1")
    assert result.exit_code == 0, result.output
    assert "doc-0" in result.output and "doc-1" in result.output


def test_parquet_with_ids_texts_metadata_and_variable_lists_checked_against_the_model(tmp_path, tiny_model):
    from subspaces.models.encoder import encode

    texts = [f"a sentence about thing {i}" for i in range(30)]
    vectors = encode(tiny_model, texts, normalize=True) * 2.5  # another length: scaled to unit on import
    table = pa.table(
        {
            "id": [f"r{i}" for i in range(30)],
            "text": texts,
            "emb": pa.array([list(map(float, v)) for v in vectors], pa.list_(pa.float64())),
            "lang": ["en" if i % 3 else "de" for i in range(30)],
            "year": list(range(2000, 2030)),
        }
    )
    pq.write_table(table, tmp_path / "v.parquet")
    store = Store.create(tmp_path / "s", tiny_model, name="tiny")
    report = store.import_vectors(tmp_path / "v.parquet", model=tiny_model, batch_rows=7)
    assert report["added"] == 30 and report["mean_cosine"] > 0.999
    hit = store.search(texts[4], k=1)
    assert hit.ids == ["r4"] and hit.metadata == [{"lang": "en", "year": 2004}] and hit.texts == [texts[4]]
    filtered = store.search(texts[4], k=3, where="lang = 'de'")
    assert len(filtered.ids) == 3 and all(m["lang"] == "de" for m in filtered.metadata)
    # the declared model did not write these: refused with the measured cosine, before anything is written
    other = pa.table({"id": [f"o{i}" for i in range(30)], "text": texts, "vector": [list(v) for v in rows(30, 32)]})
    pq.write_table(other, tmp_path / "other.parquet")
    with pytest.raises(DataError, match=r"did not write these vectors: 30 of their texts .* mean cosine of -?0\.\d+"):
        store.import_vectors(tmp_path / "other.parquet", model=tiny_model)
    assert store.count() == 30
    with pytest.raises(DataError, match="mean cosine"):
        import_vectors(tmp_path / "new", tmp_path / "other.parquet", model=tiny_model)
    assert not (tmp_path / "new").exists()  # no store is made for a refused import


def test_jsonl_arrow_and_lancedb_tables_import(tmp_path):
    import lancedb

    x = rows(20)
    with open(tmp_path / "v.jsonl", "w", encoding="utf-8") as fh:
        for i, v in enumerate(x):
            fh.write(json.dumps({"id": i, "vector": v.tolist(), "text": f"t{i}", "metadata": {"k": i % 2}}) + "\n")
    a, report = import_vectors(tmp_path / "a", tmp_path / "v.jsonl", foreign="m", batch_rows=6)
    assert report["added"] == 20 and a.search_vectors(unit(x[5:6]), k=1)[0].metadata == [{"k": 1}]
    with pa.OSFile(str(tmp_path / "v.arrow"), "wb") as sink:
        t = pa.table({"vector": pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), 8), "key": list(range(20))})
        with pa.ipc.new_file(sink, t.schema) as writer:
            writer.write_table(t)
    b, _ = import_vectors(tmp_path / "b", tmp_path / "v.arrow", foreign="m", id_field="key")
    assert sorted(b._ids("0"), key=int) == [str(i) for i in range(20)]
    db = lancedb.connect(str(tmp_path / "other-db"))
    db.create_table("docs", pa.table({"id": [f"d{i}" for i in range(20)], "vector": [list(v) for v in x]}))
    c, _ = import_vectors(tmp_path / "c", tmp_path / "other-db", foreign="m", table="docs")
    assert c.search_vectors(unit(x[:1]), k=1)[0].ids == ["d0"]
    with pytest.raises(DataError, match="--table; it holds docs"):
        import_vectors(tmp_path / "d", tmp_path / "other-db", foreign="m")


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("nan", "row 3 holds NaN or inf"),
        ("zero", "row 5 is a zero vector"),
        ("dim", "8-d; 6-d are expected"),
        ("mixed", "row 2 holds 7 numbers, row 0 8"),
        ("duplicate", "row 9 repeats the id 'x4'"),
        ("short ids", "has 39 ids for more vector rows"),
        ("long texts", "has more texts than the 40 vector rows"),
        ("unreadable", "not a readable .npy array"),
        ("typed", "row 7: metadata field 'n' holds a str"),
    ],
)
def test_bad_input_is_refused_in_one_line_before_anything_is_written(tmp_path, case, message):
    store = Store.create_foreign(tmp_path / "s", "m", 6 if case == "dim" else 8)
    x = rows()
    kwargs: dict = {}
    path = tmp_path / "v.npy"
    if case == "nan":
        x[3, 1] = np.nan
    if case == "zero":
        x[5] = 0
    if case in ("mixed", "typed"):
        path = tmp_path / "v.jsonl"
        lines = [{"vector": v.tolist(), "n": 1} for v in x]
        if case == "mixed":
            lines[2]["vector"] = lines[2]["vector"][:7]
        else:
            lines[7]["n"] = "seven"
        path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    elif case == "unreadable":
        path.write_bytes(b"not an array")
    else:
        np.save(path, x)
    if case == "duplicate":
        (tmp_path / "ids.txt").write_text("".join(f"x{i if i != 9 else 4}\n" for i in range(40)), encoding="utf-8")
        kwargs["ids"] = tmp_path / "ids.txt"
    if case == "short ids":
        (tmp_path / "ids.txt").write_text("".join(f"x{i}\n" for i in range(39)), encoding="utf-8")
        kwargs["ids"] = tmp_path / "ids.txt"
    if case == "long texts":
        (tmp_path / "t.txt").write_text("".join(f"text {i}\n" for i in range(41)), encoding="utf-8")
        kwargs["texts"] = tmp_path / "t.txt"
    with pytest.raises((DataError, DimensionError)) as caught:
        store.import_vectors(path, batch_rows=4, **kwargs)
    assert message in str(caught.value) and "\n" not in str(caught.value)
    assert store.count() == 0 and set(store._table("0").schema.names) == {"id", "text", "vector", "metadata"}
    args = ["store", "import", tmp_path / "s", "--vectors", path, "--foreign", "m", "--batch-rows", "4"]
    args += [a for key, value in kwargs.items() for a in (f"--{key}", value)]
    result = cli(*args)
    assert result.exit_code == 2 and message in result.output, result.output


def test_a_killed_import_resumes_without_lost_or_doubled_rows_and_upsert_replaces(tmp_path, monkeypatch):
    x = rows(50)
    np.save(tmp_path / "v.npy", x)
    store = Store.create_foreign(tmp_path / "s", "m", 8)
    real, calls = Store._append, []

    def dies_after_two_batches(self, name, blocks, bar, replace=None):
        def counted():
            for block in blocks:
                calls.append(1)
                if len(calls) == 3:
                    raise KeyboardInterrupt  # a kill between two committed batches
                yield block

        return real(self, name, counted(), bar, replace=replace)

    monkeypatch.setattr(Store, "_append", dies_after_two_batches)
    with pytest.raises(KeyboardInterrupt):
        store.import_vectors(tmp_path / "v.npy", batch_rows=10)
    monkeypatch.setattr(Store, "_append", real)
    assert Store.open(store.path).count() == 20
    again = Store.open(store.path).import_vectors(tmp_path / "v.npy", batch_rows=10)
    assert again["added"] == 30 and again["skipped"] == 20
    assert Store.open(store.path).import_vectors(tmp_path / "v.npy")["added"] == 0
    loaded = Store.open(store.path)._load_rows("0")
    assert len(loaded.ids) == len(set(loaded.ids)) == 50  # ids from the vectors' bytes: none lost or doubled

    # the same ids with other vectors: refused whole, unless upsert, which replaces and never doubles
    (tmp_path / "ids.txt").write_text("".join(f"{i}\n" for i in range(50)), encoding="utf-8")
    given = Store.create_foreign(tmp_path / "g", "m", 8)
    given.import_vectors(tmp_path / "v.npy", ids=tmp_path / "ids.txt")
    np.save(tmp_path / "w.npy", rows(50, seed=1))
    with pytest.raises(DataError, match="50 of these ids are already stored .* nothing was written"):
        given.import_vectors(tmp_path / "w.npy", ids=tmp_path / "ids.txt")
    report = given.import_vectors(tmp_path / "w.npy", ids=tmp_path / "ids.txt", upsert=True)
    assert report["replaced"] == 50 and report["added"] == 0 and given.count() == 50
    assert given.search_vectors(unit(rows(50, seed=1)[:1]), k=1)[0].ids == ["0"]


@pytest.mark.parametrize("suffix", [".parquet", ".npy"])
def test_export_then_import_round_trips_exactly(tmp_path, tiny_model, suffix):
    made = Store.create(tmp_path / "s", tiny_model, name="tiny")
    made.add(
        ["one text", "two\ntexts", "three"], ids=["a", "b", "c"], metadata=[{"lang": "en", "n": 1}, None, {"x": [1]}]
    )
    x = rows(3, 32)
    np.save(tmp_path / "v.npy", x)
    (tmp_path / "ids.txt").write_text("d\ne\nf\n", encoding="utf-8")
    made.import_vectors(tmp_path / "v.npy", ids=tmp_path / "ids.txt")  # rows without texts
    out = tmp_path / f"out{suffix}"
    result = cli("store", "export", made.path, "--output", out)
    assert result.exit_code == 0, result.output
    args = ["store", "import", tmp_path / "t", "--vectors", out, "--foreign", "tiny-elsewhere"]
    if suffix == ".npy":
        for what in ("ids", "texts", "metadata"):
            args += [f"--{what}", tmp_path / f"out.{what}.jsonl"]
    result = cli(*args)
    assert result.exit_code == 0, result.output
    assert stored(Store.open(tmp_path / "t")) == stored(made)  # ids, texts, metadata, vector bits
    again = cli(*args)
    assert "imported 0 of 6" in again.output  # idempotent


def test_the_cli_import_needs_one_declaration_and_delete_reads_ids(tmp_path):
    np.save(tmp_path / "v.npy", rows(10))
    result = cli("store", "import", tmp_path / "s", "--vectors", tmp_path / "v.npy")
    assert result.exit_code == 2 and "--model NAME_OR_FOLDER, or --foreign LABEL" in result.output
    result = cli("store", "import", tmp_path / "s", "--vectors", tmp_path / "v.npy", "--foreign", "m", "--dim", "9")
    assert result.exit_code == 2 and "9-d are expected" in result.output and not (tmp_path / "s").exists()
    (tmp_path / "ids.txt").write_text("".join(f"{i}\n" for i in range(10)), encoding="utf-8")
    result = cli(
        "store",
        "import",
        tmp_path / "s",
        "--vectors",
        tmp_path / "v.npy",
        "--foreign",
        "m",
        "--ids",
        tmp_path / "ids.txt",
    )
    assert result.exit_code == 0 and "imported 10 of 10 8-d vectors" in result.output, result.output
    (tmp_path / "gone.txt").write_text("3\n4\nnope\n", encoding="utf-8")
    result = cli("store", "delete", tmp_path / "s", "--ids", tmp_path / "gone.txt")
    assert result.exit_code == 0 and "deleted 2 rows (1 ids were not in the store)" in result.output, result.output
    assert Store.open(tmp_path / "s")._ids("0") == {str(i) for i in range(10)} - {"3", "4"}


def test_an_import_checked_against_the_active_space_is_refused_if_another_writer_switched_it(tmp_path, monkeypatch):
    """The checks run on the manifest as opened; if another process committed a migration before the write lock
    was taken (simulated: the manifest re-read under the lock names another active space), nothing is written."""
    np.save(tmp_path / "v.npy", rows())
    store, _ = import_vectors(tmp_path / "s", tmp_path / "v.npy", foreign="m")
    before = stored(store)
    np.save(tmp_path / "more.npy", rows(seed=1))

    def switched(self):
        self.manifest = Store.open(self.path).manifest
        self.manifest.active = "elsewhere"

    monkeypatch.setattr(Store, "_refresh_manifest", switched)
    with pytest.raises(SubspacesError, match="the active space changed while this import was being checked"):
        store.import_vectors(tmp_path / "more.npy", foreign="m")
    monkeypatch.undo()
    assert stored(Store.open(tmp_path / "s")) == before
