"""Typed metadata columns: each top-level scalar field of a row's metadata (kept whole as JSON) becomes a column
typed on its first write (string, int64, float64 or bool), which ``where=`` filters read. A value that does not
fit its column is refused before anything is written; nested values, null-only fields and names that are no plain
SQL identifier stay JSON only. See docs/store.md ("Delete, typed metadata and filters").
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Sequence
from typing import Any

from subspaces.errors import DataError

BASE = ("id", "text", "vector", "metadata")
NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
TYPES = {"string": str, "int64": int, "double": float, "bool": bool}


def parsed(value: Any) -> dict[str, Any] | None:
    """A row's metadata as a dict (None when it has none); a JSON string is parsed."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None  # a metadata string that is no JSON (Store.add takes strings as given): JSON only
    return value if isinstance(value, dict) else None


def check_finite(meta: dict[str, Any] | None, row: str, path: Any = None) -> None:
    """Refuse ``meta`` (of ``row``) where a field holds NaN or an infinity at any depth: JSON has none."""
    for name, value in (meta or {}).items():
        bad = _non_finite(value)
        if bad is not None:
            raise DataError(
                f"{row}: metadata field {name!r} holds a non-finite number ({bad}): JSON has none; give a number or "
                "null",
                path,
            )


def _non_finite(value: Any) -> float | None:
    if isinstance(value, float):
        return None if math.isfinite(value) else value
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        for item in value:
            bad = _non_finite(item)
            if bad is not None:
                return bad
    return None


def _kind(value: Any) -> str | None:
    """The column type a scalar value asks for (None for null, nested values and values no column holds)."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int64" if -(2**63) <= value < 2**63 else None
    if isinstance(value, float):
        return "double"
    if isinstance(value, str):
        return "string"
    return None


def infer(
    rows: Iterable[dict[str, Any] | None],
    known: dict[str, str],
    new: dict[str, str] | None = None,
    *,
    where: str = "row",
    first: int = 0,
) -> dict[str, str]:
    """``new`` (fields found by earlier calls) with the column types of the scalar fields of ``rows`` that the ``known``
    columns (name -> Arrow type name) lack; refuses, naming the row (the first is ``first``), a value that fits neither
    its column nor its field's other values."""
    new = {} if new is None else new
    for i, meta in enumerate(rows, first):
        if not meta:
            continue
        for name, value in meta.items():
            if not NAME.match(name) or name.lower() in BASE or value is None:  # no column of its own
                continue
            kind = _kind(value)
            if kind is None:
                if isinstance(value, int):
                    raise DataError(f"{where} {i}: metadata field {name!r} holds {value}, beyond a 64-bit integer")
                continue  # nested: kept in the JSON only
            have = known.get(name) or new.get(name)
            if have is None:
                new[name] = kind
            elif have != kind:
                if have == "double" and kind == "int64":
                    continue
                if have == "int64" and kind == "double" and name not in known:
                    new[name] = "double"  # ints and floats in one new field: a float column
                    continue
                raise DataError(
                    f"{where} {i}: metadata field {name!r} holds a {type(value).__name__} ({value!r}); its column "
                    f"holds {have} values: give that field one type (a typed column has one)"
                )
    return new


def arrow_type(kind: str) -> Any:
    import pyarrow as pa

    return {"string": pa.string(), "int64": pa.int64(), "double": pa.float64(), "bool": pa.bool_()}[kind]


def table_columns(schema: Any) -> dict[str, str]:
    """The typed metadata columns of a table's Arrow schema (name -> type name)."""
    return {f.name: str(f.type) for f in schema if f.name not in BASE}


def column_values(metadata: Sequence[dict[str, Any] | None], name: str, kind: str) -> Any:
    """The Arrow array of field ``name`` over ``metadata`` (null where a row lacks it or holds a nested value)."""
    import pyarrow as pa

    values = []
    for meta in metadata:
        value = meta.get(name) if meta else None
        if value is not None and _kind(value) is None:
            value = None
        elif kind == "double" and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        values.append(value)
    return pa.array(values, arrow_type(kind))
