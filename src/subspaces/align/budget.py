"""A fit's budget: stages ask at their safe points whether it is spent; the first to stop records where.

The caller's limit is wall-clock (what a user waits). A limit set relative to work the fit already did
(:meth:`Budget.tighten`) is in this process's CPU seconds: another job's load slows that work and the rest of the fit
alike in wall-clock time but not in CPU time, so a loaded machine stops the fit about where a quiet one would.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Budget:
    max_seconds: float | None  # wall-clock; None: no limit at all
    start: float = field(default_factory=time.perf_counter)
    cpu_start: float = field(default_factory=time.process_time)
    max_cpu_seconds: float | None = None  # set by :meth:`tighten`
    bound: str | None = None  # what set ``max_cpu_seconds``
    stopped_at: str | None = None  # the first safe point that found the budget spent
    stopped_by: str | None = None  # "wall" or "cpu"

    def tighten(self, cpu_seconds: float, why: str) -> None:
        """Also stop after ``cpu_seconds`` of this process's CPU time (a lower bound replaces a higher one; none is
        set where the caller's limit is none); ``why`` names it in :attr:`reason`."""
        if self.max_seconds is not None and (self.max_cpu_seconds is None or cpu_seconds < self.max_cpu_seconds):
            self.max_cpu_seconds, self.bound = cpu_seconds, why

    def spent(self, where: str) -> bool:
        if self.stopped_by is None:
            if self.max_seconds is not None and self.elapsed() >= self.max_seconds:
                self.stopped_by = "wall"
            elif self.max_cpu_seconds is not None and time.process_time() - self.cpu_start >= self.max_cpu_seconds:
                self.stopped_by = "cpu"
            else:
                return False
            self.stopped_at = where
        return True

    def wall_spent(self) -> bool:
        """Whether the caller's wall-clock limit is reached, whatever a tighter CPU bound said."""
        return self.max_seconds is not None and self.elapsed() >= self.max_seconds

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
        if self.stopped_by == "cpu":
            limit = f"{self.bound} ({self.max_cpu_seconds:.0f} CPU s)"
        return f"{limit} reached {self.stopped_at}; the best map so far was kept"
