r"""Batches for conditional training: plain shuffled rows, or (high, low) condition pairs kept together.

C-STS gives every sentence pair under a similar and a dissimilar condition; the pair objectives compare the two, so
both rows must share a batch. ``batch(epoch, index)`` is a pure function of (seed, epoch, index), so a resumed run
replays the same batches.
"""

from __future__ import annotations

import hashlib
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from subspaces.data.csts import ConditionalPair
from subspaces.errors import SubspacesError


@lru_cache(maxsize=2)
def _order(seed: int, epoch: int, n: int) -> np.ndarray:
    return np.random.default_rng([seed, epoch]).permutation(n)


def _fingerprint(rows: Sequence[ConditionalPair], units: Sequence[object], batch_size: int, seed: int) -> str:
    digest = hashlib.sha256(f"{batch_size}|{seed}".encode())
    for unit in units:
        digest.update(repr(unit).encode())
    for row in rows:
        digest.update(f"\x1e{row.sentence1}\x1f{row.sentence2}\x1f{row.condition}\x1f{row.label}".encode())
    return digest.hexdigest()[:16]


def pair_key(row: ConditionalPair) -> tuple[str, str]:
    """The sentence pair regardless of order: ``(a, b)`` and ``(b, a)`` are one pair."""
    a, b = row.sentence1, row.sentence2
    return (a, b) if a <= b else (b, a)


@dataclass
class PairSampler:
    """Matches rows of the same sentence pair into ``(higher-labelled, lower-labelled)`` couples.

    Pairs that cannot be ranked (one condition, or equal labels) are dropped (``dropped`` counts them per reason);
    more than two conditions keep the highest and lowest. A batch holds ``batch_size // 2`` couples ``[hi, lo, ...]``.
    """

    rows: Sequence[ConditionalPair]
    batch_size: int
    seed: int = 0
    drop_last: bool = False
    couples: list[tuple[int, int]] = field(init=False)
    dropped: Counter = field(init=False)

    def __post_init__(self) -> None:
        if self.batch_size < 2 or self.batch_size % 2:
            raise SubspacesError(f"pair batches need an even batch size of at least 2, got {self.batch_size}")
        groups: dict[tuple[str, str], list[int]] = defaultdict(list)
        self.dropped = Counter()
        for i, row in enumerate(self.rows):
            if row.label is None:
                self.dropped["no label"] += 1
                continue
            groups[pair_key(row)].append(i)
        self.couples = []
        for members in groups.values():
            if len(members) == 1:
                self.dropped["pair under one condition only"] += 1
                continue
            ranked = sorted(members, key=lambda i: self.rows[i].label, reverse=True)
            high, low = ranked[0], ranked[-1]
            if self.rows[high].label == self.rows[low].label:
                self.dropped["pair with equal labels under all its conditions"] += len(members)
                continue
            self.couples.append((high, low))
            if len(members) > 2:
                self.dropped["extra conditions beyond the highest and lowest"] += len(members) - 2
        if not self.couples:
            reasons = ", ".join(f"{n} {why}" for why, n in self.dropped.items()) or "no rows"
            raise SubspacesError(
                f"no sentence pair is seen under two conditions with different labels ({reasons}); "
                "pair objectives (quadruplet, infonce_mse) need C-STS-style data -- use --objective mse"
            )

    @property
    def pairs_per_batch(self) -> int:
        return self.batch_size // 2

    def __len__(self) -> int:
        n, k = len(self.couples), self.pairs_per_batch
        return n // k if self.drop_last else -(-n // k)

    def batch(self, epoch: int, index: int) -> list[int]:
        """Row indices of batch ``index`` of ``epoch``: ``[hi0, lo0, hi1, lo1, ...]``."""
        k = self.pairs_per_batch
        chunk = _order(self.seed, epoch, len(self.couples))[index * k : (index + 1) * k]
        return [i for c in chunk for i in self.couples[c]]

    def epoch(self, epoch: int) -> Iterator[list[int]]:
        """Row indices of each batch of ``epoch`` (a fixed shuffle per seed and epoch)."""
        return (self.batch(epoch, i) for i in range(len(self)))

    def fingerprint(self) -> str:
        return _fingerprint(self.rows, self.couples, self.batch_size, self.seed)

    def summary(self) -> str:
        kept = 2 * len(self.couples)
        parts = [f"{kept} rows in {len(self.couples)} (high, low) pairs"]
        parts += [f"dropped {n} row(s): {why}" for why, n in sorted(self.dropped.items())]
        return "; ".join(parts)


@dataclass
class RowSampler:
    """Shuffled batches of single rows (the ``mse`` objective); rows without a label are left out."""

    rows: Sequence[ConditionalPair]
    batch_size: int
    seed: int = 0
    drop_last: bool = False
    dropped: Counter = field(init=False)
    indices: list[int] = field(init=False)

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise SubspacesError(f"batch size must be positive, got {self.batch_size}")
        self.indices = [i for i, r in enumerate(self.rows) if r.label is not None]
        self.dropped = Counter(
            {"no label": len(self.rows) - len(self.indices)} if len(self.indices) < len(self.rows) else {}
        )
        if not self.indices:
            raise SubspacesError("no labelled rows to train on")

    def __len__(self) -> int:
        n, k = len(self.indices), self.batch_size
        return n // k if self.drop_last else -(-n // k)

    def batch(self, epoch: int, index: int) -> list[int]:
        k = self.batch_size
        return [self.indices[i] for i in _order(self.seed, epoch, len(self.indices))[index * k : (index + 1) * k]]

    def epoch(self, epoch: int) -> Iterator[list[int]]:
        return (self.batch(epoch, i) for i in range(len(self)))

    def fingerprint(self) -> str:
        return _fingerprint(self.rows, self.indices, self.batch_size, self.seed)

    def summary(self) -> str:
        parts = [f"{len(self.indices)} rows"]
        parts += [f"dropped {n} row(s): {why}" for why, n in sorted(self.dropped.items())]
        return "; ".join(parts)
