"""The one form of a result: a dataclass read by its attributes, whose :meth:`~JSONResult.to_dict` is exactly the
JSON its command writes (an evaluator's metrics are a flat ``dict[str, float]`` instead).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import fields
from typing import Any, ClassVar, Self

from subspaces.io import save_json


class JSONResult:
    """A base for dataclasses: fields in :attr:`OMIT_IF_NONE` are left out of the JSON when None (a metric or
    block that does not apply), every other field is written, nested results as their own JSON form."""

    OMIT_IF_NONE: ClassVar[frozenset[str]] = frozenset()

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if value is None and f.name in self.OMIT_IF_NONE:
                continue
            out[f.name] = value.to_dict() if isinstance(value, JSONResult) else value
        return out

    @classmethod
    def from_dict(cls, saved: Mapping[str, Any]) -> Self:
        """A result from its saved form: keys this version does not know are dropped, fields the saved form
        lacks keep their defaults (nested results are the subclass's to read)."""
        names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
        return cls(**{name: value for name, value in saved.items() if name in names})

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write :meth:`to_dict` as JSON, atomically (a reader never sees half a file)."""
        save_json(path, self.to_dict())
