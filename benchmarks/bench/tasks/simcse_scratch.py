"""Unsupervised SimCSE from a random small BERT with one augmentation (an arm; notes/simcse.md §1.2), every arm
from the same weights and sentences; STS-B dev always, ``full_sts`` the STS table, ``before`` the untrained model's.
A result has ``benchmarks/results/simcse_scratch_<aug>.json``'s schema."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from bench.stats import timed
from bench.tables import grid


def _sts(model: Any) -> dict[str, Any]:
    from subspaces.eval.sts import STSEvaluator

    scores, seconds = timed(STSEvaluator(), model)
    return scores | {"seconds": seconds}


def run(params: dict[str, Any], seed: int) -> dict[str, Any]:
    from bench.random_bert import build_random_bert
    from subspaces.data.text import wordnet_sentences
    from subspaces.eval.sts import STSBDevEvaluator
    from subspaces.models.encoder import load_encoder
    from subspaces.train.simcse import SimCSEConfig, set_dropout, train_simcse, unsup_examples

    p: dict[str, Any] = {
        "steps": 200, "batch_size": 64, "lr": 3e-5, "layers": 4, "hidden": 256, "full_sts": False, "before": False,
        "max_sentences": None, "work": "outputs/bench-scratch",
    } | params  # fmt: skip
    aug, steps = p["augmentation"], int(p["steps"])
    sentences = wordnet_sentences()[: p["max_sentences"] or None]
    work = Path(p["work"])

    def fresh() -> Any:  # the pooler: CLS, its MLP in training only (build_random_bert's defaults)
        size = {"num_layers": p["layers"], "hidden_size": p["hidden"], "num_heads": max(1, p["hidden"] // 64)}
        return build_random_bert(work / f"init-{aug}", **size, seed=seed)

    config = {
        "steps": steps, "batch_size": p["batch_size"], "lr": p["lr"], "seed": seed, "layers": p["layers"],
        "hidden": p["hidden"], "max_length": 32, "temperature": 0.05, "pooler": "cls (MLP in training only)",
        "corpus": "wordnet_sentences", "n_sentences": len(sentences),
    }  # fmt: skip
    results: dict[str, Any] = {"augmentation": aug, "config": config}
    if p["before"]:
        untrained = fresh().eval()
        results["before"] = {
            "stsb_dev": STSBDevEvaluator()(untrained)["stsb_dev"], "sts": _sts(untrained) if p["full_sts"] else None,
        }  # fmt: skip
    model = fresh()
    if aug == "none":
        set_dropout(model, 0.0)
    cfg = SimCSEConfig(
        output_dir=str(work / aug), batch_size=p["batch_size"], lr=p["lr"], max_steps=steps,
        eval_steps=max(1, steps // 2), save_steps=0, seed=seed, resume=False,
    )  # fmt: skip
    t = time.perf_counter()
    res = train_simcse(model, unsup_examples(sentences, aug, seed), cfg)
    best = load_encoder(str(work / aug))
    results["after"] = {
        "train_seconds": time.perf_counter() - t, "samples_per_second": res.samples_per_second,
        "best_stsb_dev": res.best_score, "sts": _sts(best) if p["full_sts"] else None,
    }  # fmt: skip
    return results


def table(summary: dict[str, Any]) -> str:
    """notes/simcse.md §1.2's STS-B dev column: each arm's best STS-B dev, training time and rate."""
    rows = [
        f"{c['result']['augmentation']} | {c['seed']} | {c['result']['after']['best_stsb_dev']:.2f} | "
        f"{c['result']['after']['train_seconds']:.0f} | {c['result']['after']['samples_per_second']:.2f}"
        for c in summary["cells"]
    ]
    return grid("augmentation | seed | best STS-B dev | train s | samples/s", rows)
