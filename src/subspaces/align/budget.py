"""A fit's wall-clock budget: stages ask at their safe points (between k-means runs, rounds, steps, passes)
whether it is spent, and the first one that stops records where, so the fit can say why it ended early."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Budget:
    max_seconds: float | None  # None: no limit
    start: float = field(default_factory=time.perf_counter)
    stopped_at: str | None = None  # the first safe point that found the budget spent

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
        return f"max_seconds={self.max_seconds:g} reached {self.stopped_at}; the best map so far was kept"
