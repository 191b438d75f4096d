"""Labelled texts and text pairs for probing frozen embeddings: Banking77, Emotion, TweetEval, MRPC, WiC, each
read from the dataset's own files (its ``SOURCE.md``) as integer labels plus the label names.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from subspaces.config import dataset_dir
from subspaces.data.wic import WIC_SPLITS, read_wic
from subspaces.errors import DataError
from subspaces.io import check_file, read_csv, read_jsonl, read_lines

TWEETEVAL_TASKS = ("emoji", "emotion", "hate", "irony", "offensive", "sentiment")


@dataclass(frozen=True)
class LabelledTexts:
    texts: list[str]
    labels: list[int]
    label_names: list[str]

    def __len__(self) -> int:
        return len(self.texts)

    @property
    def sides(self) -> tuple[list[str]]:
        return (self.texts,)


@dataclass(frozen=True)
class LabelledPairs:
    texts1: list[str]
    texts2: list[str]
    labels: list[int]
    label_names: list[str]

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def sides(self) -> tuple[list[str], list[str]]:
        return (self.texts1, self.texts2)


Records = TypeVar("Records", LabelledTexts, LabelledPairs)


def _non_empty(records: Records, path: Path) -> Records:
    if len(records) == 0:
        raise DataError("holds no rows", path=path)
    return records


def load_banking77(split: str = "train", folder: str | Path | None = None) -> LabelledTexts:
    """Banking77 ``train`` or ``test`` (CSV ``text,category``); intents are numbered in sorted name order."""
    if split not in ("train", "test"):
        raise DataError(f"Banking77 has splits train and test (no dev), not {split!r}")
    root = Path(folder) if folder is not None else dataset_dir("banking77")
    path = check_file(root / f"{split}.csv")
    names_path = root / "categories.json"
    try:
        names = sorted(json.loads(check_file(names_path).read_text(encoding="utf-8")))
    except ValueError as exc:
        raise DataError(f"not a JSON list of intent names: {exc}", path=names_path) from exc
    index = {name: i for i, name in enumerate(names)}
    texts, labels = [], []
    for _, line, row in read_csv(path, ("text", "category")):
        if row["category"] not in index:
            raise DataError(f"unknown intent {row['category']!r} (not in categories.json)", path=path, line=line)
        texts.append(row["text"])
        labels.append(index[row["category"]])
    return _non_empty(LabelledTexts(texts, labels, names), path)


EMOTION_LABELS = ["sadness", "joy", "love", "anger", "fear", "surprise"]


def load_emotion(split: str = "train", folder: str | Path | None = None) -> LabelledTexts:
    """dair-ai Emotion ``train``, ``validation`` or ``test`` (JSON lines ``{"text", "label"}``, 6 classes)."""
    if split not in ("train", "validation", "test"):
        raise DataError(f"Emotion has splits train, validation and test, not {split!r}")
    path = check_file((Path(folder) if folder is not None else dataset_dir("emotion")) / f"{split}.jsonl")
    texts, labels = [], []
    for line_no, row in read_jsonl(path):
        try:
            text, label = row["text"], int(row["label"])
        except (ValueError, KeyError, TypeError) as exc:
            raise DataError(f"expected {{'text': str, 'label': int}}: {exc}", path=path, line=line_no) from exc
        if not 0 <= label < len(EMOTION_LABELS):
            raise DataError(f"label {label} is outside 0..{len(EMOTION_LABELS) - 1}", path=path, line=line_no)
        texts.append(text)
        labels.append(label)
    return _non_empty(LabelledTexts(texts, labels, list(EMOTION_LABELS)), path)


def load_tweeteval(task: str, split: str = "train", folder: str | Path | None = None) -> LabelledTexts:
    """TweetEval ``task`` ``train``/``val``/``test`` from ``{split}_text.txt`` + ``{split}_labels.txt`` (our copy has
    no sentiment ``train_text.txt``: an error that says so)."""
    if task not in TWEETEVAL_TASKS:
        raise DataError(f"unknown TweetEval task {task!r}; choose one of {', '.join(TWEETEVAL_TASKS)}")
    if split not in ("train", "val", "test"):
        raise DataError(f"TweetEval has splits train, val and test, not {split!r}")
    root = (Path(folder) if folder is not None else dataset_dir("tweeteval")) / task
    text_path, label_path = root / f"{split}_text.txt", root / f"{split}_labels.txt"
    if not text_path.is_file():
        why = " (the sentiment training texts are missing from this copy; use split 'val')" if split == "train" else ""
        raise DataError("file not found" + (why if task == "sentiment" else ""), path=text_path)
    texts = read_lines(text_path, skip_blank=False)
    raw_labels = [x.strip() for x in read_lines(label_path, skip_blank=False)]
    if len(texts) != len(raw_labels):
        raise DataError(f"{len(texts)} texts but {len(raw_labels)} labels in {label_path.name}", path=text_path)
    names = _tweeteval_mapping(root / "mapping.txt")
    labels = []
    for line_no, value in enumerate(raw_labels, 1):
        try:
            label = int(value)
        except ValueError:
            raise DataError(f"label must be an integer, got {value!r}", path=label_path, line=line_no) from None
        if not 0 <= label < len(names):
            raise DataError(f"label {label} is outside 0..{len(names) - 1}", path=label_path, line=line_no)
        labels.append(label)
    return _non_empty(LabelledTexts(texts, labels, names), text_path)


def _tweeteval_mapping(path: Path) -> list[str]:
    names: dict[int, str] = {}
    for line_no, line in enumerate(read_lines(path, skip_blank=False), 1):
        if not line.strip():
            continue
        parts = line.split("\t")
        try:
            names[int(parts[0])] = parts[1] if len(parts) > 1 else parts[0]
        except ValueError:
            raise DataError(f"expected 'id<TAB>name', got {line.strip()!r}", path=path, line=line_no) from None
    if sorted(names) != list(range(len(names))):
        raise DataError(f"label ids must be 0..{len(names) - 1}, got {sorted(names)}", path=path)
    return [names[i] for i in range(len(names))]


def load_mrpc(split: str = "train", folder: str | Path | None = None) -> LabelledPairs:
    """MRPC ``train`` or ``test`` (MSR TSV with a BOM; quotes are literal text, so ``QUOTE_NONE``)."""
    if split not in ("train", "test"):
        raise DataError(f"MRPC has splits train and test, not {split!r}")
    path = check_file((Path(folder) if folder is not None else dataset_dir("mrpc")) / f"msr_paraphrase_{split}.txt")
    texts1, texts2, labels = [], [], []
    columns = ("Quality", "#1 String", "#2 String")
    for _, line, row in read_csv(path, columns, delimiter="\t", quoting=csv.QUOTE_NONE):
        if row["Quality"] not in ("0", "1"):
            raise DataError(f"quality must be 0 or 1, got {row['Quality']!r}", path=path, line=line)
        labels.append(int(row["Quality"]))
        texts1.append(row["#1 String"])
        texts2.append(row["#2 String"])
    return _non_empty(LabelledPairs(texts1, texts2, labels, ["not_paraphrase", "paraphrase"]), path)


def load_wic_pairs(split: str = "train", folder: str | Path | None = None) -> LabelledPairs:
    """WiC ``train``/``dev``/``test`` as plain sentence pairs labelled 1 (same sense) or 0; the target word is
    dropped."""
    if split not in WIC_SPLITS:
        raise DataError(f"WiC has splits train, dev and test, not {split!r}")
    root = Path(folder) if folder is not None else dataset_dir("wic")
    name = WIC_SPLITS[split]
    rows = read_wic(root / f"{name}.data.txt", check_file(root / f"{name}.gold.txt"))
    labels = [int(r.label or 0) for r in rows]
    return LabelledPairs(
        [r.sentence1 for r in rows], [r.sentence2 for r in rows], labels, ["different_sense", "same_sense"]
    )
