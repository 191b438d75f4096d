"""Knowledge-graph datasets as integer triples plus entity and relation names: WN18RR in SimKGC's layout and
FB15k-237 (names only). Relations are ``0..R-1``; the inverse of ``r`` is ``r + R`` (head prediction asked as tail
prediction: SimKGC's backward direction).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from subspaces.config import dataset_dir
from subspaces.errors import DataError
from subspaces.io import open_text

SPLITS = ("train", "valid", "test")
DATASETS = ("wn18rr", "fb15k237")


@dataclass
class KnowledgeGraph:
    """Entities, relations and the three splits as ``(n, 3)`` int arrays of ``(head, relation, tail)`` indices."""

    name: str
    entity_ids: list[str]  # dataset ids (synset offsets, Freebase mids), index = entity index
    entity_names: list[str]  # readable names ("land reform")
    entity_descriptions: list[str]  # "" where the dataset has none
    relation_names: list[str]  # forward relations as words ("hypernym"); inverses are derived
    splits: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def num_entities(self) -> int:
        return len(self.entity_ids)

    @property
    def num_relations(self) -> int:
        """Forward relations only; relation indices ``R..2R-1`` are their inverses."""
        return len(self.relation_names)

    def relation_text(self, relation: int) -> str:
        """The words for relation ``relation`` (``0..2R-1``), e.g. ``"inverse hypernym"`` for an inverse."""
        n = self.num_relations
        if not 0 <= relation < 2 * n:
            raise IndexError(f"relation index {relation} is outside 0..{2 * n - 1}")
        return self.relation_names[relation] if relation < n else "inverse " + self.relation_names[relation - n]

    def with_inverses(self, split: str) -> np.ndarray:
        """``split``'s triples followed by their inverses ``(t, r + R, h)``: both directions, as SimKGC trains."""
        triples = self.splits[split]
        inverse = np.stack([triples[:, 2], triples[:, 1] + self.num_relations, triples[:, 0]], axis=1)
        return np.concatenate([triples, inverse], axis=0)

    def __repr__(self) -> str:
        sizes = ", ".join(f"{s}={len(t)}" for s, t in self.splits.items())
        return f"KnowledgeGraph({self.name!r}, entities={self.num_entities}, relations={self.num_relations}, {sizes})"


def wn18rr_name(token: str) -> str:
    """SimKGC's normalisation of ``__land_reform_NN_1`` -> ``land reform`` (POS and sense number dropped)."""
    word = token[2:] if token.startswith("__") else token
    word = re.sub(r"_(NN|VB|JJ|RB)_\d+$", "", word)
    return word.replace("_", " ").strip()


def fb15k237_relation(relation: str) -> str:
    """SimKGC's wording of a Freebase relation path, tokens deduplicated, leaf first: ``/people/person/spouse_s./
    people/marriage/type_of_union`` -> ``type of union marriage spouse s person people``."""
    tokens = relation.replace("./", "/").replace("_", " ").strip().split("/")
    kept: list[str] = []
    for token in tokens:
        if token and token not in kept[-3:]:
            kept.append(token)
    reversed_tokens = kept[::-1]
    return " ".join(t for i, t in enumerate(reversed_tokens) if i == 0 or t != reversed_tokens[i - 1])


def _find(folder: Path, stem: str) -> Path:
    for candidate in (folder / stem, folder / (stem + ".gz")):
        if candidate.is_file():
            return candidate
    raise DataError(f"missing {stem} (or {stem}.gz)", path=folder)


def read_table(path: Path, columns: int, *, exact: bool = False) -> list[tuple[list[str], int]]:
    """Tab-separated lines of ``columns`` stripped fields (extra tabs belong to the last one unless ``exact``) and
    their line numbers; blank lines skipped."""
    rows: list[tuple[list[str], int]] = []
    try:
        with open_text(path) as handle:
            for lineno, line in enumerate(handle, start=1):
                line = line.rstrip("\r\n")
                if not line.strip():
                    continue
                parts = [p.strip() for p in (line.split("\t") if exact else line.split("\t", columns - 1))]
                if len(parts) != columns or not all(parts if exact else parts[:1]):
                    expected = f"expected {columns} tab-separated fields, got {line[:80]!r}"
                    raise DataError(expected, path=path, line=lineno)
                rows.append((parts, lineno))
    except UnicodeDecodeError as exc:
        raise DataError(f"not UTF-8 text ({exc.reason})", path=path) from exc
    if not rows:
        raise DataError("holds no rows", path=path)
    return rows


def _index_splits(
    folder: Path, entity_index: dict[str, int], relation_word: Callable[[str], str]
) -> tuple[dict[str, np.ndarray], list[str]]:
    """Read the three splits; relations are numbered in order of first appearance in train."""
    relation_index: dict[str, int] = {}
    splits: dict[str, np.ndarray] = {}
    for split in SPLITS:
        path = _find(folder, f"{split}.txt")
        rows = []
        for (head, relation, tail), lineno in read_table(path, 3, exact=True):
            for entity in (head, tail):
                if entity not in entity_index:
                    raise DataError(f"unknown entity id {entity!r} (it has no entity text)", path=path, line=lineno)
            if relation not in relation_index:
                if split != "train":
                    raise DataError(f"relation {relation!r} never occurs in train", path=path, line=lineno)
                relation_index[relation] = len(relation_index)
            rows.append((entity_index[head], relation_index[relation], entity_index[tail]))
        splits[split] = np.asarray(rows, dtype=np.int64)
    names = [relation_word(r) for r in sorted(relation_index, key=relation_index.__getitem__)]
    return splits, names


def load_wn18rr(folder: str | Path) -> KnowledgeGraph:
    """WN18RR in SimKGC's layout; entity text parts are the lemma and its WordNet definition."""
    folder = Path(folder)
    definitions = _find(folder, "wordnet-mlj12-definitions.txt")
    ids: list[str] = []
    names: list[str] = []
    descriptions: list[str] = []
    index: dict[str, int] = {}
    for (synset, token, definition), lineno in read_table(definitions, 3):
        if synset in index:
            raise DataError(f"entity id {synset!r} defined twice", path=definitions, line=lineno)
        name = wn18rr_name(token)
        if not name:
            raise DataError(f"empty entity name in {token!r}", path=definitions, line=lineno)
        index[synset] = len(ids)
        ids.append(synset)
        names.append(name)
        descriptions.append(definition)
    splits, relations = _index_splits(folder, index, lambda r: r.replace("_", " ").strip())
    return KnowledgeGraph("wn18rr", ids, names, descriptions, relations, splits)


def load_fb15k237(folder: str | Path) -> KnowledgeGraph:
    """FB15k-237 with names only; entities are those that occur in a split (14,541), in order of appearance."""
    folder = Path(folder)
    names_path = _find(folder, "FB15k_mid2name.txt")
    mid_names: dict[str, str] = {}
    for (mid, name), _lineno in read_table(names_path, 2):
        mid_names[mid] = name.replace("_", " ").strip()
    ids: list[str] = []
    index: dict[str, int] = {}
    for split in SPLITS:
        path = _find(folder, f"{split}.txt")
        for (head, _relation, tail), lineno in read_table(path, 3, exact=True):
            for entity in (head, tail):
                if entity in index:
                    continue
                if not mid_names.get(entity):
                    raise DataError(f"entity {entity!r} has no name in {names_path.name}", path=path, line=lineno)
                index[entity] = len(ids)
                ids.append(entity)
    splits, relations = _index_splits(folder, index, fb15k237_relation)
    names = [mid_names[m] for m in ids]
    return KnowledgeGraph("fb15k237", ids, names, [""] * len(ids), relations, splits)


def load_kg(name_or_folder: str | Path) -> KnowledgeGraph:
    """``"wn18rr"`` / ``"fb15k237"`` (from the data folder) or a folder in either layout."""
    text = str(name_or_folder)
    if text in DATASETS:
        folder = dataset_dir(text)
    else:
        folder = Path(text).expanduser()
        if not folder.is_dir():
            raise DataError(f"unknown dataset {text!r}: use one of {', '.join(DATASETS)} or a folder")
    if (folder / "wordnet-mlj12-definitions.txt").is_file():
        return load_wn18rr(folder)
    if (folder / "FB15k_mid2name.txt").is_file():
        return load_fb15k237(folder)
    raise DataError(
        "neither WN18RR (wordnet-mlj12-definitions.txt) nor FB15k-237 (FB15k_mid2name.txt) layout", path=folder
    )
