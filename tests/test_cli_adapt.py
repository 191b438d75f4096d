"""``subspaces adapt fit``'s options derived from MatryoshkaAdapter, and ``--config FILE`` for the rest."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from subspaces.adapt import MatryoshkaAdapter
from subspaces.cli.app import app


@pytest.fixture
def vectors(tmp_path):
    np.save(tmp_path / "x.npy", np.random.default_rng(0).normal(size=(60, 16)).astype(np.float32))
    return tmp_path / "x.npy"


def fit(vectors, output, *extra: str):
    args = ["adapt", "fit", "--embeddings", str(vectors), "--output", str(output), "--dims", "4,8", "--hidden", "0"]
    return CliRunner().invoke(app, [*args, "--batch-size", "16", *extra])


def test_config_sets_what_has_no_option_and_the_command_line_wins(vectors, tmp_path):
    (tmp_path / "fit.toml").write_text("weight_decay = 0.01\nmined = 3\nepochs = 3\ntau_corr = 0.2\n")
    result = fit(vectors, tmp_path / "a", "--config", str(tmp_path / "fit.toml"), "--epochs", "1")
    assert result.exit_code == 0, result.output
    adapter = MatryoshkaAdapter.load(tmp_path / "a")
    assert (adapter.weight_decay, adapter.mined, adapter.tau_corr) == (0.01, 3, 0.2)
    assert adapter.epochs == 1 and len(adapter.history_) == 1  # the command line's, not the file's 3
    assert adapter.hidden == 0 and adapter.batch_size == 16 and adapter.dims == [4, 8]
    for option in ("--mined", "--weight-decay"):  # the long tail: --config only
        result = fit(vectors, tmp_path / "b", option, "1")
        assert result.exit_code == 2 and f"No such option: {option}" in " ".join(result.output.split())


def test_config_dims_read_as_the_option_reads_them(vectors, tmp_path):
    for name, dims in (("text", '"4,full"'), ("list", "[4, 16]")):
        (tmp_path / f"{name}.toml").write_text(f"dims = {dims}\n")
        args = ["adapt", "fit", "--embeddings", str(vectors), "-o", str(tmp_path / name), "--epochs", "1"]
        result = CliRunner().invoke(app, [*args, "--hidden", "0", "--config", str(tmp_path / f"{name}.toml")])
        assert result.exit_code == 0, result.output
        assert MatryoshkaAdapter.load(tmp_path / name).dims_ == [4, 16]


def test_an_unknown_config_setting_is_one_error_line_naming_it(vectors, tmp_path):
    (tmp_path / "bad.json").write_text(json.dumps({"epochs": 1, "weight_decy": 0.1}))
    result = fit(vectors, tmp_path / "a", "--config", str(tmp_path / "bad.json"))
    assert result.exit_code == 2 and "Traceback" not in result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")
    assert "--config sets weight_decy, not settings of MatryoshkaAdapter" in lines[0] and "weight_decay" in lines[0]
    assert not (tmp_path / "a").exists()


def test_every_option_default_and_help_is_the_estimators():
    """The estimator is the one home of each default and help text: the command repeats neither."""
    import inspect

    from subspaces.cli.adapt import fit_cmd
    from subspaces.cli.common import docstring_args

    cli = inspect.signature(fit_cmd).parameters
    library = inspect.signature(MatryoshkaAdapter.__init__).parameters
    helps = docstring_args(MatryoshkaAdapter)
    derived = [name for name in cli if name in library]
    assert len(derived) == 14 and "seed" in cli
    for name in derived:
        default = library[name].default
        assert cli[name].default == (",".join(map(str, default)) if name == "dims" else default), name
        assert cli[name].annotation.__metadata__[0].help == helps[name], name
