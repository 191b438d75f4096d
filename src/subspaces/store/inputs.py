"""Rows to add to a store, read from a text file (one text a line), a CSV/TSV file with a header, or JSON lines. A
row's id is its own where the input has one, else derived from its text (:func:`text_id`). Text and CSV rows with
nothing visible are skipped and counted; in JSON lines they are refused.
"""

from __future__ import annotations

import csv
import json
import os
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from subspaces.errors import DataError
from subspaces.fingerprint import sha256_hex
from subspaces.io import open_text, read_jsonl

BOM = "\ufeff"  # a byte-order mark that some editors (Excel's "CSV UTF-8") write first: not part of the text


@dataclass
class Rows:
    ids: list[str] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    metadata: list[dict[str, Any] | None] = field(default_factory=list)
    derived: bool = True  # every id was derived from its text (none given by the input)
    invisible: int = 0  # rows skipped for holding no visible text (not counting blank lines of a text file)
    repeated: int = 0  # text lines whose text an earlier line already gave (one row kept)


def text_id(text: str) -> str:
    """The id of a text that has none of its own: the first 16 hex digits of its UTF-8 SHA-256 (stable)."""
    return sha256_hex(text.encode("utf-8"), 16)


def is_text_id(row_id: str) -> bool:
    """Whether ``row_id`` has the form of :func:`text_id` (16 lowercase hex digits)."""
    return len(row_id) == 16 and all(c in "0123456789abcdef" for c in row_id)


def visible(text: str) -> bool:
    """Whether ``text`` holds a character that is neither blank nor a control, format or surrogate code point."""
    return any(not ch.isspace() and unicodedata.category(ch) not in ("Cc", "Cf", "Cs") for ch in text)


def unicode_problem(value: Any) -> str | None:
    """Why ``value`` (a string or JSON-like data) cannot be stored as UTF-8 text (a lone surrogate), or None."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"a lone surrogate \\u{ord(text[exc.start]):04x} (a JSON escape that is no Unicode character)"
    return None


def check_unicode(value: Any, what: str, path: Any = None) -> None:
    """Refuse ``value`` (``what`` names it) where it cannot be stored as UTF-8 text (:func:`unicode_problem`)."""
    problem = unicode_problem(value)
    if problem is not None:
        raise DataError(f"{what} holds {problem}", path)


def read_rows(path: str | os.PathLike[str], *, id_field: str | None = None, text_field: str = "text") -> Rows:
    """Read ``.txt`` (blank lines skipped), ``.csv``/``.tsv`` (a header row) or ``.jsonl``/``.ndjson``, each maybe
    gzipped; any other name is read as text lines. The text is ``text_field`` (in CSV, else the only column), the id
    ``id_field`` (default: ``id`` where present, else derived from the text), every other field metadata."""
    p = Path(path)
    if p.is_dir():
        raise DataError("is a folder; give a .txt, .csv or .jsonl file", path=p)
    name = p.name.lower().removesuffix(".gz")
    rows = Rows()
    try:
        if name.endswith((".jsonl", ".ndjson")):
            seen: set[str] = set()
            for number, record in read_jsonl(p):
                _add_record(rows, record, number, p, id_field, text_field, seen)
        elif name.endswith((".csv", ".tsv")):
            with open_text(p, newline="") as handle:
                _read_csv(rows, handle, p, "\t" if name.endswith(".tsv") else ",", id_field, text_field)
        else:
            if id_field is not None:
                raise DataError(f"--id-field {id_field!r} is for .jsonl or .csv input; a text file has no fields")
            _read_lines(rows, p)
    except UnicodeDecodeError as exc:
        raise DataError(f"not UTF-8 text ({exc.reason} at byte {exc.start})", path=p) from exc
    except (OSError, EOFError) as exc:
        raise DataError(f"cannot read: {exc}", path=p) from exc
    if not rows.ids:
        skipped = f" ({rows.invisible:,} rows with no visible text skipped)" if rows.invisible else ""
        raise DataError(f"holds no text{skipped}", path=p)
    return rows


def _read_lines(rows: Rows, path: Path) -> None:
    seen: set[str] = set()
    with open_text(path) as handle:
        for number, line in enumerate(handle):
            text = line.rstrip("\n").rstrip("\r")
            if number == 0:
                text = text.removeprefix(BOM)
            if not text.strip():
                continue
            _add_text(rows, text, None, None, seen)


def _add_text(rows: Rows, text: str, row_id: str | None, meta: dict[str, Any] | None, seen: set[str]) -> None:
    """Append a row, unless it has no visible text (counted) or repeats a text (derived ids: the first one's
    metadata is kept)."""
    if not visible(text):
        rows.invisible += 1
        return
    if row_id is None:
        row_id = text_id(text)
        if row_id in seen:
            rows.repeated += 1
            return
        seen.add(row_id)
    else:
        rows.derived = False
    rows.ids.append(row_id)
    rows.texts.append(text)
    rows.metadata.append(meta or None)


def _read_csv(rows: Rows, handle: Any, path: Path, delimiter: str, id_field: str | None, text_field: str) -> None:
    reader = csv.reader(handle, delimiter=delimiter, strict=True)
    try:
        header = next(reader, None)
        if header is None:
            return
        header = [h.strip() for h in header]
        header[0] = header[0].removeprefix(BOM).strip()
        if text_field in header:
            text_col = header.index(text_field)
        elif len(header) == 1:
            text_col = 0
        else:
            raise DataError(
                f"no column {text_field!r} among the header's {', '.join(map(repr, header))} (use --text-field)",
                path=path,
                line=1,
            )
        id_name = id_field or "id"
        if id_name in header and header.index(id_name) != text_col:
            id_col: int | None = header.index(id_name)
        elif id_field is not None:
            raise DataError(f"no id column {id_field!r} in the header", path=path, line=1)
        else:
            id_col = None
        seen: set[str] = set()
        for record in reader:
            if not record or (len(record) == 1 and not record[0].strip()):
                continue  # a blank line
            line = reader.line_num
            if len(record) != len(header):
                raise DataError(f"{len(record)} fields where the header has {len(header)}", path=path, line=line)
            meta = {h: v for i, (h, v) in enumerate(zip(header, record, strict=True)) if i not in (text_col, id_col)}
            row_id = None
            if id_col is not None:
                row_id = record[id_col].strip()
                if not row_id:
                    raise DataError(f"empty id in column {id_name!r}", path=path, line=line)
            _add_text(rows, record[text_col], row_id, meta, seen)
    except csv.Error as exc:
        raise DataError(f"not valid CSV ({exc})", path=path, line=reader.line_num) from exc


def _add_record(
    rows: Rows, record: dict[str, Any], number: int, path: Path, id_field: str | None, text_field: str, seen: set[str]
) -> None:
    problem = unicode_problem(record)
    if problem is not None:
        raise DataError(f"holds {problem}; fix or drop the line", path=path, line=number)
    text = record.pop(text_field, None)
    if not isinstance(text, str):
        raise DataError(f"no text in field {text_field!r} (use --text-field)", path=path, line=number)
    if not visible(text):
        raise DataError(f"the text in field {text_field!r} has no visible character", path=path, line=number)
    key = id_field or "id"
    row_id = None
    if key in record:
        row_id = record.pop(key)
        if not isinstance(row_id, (str, int)) or isinstance(row_id, bool):
            raise DataError(f"id {row_id!r} must be a string or an integer", path=path, line=number)
        row_id = str(row_id)
    elif id_field is not None:
        raise DataError(f"no id field {id_field!r}", path=path, line=number)
    _add_text(rows, text, row_id, record, seen)
