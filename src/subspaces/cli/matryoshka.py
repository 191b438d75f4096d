"""Matryoshka commands: ``train matryoshka`` (MRL, optionally + MIC) and ``eval dims`` (scores at truncated dims)."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from subspaces.cli.common import (
    LimitOpt,
    MaxLengthOpt,
    MaxStepsOpt,
    ModelOpt,
    NoEvalOpt,
    ResumeOpt,
    SaveStepsOpt,
    SeedOpt,
    ThreadsOpt,
    echo,
    out,
    parse_dims,
    parse_numbers,
    table,
    user_errors,
)
from subspaces.cli.core import Backend, BackendOpt, Precision, PrecisionOpt
from subspaces.cli.groups import eval_app, train_app
from subspaces.cli.train import CacheDirOpt, DeviceOpt, OverwriteOpt, TrainableLayersOpt


class LayerPrefixMappingChoice(str, Enum):
    all = "all"
    paired = "paired"


def _training_rows(data: Path | None, limit: int | None) -> list[tuple[str, ...]]:
    """A text file trains unsupervised (one column); a CSV with sent0,sent1[,hard_neg] trains on pairs/triplets."""
    from subspaces.data.nli import is_csv, training_rows
    from subspaces.data.text import read_corpus, wordnet_sentences

    if data is None:
        return [(s,) for s in wordnet_sentences(limit=limit)]
    if is_csv(data):
        return training_rows(data, limit)
    return [(s,) for s in read_corpus(data, limit=limit)]


@train_app.command("matryoshka")
@user_errors
def train_matryoshka_cmd(
    output: Annotated[
        Path, typer.Option("--output", "-o", help="Folder for the trained model, checkpoint.pt and trainer_state.json.")
    ],
    model: ModelOpt = "minilm-l6",
    data: Annotated[
        Optional[Path],
        typer.Option(
            help="Text file (one sentence a line: unsupervised SimCSE) or CSV with sent0,sent1[,hard_neg]. "
            "Default: the WordNet sentences."
        ),
    ] = None,
    dims: Annotated[str, typer.Option(help="Nested prefix sizes, e.g. 16,32,64,128,full.")] = "16,32,64,128,full",
    weights: Annotated[Optional[str], typer.Option(help="One MRL weight per dim (default 1 each).")] = None,
    mic: Annotated[bool, typer.Option("--mic/--no-mic", help="Add MIC's regularisers (SCR + SIR) to MRL.")] = False,
    gamma: Annotated[float, typer.Option(help="MIC: weight of L_align (SCR + SIR).")] = 0.1,
    tau_corr: Annotated[float, typer.Option(help="MIC/SCR: correlations below this are free.")] = 0.0,
    lambda_corr: Annotated[float, typer.Option(help="MIC/SCR: weight of the prefix-residual decorrelation.")] = 100.0,
    lambda_var: Annotated[float, typer.Option(help="MIC/SCR: weight of the per-dimension variance floor.")] = 25.0,
    var_floor: Annotated[float, typer.Option(help="MIC/SCR: the floor under each dimension's token std.")] = 0.5,
    relative_floor: Annotated[
        bool,
        typer.Option(
            "--relative-floor/--absolute-floor",
            help="MIC/SCR: the floor is a fraction of the layer's mean std, or an absolute std (VICReg).",
        ),
    ] = True,
    lambda_sir: Annotated[float, typer.Option(help="MIC: weight of SIR inside L_align.")] = 1.0,
    t: Annotated[float, typer.Option("--t", help="MIC/SIR: uniformity temperature.")] = 2.0,
    lambda_distill: Annotated[
        float, typer.Option(help="MIC: weight of self-distillation (prefixes learn the full vector's similarities).")
    ] = 0.1,
    distill_temperature: Annotated[float, typer.Option(help="MIC: softmax temperature of self-distillation.")] = 0.05,
    layers: Annotated[
        Optional[str],
        typer.Option(
            help="MIC: transformer layers to regularise, 1-based (-1 = last). Default: middle,last (all), "
            "one per dim up to the last (paired)."
        ),
    ] = None,
    layer_prefix_mapping: Annotated[
        LayerPrefixMappingChoice,
        typer.Option(help="MIC: all = every layer x every dim; paired = shallower layer <-> smaller dim."),
    ] = LayerPrefixMappingChoice.all,
    temperature: Annotated[float, typer.Option(help="InfoNCE temperature.")] = 0.05,
    hard_negative_weight: Annotated[
        float, typer.Option(help="Log-weight of each anchor's own hard negative (triplets).")
    ] = 0.0,
    pooler: Annotated[
        Optional[str], typer.Option(help="Replace the model's pooling (cls, cls_before_pooler, mean, ...).")
    ] = None,
    batch_size: Annotated[int, typer.Option(help="Per process.")] = 64,
    lr: Annotated[float, typer.Option()] = 3e-5,
    epochs: Annotated[int, typer.Option()] = 1,
    max_steps: MaxStepsOpt = None,
    max_length: MaxLengthOpt = 32,
    eval_steps: Annotated[
        int, typer.Option(help="Evaluate STS-B dev at every dim every N steps (0: only at the end).")
    ] = 125,
    save_steps: SaveStepsOpt = 125,
    no_eval: NoEvalOpt = False,
    limit: LimitOpt = None,
    seed: SeedOpt = 42,
    resume: ResumeOpt = True,
    trainable_layers: TrainableLayersOpt = "all",
    cache_dir: CacheDirOpt = None,
    device: DeviceOpt = None,
    overwrite: OverwriteOpt = False,
    threads: ThreadsOpt = None,
) -> None:
    """Matryoshka Representation Learning over SimCSE's InfoNCE, with MIC's SCR + SIR regularisers if --mic."""
    from subspaces.cli.train import describe_pooling, prepare_run, report

    rows = _training_rows(data, limit)  # before the model loads: a bad file fails fast
    parsed_dims = parse_dims(dims)
    device_name, layers = prepare_run(output, overwrite, not no_eval, device, trainable_layers)

    from subspaces.models.encoder import load_encoder
    from subspaces.train.engine import seed_everything
    from subspaces.train.matryoshka import MatryoshkaConfig, train_matryoshka

    seed_everything(seed)  # before the model is built: a new pooler's MLP is drawn from it
    enc = load_encoder(model, pooler=pooler, device=device_name)
    how = "chosen with --pooler" if pooler else "the base model's"
    pooling_note = f"pooling: {describe_pooling(enc)} ({how})"
    echo(pooling_note)
    config = MatryoshkaConfig(
        output_dir=str(output),
        batch_size=batch_size,
        lr=lr,
        epochs=epochs,
        max_steps=max_steps,
        max_length=max_length,
        eval_steps=eval_steps,
        save_steps=save_steps,
        seed=seed,
        resume=resume,
        overwrite=overwrite,
        trainable_layers=layers,
        cache_dir=str(cache_dir) if cache_dir is not None else None,
        description=f"train matryoshka on {data.name if data else 'wordnet_sentences'}",
        dims=parsed_dims,
        weights=parse_numbers(weights, "weights"),
        temperature=temperature,
        hard_negative_weight=hard_negative_weight,
        mic=mic,
        gamma=gamma,
        tau_corr=tau_corr,
        lambda_corr=lambda_corr,
        lambda_var=lambda_var,
        var_floor=var_floor,
        relative_floor=relative_floor,
        lambda_sir=lambda_sir,
        t=t,
        lambda_distill=lambda_distill,
        distill_temperature=distill_temperature,
        layers=parse_numbers(layers, "layers", kind=int),
        layer_prefix_mapping=layer_prefix_mapping.value,
        stsb_dev=not no_eval,
    )
    result = train_matryoshka(enc, rows, config, card_notes=[pooling_note])
    report(result, output, "mean STS-B dev over dims")
    recorded = [entry for entry in result.history if "terms" in entry]
    for entry in recorded[:1] + recorded[1:][-1:]:  # the start weights' terms and the last step's
        terms = ", ".join(f"{name} {value:.4g}" for name, value in entry["terms"].items())
        echo(f"MIC terms at step {entry['step']}: {terms}")


@eval_app.command("dims")
@user_errors
def eval_dims_cmd(
    model: Annotated[
        Optional[list[str]], typer.Option("--model", "-m", help="Model name or folder; repeat to compare several.")
    ] = None,
    dims: Annotated[str, typer.Option(help="Prefix sizes, e.g. 16,32,64,128,full.")] = "16,32,64,128,full",
    tasks: Annotated[
        Optional[str],
        typer.Option(help="Comma-separated tasks (default: all but TweetEval-emoji and STS12-16); see --list-tasks."),
    ] = None,
    max_train: Annotated[
        Optional[int], typer.Option(help="Cap each probe's training rows (seeded random subset).")
    ] = None,
    max_test: Annotated[Optional[int], typer.Option(help="Cap each probe's test rows.")] = None,
    c: Annotated[float, typer.Option("--C", help="Inverse L2 strength of the logistic-regression probe.")] = 1.0,
    seed: Annotated[int, typer.Option(help="Seeds the row subsets.")] = 0,
    batch_size: Annotated[int, typer.Option()] = 64,
    json_path: Annotated[
        Optional[Path], typer.Option("--json", help="Write the report here; the plot goes next to it (.png).")
    ] = None,
    list_tasks: Annotated[bool, typer.Option("--list-tasks", help="Print the task names and exit.")] = False,
    device: DeviceOpt = None,
    threads: ThreadsOpt = None,
    backend: BackendOpt = Backend.torch,
    precision: PrecisionOpt = Precision.fp32,
) -> None:
    """Probes (logistic regression on frozen embeddings) and STS at each truncated dimension."""
    from subspaces.models.backends import check_backend

    check_backend(backend.value, precision.value)
    from subspaces.eval.dims import DEFAULT_TASKS, DimsEvaluator, known_tasks, plot_dims
    from subspaces.io import check_writable, save_json

    if json_path is not None:
        check_writable(json_path.with_suffix(".png"), "--json's plot")
    from subspaces.models.encoder import load_encoder

    if list_tasks:
        out.print("\n".join(known_tasks()))
        return
    if not model:
        from subspaces.errors import SubspacesError

        raise SubspacesError("give at least one --model")
    from subspaces.cli.train import check_device

    device_name = check_device(device)
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
        enc = load_encoder(name, device=device_name, backend=backend.value, precision=precision.value)
        echo(
            f"{len(chosen)} task(s) at dims {evaluator.resolve_dims(enc.get_embedding_dimension())}",
            label=f"{name}:",
            style="bold",
        )
        report = evaluator(enc, name=name)
        report.update(backend=backend.value, precision=precision.value)
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
