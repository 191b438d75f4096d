"""Rows to add to a store, read from a text file (one text a line; the id is the 0-based line number) or JSON lines."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from subspaces.errors import DataError


@dataclass
class Rows:
    ids: list[str] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    metadata: list[dict[str, Any] | None] = field(default_factory=list)


def read_rows(path: str | os.PathLike[str], *, id_field: str | None = None, text_field: str = "text") -> Rows:
    """Read ``.txt``/``.txt.gz`` (blank lines skipped, their numbers kept) or ``.jsonl``/``.jsonl.gz``.

    In JSON lines the text is ``text_field``, the id ``id_field`` (default: ``"id"`` when present, else the line
    number), and every other field is the row's metadata.
    """
    from subspaces.io import open_text

    p = Path(path)
    is_jsonl = p.name.lower().removesuffix(".gz").endswith((".jsonl", ".ndjson"))
    rows = Rows()
    try:
        with open_text(p) as handle:
            for number, line in enumerate(handle):
                text = line.rstrip("\n").rstrip("\r")
                if not text.strip():
                    continue
                if is_jsonl:
                    _add_record(rows, text, number, p, id_field, text_field)
                else:
                    rows.ids.append(str(number))
                    rows.texts.append(text)
                    rows.metadata.append(None)
    except UnicodeDecodeError as exc:
        raise DataError(f"not UTF-8 text ({exc.reason} at byte {exc.start})", path=p) from exc
    except (OSError, EOFError) as exc:
        raise DataError(f"cannot read: {exc}", path=p) from exc
    if not rows.ids:
        raise DataError("holds no text", path=p)
    return rows


def _add_record(rows: Rows, line: str, number: int, path: Path, id_field: str | None, text_field: str) -> None:
    try:
        record = json.loads(line)
    except ValueError as exc:
        raise DataError(f"not JSON ({exc})", path=path, line=number + 1) from exc
    if not isinstance(record, dict):
        raise DataError("expected a JSON object", path=path, line=number + 1)
    text = record.pop(text_field, None)
    if not isinstance(text, str) or not text.strip():
        raise DataError(f"no text in field {text_field!r} (use --text-field)", path=path, line=number + 1)
    key = id_field or "id"
    if key in record:
        row_id = record.pop(key)
    elif id_field is not None:
        raise DataError(f"no id field {id_field!r}", path=path, line=number + 1)
    else:
        row_id = number
    if not isinstance(row_id, (str, int)) or isinstance(row_id, bool):
        raise DataError(f"id {row_id!r} must be a string or an integer", path=path, line=number + 1)
    rows.ids.append(str(row_id))
    rows.texts.append(text)
    rows.metadata.append(record or None)
