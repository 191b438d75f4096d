"""Entry point of the ``subspaces`` command. Each capability registers its commands in its own module."""

from __future__ import annotations

import importlib
import os

from subspaces.cli.groups import app

# Modules that attach commands to the capabilities in ``subspaces.cli.groups`` (``subspaces <capability> <verb>``);
# importing them is cheap (each command imports torch and the library lazily, inside its body).
COMMAND_MODULES = (
    "subspaces.cli.core",  # model list/encode/eval
    "subspaces.cli.train",  # simcse train
    "subspaces.cli.matryoshka",  # matryoshka train/eval
    "subspaces.cli.search",  # vectors search (exact, funnel or codes over .npy vectors)
    "subspaces.cli.align",  # align fit/apply/eval
    "subspaces.cli.adapt",  # adapt fit/apply (Matryoshka adapter for stored vectors)
    "subspaces.cli.cond",  # cond train/eval/search/bench
    "subspaces.cli.kgc",  # kgc train/eval
    "subspaces.cli.store",  # store create/add/import/search/migrate/...
    "subspaces.cli.serve",  # serve (the HTTP server)
)

for _module in COMMAND_MODULES:
    importlib.import_module(_module)


def main() -> None:
    # The process is ours here (not a library user's): keep huggingface_hub and transformers off the network,
    # before either is imported by a command.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
