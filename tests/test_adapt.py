"""The Matryoshka adapter: its loss terms, that it leaves nested input alone and nests spread input, its folder,
and `adapt fit` / `adapt apply` (atomic, input untouched, bad input refused with nothing written)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from subspaces.adapt import MatryoshkaAdapter, adapt_file, losses
from subspaces.cli.app import app
from subspaces.errors import DataError, DimensionError, SubspacesError
from subspaces.numerics import cpu_record

FAST = {"dims": (8, 16, 32), "hidden": 64, "epochs": 10, "batch_size": 256}


def nested(n: int = 1500, dim: int = 64, seed: int = 0) -> np.ndarray:
    """Matryoshka-ready: all the structure in the first 6 coordinates (decreasing variances), the rest ~ noise."""
    rng = np.random.default_rng(seed)
    head = rng.normal(size=(n, 6)) * np.array([3, 2.5, 2, 1.5, 1.2, 1.0])
    return np.concatenate([head, 1e-3 * rng.normal(size=(n, dim - 6))], 1).astype(np.float32)


def spread(n: int = 1500, dim: int = 64, rank: int = 24, seed: int = 0) -> np.ndarray:
    """Low-rank structure rotated at random, so that every coordinate carries a little of it."""
    rng = np.random.default_rng(seed)
    latent = rng.normal(size=(n, rank)) * np.linspace(3, 0.5, rank)
    rotation, _ = np.linalg.qr(rng.normal(size=(dim, dim)))
    return (latent @ rotation[:rank]).astype(np.float32)


def neighbours(x: np.ndarray, k: int = 10) -> np.ndarray:
    unit = x / np.linalg.norm(x, axis=1, keepdims=True)
    sims = unit @ unit.T
    np.fill_diagonal(sims, -np.inf)
    return np.argsort(-sims, axis=1)[:, :k]


def recall_at_10(approx: np.ndarray, truth: np.ndarray) -> float:
    a, t = neighbours(approx), neighbours(truth)
    return float(np.mean([len(set(r) & set(s)) / 10 for r, s in zip(a, t, strict=True)]))


# -- loss terms against hand computations -------------------------------------------------------------------------


def test_similarity_losses_by_hand():
    teacher = torch.tensor([[1.0, 0.5, 0.1], [0.5, 1.0, 0.3], [0.1, 0.3, 1.0]])
    student = torch.tensor([[1.0, 0.4, 0.1], [0.4, 1.0, 0.0], [0.1, 0.0, 1.0]])
    # off-diagonal |differences|: 0.1, 0, 0.1, 0.3, 0, 0.3 -> mean 0.8 / 6
    assert losses.pairwise_loss(student, teacher).item() == pytest.approx(0.8 / 6)
    index = losses.neighbours(teacher, 1)  # row 0 -> 1, row 1 -> 0, row 2 -> 1
    assert index.squeeze(1).tolist() == [1, 0, 1]
    assert losses.topk_loss(student, teacher, index).item() == pytest.approx((0.1 + 0.1 + 0.3) / 3)
    assert losses.rank_loss(teacher, teacher).item() == pytest.approx(0.0, abs=1e-7)
    assert losses.rank_loss(student, teacher).item() > 0


def test_reconstruction_and_regularisers_by_hand():
    x = torch.tensor([[3.0, 4.0], [1.0, 0.0]])
    y = torch.tensor([[3.0, 5.0], [1.0, 0.0]])
    assert losses.reconstruction_loss(y, x).item() == pytest.approx((1 / 25 + 0) / 2)
    # a collapsed third dimension: its std is 0, the mean std is over all three dims
    rng = torch.Generator().manual_seed(0)
    healthy = torch.randn(256, 2, generator=rng)
    collapsed = torch.cat([healthy, torch.zeros(256, 1)], 1)
    assert losses.variance_floor(torch.cat([healthy, torch.randn(256, 1, generator=rng)], 1)).item() == 0.0
    assert losses.variance_floor(collapsed).item() == pytest.approx(0.5 / 3, abs=1e-3)  # (0.5 - 0) / 3 dims
    # prefix dim 0 equal to dim 1: |C| = 1, hinge (1 - 0.1)^2 over the 1 x 1 block
    twin = torch.randn(64, 1, generator=rng).repeat(1, 2)
    assert losses.decorrelation(twin, 1).item() == pytest.approx(0.81, abs=1e-3)
    assert losses.decorrelation(twin, 2).item() == 0.0


def test_supervised_loss_prefers_matching_pairs():
    q = torch.eye(4)
    assert losses.supervised_loss(q, q).item() < losses.supervised_loss(q, q.roll(1, 0)).item()


# -- the estimator ------------------------------------------------------------------------------------------------


def test_starts_at_identity_and_keeps_nested_input():
    x = nested()
    adapter = MatryoshkaAdapter(**FAST).fit(x)
    assert adapter.loss_terms_["start"]["rec"] == 0.0  # g starts at zero
    y = adapter.transform(x)
    assert np.linalg.norm(y - x) / np.linalg.norm(x) < 0.01
    assert recall_at_10(y[:, :8], x) > 0.97


def test_improves_prefix_recall_on_spread_input():
    x = spread()
    adapter = MatryoshkaAdapter(**{**FAST, "epochs": 20}).fit(x)
    y = adapter.transform(x)
    raw, adapted = recall_at_10(x[:, :8], x), recall_at_10(y[:, :8], x)
    assert adapted > raw + 0.05, (raw, adapted)
    assert adapter.loss_terms_["end"]["topk"] < adapter.loss_terms_["start"]["topk"]


def test_a_pca_basis_starts_from_the_principal_axes_and_keeps_full_size_cosines(tmp_path):
    x = spread()
    still = MatryoshkaAdapter(**{**FAST, "epochs": 1, "lr": 1e-12, "basis": "pca"}).fit(x)  # g stays ~0
    y = still.transform(x)
    unit = lambda v: v / np.linalg.norm(v, axis=1, keepdims=True)  # noqa: E731
    np.testing.assert_allclose(unit(y) @ unit(y[:50]).T, unit(x) @ unit(x[:50]).T, atol=1e-4)  # orthogonal
    rotation = still.weights_["rotation"]
    np.testing.assert_allclose(rotation.T @ rotation, np.eye(x.shape[1]), atol=1e-4)
    assert recall_at_10(y[:, :8], x) > recall_at_10(x[:, :8], x) + 0.1  # the start is PCA truncation already
    trained = MatryoshkaAdapter(**{**FAST, "epochs": 20, "basis": "pca"}).fit(x)
    reloaded = MatryoshkaAdapter.load(trained.save(tmp_path / "a"))
    np.testing.assert_array_equal(reloaded.transform(x[:20]), trained.transform(x[:20]))
    with pytest.raises(SubspacesError, match="basis"):
        MatryoshkaAdapter(**{**FAST, "basis": "svd"}).fit(x)


def test_seeded_and_leaves_global_rng_alone():
    x = spread(n=600)
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    a = MatryoshkaAdapter(**{**FAST, "epochs": 2}).fit(x).transform(x)
    assert torch.rand(1).item() == before.item()
    b = MatryoshkaAdapter(**{**FAST, "epochs": 2}).fit(x).transform(x)
    np.testing.assert_array_equal(a, b)


def test_supervised_pairs_and_regularisers_train(tmp_path):
    x = spread(n=600)
    pairs = np.stack([np.arange(0, 600, 2), np.arange(1, 600, 2)], 1)
    adapter = MatryoshkaAdapter(
        **{**FAST, "epochs": 2, "hidden": 0}, rank_weight=1.0, var_weight=1.0, corr_weight=1.0
    ).fit(x, pairs=pairs)
    terms = adapter.loss_terms_["start"]
    assert terms["sup"] > 0 and terms["corr"] > 0 and terms["rank"] > 0  # prefixes differ from the full size
    loaded = MatryoshkaAdapter.load(adapter.save(tmp_path / "adapter"))
    np.testing.assert_allclose(loaded.transform(x), adapter.transform(x), atol=1e-6)
    assert loaded.get_params() == {**adapter.get_params(), "dims": [8, 16, 32]}
    # Where it was fitted is kept with it: the precision and the CPU (a reader on another CPU can see both).
    assert loaded.fitted_on_ == adapter.fitted_on_ == cpu_record("float32")


def test_bad_inputs():
    x = spread(n=300)
    for dims in ((16, 8), (8, 8), (8, 65), (0, 8), ()):
        with pytest.raises(DimensionError):
            MatryoshkaAdapter(dims=dims).fit(x)
    bad = x.copy()
    bad[5, 3] = np.nan
    with pytest.raises(DimensionError, match="row 5"):
        MatryoshkaAdapter(dims=(8,)).fit(bad)
    bad = x.copy()
    bad[7] = 0
    with pytest.raises(DimensionError, match="row 7"):
        MatryoshkaAdapter(dims=(8,)).fit(bad)
    with pytest.raises(DimensionError):
        MatryoshkaAdapter(dims=(8,)).fit(np.zeros((0, 64), dtype=np.float32))
    with pytest.raises(SubspacesError, match="not fitted"):
        MatryoshkaAdapter().transform(x)
    with pytest.raises(DataError, match="pairs"):
        MatryoshkaAdapter(dims=(8,)).fit(x, pairs=np.array([[0, 1], [2, 999]]))


def test_load_refuses_a_mismatched_state(tmp_path):
    folder = MatryoshkaAdapter(**{**FAST, "epochs": 1}).fit(spread(n=300)).save(tmp_path / "a")
    (folder / "state.npz").write_bytes(b"not it")
    with pytest.raises(DataError, match="interrupted save"):
        MatryoshkaAdapter.load(folder)


def test_load_refuses_an_edited_config_and_reads_older_folders(tmp_path):
    import json

    x = spread(n=300)
    folder = MatryoshkaAdapter(**{**FAST, "epochs": 1}).fit(x).save(tmp_path / "a")
    config_path = folder / "adapter.json"
    config = json.loads(config_path.read_text())
    assert config["format_version"] == 3 and len(config["config_sha256"]) == 64
    expected = MatryoshkaAdapter.load(folder).transform(x)
    config_path.write_text(json.dumps(config))  # re-laid out, same fields: still loads
    np.testing.assert_array_equal(MatryoshkaAdapter.load(folder).transform(x), expected)
    for field, value in (("scale", config["scale"] * 2), ("dims", [8, 32]), ("n_features_in", 32)):
        config_path.write_text(json.dumps({**config, field: value}))
        with pytest.raises(DataError, match="adapter.json: was edited after it was written"):
            MatryoshkaAdapter.load(folder)
    edited = {**config, "params": {**config["params"], "hidden": 0}}
    config_path.write_text(json.dumps(edited))
    with pytest.raises(DataError, match="was edited"):
        MatryoshkaAdapter.load(folder)
    unhashed = {k: v for k, v in config.items() if k != "config_sha256"}
    config_path.write_text(json.dumps({**unhashed, "scale": config["scale"] * 2}))
    with pytest.raises(DataError, match="has no config_sha256"):
        MatryoshkaAdapter.load(folder)
    config_path.write_text(json.dumps({**unhashed, "format_version": 2}))  # what the previous version wrote
    np.testing.assert_array_equal(MatryoshkaAdapter.load(folder).transform(x), expected)


def test_the_docs_name_the_format_version_the_files_have():
    from pathlib import Path

    from subspaces.adapt.adapter import FORMAT_VERSION

    docs = (Path(__file__).parents[1] / "docs" / "adapt.md").read_text(encoding="utf-8")
    assert f"`format_version` {FORMAT_VERSION}" in docs


# -- files and the CLI ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    folder = tmp_path_factory.mktemp("adapt")
    np.save(folder / "x.npy", spread(n=600))
    result = CliRunner().invoke(
        app,
        ["adapt", "fit", "--embeddings", str(folder / "x.npy"), "--dims", "8,16", "--epochs", "2"]
        + ["--batch-size", "128", "--hidden", "32", "--output", str(folder / "adapter")],
    )
    assert result.exit_code == 0, result.output
    assert "topk" in result.output
    return folder


@pytest.mark.parametrize("suffix", [".npy", ".parquet"])
def test_apply_matches_transform_and_leaves_input_alone(fitted, tmp_path, suffix):
    from subspaces.io import load_embeddings, save_embeddings

    x = spread(n=600)
    source = tmp_path / f"in{suffix}"
    save_embeddings(source, x)
    before = source.read_bytes()
    result = CliRunner().invoke(
        app,
        ["adapt", "apply", str(fitted / "adapter"), str(source), str(tmp_path / f"out{suffix}")]
        + ["--chunk-size", "100"],
    )
    assert result.exit_code == 0, result.output
    assert source.read_bytes() == before
    expected = MatryoshkaAdapter.load(fitted / "adapter").transform(x)
    np.testing.assert_allclose(load_embeddings(tmp_path / f"out{suffix}"), expected, atol=1e-6)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([f"in{suffix}", f"out{suffix}"])  # no temp left


def test_apply_bad_chunk_writes_nothing(fitted, tmp_path):
    x = spread(n=600)
    x[450] = np.nan  # in the fifth chunk of 100: four were written to the temporary file already
    np.save(tmp_path / "in.npy", x)
    adapter = MatryoshkaAdapter.load(fitted / "adapter")
    with pytest.raises(DimensionError, match="row 450"):
        adapt_file(adapter, tmp_path / "in.npy", tmp_path / "out.npy", chunk_size=100)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.npy"]
    with pytest.raises(SubspacesError, match="never modified"):
        adapt_file(adapter, tmp_path / "in.npy", tmp_path / "in.npy")


def test_fit_cli_errors_write_nothing(tmp_path):
    np.save(tmp_path / "x.npy", spread(n=300))
    np.save(tmp_path / "empty.npy", np.zeros((0, 64), dtype=np.float32))
    bad = spread(n=300)
    bad[3] = 0
    np.save(tmp_path / "zero.npy", bad)
    (tmp_path / "broken.npy").write_bytes(b"")
    cases = {
        "x.npy --dims 32,16": "strictly increasing",
        "x.npy --dims 16,128": "outside 1..64",
        "empty.npy": "no rows",
        "zero.npy": "zero vectors",
        "broken.npy": "not a readable",
        "missing.npy": "not found",
    }
    for args, message in cases.items():
        name, *rest = args.split()
        rest = rest or ["--dims", "8,16"]
        result = CliRunner().invoke(
            app, ["adapt", "fit", "--embeddings", str(tmp_path / name), "--output", str(tmp_path / "out"), *rest]
        )
        assert result.exit_code == 2, (args, result.output)
        assert message in " ".join(result.output.split()), (args, result.output)
        assert not (tmp_path / "out").exists()


def test_fit_cli_pca_basis_writes_a_rotating_adapter(tmp_path):
    np.save(tmp_path / "x.npy", spread(n=300))
    args = ["adapt", "fit", "--embeddings", str(tmp_path / "x.npy"), "--output", str(tmp_path / "a")]
    result = CliRunner().invoke(app, [*args, "--dims", "8,16", "--epochs", "1", "--basis", "pca"])
    assert result.exit_code == 0, result.output
    adapter = MatryoshkaAdapter.load(tmp_path / "a")
    assert adapter.basis == "pca" and adapter.weights_["rotation"].shape == (64, 64)


def test_mined_batches_pair_rows_with_their_true_neighbours_and_train_seeded():
    x = spread(n=600)
    adapter = MatryoshkaAdapter(**{**FAST, "mined": 5})
    near = adapter._near(x, torch.Generator().manual_seed(0))
    assert near.shape == (600, 6)  # the row itself, then its 5 nearest
    truth = neighbours(x, 5)
    assert np.array_equal(near[:, 0], np.arange(600))
    assert np.mean([set(a) == set(b) for a, b in zip(near[:, 1:], truth, strict=True)]) > 0.99
    a = MatryoshkaAdapter(**{**FAST, "epochs": 3, "mined": 5}).fit(x).transform(x)
    b = MatryoshkaAdapter(**{**FAST, "epochs": 3, "mined": 5}).fit(x).transform(x)
    plain = MatryoshkaAdapter(**{**FAST, "epochs": 3}).fit(x).transform(x)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, plain)  # the batches differ, so the fit does
    with pytest.raises(SubspacesError, match="mined"):
        MatryoshkaAdapter(**{**FAST, "mined": -1}).fit(x)
    tiny = MatryoshkaAdapter(dims=(4,), hidden=8, epochs=2, batch_size=4, mined=10).fit(x[:5, :16])
    assert np.isfinite(tiny.transform(x[:5, :16])).all()  # a pool of 5 rows: 4 neighbours each
