"""Markdown tables from a runner summary: mean ± std over seeds per pool and arm, then the paired differences.
A task module's own ``table(summary)`` (a figure's layout in BENCHMARKS.md) replaces the first."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .tasks import task_table


def grid(header: str, rows: Iterable[str], left: int = 1) -> str:
    """A Markdown table of ``"a | b | c"`` rows: the first ``left`` columns left-aligned, the others right."""
    align = "|" + "---|" * left + "---:|" * (header.count("|") + 1 - left)
    return "\n".join([f"| {header} |", align, *(f"| {row} |" for row in rows)]) + "\n"


def markdown(summary: dict[str, Any]) -> str:
    lines = [f"## {summary['experiment']['name']} ({summary['command']})", ""]
    roles = {c["pool"]: c["role"] for c in summary["cells"]}
    own = task_table(summary["experiment"]["task"])
    for pool, arms in ({} if own is not None else summary["aggregate"]).items():
        names = list(dict.fromkeys(n for cells in arms.values() for n in cells))
        rows = []
        for arm, cells in arms.items():
            seeds = max((c["seeds"] for c in cells.values()), default=0)
            rows.append(f"{arm} | {seeds} | " + " | ".join(mean_std(cells.get(n)) for n in names))
        lines += [f"### {pool} ({roles[pool]})", "", grid("arm | seeds | " + " | ".join(names), rows)]
    for pool, pairs in summary.get("paired", {}).items():
        rows = []
        for name, diffs in pairs.items():
            rows += [f"{name} | {n} | {d['diff']:+.4g} [{d['low']:+.4g}, {d['high']:+.4g}]" for n, d in diffs.items()]
        head = "difference | rows | diff [low, high]"
        lines += [f"### {pool}: paired bootstrap 95 % intervals", "", grid(head, rows, left=3)]
    if own is not None:
        lines.append(own(summary))
    return "\n".join(lines).rstrip() + "\n"


def mean_std(cell: dict[str, Any] | None, mean: str = ".4g", std: str = ".2g") -> str:
    """A figure's mean over seeds, ± its std where there are several seeds."""
    return "-" if cell is None else f"{cell['mean']:{mean}}" + (f" ± {cell['std']:{std}}" if cell["seeds"] > 1 else "")
