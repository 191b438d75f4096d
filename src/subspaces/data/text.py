"""Plain text corpora, one sentence a line (``.txt`` or ``.txt.gz``), e.g. ``wordnet_sentences/``."""

from __future__ import annotations

from pathlib import Path

from subspaces.config import dataset_dir
from subspaces.io import read_lines

WORDNET_FILES = ("wordnet30_definitions.txt.gz", "wordnet30_examples.txt.gz")


def read_corpus(path: str | Path, *, limit: int | None = None) -> list[str]:
    """Sentences of a corpus file; blank lines dropped."""
    return [line.strip() for line in read_lines(path, limit=limit)]


def wordnet_sentences(*, limit: int | None = None) -> list[str]:
    """WordNet 3.0 definitions then examples (159,174 distinct lines), the stand-in for SimCSE's wiki1m."""
    folder = dataset_dir("wordnet_sentences")
    out: list[str] = []
    for name in WORDNET_FILES:
        out += read_corpus(folder / name)
    out = list(dict.fromkeys(out))
    return out[:limit] if limit is not None else out
