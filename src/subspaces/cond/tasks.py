"""The two conditional tasks: where their rows come from, their label scale, and what makes a condition "seen"."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import attrgetter
from pathlib import Path

from subspaces.data.csts import CSTS_LABEL_RANGE, ConditionalPair, load_csts, scale_label
from subspaces.data.wic import WIC_LABEL_RANGE, load_wic
from subspaces.errors import SubspacesError


def condition_word(row: ConditionalPair) -> str:
    """WiC's target word without its part of speech: ``"carry (verb)" -> "carry"``."""
    return row.condition.rsplit(" (", 1)[0]


@dataclass(frozen=True)
class Task:
    name: str
    label_range: tuple[float, float]
    binary: bool  # labels are 0/1: report accuracy at a dev-chosen threshold and ROC-AUC
    seen_key: Callable[[ConditionalPair], str]  # a test condition is "seen" if its key occurs in train
    selection_metric: str  # the dev metric that picks the best checkpoint

    def load(self, split: str, data_dir: str | Path | None = None) -> list[ConditionalPair]:
        if self.name == "wic":
            return load_wic(split, data_dir)
        if data_dir is None:
            raise SubspacesError(
                "C-STS is not redistributable: pass --data DIR holding csts_{train,validation,test}.csv"
            )
        return load_csts(data_dir, split)

    def scaled_labels(self, rows: Sequence[ConditionalPair]) -> list[float | None]:
        low, high = self.label_range
        return [None if r.label is None else scale_label(r.label, low, high) for r in rows]

    def seen_keys(self, train_rows: Sequence[ConditionalPair]) -> list[str]:
        return sorted({self.seen_key(r) for r in train_rows})


TASKS = {
    # A WiC test condition is seen when its target *word* occurs in train (41% of test).
    "wic": Task("wic", WIC_LABEL_RANGE, True, condition_word, "auc"),
    "csts": Task("csts", CSTS_LABEL_RANGE, False, attrgetter("condition"), "spearman"),
}

SPLITS = ("train", "validation", "test")  # both tasks' (WiC's dev is its validation)


def get_task(name: str) -> Task:
    if name not in TASKS:
        raise SubspacesError(f"unknown task {name!r}; choose one of {', '.join(TASKS)}")
    return TASKS[name]
