"""BENCHMARKS §3's encoder regime (issue 17): do MIC's terms make a fine-tuned encoder's 16/32-d prefixes better than
MRL's? ``minilm-l6``'s top ``trainable_layers`` train over the bottom's cached activations with supervised SimCSE
(temperature 0.05, contradiction as hard negative) on the 3,172 SNLI-dev triplets, ``DEFAULTS`` for every arm, no
warm-up, last step kept. Arms: ``start`` (untrained), ``mrl`` (InfoNCE at each of ``dims``), ``mic`` (MRL + MIC's
terms at their defaults, on the trained layers: frozen ones have no states), and ``ARMS``' others for the notes.
Each model is measured as matryoshka_adapter's ``raw`` arm on ``split`` (4 SNLI-test premises and 155 hypotheses
occur in training), plus per-row ``stsb_spearman`` for STS-B's interval. A killed training resumes from its
checkpoint under ``work``; ``seconds_per_step`` is the training loop's own."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from bench.tables import grid, mean_std
from bench.tasks import cell_params, matryoshka_adapter

DEFAULTS: dict[str, Any] = matryoshka_adapter.DEFAULTS | {
    "steps": 1000, "batch_size": 64, "max_length": 32, "lr": 5e-5, "trainable_layers": 2, "save_steps": 100,
    "train_limit": None, "work": "outputs/bench-matryoshka-encoder",
}  # fmt: skip
ARMS: dict[str, dict[str, Any]] = {  # what each arm sets in MatryoshkaConfig
    "simcse": {"dims": (None,)}, "mrl": {}, "mic": {"mic": True}, "mic_gamma1": {"mic": True, "gamma": 1.0},
    "mrl_scr": {"mic": True, "lambda_sir": 0.0, "lambda_distill": 0.0},
    "mrl_sir": {"mic": True, "lambda_corr": 0.0, "lambda_var": 0.0, "lambda_distill": 0.0},
}  # fmt: skip
SHOWN = {"banking77": "Banking77", "emotion": "Emotion", "stsb_spearman": "STS-B", "snli_ndcg@10": "SNLI nDCG@10"}


def training_rows(limit: int | None) -> list[tuple[str, str, str]]:
    """The SNLI-dev triplets (anchor, entailment, contradiction), in file order."""
    import csv

    from subspaces.config import dataset_dir
    from subspaces.io import open_text

    with open_text(dataset_dir("nli") / "snli_devtest_triplets.csv", newline="") as handle:
        rows = [(r["sent0"], r["sent1"], r["hard_neg"]) for r in csv.DictReader(handle) if r["source"] == "snli_dev"]
    return rows[:limit]


def trained(p: dict[str, Any], seed: int) -> tuple[str, dict[str, Any]]:
    """The folder (absolute) of ``p["arm"]``'s model trained with ``seed``, and its training record."""
    from subspaces.models.encoder import load_encoder
    from subspaces.train.matryoshka import train_matryoshka
    from subspaces.train.output import STATE
    from subspaces.train.recipes import MatryoshkaConfig

    folder = (Path(p["work"]) / f"{p['arm']}-seed{seed}").resolve()
    arm = {"dims": tuple(p["dims"])} | ARMS[p["arm"]]
    if arm.get("mic"):
        arm["layers"] = tuple(range(-p["trainable_layers"], 0))  # 1-based from the end: the trained layers
    config = MatryoshkaConfig(
        output_dir=str(folder), lr=p["lr"], max_steps=p["steps"], batch_size=p["batch_size"],
        max_length=p["max_length"], seed=seed, eval_steps=0, save_steps=p["save_steps"], stsb_dev=False,
        trainable_layers=p["trainable_layers"], cache_dir=str(Path(p["work"]) / f"activations-len{p['max_length']}"),
        show_progress=False, **arm,
    )  # fmt: skip
    result = train_matryoshka(load_encoder(p["model"]), training_rows(p["train_limit"]), config)
    state = json.loads((folder / STATE).read_text())  # the run that finished (a finished folder trains nothing)
    terms = [h["terms"] for h in result.history if "terms" in h]  # MIC's term sizes at the last logged step
    record = {"train_seconds": state["seconds"], "terms_last": terms[-1] if terms else None}
    return str(folder), record | {"seconds_per_step": state["seconds"] / max(1, state["steps"] - state["resumed_from"])}


def spearman_rows(cosines: list[float], gold: Any) -> list[float]:
    """Per-pair values whose mean is the pairs' Spearman and whose spread is each pair's jackknife influence (centred
    pseudo-values), so the runner's paired bootstrap of row means approximates one of the Spearman itself (to first
    order: within 0.01 of it on a simulated STS-B test)."""
    from scipy.stats import spearmanr

    x, y, n = np.asarray(cosines), np.asarray(gold, dtype=float), len(cosines)
    rho = spearmanr(x, y).statistic
    pseudo = n * rho - (n - 1) * np.array([spearmanr(np.delete(x, i), np.delete(y, i)).statistic for i in range(n)])
    return (pseudo - pseudo.mean() + rho).round(6).tolist()


def run(params: dict[str, Any], seed: int) -> dict[str, Any]:
    p = cell_params(DEFAULTS, params)
    # a trained model by its absolute path: migrate.vectors keeps its encoded texts beside its folder
    model, record = (p["model"], {}) if p["arm"] == "start" else trained(p, seed)
    result = matryoshka_adapter.run(p | {"arm": "raw", "model": model}, seed)
    gold = matryoshka_adapter.tasks(p["split"], p["limit"])[1][2]
    for d in result["dims"]:
        result["rows"][f"stsb_spearman/{d}"] = spearman_rows(result["rows"][f"stsb_cosine/{d}"], gold)
    return record | result


def table(summary: dict[str, Any]) -> str:
    """BENCHMARKS §3's encoder table per pool: each arm at 16 and 32 dims (mean ± std over seeds) and SNLI at full
    size; each compared pair's Δ [paired bootstrap 95 % interval]; each trained arm's step time against MRL's."""
    out = []
    for pool, arms in summary["aggregate"].items():
        dims = next(c["result"]["dims"] for c in summary["cells"] if c["pool"] == pool)
        shown = [(n, d) for n in SHOWN for d in dims[:2]] + [("snli_ndcg@10", dims[-1])]
        header = "arm | seeds | " + " | ".join(f"{SHOWN[n]} {d}" for n, d in shown)
        rows = []
        for arm, got in arms.items():
            seeds = got[f"metrics/{shown[0][0]}/{shown[0][1]}"]["seeds"]
            figures = " | ".join(mean_std(got[f"metrics/{n}/{d}"], ".2f", ".2f") for n, d in shown)
            rows.append(f"{arm} | {seeds} | {figures}")
        for pair, paired in summary.get("paired", {}).get(pool, {}).items():
            deltas = " | ".join(matryoshka_adapter._delta(paired.get(f"{n}/{d}"), 0) for n, d in shown)
            rows.append(f"Δ {pair.replace(' - ', ' − ')} | | {deltas}")
        out.append(grid(header, rows))
        mrl = arms.get("mrl", {}).get("seconds_per_step", {}).get("mean")
        times = {a: got["seconds_per_step"]["mean"] for a, got in arms.items() if "seconds_per_step" in got}
        if mrl and times:
            out.append("step time / MRL's: " + ", ".join(f"{a} {t / mrl:.2f}× ({t:.3f} s)" for a, t in times.items()))
    return "\n".join(out) + "\n"
