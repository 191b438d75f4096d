"""NLI triplets ``sent0,sent1,hard_neg`` (SimCSE's ``nli_for_simcse.csv`` layout) for supervised SimCSE."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from subspaces.errors import DataError
from subspaces.io import read_csv


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
    rows: list[Triplet] = []
    for _, line, row in read_csv(path, ("sent0", "sent1"), ("hard_neg",)):
        neg = row.get("hard_neg")
        if not row["sent0"].strip() or not row["sent1"].strip() or (neg is not None and not neg.strip()):
            raise DataError("empty sentence", path=path, line=line)
        rows.append(Triplet(row["sent0"], row["sent1"], neg))
    if not rows:
        raise DataError("holds no triplets", path=path)
    return rows


def training_rows(path: str | Path, limit: int | None = None) -> list[tuple[str, ...]]:
    """A triplet CSV as loss rows: ``(anchor, positive, negative)``, or ``(anchor, positive)`` without negatives."""
    rows: list[tuple[str, ...]] = [
        (t.anchor, t.positive, t.negative) if t.negative else (t.anchor, t.positive) for t in read_triplets(path)
    ]
    return rows[:limit] if limit else rows
