"""Batches for conditional training: shuffled rows, or (high, low) condition pairs kept in one batch (the pair
objectives compare the two). ``batch(epoch, index)`` is a pure function of (seed, epoch, index): a resumed run
replays the same batches."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from itertools import chain
from typing import Any

from subspaces.data.csts import ConditionalPair
from subspaces.errors import SubspacesError
from subspaces.fingerprint import sha256_hex
from subspaces.train.engine import epoch_order


def pair_key(row: ConditionalPair) -> tuple[str, str]:
    """The sentence pair regardless of order: ``(a, b)`` and ``(b, a)`` are one pair."""
    a, b = row.sentence1, row.sentence2
    return (a, b) if a <= b else (b, a)


@dataclass
class _Sampler:
    """Batches of ``units`` (a row index, or a (high, low) couple of them) in a fixed shuffle per (seed, epoch); the
    ragged last batch is kept. ``dropped`` counts the rows left out, per reason."""

    rows: Sequence[ConditionalPair]
    batch_size: int
    seed: int = 0
    dropped: Counter = field(init=False, default_factory=Counter)
    units: list[Any] = field(init=False, default_factory=list)
    rows_per_unit = 1

    def __len__(self) -> int:
        return -(-len(self.units) // (self.batch_size // self.rows_per_unit))

    def batch(self, epoch: int, index: int) -> list[int]:
        """Row indices of batch ``index`` of ``epoch`` (couples as ``[hi0, lo0, hi1, lo1, ...]``)."""
        k = self.batch_size // self.rows_per_unit
        chosen = [self.units[i] for i in epoch_order(self.seed, epoch, len(self.units))[index * k : (index + 1) * k]]
        return [i for unit in chosen for i in unit] if self.rows_per_unit > 1 else chosen

    def epoch(self, epoch: int) -> Iterator[list[int]]:
        """Row indices of each batch of ``epoch``."""
        return (self.batch(epoch, i) for i in range(len(self)))

    def fingerprint(self) -> str:
        units = (repr(unit).encode() for unit in self.units)
        rows = (f"\x1e{r.sentence1}\x1f{r.sentence2}\x1f{r.condition}\x1f{r.label}".encode() for r in self.rows)
        return sha256_hex(chain([f"{self.batch_size}|{self.seed}".encode()], units, rows), 16)

    def summary(self) -> str:
        k = len(self.units)
        kept = f"{2 * k} rows in {k} (high, low) pairs" if self.rows_per_unit == 2 else f"{k} rows"
        return "; ".join([kept, *[f"dropped {n} row(s): {why}" for why, n in sorted(self.dropped.items())]])


@dataclass
class PairSampler(_Sampler):
    """Rows of one sentence pair matched into ``(higher-labelled, lower-labelled)`` couples; pairs that cannot be
    ranked (one condition, equal labels) are dropped, and of more than two conditions the extremes kept."""

    rows_per_unit = 2

    def __post_init__(self) -> None:
        if self.batch_size < 2 or self.batch_size % 2:
            raise SubspacesError(f"pair batches need an even batch size of at least 2, got {self.batch_size}")
        groups: dict[tuple[str, str], list[int]] = defaultdict(list)
        for i, row in enumerate(self.rows):
            if row.label is None:
                self.dropped["no label"] += 1
                continue
            groups[pair_key(row)].append(i)
        for members in groups.values():
            if len(members) == 1:
                self.dropped["pair under one condition only"] += 1
                continue
            ranked = sorted(members, key=lambda i: self.rows[i].label, reverse=True)
            high, low = ranked[0], ranked[-1]
            if self.rows[high].label == self.rows[low].label:
                self.dropped["pair with equal labels under all its conditions"] += len(members)
                continue
            self.units.append((high, low))
            if len(members) > 2:
                self.dropped["extra conditions beyond the highest and lowest"] += len(members) - 2
        if not self.units:
            reasons = ", ".join(f"{n} {why}" for why, n in self.dropped.items()) or "no rows"
            raise SubspacesError(
                f"no sentence pair is seen under two conditions with different labels ({reasons}); "
                "pair objectives (quadruplet, infonce_mse) need C-STS-style data -- use --objective mse"
            )


@dataclass
class RowSampler(_Sampler):
    """Shuffled batches of single rows (the ``mse`` objective); rows without a label are left out."""

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise SubspacesError(f"batch size must be positive, got {self.batch_size}")
        self.units = [i for i, r in enumerate(self.rows) if r.label is not None]
        if len(self.units) < len(self.rows):
            self.dropped["no label"] = len(self.rows) - len(self.units)
        if not self.units:
            raise SubspacesError("no labelled rows to train on")
