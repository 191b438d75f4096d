"""Run an experiment file cell by cell, resumably: each finished cell is one JSON under ``<out>/cells/`` (written
whole, then renamed), which ``--resume`` skips (a cell recorded with other parameters stops the run).
``<out>/summary.json`` holds the environment, every cell's result less its per-row values, the mean and 95 %
t-interval over seeds of every numeric result per pool and arm, and the paired bootstrap of the ``compare`` pairs on
the per-row values. Each cell records a hash of its task's module: a resumed run names the cells another version ran
(``stale_cells``) and reruns them on ``--rerun-stale``."""

from __future__ import annotations

import argparse
import inspect
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from subspaces.fingerprint import sha256_hex
from subspaces.io import atomic_open, save_json

from .environment import ROOT, environment
from .experiment import Cell, Experiment, load
from .stats import paired_mean_difference, seed_interval, timed
from .tables import markdown
from .tasks import Task, resolve

SCHEMA = 1


def cell_path(experiment: Experiment, cell: Cell) -> Path:
    return experiment.out / "cells" / cell.pool / f"{cell.arm}-seed{cell.seed}.json"


def _plain(value: Any) -> Any:
    """JSON round trip: tuples become lists, so parameters compare equal to what a cell file holds."""
    return json.loads(json.dumps(value))


def task_code(task: Task) -> str:
    """A short hash of the module that defines ``task``: its code and its defaults."""
    source = inspect.getsourcefile(task)
    text = Path(source).read_bytes() if source else repr(task).encode()
    return sha256_hex(text, 12)


def run(path: str | Path, resume: bool = False, task: Task | None = None, rerun_stale: bool = False) -> dict[str, Any]:
    """Run (or resume) the experiment at ``path``; ``task`` replaces its task (tests); returns the summary."""
    experiment = load(path)
    measure = task or resolve(experiment.task)
    code = task_code(measure)
    done = [c for c in experiment.cells if cell_path(experiment, c).is_file()]
    if done and not resume:
        raise SystemExit(f"{experiment.out} holds {len(done)} finished cells: pass --resume to continue")
    env = environment()
    stale = []
    for cell in experiment.cells:
        target = cell_path(experiment, cell)
        if target.is_file():
            recorded = json.loads(target.read_text())
            if recorded["params"] != _plain(cell.params):
                raise SystemExit(f"{target} was run with other parameters; move it away or restore them")
            if recorded.get("task_code") == code:
                continue
            if not rerun_stale:
                stale.append(cell.key)
                continue
        print(f"[{experiment.name}] {cell.key} ({cell.role})", flush=True)
        result, seconds = timed(measure, dict(cell.params), cell.seed)
        record = {"cell": cell.key} | asdict(cell) | {"params": _plain(cell.params), "seconds": round(seconds, 3)}
        record |= {"finished": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "git": env["git"]}
        save_json(target, record | {"task_code": code, "result": result})
    if stale:
        print(f"[{experiment.name}] {len(stale)} finished cells were run by other task code (kept; --rerun-stale "
              f"reruns them): {', '.join(stale[:5])}{' ...' if len(stale) > 5 else ''}", flush=True)  # fmt: skip
    summary = summarise(experiment, env) | {"stale_cells": stale}
    with atomic_open(experiment.out / "summary.json", "w", encoding="utf-8") as handle:
        # compact: committed summaries count against issue 55's 5 MB; ``--table`` is how a person reads one
        json.dump(summary, handle, ensure_ascii=False, separators=(",", ":"))
        handle.write("\n")
    return summary


def _numbers(result: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, float]]:
    """Every numeric leaf of a result, keyed by its path ("search/exact/p50_ms"); per-row values excluded."""
    for key, value in result.items():
        name = f"{prefix}{key}"
        if key == "rows":
            continue
        if isinstance(value, dict):
            yield from _numbers(value, name + "/")
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            yield name, float(value)


def summarise(experiment: Experiment, env: dict[str, Any]) -> dict[str, Any]:
    records = [json.loads(cell_path(experiment, c).read_text()) for c in experiment.cells]
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {}  # per pool, per arm, in run order
    for r in records:
        runs.setdefault(r["pool"], {}).setdefault(r["arm"], []).append(r)
    aggregate: dict[str, dict[str, Any]] = {pool: {} for pool in runs}
    for pool, arms in runs.items():
        for arm, done in arms.items():
            values: dict[str, list[float]] = {}
            for r in done:
                for name, v in _numbers(r["result"]):
                    values.setdefault(name, []).append(v)
            aggregate[pool][arm] = {n: seed_interval(v) for n, v in values.items() if len(v) == len(done)}
    paired: dict[str, dict[str, Any]] = {}
    for a, b in experiment.compare:
        for pool, arms in runs.items():
            rows_a, rows_b = ([r["result"].get("rows", {}) for r in arms.get(arm, [])] for arm in (a, b))
            for name in sorted(set.intersection(*(set(x) for x in rows_a + rows_b))) if rows_a and rows_b else []:
                # seeds of an arm as columns; an arm with fewer seeds (a deterministic baseline) is its mean
                ya, yb = (np.stack([np.asarray(x[name], dtype=float) for x in s], axis=1) for s in (rows_a, rows_b))
                d = paired_mean_difference(ya, yb, n=experiment.bootstrap)
                pair = paired.setdefault(pool, {}).setdefault(f"{a} - {b}", {})
                pair[name] = {"diff": d.diff, "low": d.low, "high": d.high}
    resolved = experiment.path.resolve()
    file = str(resolved.relative_to(ROOT) if resolved.is_relative_to(ROOT) else experiment.path)
    cells = [r | {"result": {k: v for k, v in r["result"].items() if k != "rows"}} for r in records]
    summary = {"schema": SCHEMA, "experiment": {"name": experiment.name, "file": file, "task": experiment.task}}
    summary["command"] = f".venv/bin/python benchmarks/run.py {file} --resume"
    return summary | {"environment": env, "cells": cells, "aggregate": aggregate, "paired": paired}


def main(argv: list[str] | None = None, printer: Callable[[str], None] = print) -> None:
    parser = argparse.ArgumentParser(description="Run an experiment file (arms x seeds x pools), resumably.")
    parser.add_argument("experiment", type=Path, help="benchmarks/experiments/<name>.toml")
    parser.add_argument("--resume", action="store_true", help="continue: finished cells are kept, not rerun")
    parser.add_argument("--rerun-stale", action="store_true", help="with --resume: rerun cells other task code ran")
    parser.add_argument("--table", action="store_true", help="only print the tables of the existing summary")
    args = parser.parse_args(argv)
    if args.table:
        summary = json.loads((load(args.experiment).out / "summary.json").read_text())
    else:
        summary = run(args.experiment, resume=args.resume, rerun_stale=args.rerun_stale)
    printer(markdown(summary))
