"""A fit's wall-clock budget: stages ask at their safe points whether it is spent; the first to stop records where."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Budget:
    max_seconds: float | None  # None: no limit
    start: float = field(default_factory=time.perf_counter)
    stopped_at: str | None = None  # the first safe point that found the budget spent
    bound: str | None = None  # what set ``max_seconds`` where :meth:`tighten` lowered it (None: the caller's limit)

    def tighten(self, seconds: float, why: str) -> None:
        """Lower the limit to ``seconds`` where that is lower (never raised, nor set where there is none); ``why``
        names the new bound in :attr:`reason`."""
        if self.max_seconds is not None and seconds < self.max_seconds:
            self.max_seconds, self.bound = seconds, why

    def spent(self, where: str) -> bool:
        if self.max_seconds is None or time.perf_counter() - self.start < self.max_seconds:
            return False
        if self.stopped_at is None:
            self.stopped_at = where
        return True

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def check(self, where: str) -> Callable[[], bool]:
        """``spent`` bound to a place, for a stage's ``out_of_time`` argument."""
        return lambda: self.spent(where)

    @property
    def reason(self) -> str | None:
        if self.stopped_at is None:
            return None
        limit = f"max_seconds={self.max_seconds:g}"
        if self.bound is not None:
            limit = f"{self.bound} ({self.max_seconds:.0f} s)"
        return f"{limit} reached {self.stopped_at}; the best map so far was kept"
