"""Every command-line default equals the library's default for the parameter it feeds.

The walk covers every visible command of the typer app (click's command tree). Each command names the library
callables, recipe dataclasses and settings dicts it feeds (``FEEDS``); an option is compared with the parameter,
field or key of the same name in the first of them that has one with a default (else it feeds a parameter the
library requires, which has no default to disagree with). ``RENAMED``: where the CLI spells it differently or says
it in other terms. A default of None means "not given: the library decides", and agrees with anything; an option
with any other default that matches nothing fails the walk unless ``UNFED`` says what it is. Disagreements that are
meant are listed in ``EXCEPTIONS`` with the reason; those not yet decided in ``DISAGREEMENTS`` (strict xfails).
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import inspect
import operator
import typing
from collections.abc import Callable, Iterator, Mapping
from typing import Annotated, Any

import pytest
import typer

# The library's runtime defaults every model-loading command shares (device, backend, precision).
RUNTIME = ("subspaces.models.encoder:load_encoder",)

FEEDS: dict[str, tuple[str, ...]] = {
    "serve": ("subspaces.serve.settings:ServeSettings", *RUNTIME),
    "model list": (),
    "model encode": ("subspaces.models.encoder:encode", *RUNTIME),
    "model eval": ("subspaces.eval.sts:STSEvaluator", *RUNTIME),
    "simcse train": ("subspaces.train.simcse:SimCSEConfig", *RUNTIME, "subspaces.train.simcse:unsup_examples"),
    "matryoshka train": ("subspaces.train.matryoshka:MatryoshkaConfig", *RUNTIME),
    "matryoshka eval": ("subspaces.eval.dims:DimsEvaluator", *RUNTIME),
    "vectors search": ("subspaces.store.search:search_vectors", "subspaces.store.search:search_quantized"),
    "align fit": ("subspaces.align:MiniVec2Vec", *RUNTIME),
    "align apply": ("subspaces.align.apply:apply_to_file",),
    "align eval": ("subspaces.align:evaluate_alignment",),
    "adapt fit": ("subspaces.adapt:MatryoshkaAdapter",),
    "adapt apply": ("subspaces.adapt:adapt_file",),
    "cond train": ("subspaces.cond.recipe:CondTrainConfig", "subspaces.cond.pipeline:train_conditional"),
    "cond eval": ("subspaces.cond.pipeline:evaluate_conditional",),
    "cond search": ("subspaces.models.triencoder:TriEncoder.search", "subspaces.models.triencoder:TriEncoder.load"),
    "cond bench": ("subspaces.cond.pipeline:cache_benchmark",),
    "kgc train": ("subspaces.kgc.recipes:KGCTrainConfig", "subspaces.kgc.pipeline:train_pipeline"),
    "kgc eval": ("subspaces.kgc.pipeline:evaluate_model",),
    "store create": ("subspaces.store:Store.create", "subspaces.store:Store.open"),
    "store add": ("subspaces.store:Store.add", "subspaces.store:Store.open", "subspaces.store.inputs:read_rows"),
    "store info": (),
    "store repair": (),
    "store index": ("subspaces.store:Store.index", "subspaces.store:Store.quantize"),
    "store search": ("subspaces.store:Store.search", "subspaces.store:Store.open", "subspaces.store.plans:plan"),
    "store migrate": ("subspaces.store.migrate:migrate", "subspaces.store:Store.open"),
    "store shrink": ("subspaces.store.shrink:shrink", "subspaces.store.shrink:ADAPTER_DEFAULTS"),
    "store reembed": ("subspaces.store.backfill:reembed", "subspaces.store:Store.open"),
    "store demo": ("subspaces.store.demo:run",),
    "store import": (
        "subspaces.store.core:import_vectors",
        "subspaces.store:Store.import_vectors",
        "subspaces.store.transfer:Source",
        "subspaces.store.encoders:Runtime",
    ),
    "store export": ("subspaces.store:Store.export",),
    "store delete": ("subspaces.store:Store.delete",),
}

# (command, option) -> the library's name for it, where the CLI spells it differently; with the CLI value's meaning
# in the library's terms, where the CLI says it in other units or the other way round.
RENAMED: dict[tuple[str, str], str | tuple[str, Callable[[Any], Any]]] = {
    ("serve", "timeout"): "request_timeout_s",
    ("serve", "accept_any_model_name"): "accept_any_model",
    ("serve", "cors_origin"): "cors_origins",
    ("serve", "served_model_name"): "aliases",
    ("serve", "max_body_mb"): ("max_body_bytes", lambda mb: max(1, int(mb * 2**20))),
    ("model eval", "model"): "name_or_path",
    ("simcse train", "model"): "name_or_path",
    ("simcse train", "no_eval"): ("stsb_dev", operator.not_),
    ("matryoshka train", "model"): "name_or_path",
    ("matryoshka train", "no_eval"): ("stsb_dev", operator.not_),
    ("matryoshka eval", "c"): "C",
    ("matryoshka eval", "seed"): "random_state",
    ("adapt fit", "seed"): "random_state",
    ("align fit", "seed"): "random_state",
    ("kgc train", "eval_split"): "evaluate_split",
    ("kgc eval", "no_disk_cache"): ("disk_cache", lambda no: False if no else None),
    ("store index", "partitions"): "num_partitions",
    ("store index", "sub_vectors"): "num_sub_vectors",
    ("store shrink", "adapter_basis"): "basis",
}

# (command, option) -> what it is, for an option with a default that feeds no library parameter.
UNFED: dict[tuple[str, str], str] = {
    ("serve", "host"): "the address this process listens on (uvicorn's), not a setting of the app",
    ("serve", "port"): "the port this process listens on (uvicorn's), not a setting of the app",
    ("serve", "stay_up_on_error"): "whether this process exits when the model fails to load",
    ("matryoshka eval", "list_tasks"): "prints the task names instead of evaluating",
    ("store info", "json_out"): "prints the record as JSON instead of a table",
    ("store migrate", "commit"): "runs Store.commit instead of a migration",
    ("store migrate", "rollback"): "runs Store.rollback instead of a migration",
}

# (command, option) -> why its default differs from the library's on purpose.
ALL_LAYERS = "'all' is the command line's spelling of the library's None (every layer trains)"
EXCEPTIONS: dict[tuple[str, str], str] = {
    ("simcse train", "trainable_layers"): ALL_LAYERS,
    ("matryoshka train", "trainable_layers"): ALL_LAYERS,
    ("cond train", "trainable_layers"): ALL_LAYERS,
    ("kgc train", "trainable_layers"): ALL_LAYERS,
}

# (command, option) -> a disagreement the walk found that is not decided yet: its test below is a strict xfail, so
# the entry must go once either side changes.
DISAGREEMENTS: dict[tuple[str, str], str] = {}


def commands(app: typer.Typer) -> Iterator[tuple[str, Any]]:
    """(``"group verb"``, click command) for every visible command of ``app``."""

    def walk(command: Any, path: tuple[str, ...]) -> Iterator[tuple[str, Any]]:
        if getattr(command, "hidden", False):
            return
        if hasattr(command, "commands"):
            for name, sub in command.commands.items():
                yield from walk(sub, (*path, name))
        else:
            yield " ".join(path), command

    yield from walk(typer.main.get_command(app), ())


def resolve(target: str | Callable[..., Any]) -> Any:
    """``"module:attr.attr"`` -> the object."""
    if not isinstance(target, str):
        return target
    module, _, attrs = target.partition(":")
    obj: Any = importlib.import_module(module)
    for attr in attrs.split("."):
        obj = getattr(obj, attr)
    return obj


# The "default" of a parameter the library requires: no default to disagree with.
REQUIRED = object()


def library_defaults(target: Any) -> dict[str, Any]:
    """Parameter (or field, or key) name -> default (:data:`REQUIRED` if none), of a dataclass, class, function or
    dict of settings."""
    if isinstance(target, Mapping):
        return dict(target)
    if dataclasses.is_dataclass(target):
        defaults = {}
        for f in dataclasses.fields(target):
            if f.default is not dataclasses.MISSING:
                defaults[f.name] = f.default
            elif f.default_factory is not dataclasses.MISSING:
                defaults[f.name] = f.default_factory()
            else:
                defaults[f.name] = REQUIRED
        return defaults
    parameters = inspect.signature(target).parameters.values()
    keyed = [p for p in parameters if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    return {p.name: REQUIRED if p.default is p.empty else p.default for p in keyed}


def same(cli: Any, library: Any) -> bool:
    """Whether a CLI default says what the library's does: None defers to the library; an Enum is its value; a
    comma-separated list is the library's sequence (``full`` for None); an int is the float it equals."""
    cli, library = (getattr(x, "value", x) for x in (cli, library))
    if cli is None:
        return True
    if isinstance(cli, str) and isinstance(library, list | tuple):
        return cli == ",".join("full" if x is None else str(x) for x in library)
    if isinstance(cli, list) and isinstance(library, tuple):
        library = list(library)
    if isinstance(cli, int | float) and not isinstance(cli, bool) and isinstance(library, int | float):
        return not isinstance(library, bool) and cli == library
    return type(cli) is type(library) and cli == library


def mismatches(
    app: typer.Typer,
    feeds: dict[str, tuple[Any, ...]],
    renamed: dict[tuple[str, str], Any],
    exceptions: dict[tuple[str, str], str],
    unfed: dict[tuple[str, str], str],
) -> list[str]:
    """``"command --option: ..."`` for every option whose default disagrees with the library's, or that has a
    default (not None) and feeds nothing the command names."""
    found = []
    for path, command in commands(app):
        targets = [(t, library_defaults(resolve(t))) for t in feeds[path]]
        for param in command.params:
            key = (path, param.name)
            if param.param_type_name != "option" or param.name == "help" or key in exceptions or key in unfed:
                continue
            name, convert = renamed.get(key, param.name), None
            if isinstance(name, tuple):
                name, convert = name
            cli = param.default if convert is None or param.default is None else convert(param.default)
            option = f"{path} --{param.name.replace('_', '-')}"
            # a parameter with a default first: one the library requires has none to compare with
            matched = [(t, d[name]) for t, d in targets if d.get(name, REQUIRED) is not REQUIRED]
            matched += [(t, d[name]) for t, d in targets if d.get(name) is REQUIRED]
            if not matched:
                if param.default is not None:
                    found.append(f"{option}: default {param.default!r} feeds none of {feeds[path]}")
                continue
            target, library = matched[0]
            if library is not REQUIRED and not same(cli, library):
                found.append(f"{option}: CLI {param.default!r}, library {library!r} ({target})")
    return found


def test_every_command_is_mapped_to_what_it_feeds():
    from subspaces.cli.app import app

    assert sorted(path for path, _ in commands(app)) == sorted(FEEDS)


def test_every_cli_default_equals_the_librarys():
    from subspaces.cli.app import app

    found = mismatches(app, FEEDS, RENAMED, EXCEPTIONS | DISAGREEMENTS, UNFED)
    assert found == [], "\n".join(found)


UNDECIDED = [pytest.param(key, marks=pytest.mark.xfail(strict=True, reason=why)) for key, why in DISAGREEMENTS.items()]


@pytest.mark.parametrize("option", UNDECIDED)
def test_undecided_disagreements(option):
    from subspaces.cli.app import app

    path, name = option
    found = mismatches(app, FEEDS, RENAMED, EXCEPTIONS, UNFED)
    assert not [line for line in found if line.startswith(f"{path} --{name.replace('_', '-')}:")]


def test_the_check_catches_a_planted_mismatch():
    """The walk must be able to fail: a command whose default drifted from its library function's is reported, as is
    an option with a default that feeds nothing; a renamed option is followed (its value converted where the CLI says
    it the other way round), an option feeding a required parameter agrees, and an exception silences it."""

    def library(model: str, batch_size: int = 64, dims: tuple[int, ...] = (8, 16), evaluate: bool = True) -> None: ...

    app = typer.Typer()
    group = typer.Typer()
    app.add_typer(group, name="demo")

    @group.command("run")
    def run(
        model: str = "m",
        batch_size: int = 32,
        chunk: int = 64,
        dims: list[int] = [8, 16],  # noqa: B006
        no_eval: bool = False,
    ) -> None: ...

    @group.command("other")
    def other() -> None: ...

    feeds = {"demo run": (library,), "demo other": ()}
    no_eval = {("demo run", "no_eval"): ("evaluate", operator.not_)}
    unfed = {("demo run", "chunk"): "the command's own"}
    drifted = f"demo run --batch-size: CLI 32, library 64 ({library})"
    assert mismatches(app, feeds, no_eval, {}, unfed) == [drifted]
    unmatched = f"demo run --chunk: default 64 feeds none of {(library,)}"
    assert mismatches(app, feeds, no_eval, {}, {}) == [drifted, unmatched]
    renamed = mismatches(app, feeds, {**no_eval, ("demo run", "chunk"): "batch_size"}, {}, {})
    assert [line.split(":")[0] for line in renamed] == ["demo run --batch-size"]  # --chunk 64 agrees with 64
    meant = {("demo run", "batch_size"): "meant"}
    unconverted = mismatches(app, feeds, {("demo run", "no_eval"): "evaluate"}, meant, unfed)
    assert unconverted == [f"demo run --no-eval: CLI False, library True ({library})"]
    assert mismatches(app, feeds, no_eval, meant, unfed) == []


def enum_options(app: typer.Typer) -> set[str]:
    """``"command --option"`` for every option whose choices come from an Enum rather than a library constant."""
    found = set()
    for path, command in commands(app):
        for name, parameter in inspect.signature(command.callback, eval_str=True).parameters.items():
            kind = parameter.annotation
            kind = typing.get_args(kind)[0] if typing.get_origin(kind) is Annotated else kind
            if any(isinstance(k, type) and issubclass(k, enum.Enum) for k in typing.get_args(kind) or (kind,)):
                found.add(f"{path} --{name.replace('_', '-')}")
    return found


def test_choices_come_from_library_constants():
    from subspaces.cli.app import app

    assert enum_options(app) == set()


def test_simcse_modes_defaults_are_the_recipes():
    """unsup's defaults are SimCSEConfig's own fields (what the walk above compares); sup's are the paper's."""
    from subspaces.train.recipes import SimCSEConfig

    assert SimCSEConfig.for_mode("unsup") == SimCSEConfig()
    sup = SimCSEConfig.for_mode("sup", lr=1e-4)
    assert (sup.mode, sup.batch_size, sup.lr, sup.epochs) == ("sup", 512, 1e-4, 3)


def test_simcse_train_sup_takes_the_sup_defaults_unless_given(tiny_model_dir, tmp_path):
    """A sup run's batch size, lr and epochs are the sup recipe's unless the command line or --config sets them
    (the command line winning over the file), read back from the run's trainer_state.json."""
    import json

    from typer.testing import CliRunner

    from subspaces.cli.app import app

    rows = "\n".join(f"a{i} b c,a{i} b d,x{i} y z" for i in range(512))
    (tmp_path / "nli.csv").write_text(f"sent0,sent1,hard_neg\n{rows}\n")
    (tmp_path / "settings.json").write_text(json.dumps({"lr": 2e-5, "epochs": 7}))
    base = ["simcse", "train", "--mode", "sup", "--data", str(tmp_path / "nli.csv"), "--model", str(tiny_model_dir)]
    base += ["--max-steps", "1", "--no-eval", "--max-length", "8"]

    def config(name: str, *extra: str) -> dict:
        result = CliRunner().invoke(app, [*base, "--output", str(tmp_path / name), *extra])
        assert result.exit_code == 0, result.output
        state = json.loads((tmp_path / name / "trainer_state.json").read_text())
        return {key: state["config"][key] for key in ("batch_size", "lr", "epochs")}

    assert config("defaults") == {"batch_size": 512, "lr": 5e-5, "epochs": 3}
    assert config("given", "--lr", "1e-4", "--config", str(tmp_path / "settings.json")) == {
        "batch_size": 512,
        "lr": 1e-4,
        "epochs": 7,
    }
