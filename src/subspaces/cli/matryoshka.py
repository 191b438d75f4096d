"""Matryoshka commands: ``matryoshka train`` (MRL, optionally + MIC) and ``matryoshka eval`` (truncated dims)."""

from __future__ import annotations

from dataclasses import fields, replace
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from subspaces.cli.common import (
    DEVICE,
    DeviceOpt,
    LimitOpt,
    ModelOpt,
    NoEvalOpt,
    RunOptions,
    ThreadsOpt,
    echo,
    out,
    parse_numbers,
    recipe_options,
    runtime_options,
    table,
)
from subspaces.cli.groups import matryoshka_app
from subspaces.cli.train import OutputDirOpt, TrainableLayersOpt, load_for_training, prepare_run, report
from subspaces.data.nli import is_csv, training_rows
from subspaces.data.text import read_corpus, wordnet_sentences
from subspaces.errors import SubspacesError
from subspaces.io import check_writable, save_json
from subspaces.train.recipes import MatryoshkaConfig
from subspaces.vectors import parse_dims


def _training_rows(data: Path | None, limit: int | None) -> list[tuple[str, ...]]:
    """A text file trains unsupervised (one column); a CSV with sent0,sent1[,hard_neg] trains on pairs/triplets."""
    if data is None:
        return [(s,) for s in wordnet_sentences(limit=limit)]
    if is_csv(data):
        return training_rows(data, limit)
    return [(s,) for s in read_corpus(data, limit=limit)]


def _help(name: str) -> str:
    return next(f.metadata["help"] for f in fields(MatryoshkaConfig) if f.name == name)


@matryoshka_app.command("train")
@recipe_options(MatryoshkaConfig, skip=("output_dir", "description", "show_progress", "stsb_dev"))
def train_matryoshka_cmd(
    output: OutputDirOpt,
    model: ModelOpt = "minilm-l6",
    data: Annotated[
        Optional[Path],
        typer.Option(
            help="Text file (one sentence a line) or CSV sent0,sent1[,hard_neg]. Default: the WordNet sentences."
        ),
    ] = None,
    dims: Annotated[Optional[str], typer.Option(help="Nested prefix sizes, e.g. 16,32,64,128,full.")] = None,
    weights: Annotated[Optional[str], typer.Option(help=_help("weights"))] = None,
    layers: Annotated[Optional[str], typer.Option(help=_help("layers"))] = None,
    pooler: Annotated[Optional[str], typer.Option(help="Replace the model's pooling (cls, mean, ...).")] = None,
    trainable_layers: TrainableLayersOpt = "all",
    no_eval: NoEvalOpt = False,
    limit: LimitOpt = None,
    device: DeviceOpt = DEVICE,
    threads: ThreadsOpt = None,
    *,
    config: MatryoshkaConfig,
) -> None:
    """Matryoshka Representation Learning over SimCSE's InfoNCE, with MIC's SCR + SIR regularisers if --mic.

    Every setting of the recipe (MatryoshkaConfig) is an option here or a key of a --config file."""
    rows = _training_rows(data, limit)  # before the model loads: a bad file fails fast
    given: dict[str, Any] = {
        "dims": parse_dims(dims) if dims is not None else None,
        "weights": parse_numbers(weights, "weights"),
        "layers": parse_numbers(layers, "layers", kind=int),
    }
    description = f"train matryoshka on {data.name if data else 'wordnet_sentences'}"
    config = prepare_run(config, output, no_eval, device, trainable_layers, description)
    config = replace(config, **{name: value for name, value in given.items() if value is not None})

    from subspaces.train.matryoshka import train_matryoshka

    how = "chosen with --pooler" if pooler else "the base model's"
    enc, pooling_note = load_for_training(model, config.seed, how, pooler=pooler, device=device)
    result = train_matryoshka(enc, rows, config, card_notes=[pooling_note])
    report(result, output, "mean STS-B dev over dims")
    recorded = [entry for entry in result.history if "terms" in entry]
    for entry in recorded[:1] + recorded[1:][-1:]:  # the start weights' terms and the last step's
        terms = ", ".join(f"{name} {value:.4g}" for name, value in entry["terms"].items())
        echo(f"MIC terms at step {entry['step']}: {terms}")


@matryoshka_app.command("eval")
@runtime_options("device", "threads", "backend", "precision")
def eval_dims_cmd(
    model: Annotated[
        Optional[list[str]], typer.Option("--model", "-m", help="Model name or folder; repeat to compare several.")
    ] = None,
    dims: Annotated[str, typer.Option(help="Prefix sizes, e.g. 16,32,64,128,full.")] = "16,32,64,128,full",
    tasks: Annotated[
        Optional[str],
        typer.Option(help="Comma-separated tasks (default: all but TweetEval-emoji and STS12-16; see --list-tasks)."),
    ] = None,
    max_train: Annotated[Optional[int], typer.Option(help="Cap each probe's training rows (seeded subset).")] = None,
    max_test: Annotated[Optional[int], typer.Option(help="Cap each probe's test rows.")] = None,
    c: Annotated[float, typer.Option("--C", help="Inverse L2 strength of the logistic-regression probe.")] = 1.0,
    seed: Annotated[int, typer.Option(help="Seeds the row subsets.")] = 0,
    batch_size: Annotated[int, typer.Option()] = 64,
    json_path: Annotated[
        Optional[Path], typer.Option("--json", help="Write the report here, its plot beside it.")
    ] = None,
    list_tasks: Annotated[bool, typer.Option("--list-tasks", help="Print the task names and exit.")] = False,
    run: RunOptions = RunOptions(),
) -> None:
    """Probes (logistic regression on frozen embeddings) and STS at each truncated dimension."""
    run.check()
    from subspaces.eval.dims import DEFAULT_TASKS, DimsEvaluator, known_tasks, plot_dims

    if json_path is not None:
        check_writable(json_path.with_suffix(".png"), "--json's plot")
    from subspaces.models.encoder import load_encoder, resolve_device

    if list_tasks:
        out.print("\n".join(known_tasks()))
        return
    if not model:
        raise SubspacesError("give at least one --model")

    device = resolve_device(run.device)
    chosen = [x.strip() for x in tasks.split(",") if x.strip()] if tasks else list(DEFAULT_TASKS)
    evaluator = DimsEvaluator(
        tasks=chosen,
        dims=parse_dims(dims),
        max_train=max_train,
        max_test=max_test,
        C=c,
        batch_size=batch_size,
        random_state=seed,
        show_progress=True,
    )
    reports = []
    for name in model:
        enc = load_encoder(name, device=device, backend=run.backend, precision=run.precision)
        echo(
            f"{len(chosen)} task(s) at dims {evaluator.resolve_dims(enc.get_embedding_dimension())}",
            label=f"{name}:",
            style="bold",
        )
        report = evaluator.report(enc, name=name).to_dict()
        report.update(backend=run.backend, precision=run.precision)
        reports.append(report)
        header = ["task (metric)", *[str(d) for d in report["dims"]]]
        rows = [[f"{task} ({report['metrics'][task]})", *report["scores"][task].values()] for task in chosen]
        out.print(table(f"scores at truncated dims — {name}", header, rows))
        for task, note in report["notes"].items():
            echo(f"{task}: {note}", label="note:")
    if json_path:
        save_json(json_path, reports[0] if len(reports) == 1 else reports)
        png = plot_dims(reports, json_path.with_suffix(".png"))
        echo(f"wrote {json_path} and {png}")
