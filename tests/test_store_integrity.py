"""Issue 58's store defects: nothing lost (a second file's rows, an id with another text), nothing doubled (one
writer at a time, a repair for a store already doubled), nothing silently wrong (ANN scores are cosines, CSV
headers, invisible texts, lone surrogates, a changed --pairs), and `store info` loads no model."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from subspaces.errors import DataError, SubspacesError
from subspaces.store import Store
from subspaces.store.inputs import read_rows, text_id
from test_store import LookupEncoder, cli, sentences


def one_line_error(result, message: str) -> None:
    flat = " ".join(result.output.split())  # rich wraps at 80 columns off a terminal
    assert result.exit_code == 2, result.output
    assert message in flat and flat.count("error:") == 1 and "Traceback" not in flat, result.output


def stored(folder) -> dict[str, str]:
    rows = Store.open(folder)._load_rows("0")
    return dict(zip(rows.ids.tolist(), rows.texts.tolist(), strict=True))


@pytest.fixture
def cli_store(tmp_path, tiny_model_dir):
    folder = tmp_path / "s"
    assert cli("store", "create", folder, "--model", tiny_model_dir).exit_code == 0
    return folder


# -- 1. ids: a second file, an edited file, an id stored with another text ------------------------------------
def test_a_second_text_file_keeps_every_line_and_a_shared_line_is_stored_once(tmp_path, cli_store):
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("a cat plays\nthe dog runs\nred house\n", encoding="utf-8")
    b.write_text("blue sea\nthe dog runs\nold tree\nfast car\n", encoding="utf-8")
    assert cli("store", "add", cli_store, "--input", a).exit_code == 0
    result = cli("store", "add", cli_store, "--input", b)
    assert result.exit_code == 0, result.output
    assert "added 3 rows" in result.output and "skipped 1 already" in result.output
    texts = ["a cat plays", "the dog runs", "red house", "blue sea", "old tree", "fast car"]
    assert stored(cli_store) == {text_id(t): t for t in texts}
    a.write_text("a cat plays\nthe dog sleeps\nred house\n", encoding="utf-8")  # an edited file
    assert "added 1 rows" in cli("store", "add", cli_store, "--input", a).output
    assert stored(cli_store)[text_id("the dog sleeps")] == "the dog sleeps"


def test_jsonl_rows_without_ids_are_keyed_by_text_too(tmp_path, cli_store):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text('{"text": "a cat"}\n{"text": "a dog"}\n{"text": "a cat", "n": 2}\n', encoding="utf-8")
    b.write_text('{"text": "an eel"}\n', encoding="utf-8")
    result = cli("store", "add", cli_store, "--input", a)
    assert result.exit_code == 0 and "1 repeating an earlier text" in " ".join(result.output.split()), result.output
    assert cli("store", "add", cli_store, "--input", b).exit_code == 0
    assert sorted(stored(cli_store).values()) == ["a cat", "a dog", "an eel"]


def test_an_id_stored_with_another_text_is_refused_before_anything_is_written(tmp_path, tiny_model_dir):
    made = Store.create(tmp_path / "s", str(tiny_model_dir))
    made.add(["a cat", "a dog"], ids=["a", "b"], metadata=[{"lang": "en"}, None])
    version = made.info()["spaces"]["0"]["version"]
    with pytest.raises(DataError, match=r"1 of these ids are already stored with another text .*first: id 'b'"):
        made.add(["new row", "a red house"], ids=["c", "b"])
    with pytest.raises(DataError, match="first: id 'a'"):  # the same text with other metadata is another row
        made.add(["a cat"], ids=["a"], metadata=[{"lang": "fr"}])
    assert made.info()["spaces"]["0"]["version"] == version and len(made) == 2  # nothing, not even row c
    assert made.add(["a cat", "a dog"], ids=["a", "b"], metadata=[{"lang": "en"}, None]) == {"added": 0, "skipped": 2}
    # upsert replaces: one row per id, the new text and its own vector
    result = made.add(["new row", "a red house"], ids=["c", "b"], upsert=True)
    assert result == {"added": 1, "skipped": 0, "replaced": 1}
    assert stored(made.path) == {"a": "a cat", "b": "a red house", "c": "new row"}
    hit = made.search("a red house", k=1)
    assert hit["ids"] == ["b"] and hit["scores"][0] == pytest.approx(1.0, abs=1e-5)
    assert made.add(["new row", "a red house"], ids=["c", "b"], upsert=True) == {
        "added": 0,
        "skipped": 2,
        "replaced": 0,
    }


def test_cli_refuses_a_conflicting_id_in_one_line_and_upserts_on_request(tmp_path, cli_store):
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    first.write_text('{"id": 1, "text": "a cat"}\n{"id": 2, "text": "a dog"}\n', encoding="utf-8")
    second.write_text('{"id": 3, "text": "an eel"}\n{"id": 2, "text": "a fox"}\n', encoding="utf-8")
    assert cli("store", "add", cli_store, "--input", first).exit_code == 0
    one_line_error(cli("store", "add", cli_store, "--input", second), "first: id '2'")
    assert stored(cli_store) == {"1": "a cat", "2": "a dog"}
    result = cli("store", "add", cli_store, "--input", second, "--upsert")
    assert result.exit_code == 0 and "added 1 rows, replaced 1" in result.output, result.output
    assert stored(cli_store) == {"1": "a cat", "2": "a fox", "3": "an eel"}


@pytest.mark.filterwarnings("ignore::subspaces.errors.ConvergenceWarning")  # a tiny fit
def test_an_upsert_remaps_the_pending_space_and_makes_the_quantized_copy_stale(tmp_path):
    from subspaces.store.maps import load_map
    from subspaces.vectors import normalize_rows

    rng = np.random.default_rng(0)
    texts = [f"text {i}" for i in range(301)]  # the last: the replacement text of row 3
    old = rng.normal(size=(301, 8))
    old_model, new_model = LookupEncoder(texts, old), LookupEncoder(texts, old[:, ::-1].copy())
    made = Store.create(tmp_path / "s", old_model)
    made.add(texts[:300], ids=range(300))
    made.migrate(new_model, pairs=100, heldout=20)
    made.quantize("binary")
    made.add([texts[300]], ids=["3"], model=old_model, upsert=True)
    assert made.count("0") == made.count("1") == 300
    mapped = made._load_rows("1")
    row = int(np.flatnonzero(mapped.ids == "3")[0])
    assert mapped.texts[row] == texts[300]
    aligner = load_map(made.path / made.manifest.spaces["1"].aligner)
    own = made._load_rows("0").vectors[made._load_rows("0").ids == "3"]
    np.testing.assert_allclose(mapped.vectors[row], normalize_rows(aligner.transform(own))[0], atol=1e-5)
    with pytest.raises(SubspacesError, match="stale .rows were replaced"):
        made.search(texts[5], model=old_model, quantized=True)
    assert made.info()["spaces"]["0"]["quantized"]["stale"]


def test_an_interrupted_add_reruns_to_exactly_the_missing_rows(tmp_path, tiny_model_dir, monkeypatch):
    import subspaces.models.encoder as encoder_module

    texts = sentences(30)
    path = tmp_path / "texts.txt"
    path.write_text("\n".join(texts) + "\n", encoding="utf-8")
    folder = tmp_path / "s"
    cli("store", "create", folder, "--model", tiny_model_dir)
    real, calls = encoder_module.encode, []

    def dies_on_second_batch(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(encoder_module, "encode", dies_on_second_batch)
    assert cli("store", "add", folder, "--input", path, "--write-batch", "10").exit_code == 130
    monkeypatch.setattr(encoder_module, "encode", real)
    assert len(stored(folder)) == 10
    result = cli("store", "add", folder, "--input", path, "--write-batch", "10")
    assert "added 20 rows" in result.output and "skipped 10" in result.output, result.output
    assert stored(folder) == {text_id(t): t for t in texts}


def test_a_store_whose_text_ids_were_line_numbers_is_not_doubled_by_its_file(tmp_path, tiny_model_dir):
    made = Store.create(tmp_path / "s", str(tiny_model_dir))
    made.add(["a cat", "a dog"], ids=["0", "1"])  # as `store add --input` wrote a .txt before
    assert made.add(["a cat", "a dog", "an eel"]) == {"added": 1, "skipped": 2}
    assert sorted(stored(made.path).values()) == ["a cat", "a dog", "an eel"]


# -- 2. one writer at a time, and a repair ---------------------------------------------------------------------
def test_a_second_writer_is_refused_while_one_writes(tmp_path, tiny_model_dir, monkeypatch):
    import subspaces.models.encoder as encoder_module

    made = Store.create(tmp_path / "s", str(tiny_model_dir))
    texts = sentences(40)
    real, refusals = encoder_module.encode, []

    def another_writer_meanwhile(*args, **kwargs):
        with pytest.raises(SubspacesError, match="another writer holds the store") as refused:
            Store.open(made.path).add(texts, ids=range(40))
        refusals.append(str(refused.value))
        return real(*args, **kwargs)

    monkeypatch.setattr(encoder_module, "encode", another_writer_meanwhile)
    assert made.add(texts, ids=range(40), write_batch=20) == {"added": 40, "skipped": 0}
    assert len(refusals) == 2 and f"pid {os.getpid()}, store add since" in refusals[0]
    assert len(made) == 40 and made.duplicates() == 0
    monkeypatch.setattr(encoder_module, "encode", real)
    assert made.add(texts, ids=range(40)) == {"added": 0, "skipped": 40}  # the lock was released


def test_every_write_takes_the_lock_and_the_cli_says_so_in_one_line(tmp_path, tiny_model_dir, cli_store):
    holder = Store.open(cli_store)
    holder._lock.acquire("store add")
    try:
        other = Store.open(cli_store)
        for write in (
            lambda: other.add(["a cat"]),
            other.repair,
            other.index,
            lambda: other.quantize("int8"),
            other.commit,
            lambda: other.migrate("unused-model"),
        ):
            with pytest.raises(SubspacesError, match="another writer holds the store"):
                write()
        texts = tmp_path / "t.txt"
        texts.write_text("a cat\n", encoding="utf-8")
        one_line_error(cli("store", "add", cli_store, "--input", texts), "another writer holds the store")
        assert cli("store", "info", cli_store).exit_code == 0  # readers take no lock
    finally:
        holder._lock.release()
    assert cli("store", "add", cli_store, "--input", texts).exit_code == 0


def test_a_writer_killed_with_sigkill_leaves_no_lock(tmp_path, tiny_model_dir):
    made = Store.create(tmp_path / "s", str(tiny_model_dir))
    script = textwrap.dedent(
        """
        import sys, time
        from subspaces.store import Store
        store = Store.open(sys.argv[1])
        held = store._writing("store add")  # kept referenced: a collected generator would release it
        held.__enter__()
        print("locked", flush=True)
        time.sleep(120)
        """
    )
    child = subprocess.Popen([sys.executable, "-c", script, str(made.path)], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "locked"
        with pytest.raises(SubspacesError, match=f"another writer holds the store .*pid {child.pid}"):
            made.add(["a cat"])
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL
    assert made.add(["a cat"]) == {"added": 1, "skipped": 0}


def test_repair_keeps_one_row_per_id_of_a_doubled_store(tmp_path, tiny_model_dir, cli_store):
    texts = tmp_path / "t.txt"
    texts.write_text("\n".join(sentences(20)) + "\n", encoding="utf-8")
    cli("store", "add", cli_store, "--input", texts)
    made = Store.open(cli_store)
    table = made._table("0").handle
    table.add(table.to_arrow())  # what two unlocked writers did: every row twice
    assert made.duplicates() == 20 and made.info()["spaces"]["0"]["duplicates"] == 20
    result = cli("store", "add", cli_store, "--input", texts)
    assert "20 rows of space 0 repeat an id" in " ".join(result.output.split()), result.output
    assert "store repair" in " ".join(cli("store", "info", cli_store).output.split())
    result = cli("store", "repair", cli_store)
    assert result.exit_code == 0 and "removed 20 rows repeating 20 ids" in result.output, result.output
    assert made.duplicates() == 0 and len(made) == 20
    assert stored(cli_store) == {text_id(t): t for t in sentences(20)}
    hits = made.search(sentences(20)[3], k=5)
    assert len(set(hits["ids"])) == 5 and hits["ids"][0] == text_id(sentences(20)[3])
    assert made.repair() == {"0": {"removed": 0, "ids": 0, "differing": 0, "columns": 0}}


# -- 3. ANN scores are cosines ---------------------------------------------------------------------------------
def test_ann_scores_are_the_exact_cosines_whatever_the_index_state(tmp_path):
    rng = np.random.default_rng(0)
    texts = [f"text {i}" for i in range(420)]
    encoder = LookupEncoder(texts, rng.normal(size=(420, 16)))
    made = Store.create(tmp_path / "s", encoder)
    made.add(texts[:300], ids=range(300))
    made.index()
    queries = texts[400:]

    def check() -> None:
        exact = made.search(queries, k=len(made), model=encoder)  # every row's exact cosine
        ann = made.search(queries, k=10, model=encoder, ann=True, nprobes=50)
        for e, a in zip(exact, ann, strict=True):
            cosine = dict(zip(e["ids"], e["scores"], strict=True))
            np.testing.assert_allclose(a["scores"], [cosine[i] for i in a["ids"]], atol=1e-5)
            assert a["scores"] == sorted(a["scores"], reverse=True)
            assert len(set(a["ids"]) & set(e["ids"][:10])) >= 5

    check()
    made.add(texts[300:400], ids=range(300, 400))  # rows the index has not seen
    check()
    made.index()
    check()


# -- 4. CSV, invisible texts, a changed --pairs ----------------------------------------------------------------
def test_csv_is_read_by_its_header(tmp_path, cli_store):
    rows = tmp_path / "rows.csv"
    rows.write_text('id,text,lang\nx1,"a cat, black",en\nx2,"a dog\nthat runs",fr\n', encoding="utf-8")
    assert cli("store", "add", cli_store, "--input", rows).exit_code == 0
    table = Store.open(cli_store)._table("0").handle.to_arrow().to_pylist()
    assert [(r["id"], r["text"], json.loads(r["metadata"])) for r in table] == [
        ("x1", "a cat, black", {"lang": "en"}),
        ("x2", "a dog\nthat runs", {"lang": "fr"}),
    ]
    single = tmp_path / "single.csv"
    single.write_text("sentence\nan eel\na fox\n", encoding="utf-8")
    assert read_rows(single).texts == ["an eel", "a fox"]  # the header is no text
    assert read_rows(single).ids == [text_id("an eel"), text_id("a fox")]
    tsv = tmp_path / "rows.tsv"
    tsv.write_text("body\tkey\nan owl\tk1\n", encoding="utf-8")
    parsed = read_rows(tsv, text_field="body", id_field="key")
    assert (parsed.ids, parsed.texts, parsed.derived) == (["k1"], ["an owl"], False)
    wide = tmp_path / "wide.csv"
    wide.write_text("a,b\n1,2\n", encoding="utf-8")
    one_line_error(cli("store", "add", cli_store, "--input", wide), "no column 'text' among the header's 'a', 'b'")
    excel = tmp_path / "excel.csv"  # Excel's "CSV UTF-8" starts with a byte-order mark
    excel.write_bytes("\ufefftext,id\nan ant,a1\n".encode())
    assert (read_rows(excel).ids, read_rows(excel).texts) == (["a1"], ["an ant"])
    bom = tmp_path / "bom.txt"
    bom.write_bytes("\ufeffan ant\n".encode())
    assert read_rows(bom).texts == ["an ant"]
    with pytest.raises(DataError, match="a text file has no fields"):
        read_rows(bom, id_field="id")
    with pytest.raises(DataError, match="is a folder"):
        read_rows(tmp_path)
    ragged = tmp_path / "ragged.csv"
    ragged.write_text("id,text\n1,a cat,extra\n", encoding="utf-8")
    one_line_error(cli("store", "add", cli_store, "--input", ragged), "line 2: 3 fields where the header has 2")


def test_rows_with_no_visible_text_are_skipped_with_a_count_or_refused(tmp_path, tiny_model_dir, cli_store):
    texts = tmp_path / "t.txt"
    texts.write_text("a cat\n\x00\x00\x00\x00\n\x01\x02 \u200b\nthe dog\n", encoding="utf-8")
    result = cli("store", "add", cli_store, "--input", texts)
    assert result.exit_code == 0 and "2 with no visible text" in result.output, result.output
    assert sorted(stored(cli_store).values()) == ["a cat", "the dog"]
    only = tmp_path / "nul.txt"
    only.write_text("\x00\x00\n", encoding="utf-8")
    one_line_error(cli("store", "add", cli_store, "--input", only), "holds no text (1 rows with no visible text")
    jsonl = tmp_path / "nul.jsonl"
    jsonl.write_text('{"text": "a cat"}\n{"text": "\\u0000\\u0000"}\n', encoding="utf-8")
    one_line_error(cli("store", "add", cli_store, "--input", jsonl), "line 2: the text in field 'text' has no visible")
    made = Store.open(cli_store)
    with pytest.raises(DataError, match="control characters only"):
        made.add(["fine", "\x00\x00"])
    assert len(made) == 2


@pytest.mark.filterwarnings("ignore::subspaces.errors.ConvergenceWarning")  # a tiny fit
def test_a_new_pairs_value_refits_a_pending_migration(tmp_path):
    from scipy.stats import ortho_group

    rng = np.random.default_rng(0)
    old = rng.normal(size=(400, 8))
    texts = [f"text {i}" for i in range(400)]
    new_model = LookupEncoder(texts, old @ ortho_group.rvs(8, random_state=1))
    made = Store.create(tmp_path / "s", LookupEncoder(texts, old))
    made.add(texts, ids=range(400))
    assert made.migrate(new_model, pairs=100, heldout=50)["pairs"] == 100
    again = made.migrate(new_model, pairs=200, heldout=50)
    assert again["pairs"] == 200 and again["replaced"] == "the pending fit with pairs 100"
    reopened = Store.open(made.path)
    assert list(reopened.manifest.spaces) == ["0", "1"] and reopened.manifest.spaces["1"].options["pairs"] == 200
    assert reopened.count("1") == 400
    assert made.migrate(new_model, heldout=50)["pairs"] == 200  # no --pairs: finish the pending one as it is
    assert made.migrate(new_model, pairs=200, heldout=50) == reopened.manifest.spaces["1"].report
    assert made.migrate(new_model, pairs=200, heldout=60)["replaced"] == "the pending fit with heldout 50"


# -- 5. lone surrogates ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "line",
    [
        '{"text": "\\ud800"}',
        '{"id": "x", "text": "a cat \\udfff"}',
        '{"id": "\\ud800", "text": "a cat"}',
        '{"text": "a cat", "note": "\\ud83d"}',
    ],
)
def test_a_lone_surrogate_escape_is_one_line_and_writes_nothing(tmp_path, cli_store, line):
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"text": "fine"}\n' + line + "\n", encoding="utf-8")
    one_line_error(cli("store", "add", cli_store, "--input", rows), "line 2: holds a lone surrogate")
    assert len(Store.open(cli_store)) == 0


def test_the_library_refuses_a_lone_surrogate_too(tmp_path, tiny_model_dir):
    made = Store.create(tmp_path / "s", str(tiny_model_dir))
    with pytest.raises(DataError, match="lone surrogate"):
        made.add(["fine", "bad \ud800"])
    with pytest.raises(DataError, match="lone surrogate"):
        made.add(["fine"], ids=["\udc00"])
    assert len(made) == 0
    made.add(["fine"])
    with pytest.raises(DataError, match="query 1 holds a lone surrogate"):
        made.search(["fine", "bad \udcff"])  # as a command line argument of undecodable bytes arrives
    one_line_error(cli("store", "search", made.path, "bad \udcff"), "lone surrogate")


# -- 6. commands that need no model load none ------------------------------------------------------------------
def test_store_info_and_repair_load_no_model(cli_store):
    script = textwrap.dedent(
        """
        import sys
        from subspaces.cli.app import app
        for command in (["store", "info", sys.argv[1]], ["store", "repair", sys.argv[1]]):
            try:
                app(command)
            except SystemExit as exit:
                assert exit.code in (0, None), exit.code
        heavy = [m for m in ("torch", "transformers", "sentence_transformers") if m in sys.modules]
        print("heavy:", heavy)
        """
    )
    run = subprocess.run([sys.executable, "-c", script, str(cli_store)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "heavy: []" in run.stdout and "Loading weights" not in run.stderr + run.stdout, run.stdout + run.stderr
