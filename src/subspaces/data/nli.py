"""NLI triplets ``sent0,sent1,hard_neg`` (SimCSE's ``nli_for_simcse.csv`` layout) for supervised SimCSE."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from subspaces.errors import DataError


@dataclass(frozen=True)
class Triplet:
    anchor: str
    positive: str
    negative: str | None = None


def read_triplets(path: str | Path) -> list[Triplet]:
    """Read a CSV with a header holding ``sent0`` and ``sent1`` (and optionally ``hard_neg``); quoted as CSV."""
    p = Path(path)
    if not p.is_file():
        raise DataError("file not found", path=p)
    rows: list[Triplet] = []
    with open(p, encoding="utf-8", newline="") as handle:
        reader = csv.reader(handle)
        try:
            header = next(reader)
        except StopIteration:
            raise DataError("file is empty", path=p) from None
        if "sent0" not in header or "sent1" not in header:
            raise DataError(f"header must name sent0 and sent1 (and optionally hard_neg), got {header}", path=p, line=1)
        i0, i1 = header.index("sent0"), header.index("sent1")
        ineg = header.index("hard_neg") if "hard_neg" in header else None
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
    if not rows:
        raise DataError("holds no triplets", path=p)
    return rows
