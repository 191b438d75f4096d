"""One progress display for every long loop: a tqdm bar on a terminal, else one plain line every ``interval``
seconds and one at the end (a log shows the task moving). The label names the task and its data, never "Batches".
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Iterator
from typing import Any, TextIO, TypeVar

T = TypeVar("T")


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


class Progress:
    """``with Progress(total, "train simcse on wiki1m", unit="step") as bar: bar.update(1, loss=0.12)``.

    ``total`` None: unknown; ``initial``: units already done (a resumed run); ``enabled`` False shows nothing
    (library calls, tests, non-main DDP ranks); ``stream``: default stderr.
    """

    def __init__(
        self,
        total: int | None,
        description: str,
        *,
        unit: str = "step",
        initial: int = 0,
        enabled: bool = True,
        interval: float = 5.0,
        stream: TextIO | None = None,
    ) -> None:
        self.total, self.description, self.unit = total, description, unit
        self.n, self.initial, self.enabled, self.interval = initial, initial, enabled, interval
        self.stream = stream if stream is not None else sys.stderr
        self.postfix: dict[str, Any] = {}
        self._start = self._last_line = time.monotonic()
        self._bar = None
        self._closed = False
        self._printed_n: int | None = None  # the count the last plain line showed
        if enabled and _is_terminal(self.stream):
            from tqdm.auto import tqdm

            self._bar = tqdm(
                total=total, initial=initial, desc=description, unit=unit, dynamic_ncols=True, file=self.stream
            )

    def update(self, n: int = 1, **postfix: Any) -> None:
        self.n += n
        if postfix:
            self.postfix.update(postfix)
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.update(n)
            if postfix:
                self._bar.set_postfix(self.postfix, refresh=False)
        elif time.monotonic() - self._last_line >= self.interval:
            self._print_line()

    def line(self) -> str:
        """The plain status line: ``train simcse on x: 120/1,000 steps (12%), 3.10 steps/s, eta 4m42s, loss=0.12``."""
        elapsed = time.monotonic() - self._start
        done = self.n - self.initial
        rate = done / elapsed if elapsed > 0 else 0.0
        head = f"{self.n:,}/{self.total:,}" if self.total is not None else f"{self.n:,}"
        parts = [f"{self.description}: {head} {self.unit}s"]
        if self.total:
            parts[0] += f" ({100 * self.n / self.total:.0f}%)"
        parts.append(f"{rate:.2f} {self.unit}s/s" if rate < 10 else f"{rate:,.0f} {self.unit}s/s")
        if self.total is not None and rate > 0 and self.n < self.total:
            parts.append(f"eta {_duration((self.total - self.n) / rate)}")
        else:
            parts.append(f"elapsed {_duration(elapsed)}")
        parts.extend(f"{k}={_short(v)}" for k, v in self.postfix.items())
        return ", ".join(parts)

    def _print_line(self) -> None:
        self._last_line = time.monotonic()
        self._printed_n = self.n
        print(self.line(), file=self.stream, flush=True)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._bar is not None:
            self._bar.close()
        elif self.enabled and self.n > self.initial and self.n != self._printed_n:
            self._print_line()  # the final state, unless the last line already showed it

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def progress(
    items: Iterable[T], description: str, *, total: int | None = None, unit: str = "item", enabled: bool = True
) -> Iterator[T]:
    """Iterate ``items`` with a :class:`Progress` (``total`` defaults to ``len(items)`` when it has one)."""
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    with Progress(total, description, unit=unit, enabled=enabled) as bar:
        for item in items:
            yield item
            bar.update(1)


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _short(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)
