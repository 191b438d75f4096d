"""STS readers: STS-B, STS12-16 (SentEval 'all' setting), SICK-R; ``variant``: the organisers' raw files
(``original``) or SentEval's tokenised, lower-cased copies (``senteval``, what the SimCSE paper evaluates on).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from subspaces.config import dataset_dir
from subspaces.errors import DataError
from subspaces.io import read_lines

Variant = Literal["original", "senteval"]

STS_YEARS = {
    "STS12": ["MSRpar", "MSRvid", "SMTeuroparl", "surprise.OnWN", "surprise.SMTnews"],
    "STS13": ["FNWN", "headlines", "OnWN"],
    "STS14": ["deft-forum", "deft-news", "headlines", "images", "OnWN", "tweet-news"],
    "STS15": ["answers-forums", "answers-students", "belief", "headlines", "images"],
    "STS16": ["answer-answer", "headlines", "plagiarism", "postediting", "question-question"],
}
TASKS = (*STS_YEARS, "STSBenchmark", "SICKRelatedness")


@dataclass
class STSPairs:
    """Sentence pairs with gold similarity scores; ``subsets`` maps a subset name to its slice of rows."""

    name: str
    sentences1: list[str]
    sentences2: list[str]
    scores: list[float]
    subsets: dict[str, slice] = field(default_factory=dict)
    skipped: int = 0  # rows without a gold score, dropped as SentEval does

    def __len__(self) -> int:
        return len(self.scores)

    def head(self, n: int) -> STSPairs:
        return STSPairs(self.name, self.sentences1[:n], self.sentences2[:n], self.scores[:n])

    def add(self, sentence1: str, sentence2: str, score: float) -> None:
        self.sentences1.append(sentence1)
        self.sentences2.append(sentence2)
        self.scores.append(score)


def _float(text: str, path: Path, line: int) -> float:
    try:
        value = float(text)
    except ValueError:
        raise DataError(f"score {text!r} is not a number", path=path, line=line) from None
    if value != value:  # NaN
        raise DataError("score is NaN", path=path, line=line)
    return value


def read_stsb_file(path: Path) -> STSPairs:
    """One STS-B csv: tab-separated ``genre, file, year, id, score, s1, s2[, src1, src2]``, read without quoting."""
    pairs = STSPairs(path.stem, [], [], [])
    for lineno, line in enumerate(read_lines(path, skip_blank=False), 1):
        cols = line.split("\t")
        if not line.strip():
            continue
        if len(cols) < 7:
            raise DataError(f"expected at least 7 tab-separated columns, found {len(cols)}", path=path, line=lineno)
        pairs.add(cols[5], cols[6], _float(cols[4], path, lineno))
    if not pairs:
        raise DataError("holds no pairs", path=path)
    return pairs


def load_stsb(split: Literal["train", "dev", "test"] = "test", variant: Variant = "original") -> STSPairs:
    pairs = read_stsb_file(dataset_dir("stsb") / variant / f"sts-{split}.csv")
    pairs.name = "STSBenchmark" if split == "test" else f"STSBenchmark-{split}"
    return pairs


def read_sts_subset(input_path: Path, gold_path: Path) -> tuple[list[str], list[str], list[float], int]:
    """A SemEval STS subset: ``s1\\ts2[\\t...]`` lines aligned with gold-score lines; unscored lines are skipped."""
    inputs, golds = read_lines(input_path, skip_blank=False), read_lines(gold_path, skip_blank=False)
    if len(inputs) != len(golds):
        raise DataError(f"{len(inputs)} input lines but {len(golds)} gold lines in {gold_path.name}", path=input_path)
    s1, s2, scores, skipped = [], [], [], 0
    for lineno, (row, gold) in enumerate(zip(inputs, golds, strict=True), 1):
        if not gold.strip():
            skipped += 1
            continue
        cols = row.split("\t")
        if len(cols) < 2:
            raise DataError("expected two tab-separated sentences", path=input_path, line=lineno)
        s1.append(cols[0])
        s2.append(cols[1])
        scores.append(_float(gold.strip(), gold_path, lineno))
    return s1, s2, scores, skipped


def load_sts_year(year: str, variant: Variant = "original") -> STSPairs:
    """All subsets of one STS year, concatenated (SentEval's 'all' setting)."""
    if year not in STS_YEARS:
        raise DataError(f"unknown STS year {year!r}; choose one of {', '.join(STS_YEARS)}")
    folder = dataset_dir("sts12-16") / variant / year
    pairs = STSPairs(year, [], [], [])
    for subset in STS_YEARS[year]:
        s1, s2, scores, skipped = read_sts_subset(folder / f"STS.input.{subset}.txt", folder / f"STS.gs.{subset}.txt")
        pairs.subsets[subset] = slice(len(pairs), len(pairs) + len(scores))
        pairs.sentences1 += s1
        pairs.sentences2 += s2
        pairs.scores += scores
        pairs.skipped += skipped
    return pairs


def read_sick_file(path: Path) -> STSPairs:
    """SentEval's SICK TSV with a header ``pair_ID sentence_A sentence_B relatedness_score entailment_judgment``."""
    pairs = STSPairs("SICKRelatedness", [], [], [])
    first, *lines = read_lines(path, skip_blank=False)
    header = first.split("\t")
    try:
        ia, ib, ir = (header.index(c) for c in ("sentence_A", "sentence_B", "relatedness_score"))
    except ValueError:
        raise DataError(f"header {header} lacks sentence_A/sentence_B/relatedness_score", path=path, line=1) from None
    for lineno, line in enumerate(lines, 2):
        cols = line.split("\t")
        if not line.strip():
            continue
        if len(cols) <= max(ia, ib, ir):
            raise DataError(f"expected {len(header)} columns, found {len(cols)}", path=path, line=lineno)
        pairs.add(cols[ia], cols[ib], _float(cols[ir], path, lineno))
    if not pairs:
        raise DataError("holds no pairs", path=path)
    return pairs


def load_sick(split: Literal["train", "trial", "test"] = "test") -> STSPairs:
    name = {"train": "SICK_train.txt", "trial": "SICK_trial.txt", "test": "SICK_test_annotated.txt"}[split]
    pairs = read_sick_file(dataset_dir("sick") / name)
    pairs.name = "SICKRelatedness" if split == "test" else f"SICKRelatedness-{split}"
    return pairs


def load_task(task: str, variant: Variant = "original") -> STSPairs:
    """One task of the SimCSE STS table by its name (``STS12`` ... ``STS16``, ``STSBenchmark``, ``SICKRelatedness``)."""
    if task in STS_YEARS:
        return load_sts_year(task, variant)
    if task == "STSBenchmark":
        return load_stsb("test", variant)
    if task == "SICKRelatedness":
        return load_sick("test")
    raise DataError(f"unknown STS task {task!r}; choose from {', '.join(TASKS)}")
