"""Dynamic batching: one worker thread coalesces queued encoding jobs into batches within a padded-token budget.

Other model work is queued as a *call*, run alone between batches, so one thread touches the model; callers wait
on :class:`concurrent.futures.Future`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)


class QueueFull(Exception):
    """The queue holds ``max_queue`` requests; the caller should answer 503 and ask the client to retry."""


@dataclass
class _Encode:
    inputs: Any  # the texts, or their tokens (what ``join`` takes)
    tokens: list[int]  # per text, as the model reads it (truncated)
    future: Future = field(default_factory=Future)
    arrived: float = field(default_factory=time.monotonic)


@dataclass
class _Call:
    fn: Callable[[], Any]
    future: Future = field(default_factory=Future)


@dataclass(frozen=True)
class BatchInfo:
    """What one forward pass held, for metrics and tests."""

    requests: int
    texts: int
    tokens: int  # real tokens
    padded_tokens: int  # texts x longest text: what the budget bounds
    seconds: float


class Batcher:
    """Coalesce :meth:`encode` jobs into calls of ``encode_fn`` (joined inputs -> one row per text) on one worker.

    A batch holds at most ``max_batch_tokens`` padded tokens (a larger job runs alone); its first job waits up to
    ``max_wait`` seconds for others; beyond ``max_queue`` waiting jobs, :class:`QueueFull`. ``on_batch`` and
    ``on_reject`` are metrics hooks; ``join`` makes ``encode_fn``'s input of the jobs' (default: lists chained).
    """

    def __init__(
        self,
        encode_fn: Callable[[list[str]], np.ndarray],
        *,
        max_batch_tokens: int,
        max_wait: float,
        max_queue: int,
        on_batch: Callable[[BatchInfo], None] | None = None,
        on_reject: Callable[[], None] | None = None,
        join: Callable[[list[Any]], Any] | None = None,
    ) -> None:
        self.encode_fn = encode_fn
        self.join = join or _chain
        self.max_batch_tokens = max_batch_tokens
        self.max_wait = max_wait
        self.max_queue = max_queue
        self.on_batch = on_batch
        self.on_reject = on_reject
        self._queue: deque[_Encode | _Call] = deque()
        self._cond = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="subspaces-batcher", daemon=True)
        self._thread.start()

    @property
    def depth(self) -> int:
        """Jobs waiting (not counting the batch being computed)."""
        return len(self._queue)

    def encode(self, inputs: Any, tokens: Sequence[int]) -> Future:
        """Queue ``inputs`` with their token counts, one per text; the future's result is their rows, in order."""
        return self._put(_Encode(inputs, list(tokens)))

    def call(self, fn: Callable[[], Any]) -> Future:
        """Queue ``fn`` to run alone on the worker thread; the future's result is its return value."""
        return self._put(_Call(fn))

    def close(self, timeout: float | None = 5.0) -> None:
        """Finish the queued jobs, then stop the worker."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout)

    def _put(self, job: _Encode | _Call) -> Future:
        with self._cond:
            if self._closed:
                raise RuntimeError("the batcher is closed")
            if len(self._queue) >= self.max_queue:
                if self.on_reject is not None:
                    self.on_reject()
                raise QueueFull(f"{len(self._queue)} requests are waiting")
            self._queue.append(job)
            self._cond.notify()
        return job.future

    # --- the worker ----------------------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._cond.wait()
                if not self._queue:
                    return
                first = self._queue.popleft()
            if isinstance(first, _Call):
                _settle(first.future, first.fn)
            else:
                self._encode(self._gather(first))

    def _gather(self, first: _Encode) -> list[_Encode]:
        """``first`` and the encoding jobs behind it that fit the budget, waiting until ``max_wait`` after it came."""
        batch = [first]
        texts, longest = len(first.tokens), max(first.tokens, default=0)
        deadline = first.arrived + self.max_wait
        with self._cond:
            while True:
                while not self._queue and not self._closed and (left := deadline - time.monotonic()) > 0:
                    self._cond.wait(left)
                if not self._queue or not isinstance(nxt := self._queue[0], _Encode):
                    return batch
                grown_texts, grown_longest = texts + len(nxt.tokens), max(longest, *nxt.tokens, 0)
                if grown_texts * grown_longest > self.max_batch_tokens:
                    return batch
                self._queue.popleft()
                batch.append(nxt)
                texts, longest = grown_texts, grown_longest

    def _encode(self, batch: list[_Encode]) -> None:
        # A job whose caller gave up (timed out) while it waited is dropped here, before it costs anything.
        live = [job for job in batch if job.future.set_running_or_notify_cancel()]
        if not live:
            return
        texts = sum(len(job.tokens) for job in live)
        start = time.perf_counter()
        try:
            rows = self.encode_fn(self.join([job.inputs for job in live]))
        except Exception as exc:  # noqa: BLE001 - every waiting caller gets the error; the worker lives on
            for job in live:
                job.future.set_exception(exc)
            return
        seconds = time.perf_counter() - start
        # Counted before the callers get their rows, so a client that has its reply finds its batch in /metrics.
        if self.on_batch is not None:
            tokens = [n for job in live for n in job.tokens]
            info = BatchInfo(len(live), texts, sum(tokens), texts * max(tokens, default=0), seconds)
            try:
                self.on_batch(info)
            except Exception:  # a broken metrics hook must not strand the callers or the worker
                logger.exception("the batch hook failed")
        offset = 0
        for job in live:
            job.future.set_result(rows[offset : offset + len(job.tokens)])
            offset += len(job.tokens)


def _chain(parts: list[Any]) -> list[Any]:
    return [item for part in parts for item in part]


def _settle(future: Future, fn: Callable[[], Any]) -> None:
    if not future.set_running_or_notify_cancel():
        return
    try:
        future.set_result(fn())
    except Exception as exc:  # noqa: BLE001 - the caller gets the error; the worker lives on
        future.set_exception(exc)
