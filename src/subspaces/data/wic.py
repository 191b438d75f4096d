"""WiC (Word-in-Context) as conditional similarity data: the condition is the target word with its part of speech
(``"carry (verb)"``), the label 1 for the same sense; the sentences are kept unmarked, so their embeddings are
condition-free and cacheable.
"""

from __future__ import annotations

from pathlib import Path

from subspaces.config import dataset_dir
from subspaces.data.csts import ConditionalPair
from subspaces.errors import DataError
from subspaces.io import check_file

WIC_SPLITS = {"train": "train", "validation": "dev", "dev": "dev", "test": "test"}
POS_NAMES = {"N": "noun", "V": "verb"}
WIC_LABEL_RANGE = (0.0, 1.0)


def read_wic(data_path: str | Path, gold_path: str | Path | None = None) -> list[ConditionalPair]:
    """Read ``*.data.txt`` (TSV: word, PoS, i1-i2, sentence1, sentence2) and, if given, its ``*.gold.txt`` (T/F:
    labels 1.0/0.0; None without it)."""
    data_path = check_file(data_path)
    labels: list[float] | None = None
    if gold_path is not None:
        labels = []
        for line_no, text in enumerate(Path(gold_path).read_text(encoding="utf-8").splitlines(), 1):
            if text.strip() not in ("T", "F"):
                raise DataError(f"gold label must be T or F, got {text!r}", path=gold_path, line=line_no)
            labels.append(float(text.strip() == "T"))
    out: list[ConditionalPair] = []
    with open(data_path, encoding="utf-8") as handle:
        for line_no, text in enumerate(handle, 1):
            text = text.rstrip("\n")
            if not text.strip():
                continue
            fields = text.split("\t")
            if len(fields) != 5:
                raise DataError(f"expected 5 tab-separated fields, found {len(fields)}", path=data_path, line=line_no)
            word, pos, indices, s1, s2 = fields
            if pos not in POS_NAMES:
                raise DataError(f"part of speech must be N or V, got {pos!r}", path=data_path, line=line_no)
            try:
                _i1, _i2 = (int(x) for x in indices.split("-"))  # the target word's positions: checked, not kept
            except ValueError:
                raise DataError(f"indices must look like 3-7, got {indices!r}", path=data_path, line=line_no) from None
            if labels is not None and len(out) >= len(labels):
                raise DataError(f"gold file has fewer lines ({len(labels)}) than the data", path=gold_path)
            label = None if labels is None else labels[len(out)]
            out.append(ConditionalPair(s1, s2, f"{word} ({POS_NAMES[pos]})", label, len(out)))
    if labels is not None and len(labels) != len(out):
        raise DataError(f"gold file has {len(labels)} labels for {len(out)} instances", path=gold_path)
    if not out:
        raise DataError("holds no instances", path=data_path)
    return out


def load_wic(split: str, data_dir: str | Path | None = None) -> list[ConditionalPair]:
    """WiC ``split`` (train, validation/dev, test) as :class:`ConditionalPair` rows with labels 1.0 / 0.0."""
    if split not in WIC_SPLITS:
        raise DataError(f"unknown WiC split {split!r}; choose one of train, validation, test")
    folder = Path(data_dir) if data_dir is not None else dataset_dir("wic")
    name = WIC_SPLITS[split]
    gold = folder / f"{name}.gold.txt"
    return read_wic(folder / f"{name}.data.txt", gold if gold.is_file() else None)
