"""The STS table (BENCHMARKS §1): ``STSEvaluator``'s Spearman x 100 and alignment/uniformity of a bundled model
(a pool) in one runtime (an arm: ``dtype``, ``backend``, ``precision``); deterministic: one seed."""

from __future__ import annotations

from typing import Any

from bench.tables import grid
from bench.tasks import cell_params

DEFAULTS: dict[str, Any] = {
    "model": "minilm-l6", "dtype": "float32", "backend": "torch", "precision": "fp32", "variant": "original",
    "threads": 2,
}  # fmt: skip


def run(params: dict[str, Any], seed: int) -> dict[str, Any]:
    from subspaces.eval.sts import STSEvaluator
    from subspaces.models.encoder import load_encoder

    p = cell_params(DEFAULTS, params)
    evaluator = STSEvaluator(variant=p["variant"])
    scores = evaluator(load_encoder(p["model"], dtype=p["dtype"], backend=p["backend"], precision=p["precision"]))
    digits = {name: 2 if name in (*evaluator.tasks, "avg") else 4 for name in scores}  # Spearman x 100; geometry
    return {"scores": {name: round(float(value), digits[name]) for name, value in scores.items()}}


def table(summary: dict[str, Any]) -> str:
    cells = summary["cells"]
    names = list(cells[0]["result"]["scores"]) if cells else []
    rows = [f"{c['pool']} | {c['arm']} | " + " | ".join(f"{c['result']['scores'][n]:g}" for n in names) for c in cells]
    return grid(" | ".join(["model", "arm", *names]), rows, left=2)
