"""NLI triplets ``sent0,sent1,hard_neg`` (SimCSE's ``nli_for_simcse.csv`` layout) for supervised SimCSE."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from subspaces.errors import DataError
from subspaces.io import open_text


@dataclass(frozen=True)
class Triplet:
    anchor: str
    positive: str
    negative: str | None = None


def is_csv(path: str | Path) -> bool:
    """Whether ``path`` names a CSV file (``.csv`` or ``.csv.gz``), the format of pair/triplet training data."""
    return Path(path).name.lower().endswith((".csv", ".csv.gz"))


def read_triplets(path: str | Path) -> list[Triplet]:
    """Read a CSV (``.csv`` or ``.csv.gz``) with a header naming ``sent0`` and ``sent1`` (optionally ``hard_neg``)."""
    p = Path(path)
    try:
        with open_text(p, newline="") as handle:
            rows = _parse(csv.reader(handle), p)
    except UnicodeDecodeError as exc:
        raise DataError(f"not UTF-8 text ({exc.reason} at byte {exc.start})", path=p) from exc
    except (OSError, EOFError, csv.Error) as exc:  # a truncated gzip, an unreadable file, a broken quote
        raise DataError(f"cannot read as CSV: {exc}", path=p) from exc
    if not rows:
        raise DataError("holds no triplets", path=p)
    return rows


def training_rows(path: str | Path, limit: int | None = None) -> list[tuple[str, ...]]:
    """A triplet CSV as loss rows: ``(anchor, positive, negative)``, or ``(anchor, positive)`` without negatives."""
    rows: list[tuple[str, ...]] = [
        (t.anchor, t.positive, t.negative) if t.negative else (t.anchor, t.positive) for t in read_triplets(path)
    ]
    return rows[:limit] if limit else rows


def _parse(reader, p: Path) -> list[Triplet]:
    try:
        header = next(reader)
    except StopIteration:
        raise DataError("file is empty", path=p) from None
    if "sent0" not in header or "sent1" not in header:
        raise DataError(f"header must name sent0 and sent1 (and optionally hard_neg), got {header}", path=p, line=1)
    i0, i1 = header.index("sent0"), header.index("sent1")
    ineg = header.index("hard_neg") if "hard_neg" in header else None
    rows: list[Triplet] = []
    for row in reader:
        lineno = reader.line_num
        if not row or all(not c.strip() for c in row):
            continue
        if len(row) != len(header):
            raise DataError(f"expected {len(header)} fields, found {len(row)}", path=p, line=lineno)
        neg = row[ineg] if ineg is not None else None
        if not row[i0].strip() or not row[i1].strip() or (ineg is not None and not (neg or "").strip()):
            raise DataError("empty sentence", path=p, line=lineno)
        rows.append(Triplet(row[i0], row[i1], neg))
    return rows
