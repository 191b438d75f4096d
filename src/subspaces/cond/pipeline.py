"""``cond train``, ``cond eval`` and ``cond bench`` as one call each: ``train_conditional``, ``evaluate_conditional``
(a saved model, or a plain encoder zero-shot as the bi-encoder) and ``cache_benchmark``."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from subspaces.cond.recipe import CondTrainConfig
from subspaces.cond.tasks import get_task
from subspaces.cond.train import check_trainable, evaluate, fit, predict, reset_cache_stats
from subspaces.data.csts import write_predictions
from subspaces.errors import SubspacesError
from subspaces.models.conditional import (
    BiEncoder,
    ConditionalModel,
    TriEncoder,
    build_model,
    load_model,
    load_or_zero_shot,
)
from subspaces.results import JSONResult
from subspaces.train.engine import FitResult


@dataclass(kw_only=True)
class ConditionalTrainResult(FitResult):
    """What ``cond train`` did: the loop's result (a history entry per epoch) with the run's task, model and
    settings; saved as ``OUTPUT/train_result.json``, the loop's seconds as ``train_seconds`` and the best dev score
    as ``best_dev_<selection_metric>``."""

    OMIT_IF_NONE: ClassVar[frozenset[str]] = frozenset({"head", "rank"})
    SAVED = (
        "task", "model", "arch", "freeze_encoder", "head", "rank", "objective", "train_rows", "sampler", "steps",
        "seconds", "total_seconds", "best_epoch", "best_score", "history", "config",
    )  # fmt: skip

    task: str
    model: str
    arch: str
    freeze_encoder: bool
    head: str | None  # the tri-encoder's head kind (None: a bi-encoder)
    rank: int | str | None  # a hypernet head's K, or "full" (None: not a hypernet)
    objective: str
    train_rows: int
    sampler: str
    total_seconds: float  # including loading, the frozen encoder's one pass, and dev evaluations
    best_epoch: int | None
    selection_metric: str
    config: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        renamed = {"seconds": "train_seconds", "best_score": f"best_dev_{self.selection_metric}"}
        return {renamed.get(k, k): v for k, v in super().to_dict().items()}


@dataclass
class ConditionalEvalResult(JSONResult):
    """``cond eval``'s report: metrics overall and on seen / unseen conditions (what applies), cache, time."""

    OMIT_IF_NONE: ClassVar[frozenset[str]] = frozenset(
        {"head", "rank", "metrics", "seen", "unseen", "threshold", "n", "predictions"}
    )

    task: str
    split: str
    arch: str
    freeze_encoder: bool
    head: str | None = None
    rank: int | str | None = None
    metrics: dict[str, float] | None = None  # None: the split has no gold labels (predictions only)
    seen: dict[str, float] | None = None
    unseen: dict[str, float] | None = None
    threshold: float | None = None  # binary tasks: the accuracy threshold chosen on validation
    n: int | None = None
    predictions: str | None = None  # the C-STS prediction file written
    seconds: float = 0.0
    cache: dict[str, Any] | None = None


def _describe(model: ConditionalModel) -> dict[str, Any]:
    """arch, freeze_encoder, head and rank (None where they do not apply)."""
    info: dict[str, Any] = {"arch": model.arch, "freeze_encoder": model.freeze_encoder, "head": None, "rank": None}
    if isinstance(model, TriEncoder):
        head = model.head.config()
        info["head"] = head["kind"]
        if head["kind"] == "hypernet":
            info["rank"] = "full" if head.get("rank") is None else head["rank"]
    return info


def train_conditional(
    task: str,
    model: str,
    *,
    output: str | Path,
    config: CondTrainConfig | None = None,
    data_dir: str | Path | None = None,
    device: str = "cpu",
    **settings: Any,
) -> ConditionalTrainResult:
    """Build on ``device``, train (best state on validation), save to ``output`` with ``train_result.json``;
    ``settings`` (fields of :class:`CondTrainConfig`) replace the ``config``'s values."""
    from subspaces.models.encoder import resolve_device

    resolve_device(device)  # fails before the data and the model load
    config = replace(config or CondTrainConfig(), **settings)
    check_trainable("cond", config.arch, config.freeze_encoder, config.trainable_layers)
    spec = get_task(task)
    train_rows = spec.load("train", data_dir)
    dev_rows = spec.load("validation", data_dir)
    start = time.perf_counter()
    built_from = ("head", "rank", "freeze_encoder", "condition_encoder", "max_length", "seed")
    cond_model = build_model(model, config.arch, device=device, **{name: getattr(config, name) for name in built_from})
    result = fit(cond_model, spec, train_rows, config, dev_rows=dev_rows)
    seconds = time.perf_counter() - start
    cond_model.save(output)
    training = cond_model.metadata["training"]
    summary = ConditionalTrainResult.of(
        result,
        task=task,
        model=model,
        **_describe(cond_model),
        objective=config.objective,
        train_rows=len(train_rows),
        sampler=training["sampler"],
        total_seconds=seconds,
        best_epoch=training["best_epoch"],
        selection_metric=spec.selection_metric,
        config=asdict(config),
    )
    summary.save(Path(output) / "train_result.json")
    return summary


def evaluate_conditional(
    path: str | Path | ConditionalModel,
    task: str,
    *,
    split: str = "test",
    data_dir: str | Path | None = None,
    predictions: str | Path | None = None,
    device: str = "cpu",
) -> ConditionalEvalResult:
    """Metrics of a saved model (or a plain encoder, zero-shot) on ``split`` (binary tasks at the validation
    threshold), the caches' statistics over this evaluation, and optionally C-STS's prediction file."""
    from subspaces.models.encoder import resolve_device

    resolve_device(device)
    spec = get_task(task)
    model = path if isinstance(path, (TriEncoder, BiEncoder)) else load_or_zero_shot(path, task="cond", device=device)
    model.clear_caches(reset_stats=True)
    rows = spec.load(split, data_dir)
    seen_keys = model.metadata.get("seen_keys")
    if seen_keys is None:
        seen_keys = spec.seen_keys(spec.load("train", data_dir))
    start = time.perf_counter()
    report = ConditionalEvalResult(task=task, split=split, **_describe(model))
    labelled = [r for r in rows if r.label is not None]
    if labelled:
        dev_rows = spec.load("validation", data_dir) if spec.binary and split != "validation" else None
        result = evaluate(model, spec, labelled, dev_rows=dev_rows, seen_keys=seen_keys)
        for name in ("metrics", "seen", "unseen", "threshold", "n"):
            setattr(report, name, result.get(name))
    if predictions is not None:
        if spec.name != "csts":
            raise SubspacesError("prediction files are written in C-STS's {idx: score} form; use --task csts")
        scores = predict(model, rows)
        low, high = spec.label_range
        write_predictions(predictions, rows, low + (high - low) * np.clip(scores, 0.0, 1.0))
        report.predictions = str(predictions)
    if report.metrics is None and predictions is None:
        raise SubspacesError(
            f"split {split!r} has no gold labels; pass --predictions FILE to write the prediction file"
        )
    report.seconds = time.perf_counter() - start
    stats = model.cache_stats()
    report.cache = {"hit_rate": stats["hit_rate"], "bytes": stats["bytes"], "caches": stats["caches"]}
    return report


@dataclass
class CacheBenchmark(JSONResult):
    """:func:`cache_benchmark`'s report: per model (``runs["bi"]``, ``runs["tri"]``) its description and, per pass
    (cold, warm, new_conditions), seconds, rows/s, hit rates and bytes; the tri-encoder's speed-up per pass."""

    task: str
    split: str
    rows: int
    model: str
    runs: dict[str, dict[str, Any]]
    tri_speedup_cold: float
    tri_speedup_warm: float
    tri_speedup_new_conditions: float


def cache_benchmark(
    task: str,
    model: str,
    *,
    split: str = "test",
    data_dir: str | Path | None = None,
    rank: int | str | None = "auto",
    tri: str | Path | None = None,
    bi: str | Path | None = None,
    limit: int | None = None,
    device: str = "cpu",
) -> CacheBenchmark:
    """Inference time and cache hit rate of a bi- and a tri-encoder (untrained unless saved ones are given) on the
    same rows: *cold*, *warm* (the same pass again) and *new_conditions* (permuted conditions, caches warm)."""
    spec = get_task(task)
    rows = spec.load(split, data_dir)[:limit]
    models: dict[str, ConditionalModel] = {
        "bi": load_model(bi, task="cond", device=device) if bi else build_model(model, "bi", device=device),
        "tri": (
            load_model(tri, task="cond", device=device)
            if tri
            else build_model(model, "tri", head="hypernet", rank=rank, device=device)
        ),
    }
    s1, s2, c = [r.sentence1 for r in rows], [r.sentence2 for r in rows], [r.condition for r in rows]
    shuffled = [c[i] for i in np.random.default_rng(0).permutation(len(c))]
    passes = {"cold": c, "warm": c, "new_conditions": shuffled}
    runs_by_model: dict[str, dict[str, Any]] = {}
    for name, m in models.items():
        m.eval()
        m.clear_caches(reset_stats=True)
        runs = {}
        for phase, conditions in passes.items():
            reset_cache_stats(m)
            start = time.perf_counter()
            m.similarity(s1, s2, conditions)
            seconds = time.perf_counter() - start
            stats = m.cache_stats()
            runs[phase] = {
                "seconds": seconds,
                "rows_per_second": len(rows) / seconds,
                "hit_rate": stats["hit_rate"],
                "bytes": stats["bytes"],
                "caches": {k: v["hit_rate"] for k, v in stats["caches"].items()},
            }
        runs_by_model[name] = {**{k: v for k, v in _describe(m).items() if v is not None}, **runs}
    speedup = {
        f"tri_speedup_{phase}": runs_by_model["bi"][phase]["seconds"] / runs_by_model["tri"][phase]["seconds"]
        for phase in passes
    }
    return CacheBenchmark(task=task, split=split, rows=len(rows), model=model, runs=runs_by_model, **speedup)
