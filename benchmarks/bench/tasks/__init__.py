"""What a cell measures: ``task(params, seed) -> result`` (a JSON-able dict; per-row values under ``"rows"``,
a dict of equal-length lists, for the paired bootstrap). A task module may also define ``table(summary) -> str``.
Heavy libraries are imported inside the tasks, so reading a summary needs none of them."""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module
from typing import Any

Task = Callable[[dict[str, Any], int], dict[str, Any]]

TASKS = {"store": "bench.tasks.store:run", "simcse_scratch": "bench.tasks.simcse_scratch:run"}


def resolve(name: str) -> Task:
    """A task by its name in ``TASKS`` or as ``package.module:function``."""
    module, _, function = TASKS.get(name, name).partition(":")
    if not function:
        raise ValueError(f"unknown task {name!r}: one of {sorted(TASKS)}, or package.module:function")
    task: Task = getattr(import_module(module), function)
    return task


def cell_params(defaults: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """A cell's parameters over its task's defaults, with torch's threads set to their ``threads``."""
    from subspaces.config import set_threads

    p = defaults | params
    set_threads(p["threads"])
    return p


def task_table(name: str) -> Callable[[dict[str, Any]], str] | None:
    """The task module's own ``table``, if it has one (a module that does not import here: none)."""
    try:
        return getattr(import_module(TASKS.get(name, name).partition(":")[0]), "table", None)
    except ImportError:
        return None
