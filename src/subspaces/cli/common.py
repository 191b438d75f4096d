"""Shared CLI helpers: consoles, error handling, the shared options, options derived from a recipe dataclass."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import re
import sys
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Optional, TypeVar

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from subspaces.config import set_threads
from subspaces.errors import DataError, SubspacesError
from subspaces.io import InputPaths, check_file, check_not_input, check_writable
from subspaces.models import POOLERS
from subspaces.models.backends import BACKENDS, DTYPES, PRECISIONS, check_backend, check_dtype
from subspaces.store import Store
from subspaces.store.scaleout import choose

console = Console(stderr=True)
out = Console()

F = TypeVar("F", bound=Callable[..., Any])


ModelOpt = Annotated[
    str, typer.Option("--model", "-m", help="Bundled model name (see `subspaces model list`) or a local folder.")
]

# Options every encoder-training command shares besides its recipe's (simcse train, matryoshka train).
NoEvalOpt = Annotated[bool, typer.Option("--no-eval", help="Skip STS-B dev evaluation; keep the last model.")]
LimitOpt = Annotated[Optional[int], typer.Option(help="Use only the first N training rows.")]

# The runtime options, declared once: a command takes those it needs by :func:`runtime_options`.
DEVICE = "cpu"
DeviceOpt = Annotated[str, typer.Option(help="Torch device: cpu, cuda, cuda:N or mps (checked before anything loads).")]
BackendOpt = Annotated[
    Literal[BACKENDS],  # type: ignore[valid-type]
    typer.Option(help="torch, or the transformer exported once (cached) to ONNX Runtime or OpenVINO; CPU."),
]
PrecisionOpt = Annotated[
    Literal[PRECISIONS],  # type: ignore[valid-type]
    typer.Option(help="int8: dynamic int8 (onnx) or static int8 calibrated on bundled sentences (openvino)."),
]
DtypeOpt = Annotated[
    Literal[DTYPES],  # type: ignore[valid-type]
    typer.Option(help="What the torch backend runs in; auto: bfloat16 where the CPU multiplies it natively."),
]
PoolerOpt = Annotated[Optional[Literal[POOLERS]], typer.Option(help="Override the model's pooling.")]  # type: ignore[valid-type]
BatchSizeOpt = Annotated[int, typer.Option(help="Texts per forward pass.")]
JsonOpt = Annotated[Optional[Path], typer.Option("--json", help="Write the report as JSON here.")]

ThreadsOpt = Annotated[
    Optional[int],
    typer.Option(
        help="CPU threads for torch, BLAS and faiss. Default: $SUBSPACES_THREADS, $OMP_NUM_THREADS, "
        "or the cores this process may use (affinity and CPU quota).",
        show_default=False,
    ),
]

RayOpt = Annotated[
    Optional[str],
    typer.Option(
        "--ray",
        metavar="[ADDRESS]",
        help="Encode on Ray Data. --ray alone: a local runtime, stopped with this command (also when it is killed); "
        "--ray auto, HOST:PORT or ray://HOST:PORT: that cluster, checked to answer within 5 s before anything runs.",
        show_default=False,
    ),
]
RayAddressOpt = Annotated[
    Optional[str],
    typer.Option(help="Deprecated, goes in the next release: write --ray ADDRESS.", show_default=False),
]
ActorsOpt = Annotated[Optional[int], typer.Option(help="With --ray: encoder actors (default: one per CPU).")]


@dataclass(frozen=True)
class RunOptions:
    """How a command runs its encoders: the options of :func:`runtime_options` but --threads, with the library's
    defaults."""

    device: str = DEVICE
    backend: str = "torch"
    precision: str = "fp32"
    dtype: str = "float32"
    ray_option: Optional[str] = None
    ray_address: Optional[str] = None
    actors: Optional[int] = None

    def check(self) -> None:
        """Refuse a backend, precision and dtype that do not go together, before anything loads."""
        check_backend(self.backend, self.precision)
        check_dtype(self.dtype, self.backend)

    def encoder(self) -> dict[str, Any]:
        """``load_encoder``'s runtime arguments."""
        return {"device": self.device, "backend": self.backend, "precision": self.precision, "dtype": self.dtype}

    def open(self, store: Path) -> Any:
        return Store.open(store, **self.encoder())

    def ray(self) -> bool | str:
        """What --ray [ADDRESS] asks for, its cluster checked now."""
        return choose(self.ray_option, self.ray_address, note=lambda text: echo(text, label="note:", style="yellow"))


_RUNTIME_OPTIONS: dict[str, Any] = {
    "device": DeviceOpt,
    "dtype": DtypeOpt,
    "backend": BackendOpt,
    "precision": PrecisionOpt,
    "ray_option": RayOpt,
    "ray_address": RayAddressOpt,
    "actors": ActorsOpt,
    "threads": ThreadsOpt,
}


def runtime_options(*names: str) -> Callable[[F], F]:
    """The runtime options ``names`` (keys of ``_RUNTIME_OPTIONS``) in the place of the command's parameter ``run``,
    which receives them as one :class:`RunOptions`."""
    defaults = {f.name: f.default for f in dataclasses.fields(RunOptions)}
    options = [
        inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, default=defaults.get(n), annotation=_RUNTIME_OPTIONS[n])
        for n in names
    ]
    return expand("run", options, lambda values: RunOptions(**{n: v for n, v in values.items() if n != "threads"}))


# What is true after Ctrl-C in any command: every file is written to a temporary name and renamed when whole.
INTERRUPTED = "no file was left half-written (each is replaced whole or not at all)"
RESUMABLE = INTERRUPTED + "; rerun the same command (--resume is the default) to continue from OUTPUT/checkpoint.pt"


def echo(message: str, *, label: str | None = None, style: str = "", stdout: bool = False) -> None:
    """Print one message (after ``label`` in ``style``), unwrapped; never read as markup (it holds user data)."""
    parts: list[Any] = [(label, style), " "] if label else []
    (out if stdout else console).print(Text.assemble(*parts, message), highlight=False, soft_wrap=True)


# A Rust source location, as LanceDB's errors end: ", /root/.cargo/registry/src/.../utils.rs:51:31".
_SOURCE_LOCATION = re.compile(r",?\s*(?:[A-Za-z]:)?[\\/][^\s,]*\.rs:\d+(?::\d+)?")


def one_line(message: str) -> str:
    """``message`` as one line: without a Rust source location, its line breaks as ``"; "``."""
    lines = [line.strip() for line in _SOURCE_LOCATION.sub("", message).splitlines()]
    return "; ".join(line for line in lines if line)


# What a command reports as one line (exit code 2) rather than a traceback: the user's input or files are wrong.
_CAUGHT = (SubspacesError, FileNotFoundError, FileExistsError, IsADirectoryError, NotADirectoryError, PermissionError)


def user_errors(func: F, interrupted: str | None = None) -> F:
    """Every command's wrapper: applies ``--threads``, checks ``--json`` can be written before the work, and turns
    user errors into one red line and exit code 2; Ctrl-C prints ``interrupted`` (default: :data:`RESUMABLE` for a
    command resuming, else :data:`INTERRUPTED`)."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            if "threads" in kwargs:  # first: the native pools read their sizes when they load
                check_threads(kwargs["threads"])
                set_threads(kwargs["threads"])
            if kwargs.get("json_path") is not None:  # --json: tried before the work, not after it
                check_not_input(kwargs["json_path"], "--json", _path_options(kwargs))
                check_writable(kwargs["json_path"], "--json")
            return func(*args, **kwargs)
        except _CAUGHT as exc:
            echo(one_line(str(exc)), label="error:", style="bold red")  # one line, even into a file (no wrap)
            sys.exit(2)
        except KeyboardInterrupt:
            message = interrupted or (RESUMABLE if kwargs.get("resume") else INTERRUPTED)
            echo(message, label="interrupted:", style="yellow")
            sys.exit(130)

    return wrapper  # type: ignore[return-value]


def _path_options(kwargs: dict[str, Any]) -> InputPaths:
    """The command's other path arguments by their typed names (``--source-emb``, ``INPUT``): not for --json."""
    from typer.main import get_current_context  # typer's own copy of click: its context, not click's

    ctx = get_current_context(silent=True)
    shown = {p.name: _shown_name(p) for p in ctx.command.params} if ctx is not None else {}
    paths: dict[str, Any] = {}
    for name, value in kwargs.items():
        given = [v for v in (value if isinstance(value, (list, tuple)) else [value]) if isinstance(v, Path)]
        if name != "json_path" and given:
            paths[shown.get(name) or "--" + name.replace("_", "-")] = given
    return paths


def _shown_name(param: Any) -> str:
    """How a parameter is typed: an argument's metavar, an option's first long flag."""
    if param.param_type_name == "argument":
        return param.metavar or param.name.upper()
    return next((o for o in param.opts if o.startswith("--")), param.opts[0])


def check_threads(threads: int | None) -> None:
    """Refuse ``--threads`` above this machine's CPU threads (below 1: ``set_threads`` refuses)."""
    import os

    cpus = os.cpu_count() or 1
    if threads is not None and threads > cpus:
        raise SubspacesError(
            f"--threads {threads} is more than the {cpus} CPU threads of this machine; give at most {cpus}, "
            "or leave it out (default: the cores this process may use)"
        )


def show(renderable: Any) -> None:
    """Print to stdout; off a terminal at its natural width, not rich's assumed 80 columns."""
    (out if out.is_terminal else Console(width=100_000)).print(renderable)


def table(title: str, columns: list[str], rows: list[list[Any]]) -> Table:
    """A rich table of plain text (never markup); floats with two decimals; number columns right-aligned."""
    cells = [[f"{v:.2f}" if isinstance(v, float) else str(v) for v in r] for r in rows]
    t = Table(title=Text(title))
    for i, c in enumerate(columns):
        t.add_column(Text(c), justify="right" if i > 0 and all(_numeric(r[i]) for r in cells if i < len(r)) else "left")
    for r in cells:
        t.add_row(*(Text(cell) for cell in r))
    return t


def _numeric(cell: str) -> bool:
    try:
        float(cell.rstrip("%"))
    except ValueError:
        return cell in ("-", "n/a", "nan")
    return True


def parse_numbers(text: str | None, what: str, kind: type = float) -> list[Any] | None:
    """``"1,0.5,2"`` -> ``[1.0, 0.5, 2.0]`` (``kind=int`` for integers); None stays None."""
    if text is None:
        return None
    try:
        return [kind(x) for x in text.split(",") if x.strip()]
    except ValueError:
        noun = "integers" if kind is int else "numbers"
        raise SubspacesError(f"bad {what} {text!r}: use comma-separated {noun}") from None


def chosen_rank(text: str, configured: int | str | None) -> int | str | None:
    """A train command's hypernet rank: ``--rank`` where the command line gives it, else the recipe's (a ``--config``
    file's; its ``"full"`` read as None), which the option's default must not replace."""
    from typer.main import get_current_context  # typer's own copy of click: its context, not click's

    if given(get_current_context(), "rank"):
        return parse_rank(text)
    return parse_rank(configured) if isinstance(configured, str) else configured


def parse_rank(text: str) -> int | str | None:
    """``--rank`` of a hypernet head: a positive integer, ``auto`` (about d/12) or ``full`` (None)."""
    if text == "full":
        return None
    if text == "auto":
        return "auto"
    try:
        value = int(text)
    except ValueError:
        raise SubspacesError(f"--rank must be a positive integer, 'auto' or 'full', got {text!r}") from None
    if value <= 0:
        raise SubspacesError(f"--rank must be positive, got {value}")
    return value


# Types a setting can take as an option; settings of other types are set with --config FILE.
_OPTION_TYPES = (bool, int, float, str, Path)


@dataclass(frozen=True)
class Setting:
    """One setting a command derives an option from: a recipe dataclass's field or an estimator's parameter."""

    name: str
    hint: Any  # its type
    default: Any  # inspect.Parameter.empty where it has none
    help: str | None = None
    flags: tuple[str, ...] | None = None


def recipe_settings(recipe: type) -> list[Setting]:
    """A dataclass's fields, with their ``metadata`` help and flags."""
    hints = typing.get_type_hints(recipe)
    settings = []
    for f in dataclasses.fields(recipe):
        default = f.default
        if default is dataclasses.MISSING:
            factory = f.default_factory
            default = inspect.Parameter.empty if factory is dataclasses.MISSING else factory()
        settings.append(Setting(f.name, hints[f.name], default, f.metadata.get("help"), f.metadata.get("flags")))
    return settings


def estimator_settings(estimator: type) -> list[Setting]:
    """An estimator's ``__init__`` parameters, with their help from its docstring's ``Args:`` section."""
    hints, helps = typing.get_type_hints(estimator.__init__), docstring_args(estimator)  # type: ignore[misc]
    parameters = list(inspect.signature(estimator.__init__).parameters.values())[1:]  # type: ignore[misc]
    return [Setting(p.name, hints.get(p.name, Any), p.default, helps.get(p.name)) for p in parameters]


_ARG = re.compile(r"(\w+(?:, \w+)*): (.*)")  # "name: text" or "name, other: text"
_ROLE = re.compile(r":\w+:`(~?)\.?([^`]+)`")  # :class:`~.passes.X` -> X, :mod:`a.b` -> a.b


def docstring_args(owner: type) -> dict[str, str]:
    """Name -> plain text of the ``Args:`` section of ``owner``'s docstring; ``a, b: text`` gives both the text."""
    lines = (inspect.getdoc(owner) or "").splitlines()
    start = next((i + 1 for i, line in enumerate(lines) if line.strip() == "Args:"), len(lines))
    texts: dict[str, str] = {}
    indent: int | None = None
    names: list[str] = []
    for line in lines[start:]:
        depth = len(line) - len(line.lstrip())
        indent = depth if indent is None else indent
        entry = _ARG.fullmatch(line.strip())
        if not line.strip() or depth < indent or (depth == indent and entry is None):
            break
        if depth == indent and entry is not None:
            names = entry[1].split(", ")
            texts.update(dict.fromkeys(names, entry[2]))
        else:  # a continuation line
            texts.update({name: f"{texts[name]} {line.strip()}" for name in names})
    return {name: _plain(text) for name, text in texts.items()}


def _plain(text: str) -> str:
    """A docstring's text as a help line: roles and literals as plain words, a capital first letter."""
    text = _ROLE.sub(lambda m: m[2].split(".")[-1] if m[1] else m[2], text).replace("``", "")
    return text[:1].upper() + text[1:]


def setting_option(recipe: type, name: str, **limits: Any) -> Any:
    """The option :func:`recipe_options` derives from ``recipe``'s field ``name`` (with typer's ``limits``, e.g.
    ``min``), as an annotation, for commands that declare it themselves with their own default."""
    s = next(s for s in recipe_settings(recipe) if s.name == name)
    option = _option(s, s.flags, None, False, limits)
    if option is None:
        raise TypeError(f"{recipe.__name__}.{name} has no command-line form")
    return option.annotation


def recipe_options(recipe: type, *, build: Callable[..., Any] | None = None, **options: Any) -> Callable[[F], F]:
    """Options derived from the dataclass ``recipe`` (:func:`settings_options`); the command receives the instance
    as ``config``."""
    return settings_options(recipe.__name__, recipe_settings(recipe), build or recipe, "config", **options)


def estimator_options(
    estimator: type, *, into: str, build: Callable[..., Any] | None = None, **options: Any
) -> Callable[[F], F]:
    """Options derived from ``estimator``'s ``__init__`` (:func:`settings_options`), each default and type from its
    signature, each help from its docstring; the command receives the estimator as ``into``."""
    return settings_options(estimator.__name__, estimator_settings(estimator), build or estimator, into, **options)


def settings_options(
    owner: str,
    settings: list[Setting],
    make: Callable[..., Any],
    into: str,
    *,
    only: Iterable[str] | None = None,
    skip: Iterable[str] = (),
    notes: dict[str, str] | None = None,
    flags: dict[str, str] | None = None,
    parse: dict[str, Callable[[str], Any]] | None = None,
    fixed: dict[str, Any] | None = None,
    alias: str | None = None,
    limits: dict[str, dict[str, Any]] | None = None,
) -> Callable[[F], F]:
    """Derive a command's options from ``settings`` (of ``owner``); the command's parameter ``into`` receives
    ``make(**given)`` of only the settings given: ``fixed`` (the command's own values), under a ``--config FILE``
    (JSON or TOML, any setting), under the options given on the command line.

    Each setting (of ``only``, less ``skip`` and those the command declares) of a plain type (bool, int, float, str,
    path, Literal, optional; a tuple of str repeats) becomes ``--setting-name`` (or its ``flags``, or
    ``flags[name]``) with its default and help (``notes[name]`` after it) and typer's ``limits[name]`` (``min``).
    One in ``parse`` is a string option (a sequence default shown comma-joined) that ``parse[name]`` reads, as it
    reads a string from the file.
    ``alias``: an old spelling of ``--config``, hidden, that says so when used.
    """
    chosen, skipped, extra, renamed = None if only is None else set(only), set(skip), notes or {}, flags or {}
    parsers, known = parse or {}, [s.name for s in settings]
    about = f"JSON or TOML file of {owner} settings (any of them); options given here win."
    config_files = [_config_option("config_file", ("--config",), about)]
    if alias is not None:
        config_files.append(_config_option("config_alias", (alias,), None, hidden=True))

    def decorate(func: F) -> F:
        declared = set(inspect.signature(func).parameters)
        derived: list[inspect.Parameter] = []
        names: dict[str, str] = {}  # an option's parameter -> its setting
        for s in settings:
            if s.name in declared or s.name in skipped or (chosen is not None and s.name not in chosen):
                continue
            flag = (renamed[s.name],) if s.name in renamed else s.flags
            option = _option(s, flag, extra.get(s.name), s.name in parsers, (limits or {}).get(s.name, {}))
            if option is not None:
                derived.append(option)
                names[option.name] = s.name

        def values_given(values: dict[str, Any]) -> Any:
            from typer.main import get_current_context  # typer's own copy of click: its context, not click's

            ctx = get_current_context()
            path, old = values.pop("config_file"), values.pop("config_alias", None)
            if old is not None:
                if path is not None:
                    raise SubspacesError(f"give --config or {alias}, not both ({alias} is its old spelling)")
                echo(
                    f"{alias} is now --config (JSON or TOML); {alias} goes in the next release",
                    label="note:",
                    style="yellow",
                )
                path = old
            chosen_values = {**(fixed or {}), **read_config(path, owner, known)}
            for name, value in values.items():  # given on the command line: wins over the file
                if given(ctx, name):
                    chosen_values[names[name]] = tuple(value) if isinstance(value, list) else value
            for name, read in parsers.items():
                if isinstance(chosen_values.get(name), str):
                    chosen_values[name] = read(chosen_values[name])
            return make(**chosen_values)

        return expand(into, [*derived, *config_files], values_given)(func)

    return decorate


def _config_option(name: str, flags: tuple[str, ...], help: str | None, hidden: bool = False) -> inspect.Parameter:
    option = typer.Option(*flags, help=help, hidden=hidden)
    annotation = Annotated[Optional[Path], option]
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=annotation)


def expand(name: str, options: list[inspect.Parameter], make: Callable[[dict[str, Any]], Any]) -> Callable[[F], F]:
    """Put ``options`` in the place of the command's parameter ``name``, which receives ``make({option: value})``."""

    def decorate(func: F) -> F:
        signature = inspect.signature(func, eval_str=True)
        names = [option.name for option in options]

        @functools.wraps(func)
        def wrapper(**kwargs: Any) -> Any:
            made = make({n: kwargs.pop(n) for n in names})
            return func(**kwargs, **{name: made})

        listed = [q for p in signature.parameters.values() for q in (options if p.name == name else [p])]
        parameters = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in listed]
        wrapper.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
        wrapper.__annotations__ = {p.name: p.annotation for p in parameters}
        return wrapper  # type: ignore[return-value]

    return decorate


def _option(
    s: Setting, flags: tuple[str, ...] | None, note: str | None, parsed: bool, limits: dict[str, Any]
) -> inspect.Parameter | None:
    """The typer parameter of one setting, or None where its type has no plain command-line form."""
    args = typing.get_args(s.hint)
    optional = type(None) in args
    base = next((a for a in args if a is not type(None)), s.hint) if optional and len(args) == 2 else s.hint
    repeated = typing.get_origin(base) is tuple and typing.get_args(base) == (str, ...)
    default = s.default
    if parsed:  # a string the command's parser reads
        base, optional, repeated = str, False, False
        default = ",".join(map(str, default)) if isinstance(default, (list, tuple)) else default
    elif typing.get_origin(base) is not Literal and base not in _OPTION_TYPES and not repeated:
        return None
    flag = "--" + s.name.replace("_", "-")
    declaration = flags or ((f"{flag}/--no-{s.name.replace('_', '-')}",) if base is bool and not optional else (flag,))
    info = typer.Option(*declaration, help=" ".join(filter(None, (s.help, note))) or None, **limits)
    name = declaration[0].split("/")[0].lstrip("-").replace("-", "_")
    if repeated:  # None (not given) leaves the setting's default
        default = None
    kind = Optional[list[str]] if repeated else Optional[base] if optional else base
    annotation = Annotated[kind, info]  # type: ignore[valid-type]
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)


def given(ctx: Any, name: str) -> bool:
    """Whether the command's option ``name`` was given (command line or environment), not defaulted."""
    source = ctx.get_parameter_source(name)
    return source is not None and source.name != "DEFAULT"


def read_config(path: Path | None, owner: str, known: Iterable[str]) -> dict[str, Any]:
    """The settings of a ``--config`` file (JSON, or TOML by suffix), checked to be among ``known`` of ``owner``."""
    import json
    import tomllib

    if path is None:
        return {}
    check_file(path)
    try:
        settings = tomllib.loads(path.read_text()) if path.suffix == ".toml" else json.loads(path.read_text())
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        raise DataError(f"--config is not valid {'TOML' if path.suffix == '.toml' else 'JSON'}: {exc}", path) from None
    if not isinstance(settings, dict):
        raise DataError("--config must hold an object of settings", path)
    unknown = sorted(set(settings) - set(known))
    if unknown:
        raise DataError(
            f"--config sets {', '.join(unknown)}, not settings of {owner} (those are: {', '.join(sorted(known))})",
            path,
        )
    return settings
