"""User-facing errors: the CLI prints their message and exits non-zero, without a traceback."""

from __future__ import annotations


class SubspacesError(Exception):
    """An error caused by the user's input (a path, a name, a file's contents), not by a bug."""


class DataError(SubspacesError, ValueError):
    """A data file is missing, empty or malformed. The message names the file and, where known, the line."""

    def __init__(self, message: str, path: object | None = None, line: int | None = None) -> None:
        where = "" if path is None else f"{path}: " if line is None else f"{path}, line {line}: "
        super().__init__(where + message)
        self.path = path
        self.line = line


class ModelNotFoundError(SubspacesError, LookupError):
    """An unknown bundled-model name or a path that holds no model."""


class DimensionError(SubspacesError, ValueError):
    """Embeddings whose shapes do not fit together, or that hold NaN/inf."""


class ConvergenceWarning(UserWarning):
    """A fit finished but its label-free diagnostics say the result is probably wrong (as scikit-learn's)."""
