"""The typer apps every command module attaches to. Kept apart from ``app`` so modules can import them."""

from __future__ import annotations

from typing import Any

import typer
from typer.core import TyperArgument, TyperCommand, TyperGroup

from subspaces.cli.common import user_errors


def _usage_pieces(command: Any, ctx: Any) -> list[str]:
    """``[OPTIONS] STORE [QUERY]``: arguments as click (and every docstring here) names them, not typer's
    ``{store} [query]``, whose braces read as a set of choices."""
    pieces = [command.options_metavar] if command.options_metavar else []
    for param in command.get_params(ctx):
        if isinstance(param, TyperArgument):
            name = param.metavar or (param.name or "").upper()
            name = name if param.required else f"[{name}]"
            pieces.append(name + ("..." if param.nargs != 1 else ""))
        else:
            pieces.extend(param.get_usage_pieces(ctx))
    return pieces


class _Flags:
    def get_params(self, ctx: Any) -> list[Any]:
        """A flag (``--help``, ``--ann``, ``--normalize/--no-normalize``) takes no value: no ``<bool>`` after it."""
        params = super().get_params(ctx)  # type: ignore[misc]
        for param in params:
            if getattr(param, "is_flag", False) and param.metavar is None:
                param.metavar = ""
        return params


class Command(_Flags, TyperCommand):
    """A command whose help screen shows its arguments and flags as typed."""

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        return _usage_pieces(self, ctx)


class Group(_Flags, TyperGroup):
    """A group whose help screen shows its flags as typed (``--help``, not ``--help <bool>``)."""

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        return [*_usage_pieces(self, ctx), self.subcommand_metavar]


class Commands(typer.Typer):
    """A typer app of :class:`Group` whose commands are :class:`Command` and report user errors as one line
    (:func:`~subspaces.cli.common.user_errors`); ``interrupted`` is what a command prints on Ctrl-C."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(cls=Group, **kwargs)

    def command(self, name: str | None = None, *, interrupted: str | None = None, **kwargs: Any) -> Any:
        register = super().command(name, **{"cls": Command, **kwargs})
        return lambda func: register(user_errors(func, interrupted=interrupted))


app = Commands(
    name="subspaces",
    help="Sentence embeddings that adapt: SimCSE, Hyper-CL, Matryoshka+MIC, mini-vec2vec.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


def capability(name: str, help: str) -> Commands:
    """The app of one capability: its commands are its verbs (``subspaces NAME VERB``)."""
    sub = Commands(help=help, no_args_is_help=True)
    app.add_typer(sub, name=name)
    return sub


model_app = capability("model", "Encoders: list the bundled models, encode texts, the STS table.")
simcse_app = capability("simcse", "SimCSE: train an encoder contrastively (unsupervised or on NLI triplets).")
matryoshka_app = capability("matryoshka", "Matryoshka/MIC: train nested dimensions; evaluate truncated ones.")
vectors_app = capability("vectors", "Vector files (.npy, .parquet): search them exactly, by funnel or by codes.")
align_app = capability("align", "Unsupervised alignment of embedding spaces (mini-vec2vec).")
adapt_app = capability("adapt", "Matryoshka adapter: make the prefixes of embeddings you already have usable.")
cond_app = capability("cond", "Conditional similarity (Hyper-CL tri-encoders) on WiC and C-STS.")
kgc_app = capability("kgc", "Knowledge-graph completion (SimKGC bi-encoder, Hyper-CL tri-encoder).")
store_app = capability(
    "store", "A vector store (LanceDB folder): add texts, search them exactly, by ANN or by Matryoshka funnel, migrate."
)
