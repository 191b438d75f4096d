"""Bad input to the bring-your-own-index workflow gets a clear one-line error and loses nothing: blank queries,
named fields an input lacks, ids that depend on the batch size, a filter of two statements, non-finite metadata."""

from __future__ import annotations

import json
import math

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from subspaces.errors import DataError, SubspacesError
from subspaces.store import Store
from subspaces.store.core import import_vectors


def cli(*args):
    from subspaces.cli.app import app

    return CliRunner().invoke(app, [str(a) for a in args])


def one_line_refusal(result, *words: str) -> None:
    """A refused command: exit 2, one line of output, holding every word."""
    assert result.exit_code == 2, result.output
    assert len(result.output.strip().splitlines()) == 1, result.output
    for word in words:
        assert word in result.output, result.output


def vectors(n: int, dim: int = 4, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, dim)).astype(np.float32)


def write_jsonl(path, rows) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def foreign_store(tmp_path, meta=None):
    """A foreign store of 6 rows, ids r0..r5, metadata ``meta`` (default: a score i)."""
    x = vectors(6)
    rows = [
        {"id": f"r{i}", "vector": x[i].tolist(), **(meta[i] if meta is not None else {"score": float(i)})}
        for i in range(6)
    ]
    write_jsonl(tmp_path / "rows.jsonl", rows)
    store, _ = import_vectors(tmp_path / "s", tmp_path / "rows.jsonl", foreign="f")
    return store, x


# -- 1: a blank query -------------------------------------------------------------------------------------------


BLANK = ["", "\t ", "\x01\x02", "\u200b\n"]


def test_a_blank_or_invisible_query_is_refused_by_the_library_and_the_cli(tmp_path, tiny_model_dir):
    store = Store.create(tmp_path / "s", str(tiny_model_dir))
    store.add(["a red fox", "a blue whale", "a green tree"])
    assert len(store.search("a red fox", k=2).ids) == 2  # a text still searches
    for query in BLANK:
        with pytest.raises(DataError, match="query 0 has no visible character"):
            store.search(query, k=2)
    with pytest.raises(DataError, match="query 1 has no visible character"):
        store.search(["a red fox", " "], k=2)
    for query in BLANK[:3]:
        one_line_refusal(cli("store", "search", tmp_path / "s", query), "no visible character")


# -- 2: a named field the input lacks ---------------------------------------------------------------------------


def keyed_rows(tmp_path):
    x = vectors(4)
    rows = [{"key": f"k{i}", "body": f"text {i}", "vector": x[i].tolist()} for i in range(4)]
    write_jsonl(tmp_path / "rows.jsonl", rows)
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "rows.parquet")
    return x


@pytest.mark.parametrize("suffix", ["jsonl", "parquet"])
@pytest.mark.parametrize("option", ["id_field", "text_field"])
def test_a_named_id_or_text_field_the_input_lacks_is_refused(tmp_path, suffix, option):
    keyed_rows(tmp_path)
    path = tmp_path / f"rows.{suffix}"
    with pytest.raises(DataError, match="no field 'nope'.*body, key, vector") as refused:
        import_vectors(tmp_path / "s", path, foreign="f", **{option: "nope"})
    assert str(path) in str(refused.value)
    assert not (tmp_path / "s").exists()  # nothing made
    flag = "--" + option.replace("_", "-")
    result = cli("store", "import", tmp_path / "s2", "--vectors", path, "--foreign", "f", flag, "nope")
    one_line_refusal(result, "'nope'", str(path))


@pytest.mark.parametrize("suffix", ["jsonl", "parquet"])
def test_named_fields_that_exist_are_read_and_the_defaults_stay_optional(tmp_path, suffix):
    keyed_rows(tmp_path)
    path = tmp_path / f"rows.{suffix}"
    store, report = import_vectors(tmp_path / "s", path, foreign="f", id_field="key", text_field="body")
    assert report["added"] == 4 and report["ids"] == "given"
    loaded = store._load_rows("0")
    assert sorted(loaded.ids) == ["k0", "k1", "k2", "k3"] and "text 0" in list(loaded.texts)
    assert all(m is None for m in loaded.metadata)  # key and body are not metadata
    store, report = import_vectors(tmp_path / "t", path, foreign="f")  # no id, no text: both optional
    assert report["ids"] == "vector" and report["added"] == 4


def test_with_ids_a_named_text_field_may_start_in_a_later_row_but_must_be_somewhere(tmp_path):
    x = vectors(4)
    rows = [{"id": f"k{i}", "vector": x[i].tolist(), **({"body": f"t{i}"} if i >= 2 else {})} for i in range(4)]
    write_jsonl(tmp_path / "rows.jsonl", rows)
    for batch_rows in (1, 4096):
        store, report = import_vectors(
            tmp_path / f"s{batch_rows}", tmp_path / "rows.jsonl", foreign="f", text_field="body", batch_rows=batch_rows
        )
        loaded = dict(zip(store._load_rows("0").ids, store._load_rows("0").texts, strict=True))
        assert loaded == {"k0": None, "k1": None, "k2": "t2", "k3": "t3"}
    with pytest.raises(DataError, match="has no field 'nada' in any row"):
        import_vectors(tmp_path / "t", tmp_path / "rows.jsonl", foreign="f", text_field="nada")
    assert not (tmp_path / "t").exists()


def test_a_field_named_for_an_npy_array_is_refused(tmp_path):
    np.save(tmp_path / "v.npy", vectors(3))
    for option in ("id_field", "text_field", "vector_field"):
        with pytest.raises(DataError, match=f"with no fields: {option} 'x'"):
            import_vectors(tmp_path / "s", tmp_path / "v.npy", foreign="f", **{option: "x"})


def test_a_missing_vector_field_in_json_lines_is_called_missing(tmp_path):
    keyed_rows(tmp_path)
    with pytest.raises(DataError, match="row 0 has no field 'nope'"):
        import_vectors(tmp_path / "s", tmp_path / "rows.jsonl", foreign="f", vector_field="nope")
    write_jsonl(tmp_path / "bad.jsonl", [{"vector": "abc"}])
    with pytest.raises(DataError, match="row 0: field 'vector' is not a list of numbers"):
        import_vectors(tmp_path / "s", tmp_path / "bad.jsonl", foreign="f")


# -- 3: ids that depend on the batch size -----------------------------------------------------------------------


@pytest.mark.parametrize("batch_rows", [1, 3, 4, 4096])
def test_ids_in_later_rows_only_are_refused_whatever_the_batch_size(tmp_path, batch_rows):
    x = vectors(6)
    rows = [{"vector": x[i].tolist(), **({"id": f"k{i}"} if i >= 3 else {})} for i in range(6)]
    write_jsonl(tmp_path / "rows.jsonl", rows)
    with pytest.raises(DataError, match="row 3 has a field 'id' that row 0 lacks"):
        import_vectors(tmp_path / "s", tmp_path / "rows.jsonl", foreign="f", batch_rows=batch_rows)
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("batch_rows", [1, 2, 4096])
def test_a_row_without_the_id_the_first_row_has_is_refused_as_missing(tmp_path, batch_rows):
    x = vectors(4)
    rows = [{"vector": x[i].tolist(), **({"id": f"k{i}"} if i != 2 else {})} for i in range(4)]
    write_jsonl(tmp_path / "rows.jsonl", rows)
    with pytest.raises(DataError, match="row 2 has no field 'id'") as refused:
        import_vectors(tmp_path / "s", tmp_path / "rows.jsonl", foreign="f", batch_rows=batch_rows)
    assert "None" not in str(refused.value)


@pytest.mark.parametrize("batch_rows", [1, 3, 4096])
def test_texts_in_later_rows_only_are_refused_whatever_the_batch_size(tmp_path, batch_rows):
    x = vectors(6)
    rows = [{"vector": x[i].tolist(), **({"text": f"t{i}"} if i >= 3 else {})} for i in range(6)]
    write_jsonl(tmp_path / "rows.jsonl", rows)
    with pytest.raises(DataError, match="row 3 has a field 'text' that row 0 lacks"):
        import_vectors(tmp_path / "s", tmp_path / "rows.jsonl", foreign="f", batch_rows=batch_rows)


@pytest.mark.parametrize("batch_rows", [1, 4096])
def test_ids_given_in_every_row_import_at_any_batch_size(tmp_path, batch_rows):
    x = vectors(5)
    rows = [{"id": f"k{i}", "vector": x[i].tolist(), **({"text": f"t{i}"} if i % 2 else {})} for i in range(5)]
    write_jsonl(tmp_path / "rows.jsonl", rows)
    store, report = import_vectors(tmp_path / "s", tmp_path / "rows.jsonl", foreign="f", batch_rows=batch_rows)
    assert report["added"] == 5 and sorted(store._load_rows("0").ids) == [f"k{i}" for i in range(5)]


# -- 4: a filter of two statements ------------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["score > 3; garbage (((", "score > 3;", "score > 3 ; DROP TABLE x"])
def test_a_filter_with_a_semicolon_is_refused_in_every_mode(tmp_path, where):
    store, x = foreign_store(tmp_path)
    query = x[:1] / np.linalg.norm(x[:1])
    for options in ({}, {"dims": 2}, {"dims": 2, "rerank": "none"}):
        with pytest.raises(SubspacesError, match="one SQL expression"):
            store.search_vectors(query, k=6, where=where, **options)
    np.save(tmp_path / "q.npy", x[:1])
    result = cli("store", "search", tmp_path / "s", "--query-vectors", tmp_path / "q.npy", "--where", where)
    one_line_refusal(result, "one SQL expression")


def test_a_semicolon_inside_a_string_literal_is_part_of_the_filter(tmp_path):
    meta = [{"note": ["a;b", "it's; here", "c"][i % 3]} for i in range(6)]
    store, x = foreign_store(tmp_path, meta)
    query = x[:1] / np.linalg.norm(x[:1])
    assert sorted(store.search_vectors(query, k=6, where="note = 'a;b'")[0].ids) == ["r0", "r3"]
    assert sorted(store.search_vectors(query, k=6, where="note = 'it''s; here'")[0].ids) == ["r1", "r4"]
    with pytest.raises(SubspacesError, match="cannot be applied"):  # a quoted name: LanceDB's to judge, one line
        store.search_vectors(query, k=6, where='"a;b" = 1')
    with pytest.raises(SubspacesError, match="one SQL expression"):
        store.search_vectors(query, k=6, where="note = 'a;b'; x")


# -- 5: non-finite metadata -------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_metadata_in_json_lines_is_refused_naming_the_row_and_field(tmp_path, bad):
    x = vectors(3)
    lines = [json.dumps({"id": f"r{i}", "vector": x[i].tolist(), "score": 1.0}) for i in range(3)]
    lines[1] = lines[1].replace('"score": 1.0', f'"score": {bad}')
    (tmp_path / "rows.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(DataError, match="row 1: metadata field 'score' holds a non-finite number"):
        import_vectors(tmp_path / "s", tmp_path / "rows.jsonl", foreign="f")
    assert not (tmp_path / "s").exists()


def test_non_finite_metadata_in_parquet_a_side_file_or_nested_is_refused(tmp_path):
    x = vectors(3)
    table = pa.table({"id": ["a", "b", "c"], "vector": x.tolist(), "score": [1.0, 2.0, math.inf]})
    pq.write_table(table, tmp_path / "rows.parquet")
    with pytest.raises(DataError, match="row 2: metadata field 'score' holds a non-finite number"):
        import_vectors(tmp_path / "s", tmp_path / "rows.parquet", foreign="f")
    np.save(tmp_path / "v.npy", x)
    (tmp_path / "meta.jsonl").write_text('{"a": 1}\nnull\n{"deep": {"x": [1, NaN]}}\n', encoding="utf-8")
    with pytest.raises(DataError, match="row 2: metadata field 'deep' holds a non-finite number"):
        import_vectors(tmp_path / "s", tmp_path / "v.npy", foreign="f", metadata=tmp_path / "meta.jsonl")
    result = cli("store", "import", tmp_path / "s", "--vectors", tmp_path / "rows.parquet", "--foreign", "f")
    one_line_refusal(result, "'score'", "non-finite")
    assert not (tmp_path / "s").exists()


def test_non_finite_metadata_is_refused_by_add_before_anything_is_written(tmp_path, tiny_model_dir):
    store = Store.create(tmp_path / "s", str(tiny_model_dir))
    for bad in (float("nan"), float("inf"), '{"score": NaN}'):
        meta = [{"score": 1.0}, bad if isinstance(bad, str) else {"score": bad}]
        with pytest.raises(DataError, match="row 1 .*metadata field 'score' holds a non-finite number"):
            store.add(["one text", "another text"], metadata=meta)
        assert store.count() == 0


def test_a_store_with_finite_metadata_filters_and_exports_standard_json(tmp_path):
    store, x = foreign_store(tmp_path)
    query = x[:1] / np.linalg.norm(x[:1])
    assert sorted(store.search_vectors(query, k=6, where="score > 3")[0].ids) == ["r4", "r5"]
    store.export(tmp_path / "out.npy")
    for line in (tmp_path / "out.metadata.jsonl").read_text(encoding="utf-8").splitlines():
        json.loads(line, parse_constant=lambda name: pytest.fail(f"non-standard JSON {name}"))
