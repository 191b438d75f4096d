"""Quantized embeddings (BENCHMARKS §7; quantized.toml says on what): int8 and binary search's top-10 overlap with
float search, unrescored and 4x rescored from the codes or the float rows; int8 ranges from a seeded corpus sample."""

from __future__ import annotations

from typing import Any

import numpy as np

from bench.tables import grid
from bench.tasks import cell_params
from bench.tasks.inference import DEFAULTS, texts
from bench.tasks.store import recall


def run(params: dict[str, Any], seed: int) -> dict[str, Any]:
    from subspaces.models.encoder import encode, load_encoder
    from subspaces.quantize import calibrate_int8, calibration_sample, quantize, search

    p = cell_params(DEFAULTS | {"n_corpus": 20_000, "n_queries": 1000}, params)
    model = load_encoder(p["model"])
    corpus = encode(model, texts("long", p["n_corpus"]), normalize=True, show_progress=False)
    queries = encode(model, texts("short", p["n_queries"]), normalize=True, show_progress=False)
    truth = np.argsort(-(queries @ corpus.T), axis=1, kind="stable")[:, :10]
    calibration = calibrate_int8(calibration_sample(corpus, seed=seed))
    out: dict[str, Any] = {"corpus": len(corpus), "queries": len(queries), "float32_bytes": 4 * corpus.shape[1]}
    for kind in ("int8", "binary"):
        codes = quantize(corpus, kind, calibration)
        out[kind] = {"bytes_per_vector": int(codes.shape[1])}
        arms: dict[str, dict[str, Any]] = {"none": {"rescore": None}, "codes": {}, "float": {"corpus": corpus}}
        for name, extra in arms.items():
            ids = search(queries, codes, kind=kind, k=10, calibration=calibration, **extra)[1]
            out[kind][f"recall@10/rescore-{name}"] = round(recall(ids, truth), 4)
    return out


def table(summary: dict[str, Any]) -> str:
    """Per model and code: bytes per vector and the top-10 overlap with float search, by rescoring."""
    rows = []
    for cell in summary["cells"]:
        result = cell["result"]
        for kind in ("int8", "binary"):
            r = result[kind]
            recalls = " | ".join(f"{r[f'recall@10/rescore-{how}']:.3f}" for how in ("none", "codes", "float"))
            size = f"{r['bytes_per_vector']} (float32: {result['float32_bytes']})"
            rows.append(f"{cell['pool']} | {kind} | {size} | {recalls}")
    head = "model | code | bytes / vector | no rescoring | 4x rescored from the codes | 4x rescored from float rows"
    return grid(head, rows, left=2)
