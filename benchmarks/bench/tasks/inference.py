"""CPU inference (BENCHMARKS §7): sentences/s of one arm (``backend``, ``precision``, ``dtype``) on ``short``
(WordNet examples) or ``long`` texts (WN18RR definitions) at batch 1 and 64, after an untimed export and warm-up.
Seeds are repeats (the runner rotates the arms' order). STS per arm: ``inference_sts.toml``."""

from __future__ import annotations

from typing import Any

from bench.stats import timed
from bench.tables import grid
from bench.tasks import cell_params

DEFAULTS: dict[str, Any] = {
    "model": "minilm-l6", "backend": "torch", "precision": "fp32", "dtype": "float32", "threads": 2, "n_short": 2048,
    "n_long": 1024, "n_batch1": 128,
}  # fmt: skip


def texts(kind: str, n: int) -> list[str]:
    from subspaces.config import dataset_dir
    from subspaces.io import read_lines

    if kind == "short":
        return read_lines(dataset_dir("wordnet_sentences") / "wordnet30_examples.txt.gz", limit=n)
    rows = (dataset_dir("wn18rr") / "wordnet-mlj12-definitions.txt").read_text(encoding="utf-8").splitlines()
    return [r.split("\t")[2] for r in rows if r.count("\t") == 2 and r.split("\t")[2].strip()][:n]


def _rate(model: Any, batch: list[str], batch_size: int) -> float:
    from subspaces.models.encoder import encode

    _, seconds = timed(encode, model, batch, batch_size=batch_size, show_progress=False)
    return round(len(batch) / seconds, 1)


def run(params: dict[str, Any], seed: int) -> dict[str, Any]:
    from subspaces.models.encoder import load_encoder

    p = cell_params(DEFAULTS, params)
    batch = texts(p["kind"], p[f"n_{p['kind']}"])
    model = load_encoder(p["model"], backend=p["backend"], precision=p["precision"], dtype=p["dtype"])
    _rate(model, batch[:64], 64)  # export (once per weights) and warm-up, untimed
    return {"batch1": _rate(model, batch[: p["n_batch1"]], 1), "batch64": _rate(model, batch, 64)}


def table(summary: dict[str, Any]) -> str:
    """Per pool (model, text kind): each arm's mean sentences/s over repeats ± the 95 % half-width, × torch fp32."""
    rows = []
    for pool, arms in summary["aggregate"].items():
        base = arms.get("torch-fp32", {})
        for arm, values in arms.items():
            cells = [
                f"{values[n]['mean']:,.0f} ± {values[n]['half_width']:,.0f}"
                + (f" ({values[n]['mean'] / base[n]['mean']:.2f}×)" if n in base else "")
                for n in ("batch1", "batch64")
                if n in values
            ]
            if cells:
                rows.append(f"{pool} | {arm} | " + " | ".join(cells))
    return grid("pool | arm | batch 1 | batch 64", rows, left=2)
