"""Where datasets and caches live. Resolved at call time, never at import time."""

from __future__ import annotations

import os
from pathlib import Path

from subspaces.errors import DataError

DATA_ENV = "SUBSPACES_DATA"
CACHE_ENV = "SUBSPACES_CACHE"


def data_dir() -> Path:
    """The folder that holds the datasets (``stsb/``, ``sts12-16/``, ...).

    Order: ``$SUBSPACES_DATA``; ``../shared/data`` relative to the working directory; ``./data``.
    An explicit ``$SUBSPACES_DATA`` that does not exist is an error rather than a silent fallback.
    """
    env = os.environ.get(DATA_ENV)
    if env:
        path = Path(env).expanduser()
        if not path.is_dir():
            raise DataError(f"${DATA_ENV} points to {path}, which is not a folder")
        return path
    for candidate in (Path("../shared/data"), Path("data")):
        if candidate.is_dir():
            return candidate.resolve()
    raise DataError(
        f"no data folder found: set ${DATA_ENV}, or run from a folder that has ../shared/data or ./data"
    )


def dataset_dir(name: str) -> Path:
    """The folder of one dataset, e.g. ``dataset_dir("stsb")``, with a clear error if it is missing."""
    path = data_dir() / name
    if not path.is_dir():
        raise DataError(f"dataset {name!r} not found under {data_dir()} (set ${DATA_ENV} to the folder that holds it)")
    return path


def cache_dir() -> Path:
    """A writable cache folder for derived artefacts (converted models, entity embeddings)."""
    env = os.environ.get(CACHE_ENV)
    path = Path(env).expanduser() if env else Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "subspaces"
    path.mkdir(parents=True, exist_ok=True)
    return path
