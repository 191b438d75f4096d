"""``subspaces align fit|apply|eval`` end to end on small synthetic spaces."""

from __future__ import annotations

import inspect
import json

import numpy as np
import pytest
from scipy.stats import ortho_group
from typer.testing import CliRunner

from subspaces.align import MiniVec2Vec
from subspaces.cli.app import app
from test_align import clustered

# The stage settings of test_align.FAST, as `--config` JSON.
FAST_PARAMS = {
    "anchors": {"n_runs": 6, "n_clusters": 10, "sample": 1000, "kmeans_redo": 3, "n_pseudo_pairs": 1000},
    "refine": {"n_iter": 30, "sample": 500, "centroid_clusters": 40},
    "search": {"probe_size": 500},
}


def params_args(tmp_path, params: dict = FAST_PARAMS, name: str = "params.json") -> list[str]:
    """``--config FILE`` for ``params``, written into ``tmp_path``."""
    path = tmp_path / name
    path.write_text(json.dumps(params))
    return ["--config", str(path)]


def flat(result) -> str:
    """The command's output with rich's line wrapping undone."""
    return " ".join(result.output.split())


def fit_args(spaces, output, *extra: str) -> list[str]:
    """``align fit`` of the ``spaces`` folder's a.npy onto its b.npy into ``output``, then ``extra``."""
    source, target = str(spaces / "a.npy"), str(spaces / "b.npy")
    return ["align", "fit", "--source-emb", source, "--target-emb", target, "--output", str(output), *extra]


@pytest.fixture(scope="module")
def spaces(tmp_path_factory):
    folder = tmp_path_factory.mktemp("spaces")
    rng = np.random.default_rng(0)
    q = ortho_group.rvs(8, random_state=1)
    held = clustered(rng, 300)
    arrays = {
        "a": clustered(rng, 1500),
        "b": clustered(rng, 1700) @ q + 3.0,  # row counts may differ
        "x": held,
        "y": held @ q + 3.0,
    }
    for name, array in arrays.items():
        np.save(folder / f"{name}.npy", array.astype(np.float32))
    result = CliRunner().invoke(app, fit_args(folder, folder / "aligner", *params_args(folder), "--n-restarts", "4"))
    assert result.exit_code == 0, result.output
    return folder


def test_eval_writes_report_with_baselines(spaces):
    report_path = spaces / "report.json"
    result = CliRunner().invoke(
        app,
        [
            "align",
            "eval",
            str(spaces / "aligner"),
            "--source-emb",
            str(spaces / "x.npy"),
            "--target-emb",
            str(spaces / "y.npy"),
            "--json",
            str(report_path),
            "--source-name",
            "A",
        ],
    )
    assert result.exit_code == 0, result.output
    report = json.loads(report_path.read_text())
    assert {
        "source",
        "target",
        "n_eval",
        "top1",
        "mean_rank",
        "cosine",
        "identity",
        "oracle",
        "fit_seconds",
        "oracle_cross_fitted",
    } <= set(report)
    assert report["source"] == "A" and report["n_eval"] == 300
    assert report["top1"] > 0.9 and report["oracle"]["top1"] > 0.99


@pytest.mark.parametrize("suffix", [".npy", ".parquet"])
def test_apply_maps_in_chunks_and_keeps_the_input(spaces, tmp_path, suffix):
    import pandas as pd

    x = np.load(spaces / "x.npy")
    source = tmp_path / f"in{suffix}"
    if suffix == ".npy":
        np.save(source, x)
    else:
        pd.DataFrame({"vec": list(x)}).to_parquet(source)
    before = source.read_bytes()
    target = tmp_path / f"out{suffix}"
    result = CliRunner().invoke(
        app, ["align", "apply", str(spaces / "aligner"), str(source), str(target), "--chunk-size", "64"]
    )
    assert result.exit_code == 0, result.output
    assert source.read_bytes() == before
    got = np.load(target) if suffix == ".npy" else np.stack(pd.read_parquet(target)["vec"].to_numpy())
    np.testing.assert_allclose(got, MiniVec2Vec.load(spaces / "aligner").transform(x), atol=1e-5)


def test_user_errors_exit_2_without_traceback(spaces, tmp_path):
    runner = CliRunner()
    bad = np.load(spaces / "x.npy")
    bad[7] = np.nan
    np.save(tmp_path / "bad.npy", bad)
    cases = [
        ["align", "apply", str(spaces / "aligner"), str(tmp_path / "bad.npy"), str(tmp_path / "o.npy")],
        ["align", "apply", str(spaces / "aligner"), str(spaces / "x.npy"), str(spaces / "x.npy")],
        [
            "align",
            "eval",
            str(spaces / "aligner"),
            "--source-emb",
            str(spaces / "x.npy"),
            "--target-emb",
            str(spaces / "b.npy"),
        ],
        ["align", "eval", str(tmp_path), "--source-emb", str(spaces / "x.npy"), "--target-emb", str(spaces / "y.npy")],
        ["align", "fit", "--source-emb", str(spaces / "a.npy"), "--output", str(tmp_path / "o")],
        [
            "align",
            "fit",
            "--source-emb",
            str(tmp_path / "missing.npy"),
            "--target-emb",
            str(spaces / "b.npy"),
            "--output",
            str(tmp_path / "o"),
        ],
    ]
    for args in cases:
        result = runner.invoke(app, args)
        assert result.exit_code == 2, (args, result.output)
        assert "Traceback" not in result.output
    assert not (tmp_path / "o.npy").exists()  # the failed apply left nothing half-written


def test_cli_defaults_are_the_estimators():
    from subspaces.cli.align import fit_cmd

    cli = {name: p.default for name, p in inspect.signature(fit_cmd).parameters.items()}
    library = {name: p.default for name, p in inspect.signature(MiniVec2Vec.__init__).parameters.items()}
    for name in ("n_restarts", "init", "max_seconds"):
        assert cli[name] == library[name], name
    assert cli["seed"] == library["random_state"]
    assert cli["config_file"] is None and cli["config_alias"] is None


def test_config_file_is_read_by_stage_and_bad_keys_name_the_valid_ones(spaces, tmp_path):
    from subspaces.align.params import AnchorParams

    loaded = MiniVec2Vec.load(spaces / "aligner")
    assert loaded.anchors == AnchorParams(n_runs=6, n_clusters=10, sample=1000, kmeans_redo=3, n_pseudo_pairs=1000)
    assert loaded.refine.n_iter == 30 and loaded.search.probe_size == 500 and loaded.n_restarts == 4
    base = fit_args(spaces, tmp_path / "o")
    cases = {
        "unknown refine setting(s) iters; valid: n_iter, sample, k,": {"refine": {"iters": 3}},
        "--config sets anchor, not settings of MiniVec2Vec (those are: agreement_search,": {"anchor": {}},
        "anchors.keep must be above 0, got 0": {"anchors": {"keep": 0}},
        "anchors settings must be a JSON object": {"anchors": [1]},
    }
    for message, params in cases.items():
        result = CliRunner().invoke(app, base + params_args(tmp_path, params))
        assert result.exit_code == 2 and message in flat(result), (message, result.output)
        assert "fitting" not in result.output and "Traceback" not in result.output
    (tmp_path / "broken.json").write_text("{")
    result = CliRunner().invoke(app, base + ["--config", str(tmp_path / "broken.json")])
    assert result.exit_code == 2 and "--config is not valid JSON" in flat(result)
    # The stage settings are keys of --config, not options.
    for option in ("--refine-iter", "--no-such-thing"):
        result = CliRunner().invoke(app, base + [option, "5"])
        assert result.exit_code == 2 and f"No such option: {option}" in flat(result), result.output


def test_fit_says_when_no_pass_converged(tmp_path):
    rng = np.random.default_rng(0)
    for name, layout in (("a", 0), ("b", 1)):  # different cluster layouts: no rotation fits
        np.save(tmp_path / f"{name}.npy", clustered(rng, 2000, seed=layout).astype(np.float32))
    result = CliRunner().invoke(
        app,
        [
            "align",
            "fit",
            "--source-emb",
            str(tmp_path / "a.npy"),
            "--target-emb",
            str(tmp_path / "b.npy"),
            "--output",
            str(tmp_path / "aligner"),
            *params_args(tmp_path),
            "--n-restarts",
            "2",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "warning:" in result.output and "probably wrong" in result.output
    assert MiniVec2Vec.load(tmp_path / "aligner").diagnostics_.converged is False
    check = MiniVec2Vec.load(tmp_path / "aligner").diagnostics_.agreement
    searched = f", best of {check.compared} passes" if check.search is not None else ""
    assert f"agreement with an independent pass: {check.agreement:.3f}{searched} (trusted: >= 0.55)" in flat(result)
    assert "align apply` refuses it unless --force" in flat(result)
    np.save(tmp_path / "store.npy", np.load(tmp_path / "a.npy")[:10])
    apply = ["align", "apply", str(tmp_path / "aligner"), str(tmp_path / "store.npy"), str(tmp_path / "out.npy")]
    result = CliRunner().invoke(app, apply)
    refused = "this map is not trusted (no two independent passes of the alignment agree"
    assert result.exit_code == 2 and refused in flat(result)
    assert not (tmp_path / "out.npy").exists()
    result = CliRunner().invoke(app, [*apply, "--force"])
    assert result.exit_code == 0 and np.load(tmp_path / "out.npy").shape == (10, 8), result.output


def test_apply_refuses_bad_collections_and_leaves_no_output(spaces, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    x = np.load(spaces / "x.npy")
    (tmp_path / "empty.npy").write_bytes(b"")
    (tmp_path / "corrupt.parquet").write_bytes(b"PAR1 not really")
    pq.write_table(pa.table({"vec": pa.array([], pa.list_(pa.float32()))}), tmp_path / "no_rows.parquet")
    pq.write_table(
        pa.table({"vec": pa.array([list(x[0]), None, list(x[2])], pa.list_(pa.float32()))}),
        tmp_path / "null_row.parquet",
    )
    pq.write_table(
        pa.table({"vec": pa.array([list(x[0]), list(x[1][:5])], pa.list_(pa.float32()))}), tmp_path / "ragged.parquet"
    )
    np.save(tmp_path / "wide.npy", np.hstack([x, x]))
    cases = {
        "empty.npy": "not a readable .npy",
        "corrupt.parquet": "not a readable parquet",
        "no_rows.parquet": "holds no rows",
        "null_row.parquet": "row 1 of the embedding column is null",
        "ragged.parquet": "row 1 of the embedding column holds 5 numbers",
        "wide.npy": "16 dimensions",
    }
    for name, message in cases.items():
        out = tmp_path / f"out_{name}"
        result = CliRunner().invoke(app, ["align", "apply", str(spaces / "aligner"), str(tmp_path / name), str(out)])
        assert result.exit_code == 2, (name, result.output)
        assert message in flat(result) and "Traceback" not in result.output, (name, result.output)
        assert not out.exists() and not list(tmp_path.glob(f".out_{name}*")), name
    pq.write_table(pa.table({"vec": pa.array([["1.5", "2"]], pa.list_(pa.string()))}), tmp_path / "strings.parquet")
    result = CliRunner().invoke(
        app, ["align", "apply", str(spaces / "aligner"), str(tmp_path / "strings.parquet"), str(tmp_path / "o.npy")]
    )
    assert result.exit_code == 2 and "not numbers" in flat(result), result.output
    result = CliRunner().invoke(
        app,
        [
            "align",
            "apply",
            str(spaces / "aligner"),
            str(spaces / "x.npy"),
            str(tmp_path / "o.npy"),
            "--chunk-size",
            "0",
        ],
    )
    assert result.exit_code == 2 and not (tmp_path / "o.npy").exists()


def test_apply_reads_parquet_written_by_pandas_with_its_index(spaces, tmp_path):
    import pandas as pd

    x = np.load(spaces / "x.npy")
    frame = pd.DataFrame({"vec": list(x), "keep": np.arange(len(x)) % 3 != 0})
    frame[frame["keep"]][["vec"]].to_parquet(tmp_path / "filtered.parquet")  # a non-range index is stored too
    result = CliRunner().invoke(
        app,
        [
            "align",
            "apply",
            str(spaces / "aligner"),
            str(tmp_path / "filtered.parquet"),
            str(tmp_path / "out.parquet"),
            "--chunk-size",
            "50",
        ],
    )
    assert result.exit_code == 0, result.output
    got = np.stack(pd.read_parquet(tmp_path / "out.parquet")["vec"].to_numpy())
    np.testing.assert_allclose(
        got, MiniVec2Vec.load(spaces / "aligner").transform(x[frame["keep"].to_numpy()]), atol=1e-5
    )


@pytest.mark.parametrize("suffix", [".npy", ".parquet"])
def test_apply_names_a_bad_row_by_its_place_in_the_file(spaces, tmp_path, suffix):
    import pandas as pd

    x = np.load(spaces / "x.npy")
    x[200] = np.nan
    source = tmp_path / f"in{suffix}"
    np.save(source, x) if suffix == ".npy" else pd.DataFrame({"vec": list(x)}).to_parquet(source)
    result = CliRunner().invoke(
        app, ["align", "apply", str(spaces / "aligner"), str(source), str(tmp_path / "o.npy"), "--chunk-size", "64"]
    )
    assert result.exit_code == 2 and "first: row 200" in flat(result), result.output


def test_apply_never_writes_over_its_input_even_through_a_link(spaces, tmp_path):
    import os

    from subspaces.align.apply import apply_to_file
    from subspaces.errors import SubspacesError

    source = tmp_path / "store.npy"
    np.save(source, np.load(spaces / "x.npy"))
    os.link(source, tmp_path / "same.npy")
    before = source.read_bytes()
    aligner = MiniVec2Vec.load(spaces / "aligner")
    for output in (source, tmp_path / "same.npy"):
        with pytest.raises(SubspacesError, match="never modified"):
            apply_to_file(aligner, source, output)
    with pytest.raises(SubspacesError, match="chunk_size"):
        apply_to_file(aligner, source, tmp_path / "o.npy", chunk_size=-5)
    assert source.read_bytes() == before and not (tmp_path / "o.npy").exists()


def test_fit_checks_its_arguments_before_reading_anything(spaces, tmp_path):
    (tmp_path / "a_file").write_text("")
    base = ["align", "fit", "--source-emb", str(spaces / "a.npy"), "--target-emb", str(spaces / "b.npy")]
    cases = {
        "exists and is not a folder": ["--output", str(tmp_path / "a_file")],
        "anchors.sample (5) must be at least 4 x anchors.n_clusters": [
            "--output",
            str(tmp_path / "o"),
            *params_args(tmp_path, {"anchors": {"sample": 5}}, "p1.json"),
        ],
        "structure.sample (100) must be at least 4 x structure.n_clusters": [
            "--output",
            str(tmp_path / "o"),
            *params_args(tmp_path, {"structure": {"sample": 100}}, "p2.json"),
        ],
        "anchors.n_clusters must be at least 3": [
            "--output",
            str(tmp_path / "o"),
            *params_args(tmp_path, {"anchors": {"n_clusters": 1}}, "p3.json"),
        ],
    }
    for message, extra in cases.items():
        result = CliRunner().invoke(app, base + extra)
        assert result.exit_code == 2 and message in flat(result), (message, result.output)
        assert "fitting" not in result.output  # refused before the vectors were read
    result = CliRunner().invoke(
        app,
        [
            "align",
            "eval",
            str(spaces / "aligner"),
            "--source-emb",
            str(spaces / "x.npy"),
            "--target-emb",
            str(spaces / "y.npy"),
            "--pool-size",
            "0",
        ],
    )
    assert result.exit_code == 2 and "Traceback" not in result.output


def test_fit_can_embed_texts_first(tiny_model_dir, tmp_path):
    """--source MODEL --source-texts FILE: the texts are embedded by the model, then aligned (here: a model onto
    itself)."""
    words = ["cat", "dog", "river", "stone", "music", "bread", "storm", "glass", "train", "garden"]
    texts = [f"the {a} and the {b} near a {c}" for a in words for b in words for c in words[:3]]
    (tmp_path / "a.txt").write_text("\n".join(texts[::2]) + "\n", encoding="utf-8")
    (tmp_path / "b.txt").write_text("\n".join(texts[1::2]) + "\n", encoding="utf-8")
    result = CliRunner().invoke(
        app,
        [
            "align",
            "fit",
            "--source",
            str(tiny_model_dir),
            "--source-texts",
            str(tmp_path / "a.txt"),
            "--target",
            str(tiny_model_dir),
            "--target-texts",
            str(tmp_path / "b.txt"),
            "--output",
            str(tmp_path / "al"),
            *params_args(tmp_path, FAST_PARAMS | {"refine": FAST_PARAMS["refine"] | {"centroid_clusters": 20}}),
            "--n-restarts",
            "1",
        ],
    )
    assert result.exit_code == 0, result.output
    aligner = MiniVec2Vec.load(tmp_path / "al")
    assert aligner.matrix_.shape == (32, 32) and "embedding 150 texts" in flat(result)
    result = CliRunner().invoke(
        app,
        [
            "align",
            "fit",
            "--source",
            str(tiny_model_dir),
            "--source-texts",
            str(tmp_path / "a.txt"),
            "--target",
            "no-such-model",
            "--target-texts",
            str(tmp_path / "b.txt"),
            "--output",
            str(tmp_path / "al2"),
        ],
    )
    assert result.exit_code == 2 and "neither a bundled model" in flat(result) and "embedding" not in result.output


def test_ctrl_c_during_fit_says_what_is_true_for_fit(spaces, tmp_path, monkeypatch):
    def interrupted(self, source, target, **_):
        raise KeyboardInterrupt

    monkeypatch.setattr(MiniVec2Vec, "fit", interrupted)  # Ctrl-C arrives mid-fit
    result = CliRunner().invoke(app, fit_args(spaces, tmp_path / "o"))
    assert result.exit_code == 130 and "nothing was written" in flat(result)
    assert "checkpoint" not in result.output and not (tmp_path / "o").exists()


def test_fit_max_seconds_keeps_the_best_map_so_far_and_says_so(spaces, tmp_path):
    result = CliRunner().invoke(
        app, fit_args(spaces, tmp_path / "aligner", *params_args(tmp_path), "--max-seconds", "0")
    )
    assert result.exit_code == 0, result.output
    assert "alignment stopped early: max_seconds=0 reached" in flat(result)
    assert MiniVec2Vec.load(tmp_path / "aligner").stopped_early_ is True
    result = CliRunner().invoke(
        app, fit_args(spaces, tmp_path / "aligner", *params_args(tmp_path), "--max-seconds", "-1")
    )
    assert result.exit_code == 2


def test_fit_has_a_time_budget_by_default(spaces, tmp_path):
    from subspaces.align.params import FIT_SECONDS

    result = CliRunner().invoke(app, fit_args(spaces, tmp_path / "a", *params_args(tmp_path)))
    assert result.exit_code == 0, result.output
    assert MiniVec2Vec.load(tmp_path / "a").max_seconds == FIT_SECONDS == 300
    # --config's own max_seconds is kept, the option wins over it, and 'inf' lifts the bound.
    budget = params_args(tmp_path, FAST_PARAMS | {"max_seconds": 120}, name="budget.json")
    for i, (extra, expected) in enumerate((([], 120), (["--max-seconds", "60"], 60), (["--max-seconds", "inf"], None))):
        result = CliRunner().invoke(app, fit_args(spaces, tmp_path / f"b{i}", *budget, *extra))
        assert result.exit_code == 0, result.output
        assert MiniVec2Vec.load(tmp_path / f"b{i}").max_seconds == expected


def test_fit_with_known_pairs(spaces, tmp_path):
    q = ortho_group.rvs(8, random_state=1)
    paired = clustered(np.random.default_rng(5), 50)
    np.save(tmp_path / "pa.npy", paired.astype(np.float32))
    np.save(tmp_path / "pb.npy", (paired @ q + 3.0).astype(np.float32))
    pairs = ["--pairs-source", str(tmp_path / "pa.npy"), "--pairs-target", str(tmp_path / "pb.npy")]
    result = CliRunner().invoke(app, fit_args(spaces, tmp_path / "aligner", *params_args(tmp_path), *pairs))
    assert result.exit_code == 0, result.output
    assert "50 known pairs" in flat(result)
    assert "known pairs placed nearest their own target among the 50 pairs (in-sample): 1.000" in flat(result)
    aligner = MiniVec2Vec.load(tmp_path / "aligner")
    assert aligner.diagnostics_.n_pairs == 50 and aligner.diagnostics_.paired_check.judged
    x, y = np.load(spaces / "x.npy"), np.load(spaces / "y.npy")
    from subspaces.align import evaluate_alignment

    assert evaluate_alignment(aligner, x, y).top1 > 0.95


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p, q: (p, None), "give --pairs-source and --pairs-target together"),
        (lambda p, q: (p, (p @ q)[:-1]), "one row per pair, got 50 and 49"),
        (lambda p, q: (p, (p @ q)[:, :5]), "paired target embeddings have 5 dimensions, the target ones 8"),
    ],
)
def test_fit_with_bad_known_pairs_is_a_one_line_error(spaces, tmp_path, make, message):
    q = ortho_group.rvs(8, random_state=1)
    source, target = make(clustered(np.random.default_rng(5), 50), q)
    args = ["--pairs-source", str(tmp_path / "pa.npy")]
    np.save(tmp_path / "pa.npy", source.astype(np.float32))
    if target is not None:
        np.save(tmp_path / "pb.npy", target.astype(np.float32))
        args += ["--pairs-target", str(tmp_path / "pb.npy")]
    result = CliRunner().invoke(app, fit_args(spaces, tmp_path / "aligner", *params_args(tmp_path), *args))
    assert result.exit_code == 2 and message in flat(result)
    assert not (tmp_path / "aligner").exists()


def test_fit_init_identity_is_one_pass_from_the_identity_and_a_bad_init_is_refused(spaces, tmp_path):
    """On the spaces' rotated target the identity is a wrong start: the fit says it is not trusted."""
    result = CliRunner().invoke(app, fit_args(spaces, tmp_path / "a", *params_args(tmp_path), "--init", "identity"))
    assert result.exit_code == 0, result.output
    aligner = MiniVec2Vec.load(tmp_path / "a")
    assert aligner.init == "identity" and aligner.diagnostics_.restarts[0].label == "identity start"
    assert "identity start" in flat(result) and "not trusted" in flat(result)
    result = CliRunner().invoke(app, fit_args(spaces, tmp_path / "b", *params_args(tmp_path), "--init", "eye"))
    assert result.exit_code == 2 and "init must be one of auto, anchors, identity" in flat(result)
    assert not (tmp_path / "b").exists()


def toml_of(params: dict) -> str:
    """``params`` (top-level values, then one table per stage) as TOML."""
    top = [f"{key} = {json.dumps(value)}" for key, value in params.items() if not isinstance(value, dict)]
    tables = [
        f"[{key}]\n" + "\n".join(f"{name} = {json.dumps(v)}" for name, v in value.items())
        for key, value in params.items()
        if isinstance(value, dict)
    ]
    return "\n".join(top) + "\n" + "\n\n".join(tables) + "\n"


def test_fit_reads_a_toml_config_and_the_old_params_spelling_still_works(spaces, tmp_path):
    """--config takes TOML (stages as tables) as it takes JSON; --params (hidden) is the same file under its old
    name and says so; the file's random_state holds unless --seed is given."""
    settings = FAST_PARAMS | {"n_restarts": 1, "random_state": 5}
    (tmp_path / "fit.toml").write_text(toml_of(settings))
    (tmp_path / "fit.json").write_text(json.dumps(settings))
    runs = {
        "toml": ["--config", str(tmp_path / "fit.toml")],
        "params": ["--params", str(tmp_path / "fit.json")],
        "seeded": ["--config", str(tmp_path / "fit.toml"), "--seed", "0"],
    }
    fitted = {}
    for name, args in runs.items():
        result = CliRunner().invoke(app, fit_args(spaces, tmp_path / name, *args))
        assert result.exit_code == 0, result.output
        assert ("--params is now --config" in flat(result)) == (name == "params"), result.output
        fitted[name] = MiniVec2Vec.load(tmp_path / name)
    toml, params, seeded = fitted.values()
    assert toml.anchors.n_runs == 6 and toml.refine.n_iter == 30 and toml.n_restarts == 1
    assert toml.random_state == params.random_state == 5 and seeded.random_state == 0
    np.testing.assert_array_equal(toml.matrix_, params.matrix_)
    assert "--params" not in flat(CliRunner().invoke(app, ["align", "fit", "--help"]))
    both = CliRunner().invoke(app, fit_args(spaces, tmp_path / "both", *runs["toml"], *runs["params"]))
    assert both.exit_code == 2 and "give --config or --params, not both" in flat(both)
    (tmp_path / "bad.toml").write_text("[refine\n")
    bad = CliRunner().invoke(app, fit_args(spaces, tmp_path / "bad", "--config", str(tmp_path / "bad.toml")))
    assert bad.exit_code == 2 and "--config is not valid TOML" in flat(bad)
    assert not (tmp_path / "both").exists() and not (tmp_path / "bad").exists()
