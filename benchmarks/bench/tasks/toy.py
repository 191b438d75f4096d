"""A task of seconds' cost for the runner's own tests and smoke runs: noisy per-row scores around an arm's level."""

from __future__ import annotations

from typing import Any

import numpy as np


def run(params: dict[str, Any], seed: int) -> dict[str, Any]:
    rng = np.random.default_rng([seed, int(params.get("pool_seed", 0))])
    rows = np.clip(float(params["level"]) + 0.1 * rng.standard_normal(int(params.get("rows", 50))), 0, 1)
    return {"score": float(rows.mean()), "n": len(rows), "rows": {"score": rows.round(6).tolist()}}
