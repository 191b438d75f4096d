"""The store's --dtype (a float32 store searched in bfloat16), its query/document prompts (recorded per space when
it is made, applied on add, search, migrate) and a large space's search on a read-only folder."""

from __future__ import annotations

import errno
import json
import shutil

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from subspaces.errors import SubspacesError
from subspaces.models.encoder import encode
from subspaces.store import Store, vectorfile
from vocabulary import WORDS

PROMPTS = {"query": "query: ", "passage": "passage: "}  # E5's names: "passage" is the document prompt


def sentences(n: int) -> list[str]:
    rng = np.random.default_rng(0)
    return [" ".join(rng.choice(WORDS, size=int(rng.integers(3, 9)))) + f" {i}" for i in range(n)]


def cli(*args):
    from subspaces.cli.app import app

    return CliRunner().invoke(app, [str(a) for a in args])


def one_line(output: str) -> str:
    return " ".join(output.split())


def with_prompts(source, folder, prompts):
    shutil.copytree(source, folder)
    path = folder / "config_sentence_transformers.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    config["prompts"] = prompts
    path.write_text(json.dumps(config), encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def prompted_dir(tiny_model_dir, tmp_path_factory):
    """The tiny model with sentence-transformers prompts in its folder (the same weights: the same fingerprint)."""
    return with_prompts(tiny_model_dir, tmp_path_factory.mktemp("prompted") / "st", PROMPTS)


def stored(store: Store, space: str = "0") -> dict[str, np.ndarray]:
    rows = store._load_rows(space)
    return {str(i): np.asarray(rows.vectors[n]) for n, i in enumerate(rows.ids)}


def unit(model, texts: list[str]) -> np.ndarray:
    return encode(model, texts, normalize=True)


# --- dtype ---------------------------------------------------------------------------------------------------
def test_a_float32_store_is_searched_in_bfloat16_with_close_scores(tmp_path, tiny_model_dir):
    texts = sentences(40)
    store = Store.create(tmp_path / "s", str(tiny_model_dir))
    store.add(texts, ids=range(40))
    want = store.search(texts[:8], k=5)
    half = Store.open(store.path, dtype="bfloat16")  # the fingerprint names the float32 weights: accepted
    got = half.search(texts[:8], k=5)
    assert next(half.model().parameters()).dtype == torch.bfloat16  # it did run in bfloat16
    assert [g.ids[0] for g in got] == [w.ids[0] for w in want]
    np.testing.assert_allclose([g.scores[0] for g in got], [w.scores[0] for w in want], atol=0.02)
    result = cli("store", "search", store.path, texts[0], "--dtype", "bfloat16", "-k", "1")
    assert result.exit_code == 0, result.output
    assert "0" in result.output


def test_bfloat16_on_an_exported_graph_and_an_unknown_dtype_are_refused(tmp_path, tiny_model_dir):
    store = Store.create(tmp_path / "s", str(tiny_model_dir))
    with pytest.raises(SubspacesError, match="runs on --backend torch"):
        Store.open(store.path, backend="onnx", dtype="bfloat16")
    with pytest.raises(SubspacesError, match="unknown dtype"):
        Store.open(store.path, dtype="float16")
    result = cli("store", "search", store.path, "a cat", "--backend", "onnx", "--dtype", "bfloat16")
    assert result.exit_code != 0 and "runs on --backend torch" in one_line(result.output)


# --- prompts -------------------------------------------------------------------------------------------------
def test_the_folders_prompts_are_recorded_and_applied_on_add_and_search(tmp_path, prompted_dir, tiny_model):
    texts = sentences(30)
    store = Store.create(tmp_path / "s", str(prompted_dir))
    assert store.manifest.spaces["0"].prompts == {"query": "query: ", "document": "passage: "}
    store.add(texts, ids=range(30))
    rows = stored(store)
    documents = unit(tiny_model, ["passage: " + t for t in texts])
    np.testing.assert_allclose(np.stack([rows[str(i)] for i in range(30)]), documents, atol=1e-5)
    assert not np.allclose(documents, unit(tiny_model, texts), atol=1e-3)  # the prompt changes the vectors

    reopened = Store.open(store.path)  # persisted in store.json
    assert reopened.prompt("query") == "query: " and reopened.prompt("document") == "passage: "
    hit = reopened.search(texts[3], k=3)
    query = unit(tiny_model, ["query: " + texts[3]])[0]
    np.testing.assert_allclose(hit.scores, [float(documents[int(i)] @ query) for i in hit.ids], atol=1e-5)
    assert hit.scores[0] == pytest.approx(float(np.max(documents @ query)), abs=1e-5)

    override = reopened.search(texts[3], k=3, query_prompt="")  # this call only: no prompt at all
    plain = unit(tiny_model, [texts[3]])[0]
    np.testing.assert_allclose(override.scores, [float(documents[int(i)] @ plain) for i in override.ids], atol=1e-5)
    assert reopened.prompt("query") == "query: "


def test_prompts_given_at_create_replace_the_folders(tmp_path, prompted_dir, tiny_model):
    store = Store.create(tmp_path / "s", str(prompted_dir), query_prompt="", document_prompt_name="query")
    assert store.manifest.spaces["0"].prompts == {"query": "", "document": "query: "}
    store.add(["a red house"], ids=["a"])
    np.testing.assert_allclose(stored(store)["a"], unit(tiny_model, ["query: a red house"])[0], atol=1e-5)

    made = cli("store", "create", tmp_path / "c", "-m", prompted_dir, "--document-prompt", "doc: ")
    assert made.exit_code == 0, made.output
    assert "document prompt 'doc: '" in one_line(made.output)
    info = cli("store", "info", tmp_path / "c")
    assert "query prompt 'query: ', document prompt 'doc: '" in one_line(info.output)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"query_prompt_name": "nope"},
            "--query-prompt-name 'nope' is not one of the model's prompts: 'query', 'document', 'passage'",
        ),
        (
            {"document_prompt": "x", "document_prompt_name": "passage"},
            "give the document prompt's text or its name, not both",
        ),
        ({"query_prompt": "bad \udc80"}, "the query prompt holds"),
    ],
)
def test_bad_prompt_options_are_one_line_errors_and_make_no_store(tmp_path, prompted_dir, options, message):
    with pytest.raises(SubspacesError, match="^" + message.replace("(", r"\(").replace(")", r"\)")) as raised:
        Store.create(tmp_path / "s", str(prompted_dir), **options)
    assert "\n" not in str(raised.value)
    assert not (tmp_path / "s").exists()


def test_a_bad_prompt_on_the_cli_is_one_line(tmp_path, prompted_dir):
    result = cli("store", "create", tmp_path / "s", "-m", prompted_dir, "--query-prompt-name", "nope")
    assert result.exit_code != 0
    assert "is not one of the model's prompts" in one_line(result.output)
    assert "Traceback" not in result.output and not (tmp_path / "s").exists()


def test_a_store_without_recorded_prompts_encodes_as_before(tmp_path, prompted_dir, tiny_model):
    store = Store.create(tmp_path / "s", str(prompted_dir))
    manifest = json.loads((store.path / "store.json").read_text(encoding="utf-8"))
    del manifest["spaces"]["0"]["prompts"]  # a store.json written before prompts existed
    (store.path / "store.json").write_text(json.dumps(manifest), encoding="utf-8")
    old = Store.open(store.path)
    assert old.prompt("query") is None and old.prompt("document") is None
    old.add(["a red house", "a blue car"], ids=["a", "b"])
    np.testing.assert_allclose(stored(old)["a"], unit(tiny_model, ["a red house"])[0], atol=1e-5)
    hit = old.search("a blue car", k=1)
    assert hit.ids == ["b"] and hit.scores[0] == pytest.approx(1.0, abs=1e-5)


def test_a_migration_records_and_uses_the_new_models_prompts(tmp_path, tiny_model_dir, tmp_path_factory):
    from bench.random_bert import build_random_bert
    from subspaces.models.encoder import load_encoder, portable

    other = tmp_path_factory.mktemp("other")
    model = build_random_bert(other / "hf", num_layers=2, hidden_size=32, num_heads=2, max_position=64, seed=1)
    portable(model).save(str(other / "plain"))
    new_dir = with_prompts(other / "plain", other / "st", {"query": "q: ", "document": "d: "})
    new_model = load_encoder(str(new_dir))

    texts = sentences(80)
    store = Store.create(tmp_path / "s", str(tiny_model_dir))
    store.add(texts, ids=range(80))
    store.migrate(str(new_dir), maps=["orthogonal"], heldout=10)
    pending = store.manifest.pending()[0]
    assert store.manifest.spaces[pending].prompts == {"query": "q: ", "document": "d: "}
    hit = store.search(texts[5], k=3, model=str(new_dir))  # the pending space: the new model's query prompt
    mapped = stored(store, pending)
    query = unit(new_model, ["q: " + texts[5]])[0]
    np.testing.assert_allclose(hit.scores, [float(mapped[i] @ query) for i in hit.ids], atol=1e-5)

    store.commit()
    store.add(["a new row"], ids=["new"])  # now encoded by the new model, after its document prompt
    np.testing.assert_allclose(stored(store, pending)["new"], unit(new_model, ["d: a new row"])[0], atol=1e-5)


# --- a read-only store folder --------------------------------------------------------------------------------
def test_a_large_space_on_a_read_only_folder_is_one_line_or_read_from_its_kept_file(
    tmp_path, tiny_model_dir, monkeypatch
):
    texts = sentences(30)
    store = Store.create(tmp_path / "s", str(tiny_model_dir))
    store.add(texts, ids=range(30))
    monkeypatch.setattr(vectorfile, "IN_MEMORY_BYTES", 0)  # every space is searched from its vector file

    def read_only(path, *args, **kwargs):  # what the OS answers on a read-only mount (root ignores chmod)
        raise OSError(errno.EROFS, "Read-only file system", str(path))

    real_write = vectorfile.write
    monkeypatch.setattr(vectorfile, "write", read_only)
    with pytest.raises(SubspacesError) as raised:
        Store.open(store.path).search(texts[0], k=1)
    message = str(raised.value)
    assert "\n" not in message and str(store.path) in message and "read-only" in message

    monkeypatch.setattr(vectorfile, "write", real_write)
    assert Store.open(store.path).search(texts[0], k=1).ids == ["0"]  # a writable search writes the file once
    monkeypatch.setattr(vectorfile, "write", read_only)
    reopened = Store.open(store.path)
    assert reopened.search(texts[1], k=1).ids == ["1"]  # read-only again: the kept file is read, nothing written
    assert reopened._load_rows("0").file is not None


def test_a_full_disk_is_not_called_read_only(tmp_path, tiny_model_dir, monkeypatch):
    store = Store.create(tmp_path / "s", str(tiny_model_dir))
    store.add(sentences(5), ids=range(5))
    monkeypatch.setattr(vectorfile, "IN_MEMORY_BYTES", 0)

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(vectorfile, "write", full)
    with pytest.raises(OSError, match="No space left"):
        Store.open(store.path).search("a cat", k=1)
