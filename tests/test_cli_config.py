"""Options derived from a recipe dataclass (``cli.common.recipe_options``) and ``--config FILE``."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Literal, Optional

import typer
from typer.testing import CliRunner

from subspaces.cli.common import estimator_options, recipe_options, user_errors


@dataclass
class Recipe:
    lr: float = field(default=3e-5, metadata={"help": "Learning rate."})
    steps: Optional[int] = None
    mode: Literal["a", "b"] = "a"
    flag: bool = False
    dims: tuple[int, ...] = (16, 32)  # no plain command-line form: --config only
    name: str = "x"


app = typer.Typer()


@app.command()
@user_errors
@recipe_options(Recipe, skip=["name"])
def run(out: str = "o", *, config: Recipe) -> None:
    print(json.dumps({"out": out, **dataclasses.asdict(config)}))


@app.command()
def other() -> None: ...


def invoke(*args: str) -> dict:
    result = CliRunner().invoke(app, ["run", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_fields_become_options_with_the_librarys_defaults_and_help():
    help_text = " ".join(CliRunner().invoke(app, ["run", "--help"]).output.split())
    assert "--lr" in help_text and "Learning rate." in help_text and "--flag" in help_text and "--no-flag" in help_text
    assert "--dims" not in help_text and "--name" not in help_text  # no plain form; skipped
    assert invoke() == {"out": "o", **dataclasses.asdict(Recipe()), "dims": [16, 32]}
    assert invoke("--lr", "0.1", "--mode", "b", "--flag")["lr"] == 0.1


def test_a_config_file_sets_any_field_and_the_command_line_wins(tmp_path):
    (tmp_path / "r.toml").write_text('lr = 0.5\nsteps = 7\ndims = [3]\nname = "y"\n')
    got = invoke("--config", str(tmp_path / "r.toml"), "--steps", "9")
    assert (got["lr"], got["steps"], got["dims"], got["name"]) == (0.5, 9, [3], "y")
    (tmp_path / "r.json").write_text(json.dumps({"mode": "b", "lr": 0.25}))
    got = invoke("--config", str(tmp_path / "r.json"), "--lr", "3e-5")  # given, though equal to the default
    assert (got["mode"], got["lr"]) == ("b", 3e-5)


def test_a_config_file_with_an_unknown_setting_is_one_error_line(tmp_path):
    (tmp_path / "bad.json").write_text(json.dumps({"bogus": 1}))
    result = CliRunner().invoke(app, ["run", "--config", str(tmp_path / "bad.json")])
    assert result.exit_code == 2
    assert result.output.startswith("error: ") and "--config sets bogus, not settings of Recipe" in result.output


def test_cond_train_reads_recipe_settings_from_a_config_file_and_the_command_line_wins(tmp_path, monkeypatch):
    """The options derived from CondTrainConfig take a --config file's value where the command line gives none."""
    import subspaces.cond.pipeline as pipeline
    from subspaces.cli.app import app as subspaces_app

    seen = []

    def captured(task, model, *, config, **_):
        seen.append(config)
        raise RuntimeError("stop before training")

    monkeypatch.setattr(pipeline, "train_conditional", captured)
    (tmp_path / "cfg.json").write_text(json.dumps({"freeze_encoder": False, "max_length": 77, "epochs": 3, "rank": 8}))
    args = ["cond", "train", "-o", str(tmp_path / "out"), "--config", str(tmp_path / "cfg.json")]
    CliRunner().invoke(subspaces_app, args)
    CliRunner().invoke(subspaces_app, [*args, "--max-length", "20", "--freeze-encoder", "--rank", "auto"])
    assert [(c.freeze_encoder, c.max_length, c.epochs, c.rank) for c in seen] == [
        (False, 77, 3, 8),
        (True, 20, 3, "auto"),
    ]


def test_kgc_train_takes_the_config_files_rank_unless_the_command_line_gives_one(tmp_path, monkeypatch):
    """--rank is hand-declared (it parses 'full'); a --config file's rank must not be replaced by its default."""
    import subspaces.kgc.pipeline as pipeline
    from subspaces.cli.app import app as subspaces_app

    seen = []

    def captured(config, **_):
        seen.append(config.rank)
        raise RuntimeError("stop before training")

    monkeypatch.setattr(pipeline, "train_pipeline", captured)
    (tmp_path / "cfg.toml").write_text('rank = "full"\n')
    args = ["kgc", "train", "-o", str(tmp_path / "out"), "--config", str(tmp_path / "cfg.toml")]
    CliRunner().invoke(subspaces_app, args)
    CliRunner().invoke(subspaces_app, [*args, "--rank", "16"])
    (tmp_path / "cfg.toml").write_text("rank = 4\n")
    CliRunner().invoke(subspaces_app, args)
    assert seen == [None, 16, 4]


class Estimator:
    """A toy estimator.

    Args:
        sizes: sizes, as ``"1,2"``.
        lr, decay: AdamW's
            settings (:class:`~torch.optim.AdamW`).
        random_state: the seed.
        verbose: talk.

    Fitted: nothing.
    """

    def __init__(
        self, sizes: tuple[int, ...] = (1, 2), lr: float = 0.1, decay: float = 0.0, random_state: int = 0, verbose=False
    ) -> None:
        self.params = {"sizes": sizes, "lr": lr, "decay": decay, "random_state": random_state, "verbose": verbose}


def test_docstring_args_reads_grouped_names_and_continuations_as_plain_text():
    from subspaces.cli.common import docstring_args

    assert docstring_args(Estimator) == {
        "sizes": 'Sizes, as "1,2".',
        "lr": "AdamW's settings (AdamW).",
        "decay": "AdamW's settings (AdamW).",
        "random_state": "The seed.",
        "verbose": "Talk.",
    }


estimator_app = typer.Typer()


@estimator_app.command()
@user_errors
@estimator_options(
    Estimator,
    into="estimator",
    only=("sizes", "lr", "random_state"),
    flags={"random_state": "--seed"},
    parse={"sizes": lambda text: tuple(int(x) for x in text.split(","))},
    fixed={"verbose": True},
    alias="--old",
)
def fit(out: str = "o", *, estimator: Estimator) -> None:
    print(json.dumps(estimator.params))


@estimator_app.command()
def other_fit() -> None: ...


def test_estimator_options_derive_from_init_and_the_file_sets_any_parameter(tmp_path):
    def run(*args: str):
        return CliRunner().invoke(estimator_app, ["fit", *args])

    help_text = " ".join(run("--help").output.split())
    assert "--seed" in help_text and "The seed." in help_text and "[default: 1,2]" in help_text
    assert "--decay" not in help_text and "--old" not in help_text and "--random-state" not in help_text
    assert json.loads(run().stdout) == {"sizes": [1, 2], "lr": 0.1, "decay": 0.0, "random_state": 0, "verbose": True}
    (tmp_path / "e.toml").write_text('decay = 0.5\nsizes = "3,4"\nrandom_state = 7\nverbose = false\n')
    got = json.loads(run("--config", str(tmp_path / "e.toml"), "--seed", "9").stdout)
    assert got == {"sizes": [3, 4], "lr": 0.1, "decay": 0.5, "random_state": 9, "verbose": False}
    old = run("--old", str(tmp_path / "e.toml"), "--sizes", "5")
    assert old.exit_code == 0 and "--old is now --config" in old.output and '"sizes": [5]' in old.output
    (tmp_path / "bad.json").write_text(json.dumps({"rate": 1}))
    result = run("--config", str(tmp_path / "bad.json"))
    assert result.exit_code == 2
    assert "--config sets rate, not settings of Estimator (those are: decay, lr," in result.output
