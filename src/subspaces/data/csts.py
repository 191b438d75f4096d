"""Conditional similarity records and the C-STS file format (Deshpande et al., 2023): CSVs of ``sentence1,
sentence2, condition, label`` (1-5; -1 in the hidden test split), predictions as JSON ``{"idx": score}``. The data
may not be redistributed, so it is not bundled.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from subspaces.errors import DataError
from subspaces.io import read_csv, save_json

CSTS_LABEL_RANGE = (1.0, 5.0)
CSTS_SPLITS = ("train", "validation", "test")
REQUIRED_COLUMNS = ("sentence1", "sentence2", "condition", "label")


@dataclass(frozen=True)
class ConditionalPair:
    """Two sentences, a condition, and a gold label on the dataset's own scale (``None`` when withheld)."""

    sentence1: str
    sentence2: str
    condition: str
    label: float | None
    idx: int  # the row's id in the official prediction file


def scale_label(label: float, low: float, high: float) -> float:
    """Map a label on ``[low, high]`` to ``[0, 1]`` (the target of the ``mse`` objective)."""
    return (label - low) / (high - low)


def read_csts(path: str | Path) -> list[ConditionalPair]:
    """Read one C-STS CSV. ``idx`` comes from an ``idx`` column if present, else the 0-based row number.

    Labels must be numbers in 1..5, or -1/empty for withheld ones (read as ``None``).
    """
    rows: list[ConditionalPair] = []
    seen_idx: set[int] = set()
    for number, line, row in read_csv(path, REQUIRED_COLUMNS, ("idx",)):
        s1, s2, cond = row["sentence1"], row["sentence2"], row["condition"]
        if not s1.strip() or not s2.strip() or not cond.strip():
            raise DataError("empty sentence or condition", path=path, line=line)
        label = _label(row["label"], path, line)
        try:
            idx = int(row["idx"]) if "idx" in row else number
        except ValueError:
            raise DataError(f"idx {row['idx']!r} is not an integer", path=path, line=line) from None
        if idx in seen_idx:
            raise DataError(f"duplicate idx {idx}", path=path, line=line)
        seen_idx.add(idx)
        rows.append(ConditionalPair(s1, s2, cond, label, idx))
    if not rows:
        raise DataError("holds no rows", path=path)
    return rows


def load_csts(data_dir: str | Path, split: str) -> list[ConditionalPair]:
    """``data_dir/csts_{split}.csv``; a clear error says where to get the data when it is missing."""
    if split not in CSTS_SPLITS:
        raise DataError(f"unknown C-STS split {split!r}; choose one of {', '.join(CSTS_SPLITS)}")
    path = Path(data_dir) / f"csts_{split}.csv"
    if not path.is_file():
        raise DataError(
            "C-STS split not found: the data is not redistributable; request it from princeton-nlp/c-sts and "
            "pass the folder holding csts_{train,validation,test}.csv with --data",
            path=path,
        )
    return read_csts(path)


def write_predictions(path: str | Path, rows: Sequence[ConditionalPair], scores: Sequence[float]) -> None:
    """The official C-STS prediction file: ``{"idx": score}`` (scores on the 1-5 label scale), written atomically."""
    save_json(path, {str(r.idx): float(s) for r, s in zip(rows, scores, strict=True)})


def _label(text: str, path: str | Path, line: int) -> float | None:
    text = text.strip()
    if text in ("", "-1", "-1.0"):
        return None
    try:
        value = float(text)
    except ValueError:
        raise DataError(f"label {text!r} is not a number", path=path, line=line) from None
    low, high = CSTS_LABEL_RANGE
    if not low <= value <= high:
        raise DataError(
            f"label {value} is outside {low:g}..{high:g} (or -1 for a withheld label)", path=path, line=line
        )
    return value
