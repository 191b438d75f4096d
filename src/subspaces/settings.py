"""Settings records: a component's settings are the fields of one dataclass, each declared with :func:`setting`,
the one home of its default and its help. The CLI derives its options from the fields (``cli.common``) and
``--config FILE`` fills them; :func:`chosen` takes one record's fields out of a record that extends it."""

from __future__ import annotations

from dataclasses import field, fields
from typing import Any, TypeVar

S = TypeVar("S")


def setting(default: Any, text: str, *flags: str) -> Any:
    """A settings field: its default, its help ``text`` and, if not ``--field-name``, its CLI ``flags``."""
    return field(default=default, metadata={"help": text, "flags": flags} if flags else {"help": text})


def chosen(kind: type[S], settings: Any | None, changes: dict[str, Any]) -> S:
    """The ``kind`` of settings in ``settings`` (a ``kind``, or a record extending it; None: the defaults), with
    ``changes`` to single fields."""
    taken = {} if settings is None else {f.name: getattr(settings, f.name) for f in fields(kind)}  # type: ignore[arg-type]
    return kind(**taken | changes)
