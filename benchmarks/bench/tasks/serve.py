"""Serving beside infinity-emb (BENCHMARKS §8): ``benchmarks/serve_load.py``'s side-by-side load test as a cell;
seeds are repeats. Run it on an otherwise idle machine."""

from __future__ import annotations

from typing import Any

DEFAULTS: dict[str, Any] = {"duration": 15.0}  # seconds a level; the rest are serve_load.py's defaults


def run(params: dict[str, Any], seed: int) -> dict[str, Any]:
    """``params``: any of serve_load.py's options, by name (``per_request`` for ``--per-request``)."""
    import serve_load

    argv = [f"--{name.replace('_', '-')}={value}" for name, value in (DEFAULTS | params).items()]
    return serve_load.against_infinity(serve_load.build_parser().parse_args(argv))


def table(summary: dict[str, Any]) -> str:
    """Texts/s (p99 ms) per server at each level, and ours over infinity, one block per cell."""
    out = []
    for cell in summary["cells"]:
        result = cell["result"]
        out.append(f"### {cell['pool']} / {cell['arm']} / seed {cell['seed']} ({result['cpu']}, {result['date']})")
        out += ["| server | texts | c | texts/s | p99 ms | x infinity |", "|---|---|---:|---:|---:|---:|"]
        ratios = result["ratio_over_infinity"]
        for label, kinds in result["servers"].items():
            for kind, rows in kinds.items():
                for row in rows:
                    c = row["concurrency"]
                    ratio = ratios.get(label, {}).get(f"{kind} c={c}", {}).get("texts_per_s")
                    shown = "-" if ratio is None else f"{ratio:.2f}"
                    out.append(f"| {label} | {kind} | {c} | {row['texts_per_s']:.0f} | {row['p99_ms']:.0f} | {shown} |")
    return "\n".join(out) + "\n"
