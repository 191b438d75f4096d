"""Bad input gets a one-line error and loses nothing: no command writes over one of its own inputs (``vectors
search -o``, ``model encode -o``, ``--json`` of ``align eval`` and of every command), a server over an empty store
has no basis for ``dimensions``, and non-finite settings are refused before any work."""

from __future__ import annotations

import json
import math
import os
import time
import warnings
from pathlib import Path
from typing import Annotated, Optional

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from subspaces.cli.app import app
from subspaces.errors import SubspacesError

runner = CliRunner()


def one_line_error(result, *words: str) -> None:
    """Exit 2 with one ``error:`` line that holds every one of ``words``, and no traceback."""
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), result.output
    for word in words:
        assert word in lines[0], result.output


def _links(path: Path) -> list[Path]:
    """``path`` itself, a symbolic link to it and a hard link to it: three names of one file."""
    soft, hard = path.with_name("soft-" + path.name), path.with_name("hard-" + path.name)
    soft.symlink_to(path.name)
    os.link(path, hard)
    return [path, soft, hard]


# --- 1. vectors search -o ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["corpus", "queries"])
def test_vectors_search_never_writes_over_its_corpus_or_queries(tmp_path, which):
    rng = np.random.default_rng(0)
    np.save(tmp_path / "corpus.npy", rng.normal(size=(20, 8)).astype(np.float32))
    np.save(tmp_path / "queries.npy", rng.normal(size=(3, 8)).astype(np.float32))
    files = {name: tmp_path / f"{name}.npy" for name in ("corpus", "queries")}
    before = {name: path.read_bytes() for name, path in files.items()}
    for output in _links(files[which]):
        args = ["--corpus", str(files["corpus"]), "--queries", str(files["queries"]), "-k", "3"]
        result = runner.invoke(app, ["vectors", "search", *args, "-o", str(output)])
        one_line_error(result, f"is the --{which} file", "output must differ from input")
    assert {name: path.read_bytes() for name, path in files.items()} == before
    # Another file is written as before.
    args = ["--corpus", str(files["corpus"]), "--queries", str(files["queries"]), "-k", "3"]
    result = runner.invoke(app, ["vectors", "search", *args, "-o", str(tmp_path / "rows.npy")])
    assert result.exit_code == 0, result.output
    assert np.load(tmp_path / "rows.npy").shape == (3, 3)


# --- 2. model encode -o -------------------------------------------------------------------------------------------


def test_encode_never_writes_over_its_input(tiny_model_dir, tmp_path):
    source = tmp_path / "docs.jsonl"
    source.write_text("".join(json.dumps({"text": t, "id": i}) + "\n" for i, t in enumerate(["a dog", "a cat"])))
    before = source.read_bytes()
    for output in _links(source):
        result = runner.invoke(
            app, ["model", "encode", "-m", str(tiny_model_dir), "-i", str(source), "-o", str(output)]
        )
        one_line_error(result, "is the --input file", "output must differ from input")
    assert source.read_bytes() == before
    # A codes file's description beside it must not be the input either.
    codes = tmp_path / "codes.npy"
    described = Path(f"{codes}.quant.json")
    described.write_text("not a text file of any kind\n")
    result = runner.invoke(
        app,
        ["model", "encode", "-m", str(tiny_model_dir), "-i", str(described), "-o", str(codes), "--quantize", "int8"],
    )
    one_line_error(result, "--output's description", "is the --input file")
    assert described.read_text() == "not a text file of any kind\n" and not codes.exists()


# --- 3. --json over an input --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def aligned(tmp_path_factory):
    """A small fitted aligner (8-d, a rotation and a shift) and held-out paired vectors x (source), y (target)."""
    from scipy.stats import ortho_group

    from test_align import clustered

    folder = tmp_path_factory.mktemp("aligned")
    rng = np.random.default_rng(0)
    q = ortho_group.rvs(8, random_state=1)
    held = clustered(rng, 100)
    arrays = {"a": clustered(rng, 600), "b": clustered(rng, 700) @ q + 3.0, "x": held, "y": held @ q + 3.0}
    for name, array in arrays.items():
        np.save(folder / f"{name}.npy", array.astype(np.float32))
    params = {
        "anchors": {"n_runs": 2, "n_clusters": 8, "sample": 400, "kmeans_redo": 1, "n_pseudo_pairs": 300},
        "refine": {"n_iter": 5, "sample": 300, "centroid_clusters": 10},
        "search": {"probe_size": 200},
    }
    (folder / "params.json").write_text(json.dumps(params))
    args = ["--source-emb", str(folder / "a.npy"), "--target-emb", str(folder / "b.npy")]
    args += ["--params", str(folder / "params.json"), "--n-restarts", "1", "-o", str(folder / "aligner")]
    result = runner.invoke(app, ["align", "fit", *args])
    assert result.exit_code == 0, result.output
    return folder


def test_align_eval_json_never_replaces_an_input(aligned):
    def run(json_path: Path):
        args = ["--source-emb", str(aligned / "x.npy"), "--target-emb", str(aligned / "y.npy"), "--pool-size", "50"]
        return runner.invoke(app, ["align", "eval", str(aligned / "aligner"), *args, "--json", str(json_path)])

    inputs = [aligned / "x.npy", aligned / "y.npy", *sorted((aligned / "aligner").iterdir())]
    before = [path.read_bytes() for path in inputs]
    for path, words in zip(
        inputs, [("--source-emb",), ("--target-emb",)] + [("aligner folder",)] * (len(inputs) - 2), strict=True
    ):
        one_line_error(run(path), "--json", *words, "output must differ from input")
    assert [path.read_bytes() for path in inputs] == before
    result = run(aligned / "report.json")  # elsewhere, as before
    assert result.exit_code == 0, result.output
    assert json.loads((aligned / "report.json").read_text())["n_eval"] == 100


def test_every_commands_json_is_refused_over_its_inputs(tmp_path):
    """``user_errors`` (every command's decorator) refuses ``--json`` naming any of the command's path arguments."""
    from subspaces.cli.common import user_errors

    toy = typer.Typer()

    @toy.command()
    @user_errors
    def report(
        data: Annotated[Path, typer.Argument()],
        extra: Annotated[Optional[list[Path]], typer.Option("--extra")] = None,
        json_path: Annotated[Optional[Path], typer.Option("--json")] = None,
    ) -> None:
        if json_path is not None:
            json_path.write_text("{}")

    data, other = tmp_path / "data.txt", tmp_path / "other.txt"
    data.write_text("keep me\n")
    other.write_text("keep me too\n")
    for json_path in _links(data):
        one_line_error(runner.invoke(toy, [str(data), "--json", str(json_path)]), "is the DATA file")
    one_line_error(
        runner.invoke(
            toy, [str(data), "--extra", str(data.with_name("x")), "--extra", str(other), "--json", str(other)]
        ),
        "is the --extra file",
    )
    assert data.read_text() == "keep me\n" and other.read_text() == "keep me too\n"
    assert runner.invoke(toy, [str(data), "--json", str(tmp_path / "r.json")]).exit_code == 0


# --- 4. serve --store over an empty store -------------------------------------------------------------------------


def _ready(client) -> None:
    deadline = time.monotonic() + 30
    while client.get("/health").status_code != 200 and time.monotonic() < deadline:
        time.sleep(0.02)


@pytest.mark.parametrize("rows", [0, 1])
def test_serve_over_a_store_too_small_for_axes_refuses_dimensions(tiny_model_dir, tmp_path, rows):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from subspaces.serve.app import create_app
    from subspaces.serve.settings import ServeSettings
    from subspaces.store import Store

    store = Store.create(tmp_path / "store", str(tiny_model_dir))
    if rows:
        store.add(["a dog runs in the park"], ids=["a"])
    settings = ServeSettings(backend="torch", model=str(tiny_model_dir), store=tmp_path / "store")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with TestClient(create_app(settings)) as client:
            _ready(client)
            cut = client.post("/v1/embeddings", json={"input": "a dog runs", "dimensions": 16})
            full = client.post("/v1/embeddings", json={"input": "a dog runs", "dimensions": 32})
            listed = client.get("/v1/models").json()["data"][0]
    assert cut.status_code == 422, cut.text
    message = cut.json()["error"]["message"]
    assert "not trained for truncation" in message and f"holds {rows} row(s)" in message
    assert full.status_code == 200 and len(full.json()["data"][0]["embedding"]) == 32
    assert listed["dimensions_basis"] is None
    assert not [w for w in caught if "empty slice" in str(w.message) or "invalid value" in str(w.message)]


def test_serve_over_a_store_with_rows_still_reads_its_axes(tiny_model_dir, tmp_path):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from subspaces.serve.app import create_app
    from subspaces.serve.settings import ServeSettings
    from subspaces.store import Store

    Store.create(tmp_path / "store", str(tiny_model_dir)).add(["a dog runs", "a red guitar", "rain on the hill"])
    settings = ServeSettings(backend="torch", model=str(tiny_model_dir), store=tmp_path / "store")
    with TestClient(create_app(settings)) as client:
        _ready(client)
        cut = client.post("/v1/embeddings", json={"input": "a dog runs", "dimensions": 16})
        listed = client.get("/v1/models").json()["data"][0]
    assert cut.status_code == 200 and len(cut.json()["data"][0]["embedding"]) == 16
    assert listed["dimensions_basis"] == "pca"


# --- 5. serve settings: non-finite limits -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "options",
    [
        {"max_wait_ms": math.nan},
        {"request_timeout_s": math.nan},
        {"max_body_bytes": -1},
        {"max_body_bytes": 0},
    ],
)
def test_serve_settings_refuse_nan_and_non_positive_limits(options):
    from subspaces.serve.settings import ServeSettings

    with pytest.raises(SubspacesError, match="must be"):
        ServeSettings(model="minilm-l6", backend="torch", **options)


# --- 6. adapt: non-finite or negative float parameters ------------------------------------------------------------

FLOATS = (
    "lr",
    "weight_decay",
    "pair_weight",
    "topk_weight",
    "rec_weight",
    "rank_weight",
    "rank_temperature",
    "var_weight",
    "var_floor",
    "corr_weight",
    "tau_corr",
    "sup_weight",
    "sup_temperature",
)


@pytest.mark.parametrize("value", [math.nan, math.inf, -1.0])
@pytest.mark.parametrize("name", FLOATS)
def test_adapter_refuses_non_finite_or_negative_float_parameters_before_training(name, value):
    from subspaces.adapt import MatryoshkaAdapter

    x = np.random.default_rng(0).normal(size=(40, 16)).astype(np.float32)
    adapter = MatryoshkaAdapter(dims=(4, 8), hidden=0, epochs=1, batch_size=8, **{name: value})
    with pytest.raises(SubspacesError, match=f"^{name} must"):
        adapter.fit(x)
    assert not hasattr(adapter, "weights_")


def test_adapter_keeps_zero_weights_and_regularisers(tmp_path):
    from subspaces.adapt import MatryoshkaAdapter

    x = np.random.default_rng(0).normal(size=(40, 16)).astype(np.float32)
    zeros = {name: 0.0 for name in FLOATS if name.endswith("_weight") and name != "rec_weight"}
    MatryoshkaAdapter(dims=(4, 8), hidden=0, epochs=1, batch_size=8, var_floor=0.0, tau_corr=0.0, **zeros).fit(x)


@pytest.mark.parametrize("option", ["--pair-weight", "--lr", "--sup-weight", "--var-weight"])
def test_adapt_fit_refuses_nan_weights_in_one_line_and_writes_nothing(tmp_path, option):
    np.save(tmp_path / "x.npy", np.random.default_rng(0).normal(size=(40, 16)).astype(np.float32))
    args = ["adapt", "fit", "--embeddings", str(tmp_path / "x.npy"), "-o", str(tmp_path / "ad"), "--dims", "4,8"]
    result = runner.invoke(app, [*args, "--epochs", "1", "--batch-size", "8", "--hidden", "0", option, "nan"])
    one_line_error(result, option.removeprefix("--").replace("-", "_") + " must be")
    assert not (tmp_path / "ad").exists()


def test_serve_refuses_a_non_positive_body_limit_before_starting(tiny_model_dir):
    for value in ("-1", "0"):
        result = runner.invoke(app, ["serve", "--model", str(tiny_model_dir), "--max-body-mb", value])
        one_line_error(result, "--max-body-mb must be positive")


def test_a_store_report_written_inside_the_store_is_refused_before_any_work(tiny_model_dir, tmp_path):
    from subspaces.store import Store

    folder = tmp_path / "store"
    Store.create(folder, str(tiny_model_dir)).add(["a dog runs", "a red guitar", "rain on the hill"])
    before = sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))
    manifest = next(p for p in folder.iterdir() if p.is_file())
    for command in (["store", "search", str(folder), "a dog"], ["store", "shrink", str(folder), "--dims", "4"]):
        result = runner.invoke(app, [*command, "--json", str(manifest)])
        one_line_error(result, "inside the store")
    assert sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) == before
    assert len(Store.open(folder).search("a dog", k=1).ids) == 1  # still whole
