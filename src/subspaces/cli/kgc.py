"""``subspaces kgc train`` and ``subspaces kgc eval``: thin wrappers over :mod:`subspaces.kgc.pipeline`."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Optional

import typer

from subspaces.cli.common import (
    DeviceOpt,
    JsonOpt,
    ThreadsOpt,
    chosen_rank,
    echo,
    given,
    out,
    recipe_options,
    table,
)
from subspaces.cli.groups import kgc_app
from subspaces.cli.train import CacheDirOpt, TrainableLayersOpt, parse_trainable_layers
from subspaces.io import check_writable
from subspaces.kgc.recipes import RECIPES, KGCTrainConfig, Ties, recipe_settings

if TYPE_CHECKING:
    from subspaces.kgc.pipeline import KGCEvalResult


Recipe = Literal[tuple(RECIPES)]  # type: ignore[valid-type]


def _show(result: KGCEvalResult) -> None:
    parts = [("forward", result.forward), ("backward", result.backward), ("average", result.average)]
    if result.rerank is not None:
        parts.append((f"average, {result.rerank['n_hop']}-hop re-rank", result.rerank["average"]))
    rows = [
        [name, *[f"{m[k]:.4f}" for k in ("mrr", "hits@1", "hits@3", "hits@10")], f"{m['mr']:.1f}"] for name, m in parts
    ]
    title = f"{result.dataset} {result.split} ({result.arch}-encoder, filtered, {result.queries} queries)"
    out.print(table(title, ["direction", "MRR", "H@1", "H@3", "H@10", "MR"], rows))
    out.print(
        f"inference {result.inference_seconds:.1f} s, text-cache hit rate {result.cache_hit_rate:.2%}, "
        f"{result.encoded_texts} texts encoded"
    )


@kgc_app.command("train")
@recipe_options(
    KGCTrainConfig,
    only=(
        "arch", "head", "freeze_encoder", "shared_encoder", "batch_size", "encoder_lr", "head_lr", "epochs",
        "max_steps", "seed", "max_length", "pre_batch", "pre_batch_weight", "self_negatives", "margin",
        "temperature", "neighbour_names", "per_example_texts", "head_dropout", "head_init", "normalize_queries",
        "rerank_n_hop", "neighbour_weight",
    ),
)  # fmt: skip
def train(
    output: Path = typer.Option(..., "--output", "-o", help="Folder for the trained model and its evaluation."),
    dataset: str = typer.Option("wn18rr", help="wn18rr, fb15k237, or a folder in either layout."),
    model: str = typer.Option("minilm-l6", "--model", "-m", help="Bundled encoder name or a local model folder."),
    rank: str = typer.Option("auto", help="Hypernet rank K, 'auto' (d/12, as Hyper-CL) or 'full'."),
    recipe: Optional[Recipe] = typer.Option(None, help="A released configuration (docs/kgc.md); options given win."),  # type: ignore[valid-type]
    eval_split: str = typer.Option("test", help="Split to evaluate after training, or 'none'."),
    json_path: Optional[Path] = typer.Option(
        None, "--json", help="Also write the evaluation here, as JSON (none with --eval-split none)."
    ),
    device: DeviceOpt = "cpu",
    trainable_layers: TrainableLayersOpt = "all",
    cache_dir: CacheDirOpt = None,
    checkpoint_dir: Optional[Path] = typer.Option(None, help="Checkpoint here (every 50 steps, on Ctrl-C); resumes."),
    threads: ThreadsOpt = None,
    *,
    config: KGCTrainConfig,
) -> None:
    """Train a KGC model with SimKGC's loss, then evaluate it (filtered ranking against every entity).

    Every setting of the recipe (KGCTrainConfig) is an option here or a key of a --config file.
    """
    from subspaces.kgc.pipeline import train_pipeline
    from subspaces.models.encoder import resolve_device

    resolve_device(device)
    check_writable(output, "--output", folder=True)  # before the work, not after it
    config = replace(
        config,
        rank=chosen_rank(rank, config.rank),
        evaluate_split=None if eval_split == "none" else eval_split,
        trainable_layers=parse_trainable_layers(trainable_layers),
        cache_dir=cache_dir,
        output_dir=None if checkpoint_dir is None else str(checkpoint_dir),
    )
    if recipe is not None:
        config = replace(config, **_recipe_defaults(recipe, config.arch), recipe=recipe)
    report = train_pipeline(config, output=output, dataset=dataset, model=model, device=device)
    r = report.train_result
    echo(f"trained {r.steps} steps in {r.seconds:.1f} s ({r.examples_per_second:.0f} examples/s); saved to {output}")
    if report.eval is not None:
        _show(report.eval)
        if json_path is not None:
            report.eval.save(json_path)


def _recipe_defaults(name: str, arch: str) -> dict:
    """The recipe's settings for the options this command line left at their defaults."""
    from typer.main import get_current_context  # typer's own copy of click: its context, not click's

    ctx = get_current_context()
    return {key: value for key, value in recipe_settings(name, arch).items() if not given(ctx, key)}


@kgc_app.command("eval")
def evaluate(
    model: str = typer.Argument(..., help="A folder of `kgc train`, or an encoder for the zero-shot bi-encoder."),
    dataset: Optional[str] = typer.Option(None, help="wn18rr, fb15k237 or a folder (default: the model's)."),
    split: str = typer.Option("test", help="test, valid (or validation) or train."),
    json_path: JsonOpt = None,
    predictions: Optional[Path] = typer.Option(None, help="Write per-query rank and top-10 as JSON lines."),
    rerank_n_hop: int = typer.Option(KGCTrainConfig.rerank_n_hop, help="SimKGC's graph re-ranking, N hops (0: off)."),
    neighbour_weight: float = typer.Option(KGCTrainConfig.neighbour_weight, help="Re-ranking: bonus within the hops."),
    ties: Ties = typer.Option("realistic", help="How ties rank: realistic (expected), optimistic or pessimistic."),
    no_disk_cache: bool = typer.Option(False, "--no-disk-cache", help="Encode everything afresh (for timing)."),
    device: DeviceOpt = "cpu",
    threads: ThreadsOpt = None,
) -> None:
    """Filtered MR, MRR and Hits@1/3/10, forward, backward (inverse relations) and averaged."""
    from subspaces.kgc.pipeline import evaluate_model
    from subspaces.models.encoder import resolve_device

    resolve_device(device)
    result = evaluate_model(
        model,
        dataset,
        split=split,
        predictions=predictions,
        rerank_n_hop=rerank_n_hop,
        neighbour_weight=neighbour_weight,
        ties=ties,
        disk_cache=False if no_disk_cache else None,
        device=device,
    )
    _show(result)
    if json_path is not None:
        result.save(json_path)
