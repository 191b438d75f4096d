"""Step time of full against partial fine-tuning (BENCHMARKS §6): a fresh ``minilm-l6`` under ``--trainable-layers
layers`` (0: all), SimCSE's unsupervised loss on WordNet sentences; the frozen layers' cache built first (timed
apart), then the median of ``steps`` timed steps after ``warmup``. Seeds are repeats."""

from __future__ import annotations

import statistics
import time
from typing import Any

from bench.tables import grid
from bench.tasks import cell_params

DEFAULTS: dict[str, Any] = {
    "model": "minilm-l6", "layers": 0, "batch_size": 64, "max_length": 32, "warmup": 2, "steps": 10, "cached": 2048,
    "threads": 2,
}  # fmt: skip


def run(params: dict[str, Any], seed: int) -> dict[str, Any]:
    import torch

    from subspaces.data.text import wordnet_sentences
    from subspaces.losses.simcse import SimCSELoss
    from subspaces.models.encoder import load_encoder
    from subspaces.models.partial import partial_fine_tuning
    from subspaces.train.sentence import loss_step

    p = cell_params(DEFAULTS, params)
    torch.manual_seed(seed)
    n = p["batch_size"]
    texts = wordnet_sentences()[: max(p["cached"], (p["warmup"] + p["steps"]) * n)]
    model = load_encoder(p["model"])
    model.max_seq_length = p["max_length"]
    model.train()
    start = time.perf_counter()
    partial = partial_fine_tuning(model, p["layers"] or None, cache_dir=False, show_progress=False)
    if partial is not None:
        partial.prepare(texts)
    cache_seconds = time.perf_counter() - start
    trainable = [q for q in model.parameters() if q.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=3e-5)
    step = loss_step(model, SimCSELoss(model, temperature=0.05))
    seconds = []
    for i in range(p["warmup"] + p["steps"]):
        start = time.perf_counter()
        loss = step([(t,) for t in texts[i * n : (i + 1) * n]])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        seconds.append(time.perf_counter() - start)
    return {
        "trainable_parameters": sum(q.numel() for q in trainable),
        "median_step_seconds": round(statistics.median(seconds[p["warmup"] :]), 4),
        "cache_build_seconds": round(cache_seconds, 2) if partial is not None else 0.0,
        "cached_texts": len(set(texts)) if partial is not None else 0,
    }  # fmt: skip


def table(summary: dict[str, Any]) -> str:
    rows = []
    for arms in summary["aggregate"].values():
        full = arms.get("all", {}).get("median_step_seconds", {}).get("mean")
        for arm, v in arms.items():
            step = v["median_step_seconds"]
            speedup = f"{full / step['mean']:.2f}×" if full else "-"
            rows.append(
                f"{arm} | {v['trainable_parameters']['mean'] / 1e6:.1f} M "
                f"| {step['mean']:.3f} ± {step['half_width']:.3f} | {speedup} "
                f"| {v['cache_build_seconds']['mean']:.1f} ({v['cached_texts']['mean']:,.0f})"
            )
    return grid("arm | trainable parameters | s / step (median) | speed-up | cache build s (texts)", rows)
