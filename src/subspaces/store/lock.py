"""One writer at a time: an advisory ``flock`` on ``write.lock`` in the store folder, held for every write (two
writers that both read the ids and then append would add rows twice). A second writer is refused at once, naming
the holder; the kernel releases the lock when the holder dies, however it dies. Readers take no lock. The lock is
per open file, re-entrant within one :class:`WriteLock`; where ``fcntl`` does not exist (Windows) writes are not
locked.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import IO

from subspaces.errors import SubspacesError

LOCK = "write.lock"


class WriteLock:
    """The write lock of the store in ``folder``; re-entrant within this object."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / LOCK
        self._handle: IO[str] | None = None
        self._depth = 0

    def acquire(self, what: str) -> None:
        """Take the lock for ``what`` (e.g. ``"store add"``), or refuse in one line if another writer holds it."""
        if self._depth:
            self._depth += 1
            return
        try:
            import fcntl
        except ImportError:  # pragma: no cover - Windows: no advisory locks here
            self._depth = 1
            return
        try:
            handle = open(self.path, "a+", encoding="utf-8")  # noqa: SIM115 - held open while the lock is held
        except OSError as exc:
            raise SubspacesError(f"{self.path.parent}: cannot write the store ({exc.strerror or exc})") from exc
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = _holder(handle)
            handle.close()
            raise SubspacesError(
                f"another writer holds the store {self.path.parent}{holder}; one writer at a time: "
                "wait for it to finish (or stop it), then rerun"
            ) from None
        handle.seek(0)
        handle.truncate()
        record = {"pid": os.getpid(), "what": what, "since": time.strftime("%Y-%m-%d %H:%M:%S")}
        handle.write(json.dumps(record) + "\n")
        handle.flush()
        self._handle, self._depth = handle, 1

    def release(self) -> None:
        if not self._depth:
            return
        self._depth -= 1
        if self._depth or self._handle is None:
            return
        handle, self._handle = self._handle, None
        handle.close()  # closing the file releases the flock

    @property
    def held(self) -> bool:
        return self._depth > 0


def _holder(handle: IO[str]) -> str:
    """`` (pid N, store add since T)`` from the lock file, or nothing if it cannot be read."""
    try:
        handle.seek(0)
        record = json.loads(handle.read() or "{}")
        return f" (pid {int(record['pid'])}, {record['what']} since {record['since']})"
    except (OSError, ValueError, KeyError, TypeError):
        return ""
