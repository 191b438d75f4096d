"""An experiment file (TOML) read into cells: arms x seeds x pools, each pool tagged dev (choose) or test (report).

    name = "store"                 # results go to benchmarks/results/runner/<name>/ unless out = "..." is given
    task = "store"                 # a name in bench.tasks.TASKS, or "package.module:function"
    seeds = [0]
    compare = [["adapter", "raw"]] # optional: paired bootstrap of arm - arm on the cells' per-row values
    [params]                       # every cell's
    n = 100000
    [[arms]]
    name = "default"
    params = {}                    # this arm's, over the experiment's
    seeds = [0]                    # optional: a deterministic arm runs only these of the experiment's seeds
    [[pools]]
    name = "wordnet"
    role = "test"                  # dev: settings are chosen here; test: only reported
    params = {}                    # this pool's, over the arm's

A cell's parameters are the experiment's, then its pool's, then its arm's (the arm's win: an arm is what differs).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .environment import ROOT

ROLES = ("dev", "test")


@dataclass(frozen=True)
class Cell:
    pool: str
    role: str
    arm: str
    seed: int
    params: dict[str, Any] = field(hash=False)

    @property
    def key(self) -> str:
        return f"{self.pool}/{self.arm}-seed{self.seed}"


@dataclass(frozen=True)
class Experiment:
    name: str
    task: str
    path: Path
    out: Path
    cells: list[Cell]
    compare: list[tuple[str, str]]
    bootstrap: int = 1000


def load(path: str | Path) -> Experiment:
    """Read and check an experiment file; the cells come in run order: per seed, per pool, the arms rotated by the
    seed's index (arms run in one process and no arm always runs first, when caches are coldest)."""
    path = Path(path)
    spec = tomllib.loads(path.read_text())
    unknown = set(spec) - {"name", "task", "out", "seeds", "compare", "params", "arms", "pools", "bootstrap"}
    if unknown:
        raise ValueError(f"{path}: unknown keys {sorted(unknown)}")
    for key in ("name", "task", "arms", "pools"):
        if key not in spec:
            raise ValueError(f"{path}: '{key}' is required")
    arms = [(a["name"], dict(a.get("params", {})), a.get("seeds")) for a in spec["arms"]]
    pools = [(p["name"], p.get("role", "dev"), dict(p.get("params", {}))) for p in spec["pools"]]
    for name, role, _ in pools:
        if role not in ROLES:
            raise ValueError(f"{path}: pool {name!r} has role {role!r}; one of {ROLES}")
    names = [a for a, _, _ in arms]
    if len(set(names)) != len(names) or len({p for p, _, _ in pools}) != len(pools):
        raise ValueError(f"{path}: arm and pool names must be unique")
    compare = [(a, b) for a, b in spec.get("compare", [])]
    for a, b in compare:
        if a not in names or b not in names:
            raise ValueError(f"{path}: compare names an arm that is not there: {a!r} - {b!r}")
    seeds = [int(s) for s in spec.get("seeds", [0])]
    common = dict(spec.get("params", {}))
    cells = []
    for i, seed in enumerate(seeds):
        for pool, role, pool_params in pools:
            for arm, arm_params, only in arms[i % len(arms) :] + arms[: i % len(arms)]:
                if only is None or seed in only:
                    cells.append(Cell(pool, role, arm, seed, common | pool_params | arm_params))
    out = ROOT / spec.get("out", f"benchmarks/results/runner/{spec['name']}")  # an absolute out stays as it is
    return Experiment(spec["name"], spec["task"], path, out, cells, compare, int(spec.get("bootstrap", 1000)))
