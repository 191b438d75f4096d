"""What the commands print and refuse: user data never read as rich markup, one-line errors that name the user's
path, output paths tried before the work, typed inputs (.jsonl/.csv, code files, query lines), options that would
do nothing, and help screens."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from subspaces.cli.app import app
from subspaces.errors import DataError, SubspacesError

MARKUP = ["see [bold]this[/bold] now", "a [/foo] b", "plain words here"]


def cli(*args: object):
    return CliRunner().invoke(app, [str(a) for a in args])


def one_error_line(result) -> str:
    """The output of a refused command: exit 2 and exactly one line, the error."""
    assert result.exit_code == 2, result.output
    lines = result.output.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    return lines[0]


# -- markup -----------------------------------------------------------------------------------------------------


def test_table_titles_headers_and_cells_print_as_typed(capsys):
    from subspaces.cli.common import show, table

    show(table("[/q] [bold]title[/bold]", ["[i]col[/i]", "n"], [[text, 1.0] for text in MARKUP]))
    printed = capsys.readouterr().out
    for text in [*MARKUP, "[/q] [bold]title[/bold]", "[i]col[/i]"]:
        assert text in printed, printed


def test_store_search_prints_stored_texts_and_queries_as_typed(tmp_path, tiny_model_dir):
    folder, texts = tmp_path / "st[/x]", tmp_path / "texts.txt"
    texts.write_text("\n".join(MARKUP) + "\n", encoding="utf-8")
    assert cli("store", "create", folder, "--model", tiny_model_dir).exit_code == 0
    result = cli("store", "add", folder, "--input", texts)
    assert result.exit_code == 0 and str(folder) in result.output, result.output
    result = cli("store", "search", folder, "[/foo] [bold]q[/bold]", "-k", "3")
    assert result.exit_code == 0, result.output
    for text in [*MARKUP, "[/foo] [bold]q[/bold]"]:
        assert text in result.output, result.output


def test_encode_to_a_bracketed_path_succeeds_and_says_so(tmp_path, tiny_model_dir):
    (tmp_path / "in.txt").write_text("[bold]x[/bold]\n[/foo]\n", encoding="utf-8")
    out = tmp_path / "[/q].npy"
    result = cli("model", "encode", "-m", tiny_model_dir, "-i", tmp_path / "in.txt", "-o", out)
    assert result.exit_code == 0, result.output
    assert np.load(out).shape[0] == 2 and str(out) in " ".join(result.output.split())


def test_an_error_keeps_its_brackets_and_stays_one_line_however_long(tmp_path):
    missing = tmp_path / ("[bold]fp-1234[/bold] [/x] " + "a-long-folder-name-" * 6) / "corpus.npy"
    np.save(tmp_path / "q.npy", np.ones((2, 4), np.float32))
    line = one_error_line(
        cli("vectors", "search", "--corpus", missing, "--queries", tmp_path / "q.npy", "-o", tmp_path / "o.json")
    )
    assert str(missing) in line and len(line) > 200


def test_one_line_drops_a_rust_source_location_and_joins_lines():
    from subspaces.cli.common import one_line

    lance = (
        "lance error: LanceError(Arrow): Cast error: value at index 0 has length 3, "
        "/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/lance-datafusion-13.0.0/src/utils.rs:51:31"
    )
    assert one_line(lance) == "lance error: LanceError(Arrow): Cast error: value at index 0 has length 3"
    assert one_line("first\n\n  second [x]\n") == "first; second [x]"


# -- output paths and inputs --------------------------------------------------------------------------------------


def test_json_into_a_folder_is_refused_before_the_work(tmp_path, tiny_model_dir):
    (tmp_path / "out").mkdir()
    line = one_error_line(cli("model", "eval", "--model", tiny_model_dir, "--json", tmp_path / "out"))
    assert f"--json {tmp_path / 'out'} is a folder" in line


def test_an_output_under_a_file_is_refused_before_the_work_and_named_as_typed(tmp_path, tiny_model_dir):
    (tmp_path / "in.txt").write_text("a cat\n", encoding="utf-8")
    (tmp_path / "file").write_text("")
    target = tmp_path / "file" / "x.npy"
    line = one_error_line(cli("model", "encode", "-m", tiny_model_dir, "-i", tmp_path / "in.txt", "-o", target))
    assert str(target) in line and "is a file, not a folder" in line and ".tmp" not in line


def test_a_failed_atomic_write_names_the_users_path_not_its_temporary_one(tmp_path):
    from subspaces.io import save_npy

    (tmp_path / "file").write_text("")
    with pytest.raises(SubspacesError, match=r"cannot write .*file/x\.npy") as caught:
        save_npy(tmp_path / "file" / "x.npy", np.zeros(2))
    assert ".tmp" not in str(caught.value)
    (tmp_path / "dir.npy").mkdir()
    with pytest.raises(SubspacesError, match="dir.npy: it is a folder"):
        save_npy(tmp_path / "dir.npy", np.zeros(2))


def test_a_folder_given_as_input_is_said_to_be_one(tmp_path, tiny_model_dir):
    line = one_error_line(cli("model", "encode", "-m", tiny_model_dir, "-i", tmp_path, "-o", tmp_path / "x.npy"))
    assert "is a folder, not a file" in line


def test_encode_reads_jsonl_by_its_field_and_csv_by_its_column(tmp_path, tiny_model_dir):
    texts = ["a cat plays", 'the "dog", runs', "red house"]
    (tmp_path / "in.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
    with (tmp_path / "in.jsonl").open("w", encoding="utf-8") as fh:
        for i, text in enumerate(texts):
            fh.write(json.dumps({"id": i, "body": text}) + "\n" + ("\n" if i == 0 else ""))
    import csv

    with (tmp_path / "in.csv").open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["id", "body"])
        writer.writerows([[i, t] for i, t in enumerate(texts)])
    expected = None
    for name, extra in (("in.txt", []), ("in.jsonl", ["--text-field", "body"]), ("in.csv", ["--text-field", "body"])):
        out = tmp_path / f"{name}.npy"
        result = cli("model", "encode", "-m", tiny_model_dir, "-i", tmp_path / name, "-o", out, *extra)
        assert result.exit_code == 0, (name, result.output)
        emb = np.load(out)
        expected = emb if expected is None else expected
        np.testing.assert_allclose(emb, expected, atol=1e-5, err_msg=name)  # the texts, not the raw lines
    line = one_error_line(
        cli("model", "encode", "-m", tiny_model_dir, "-i", tmp_path / "in.jsonl", "-o", tmp_path / "o.npy")
    )
    assert "line 1: no field 'text'" in line
    line = one_error_line(
        cli(
            "model",
            "encode",
            "-m",
            tiny_model_dir,
            "-i",
            tmp_path / "in.txt",
            "-o",
            tmp_path / "o.npy",
            "--text-field",
            "x",
        )
    )
    assert "--text-field" in line


def test_a_non_string_text_field_is_named_with_its_line():
    from subspaces.io import read_texts

    with pytest.raises(DataError, match=r"rows\.jsonl, line 2: field 'text' is a JSON number, not a string"):
        read_texts(_write("rows.jsonl", '{"text": "a"}\n{"text": 7}\n'))
    with pytest.raises(DataError, match=r"line 1: field 'text' is a JSON null"):
        read_texts(_write("rows.jsonl", '{"text": null}\n'))
    with pytest.raises(DataError, match=r"line 1: field 'text' holds a lone surrogate \(U\+D800\)"):
        read_texts(_write("rows.jsonl", '{"text": "a \\ud800 b"}\n'))
    with pytest.raises(DataError, match="is not read as text"):
        read_texts(_write("rows.json", '["a"]'))


def _write(name: str, text: str):
    import tempfile
    from pathlib import Path

    path = Path(tempfile.mkdtemp()) / name
    path.write_text(text, encoding="utf-8")
    return path


def test_search_reads_a_code_file_as_its_dequantized_vectors(tmp_path):
    from subspaces.quantize import calibrate_int8, dequantize, quantize, save_codes
    from subspaces.store.search import search_vectors

    rng = np.random.default_rng(0)
    corpus, queries = rng.normal(size=(300, 16)).astype(np.float32), rng.normal(size=(5, 16)).astype(np.float32)
    cal = calibrate_int8(corpus)
    codes = quantize(corpus, "int8", cal)
    save_codes(tmp_path / "codes.npy", codes, "int8", 16, cal)
    np.save(tmp_path / "q.npy", queries)
    common = ["vectors", "search", "--corpus", tmp_path / "codes.npy", "--queries", tmp_path / "q.npy", "-k", "5"]
    result = cli(*common, "-o", tmp_path / "r.json")
    assert result.exit_code == 0 and "int8 codes" in result.output, result.output
    _, rows = search_vectors(dequantize(codes, "int8", 16, cal), queries, k=5)
    assert json.loads((tmp_path / "r.json").read_text())["rows"] == np.asarray(rows).tolist()
    (tmp_path / "codes.npy.quant.json").unlink()
    line = one_error_line(cli(*common, "-o", tmp_path / "r.json"))
    assert "int8 numbers, not float vectors" in line and "codes.npy.quant.json is missing" in line


def test_query_lines_keep_their_numbers():
    from subspaces.io import read_queries

    assert read_queries(_write("q.txt", "one\ntwo\n\n\n")) == ["one", "two"]  # blank lines at the end shift nothing
    with pytest.raises(DataError, match=r"q\.txt, line 2: blank query line"):
        read_queries(_write("q.txt", "one\n \nthree\n"))


def test_store_search_answers_query_lines_one_for_one(tmp_path, tiny_model_dir):
    folder, texts = tmp_path / "st", tmp_path / "texts.txt"
    texts.write_text("a cat plays\nthe dog runs\nred house\n", encoding="utf-8")
    assert cli("store", "create", folder, "--model", tiny_model_dir).exit_code == 0
    assert cli("store", "add", folder, "--input", texts).exit_code == 0
    (tmp_path / "q.txt").write_text("red house\n\nthe dog runs\n", encoding="utf-8")
    line = one_error_line(
        cli("store", "search", folder, "--queries", tmp_path / "q.txt", "--json", tmp_path / "r.json")
    )
    assert "q.txt, line 2: blank query line" in line and not (tmp_path / "r.json").exists()
    (tmp_path / "q.txt").write_text("red house\nthe dog runs\n\n", encoding="utf-8")
    result = cli("store", "search", folder, "--queries", tmp_path / "q.txt", "--json", tmp_path / "r.json", "-k", "1")
    assert result.exit_code == 0, result.output
    results = json.loads((tmp_path / "r.json").read_text())["results"]
    assert [(r["query"], r["texts"]) for r in results] == [
        ("red house", ["red house"]),
        ("the dog runs", ["the dog runs"]),
    ]


# -- options that do nothing, help screens ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--shortlist-factor", "3"], "--shortlist-factor sizes the funnel's shortlist"),
        (["--shortlist-factor", "10"], "--shortlist-factor sizes the funnel's shortlist"),  # the default, given
        (["--rescore", "2"], "--rescore re-ranks the shortlist of --quantize"),
        (["--quantize", "binary", "--calibration-rows", "50"], "--calibration-rows sets the ranges of --quantize int8"),
        (["--threads", "100000"], "--threads 100000 is more than the"),
    ],
)
def test_search_refuses_options_that_would_do_nothing(tmp_path, args, message):
    np.save(tmp_path / "c.npy", np.eye(4, dtype=np.float32))
    common = [
        "vectors",
        "search",
        "--corpus",
        tmp_path / "c.npy",
        "--queries",
        tmp_path / "c.npy",
        "-o",
        tmp_path / "r.json",
    ]
    assert message in one_error_line(cli(*common, *args))
    assert not (tmp_path / "r.json").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["a cat", "--shortlist", "3"], "--shortlist sizes the funnel's shortlist"),
        (["a cat", "--dims", "8", "--rerank", "none", "--shortlist", "3"], "--shortlist sizes"),
        (["a cat", "--rescore", "2"], "--rescore re-ranks the shortlist of --quantized"),
    ],
)
def test_store_search_refuses_options_that_would_do_nothing(tmp_path, args, message):
    assert message in one_error_line(cli("store", "search", tmp_path / "no-store", *args))


def test_store_index_refuses_more_partitions_than_the_rows_train(tmp_path, tiny_model_dir):
    folder, texts = tmp_path / "st", tmp_path / "texts.txt"
    texts.write_text("".join(f"sentence {i}\n" for i in range(30)), encoding="utf-8")
    assert cli("store", "create", folder, "--model", tiny_model_dir).exit_code == 0
    assert cli("store", "add", folder, "--input", texts).exit_code == 0
    line = one_error_line(cli("store", "index", folder, "--partitions", "1000"))
    assert "--partitions 1000 is more than the 1 the 30 rows can train" in line


def test_help_screens_show_arguments_and_flags_as_typed():
    for args in (["store", "search"], ["adapt", "apply"], ["model", "encode"], ["store"], []):
        result = cli(*args, "--help")
        assert result.exit_code == 0, (args, result.output)
        assert "<bool>" not in result.output and "{" not in result.output.split("\n\n")[0], (args, result.output)
    usage = " ".join(cli("store", "search", "--help").output.split())
    assert "Usage: subspaces store search [OPTIONS] STORE [QUERY]" in usage
    usage = " ".join(cli("adapt", "apply", "--help").output.split())
    assert "[OPTIONS] ADAPTER_DIR INPUT OUTPUT" in usage
