"""Entry point of the ``subspaces`` command. Each capability registers its commands in its own module."""

from __future__ import annotations

import importlib

from subspaces.cli.groups import app, plain_help

# Modules that attach commands to the groups in ``subspaces.cli.groups``; importing them is cheap
# (each command imports torch and the library lazily, inside its body).
COMMAND_MODULES = (
    "subspaces.cli.core",  # models, encode, eval sts
    "subspaces.cli.train",  # train simcse
    "subspaces.cli.matryoshka",  # eval dims, train matryoshka
    "subspaces.cli.align",  # align fit/apply/eval
    "subspaces.cli.cond",  # cond train/eval, bench csts-cache
    "subspaces.cli.kgc",  # kgc train/eval
    "subspaces.cli.store",  # store create/add/info/index/search/migrate
    "subspaces.cli.serve",  # serve (the HTTP server)
    "subspaces.cli.adapt",  # adapt fit/apply (Matryoshka adapter for stored vectors)
    "subspaces.cli.search",  # search (exact or funnel over .npy vectors)
)

for _module in COMMAND_MODULES:
    importlib.import_module(_module)
plain_help(app)  # every command's help screen: STORE, not {store}; --help, not --help <bool>


def main() -> None:
    import os

    # The process is ours here (not a library user's): keep huggingface_hub and transformers off the network,
    # before either is imported by a command.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
