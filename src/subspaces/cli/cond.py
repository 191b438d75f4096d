"""``subspaces cond train|eval|search|bench`` (Hyper-CL conditional similarity)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, Optional

import typer

from subspaces.cli.common import (
    DeviceOpt,
    JsonOpt,
    ThreadsOpt,
    chosen_rank,
    echo,
    out,
    parse_rank,
    recipe_options,
    table,
)
from subspaces.cli.groups import cond_app
from subspaces.cli.search import CONDITION, CORPUS, HEAD, KOpt, QueryArg, QueryFileOpt, query_texts, show_results
from subspaces.cli.train import TrainableLayersOpt, parse_trainable_layers
from subspaces.cond.recipe import CondTrainConfig
from subspaces.cond.tasks import SPLITS, TASKS
from subspaces.errors import DataError
from subspaces.io import check_writable, load_embeddings, read_lines
from subspaces.store.plans import SearchSettings
from subspaces.store.results import SearchResult

if TYPE_CHECKING:
    from subspaces.cond.pipeline import ConditionalEvalResult


Task = Literal[tuple(TASKS)]  # type: ignore[valid-type]
Split = Literal[SPLITS]  # type: ignore[valid-type]
TaskOpt = Annotated[Task, typer.Option(help="wic (bundled) or csts (needs --data).")]  # type: ignore[valid-type]
METRICS = ("accuracy", "auc", "spearman", "pearson", "mse")  # the columns of a report, those the task has
DataOpt = Annotated[Optional[Path], typer.Option("--data", help="Folder with csts_{train,validation,test}.csv.")]


def _pct(rate: float | None) -> str:
    return "-" if rate is None else f"{rate:.2%}"


def _metrics_table(title: str, report: ConditionalEvalResult) -> None:
    parts = [(name, m) for name, m in (("all", report.metrics), ("seen", report.seen), ("unseen", report.unseen)) if m]
    if not parts:
        return
    keys = [k for k in METRICS if k in parts[0][1]]
    default_n = "" if report.n is None else report.n
    rows = [[name, m.get("n", default_n), *[f"{m[k]:.4f}" if k in m else "-" for k in keys]] for name, m in parts]
    out.print(table(title, ["conditions", "n", *keys], rows))


@cond_app.command("train")
@recipe_options(
    CondTrainConfig,
    only=(
        "arch", "head", "freeze_encoder", "condition_encoder", "max_length", "objective", "batch_size", "head_lr",
        "encoder_lr", "epochs", "max_steps", "temperature", "margin", "in_batch_negatives", "seed", "cache_dir",
    ),
)  # fmt: skip
def train_cmd(
    output: Annotated[Path, typer.Option("--output", "-o", help="Folder to save the model in.")],
    task: TaskOpt = "wic",
    data: DataOpt = None,
    model: Annotated[str, typer.Option("--model", "-m", help="Bundled model name or local folder.")] = "minilm-l6",
    rank: Annotated[str, typer.Option(help="Hypernet rank K, 'auto' (d/12, as Hyper-CL) or 'full'.")] = "auto",
    trainable_layers: TrainableLayersOpt = "all",
    device: DeviceOpt = "cpu",
    threads: ThreadsOpt = None,
    *,
    config: CondTrainConfig,
) -> None:
    """Train a conditional similarity model; the state best on the validation split is saved.

    --trainable-layers N fine-tunes the encoder's top N layers (so it implies --fine-tune).

    Every setting of the recipe (CondTrainConfig) is an option here or a key of a --config file.
    """
    from subspaces.cond.pipeline import train_conditional
    from subspaces.models.encoder import resolve_device

    resolve_device(device)
    check_writable(output, "--output", folder=True)  # before the work, not after it
    layers = parse_trainable_layers(trainable_layers)
    config = replace(
        config,
        rank=chosen_rank(rank, config.rank),
        freeze_encoder=config.freeze_encoder and layers is None,
        trainable_layers=layers,
    )
    summary = train_conditional(task, model, output=output, config=config, data_dir=data, device=device)
    echo(
        f"{output}  ({summary.sampler}; {summary.steps} steps in {summary.seconds:.1f}s)",
        label="saved",
        style="green",
    )
    evaluated = [h for h in summary.history if "dev" in h]
    # Only the metrics the task has (C-STS has no accuracy or AUC): no columns of NaN.
    keys = [k for k in METRICS if any(k in h["dev"] for h in evaluated)]
    rows = [
        [
            h["epoch"],
            f"{h['loss']:.4f}" if h.get("loss") is not None else "-",
            *[f"{h['dev'][k]:.4f}" if k in h["dev"] else "-" for k in keys],
        ]
        for h in evaluated
    ]
    if rows:
        out.print(table("validation by epoch", ["epoch", "loss", *keys], rows))


@cond_app.command("eval")
def eval_cmd(
    model_dir: Annotated[Path, typer.Argument(help="A folder written by `cond train`.")],
    task: TaskOpt = "wic",
    split: Annotated[Split, typer.Option(help="Split to score (thresholds are picked on validation).")] = "test",
    data: DataOpt = None,
    json_path: JsonOpt = None,
    predictions: Annotated[Optional[Path], typer.Option(help="C-STS: write {idx: score} predictions here.")] = None,
    device: DeviceOpt = "cpu",
    threads: ThreadsOpt = None,
) -> None:
    """Score a conditional model: metrics overall and on seen / unseen conditions, cache hit rate, time."""
    from subspaces.cond.pipeline import evaluate_conditional

    report = evaluate_conditional(model_dir, task, split=split, data_dir=data, predictions=predictions, device=device)
    _metrics_table(f"{task} {split}: {report.arch} {report.head or ''}", report)
    cache = report.cache or {}
    echo(f"cache hit rate {_pct(cache['hit_rate'])} ({cache['bytes'] / 2**20:.1f} MiB), {report.seconds:.1f}s")
    if json_path is not None:
        report.save(json_path)
        echo(f"wrote {json_path}")


@cond_app.command("search")
def search_cmd(
    head: Annotated[Path, HEAD],
    condition: Annotated[str, CONDITION],
    query: QueryArg = None,
    queries: QueryFileOpt = None,
    corpus: Annotated[Optional[Path], CORPUS] = None,
    corpus_texts: Annotated[
        Optional[Path], typer.Option("--corpus-texts", help="Texts, one a line: embedded, or labels of --corpus rows.")
    ] = None,
    k: KOpt = SearchSettings.k,
    json_path: JsonOpt = None,
    old_query: Annotated[Optional[list[str]], typer.Option("--query", "-q", hidden=True)] = None,
    device: DeviceOpt = "cpu",
    threads: ThreadsOpt = None,
) -> None:
    """Rank a corpus by cos(W_c q, W_c d) under a condition, without re-encoding it: the corpus is projected once
    per condition (into the hypernet's K-dim factor space), then each query costs one product."""
    from subspaces.models.encoder import resolve_device
    from subspaces.models.triencoder import TriEncoder

    resolve_device(device)
    if sum(x is not None for x in (query, queries, old_query)) != 1:
        raise DataError("give one QUERY or --queries FILE")
    texts_asked = old_query or query_texts(query, queries)
    texts = read_lines(corpus_texts) if corpus_texts is not None else None
    vectors = load_embeddings(corpus) if corpus is not None else None
    source = vectors if vectors is not None else texts
    if source is None:
        raise DataError("give the corpus: --corpus VECTORS.npy and/or --corpus-texts FILE")
    if vectors is not None and texts is not None and len(texts) != len(vectors):
        raise DataError(f"{corpus} has {len(vectors)} rows but {corpus_texts} {len(texts)} texts: give one text a row")
    model = TriEncoder.load(head, device=device)
    model.index_corpus(source)
    hits = model.search(texts_asked, condition, k)
    if hits.note:
        echo(hits.note, label="note:", style="yellow")
    results = [
        SearchResult(
            query=q,
            ids=rows.tolist(),
            scores=[float(s) for s in scores],
            texts=[texts[r] for r in rows] if texts is not None else [],
        )
        for q, rows, scores in zip(texts_asked, hits.rows, hits.scores, strict=True)
    ]
    report: dict[str, Any] = {"condition": condition, "seen": hits.seen, "note": hits.note, "k": k}
    if json_path is not None:
        report["cache"] = model.cache_stats()["caches"]["conditioned_corpus"]
    show_results(results, json_path, report=report, condition=condition, rows=True)


@cond_app.command("bench")
def csts_cache_cmd(
    task: TaskOpt = "wic",
    data: DataOpt = None,
    model: Annotated[str, typer.Option("--model", "-m")] = "minilm-l6",
    split: Split = "test",
    rank: Annotated[str, typer.Option(help="Hypernet rank K, 'auto' (d/12) or 'full'.")] = "auto",
    tri: Annotated[Optional[Path], typer.Option(help="A trained tri-encoder (default: a fresh hypernet head).")] = None,
    bi: Annotated[Optional[Path], typer.Option(help="A trained bi-encoder (default: the plain encoder).")] = None,
    limit: Annotated[Optional[int], typer.Option(help="Only the first N rows.")] = None,
    json_path: JsonOpt = None,
    device: DeviceOpt = "cpu",
    threads: ThreadsOpt = None,
) -> None:
    """Inference time and cache hit rate of the bi- and tri-encoder on the same rows: cold caches, warm caches,
    and the same sentence pairs under new conditions (what C-STS asks: each pair under two conditions)."""
    from subspaces.cond.pipeline import cache_benchmark
    from subspaces.models.encoder import resolve_device

    resolve_device(device)
    report = cache_benchmark(
        task, model, split=split, data_dir=data, rank=parse_rank(rank), tri=tri, bi=bi, limit=limit, device=device
    )
    phases = ("cold", "warm", "new_conditions")
    rows = []
    for name, run in report.runs.items():
        for phase in phases:
            r = run[phase]
            rows.append(
                [f"{name}-encoder", phase, f"{r['seconds']:.2f}", f"{r['rows_per_second']:.1f}", _pct(r["hit_rate"])]
            )
    out.print(table(f"{task} {split} ({report.rows} rows)", ["model", "cache", "seconds", "rows/s", "hit rate"], rows))
    echo(
        "tri-encoder speed relative to the bi-encoder: "
        + ", ".join(f"{phase} {getattr(report, f'tri_speedup_{phase}'):.2f}x" for phase in phases)
    )
    if json_path is not None:
        report.save(json_path)
