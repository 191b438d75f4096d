"""``simcse train``, and what every encoder-training command shares (``matryoshka train`` uses it too).

Every input a run needs (output folder, training data, STS-B dev, the device, --trainable-layers) is checked
before the model loads or a step runs; the model is built after seeding, so ``--seed`` reproduces a run.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, Optional, TypeVar

import typer

from subspaces.cli.common import (
    DEVICE,
    DeviceOpt,
    LimitOpt,
    ModelOpt,
    NoEvalOpt,
    ThreadsOpt,
    echo,
    recipe_options,
)
from subspaces.cli.groups import simcse_app
from subspaces.data.nli import is_csv, training_rows
from subspaces.data.text import read_corpus
from subspaces.errors import SubspacesError
from subspaces.io import check_writable
from subspaces.models import POOLERS
from subspaces.train.output import check_output_dir
from subspaces.train.recipes import SIMCSE_MODE_DEFAULTS, Augmentation, MatryoshkaConfig, SimCSEConfig

if TYPE_CHECKING:
    from subspaces.train.engine import FitResult


C = TypeVar("C", SimCSEConfig, MatryoshkaConfig)

TrainableLayersOpt = Annotated[
    str, typer.Option(help="Train only the top N layers over cached activations of the rest, or 'all'.")
]
CacheDirOpt = Annotated[
    Optional[Path], typer.Option(help="With --trainable-layers N: cache the activations here (default: in memory).")
]
OutputDirOpt = Annotated[Path, typer.Option("--output", "-o", help="Folder for the model, its checkpoint and state.")]


def parse_trainable_layers(text: str) -> int | None:
    """``all`` -> None, ``"2"`` -> 2; the model's depth is checked once it is loaded (before any step)."""
    if text.strip().lower() == "all":
        return None
    try:
        value = int(text)
    except ValueError:
        raise SubspacesError(f"--trainable-layers must be a whole number or 'all', got {text!r}") from None
    if value < 1:
        raise SubspacesError(f"--trainable-layers must be at least 1 (or 'all'), got {value}")
    return value


def describe_pooling(model: Any) -> str:
    """The pooling the saved model will use, in words."""
    from subspaces.models.pooling import SimCSEPooling

    modules = list(model)
    if len(modules) < 2:
        return "none"
    pooling = modules[1]
    if isinstance(pooling, SimCSEPooling):
        if pooling.mlp is None:
            return pooling.pooler
        return f"{pooling.pooler} + MLP" + (" (in training only; not saved)" if pooling.mlp_only_train else "")
    mode = getattr(pooling, "pooling_mode", None)
    return str(mode) if mode is not None else type(pooling).__name__


def prepare_run(config: C, output: Path, no_eval: bool, device: str, trainable_layers: str, description: str) -> C:
    """The checks every encoder-training command runs before it loads anything big; the run's recipe."""
    check_output_dir(output, config.overwrite)
    check_writable(output, "--output", folder=True)
    if not no_eval:
        from subspaces.eval.sts import STSBDevEvaluator

        STSBDevEvaluator().check()  # a bad data setting fails now, not after training
    from subspaces.models.encoder import resolve_device

    resolve_device(device)
    layers = parse_trainable_layers(trainable_layers)
    return replace(
        config, output_dir=str(output), stsb_dev=not no_eval, trainable_layers=layers, description=description
    )


def load_for_training(model: str, seed: int, how: str, **options: Any) -> tuple[Any, str]:
    """The encoder to train, built after seeding (a new pooler's MLP is drawn from the seed), and a note on its
    pooling (``how``: who chose it), printed and kept for the model card."""
    from subspaces.models.encoder import load_encoder
    from subspaces.train.engine import seed_everything

    seed_everything(seed)
    enc = load_encoder(model, **options)
    note = f"pooling: {describe_pooling(enc)} ({how})"
    echo(note)
    return enc, note


def report(result: FitResult, output: Path, best_label: str) -> None:
    """One line on what the run did (or that it had already been done)."""
    best = "-" if result.best_score is None else f"{result.best_score:.2f}"
    if result.already_complete:
        echo(
            f"already complete: {output} holds a finished run of {result.steps} steps (best {best_label} {best}); "
            "pass a larger --max-steps to train on from it, or --no-resume to start over"
        )
        return
    trained = result.steps - result.resumed_from
    resumed = f" (resumed at step {result.resumed_from})" if result.resumed_from else ""
    extended = f"; extended a run of {result.extended_from} steps" if result.extended_from else ""
    echo(
        f"trained {trained} steps{resumed} in {result.seconds:.0f}s ({result.samples_per_second:.1f} samples/s)"
        f"{extended}; best {best_label} {best}; model in {output}"
    )


@simcse_app.command("train")
@recipe_options(
    SimCSEConfig,
    skip=("output_dir", "description", "show_progress", "stsb_dev"),
    build=SimCSEConfig.for_mode,
    notes={name: f"--mode sup: {value}." for name, value in SIMCSE_MODE_DEFAULTS["sup"].items()},
)
def train_simcse_cmd(
    data: Annotated[Path, typer.Option(help="unsup: text file, one sentence a line; sup: CSV sent0,sent1[,hard_neg].")],
    output: OutputDirOpt,
    model: ModelOpt = "minilm-l6",
    pooler: Annotated[
        Optional[Literal[POOLERS]],  # type: ignore[valid-type]
        typer.Option(help="Default: the base model's (a plain transformers folder: SimCSE's cls)."),
    ] = None,
    augmentation: Annotated[
        Augmentation, typer.Option(help="unsup views: dropout, none, delete_one_word.")
    ] = "dropout",
    no_eval: NoEvalOpt = False,
    limit: LimitOpt = None,
    trainable_layers: TrainableLayersOpt = "all",
    device: DeviceOpt = DEVICE,
    threads: ThreadsOpt = None,
    *,
    config: SimCSEConfig,
) -> None:
    """SimCSE: unsupervised (dropout) or supervised (NLI triplets) InfoNCE training.

    Every setting of the recipe (SimCSEConfig) is an option here or a key of a --config file; --mode sup defaults
    to the paper's batch size, learning rate and epochs for it."""
    mode = config.mode
    # The data is read before the model loads: a bad file fails in a second, not after the load.
    if mode == "unsup" and is_csv(data):
        raise SubspacesError(
            f"{data} is a CSV: unsupervised SimCSE reads one sentence a line (pairs/triplets train with --mode sup)"
        )
    texts = read_corpus(data, limit=limit) if mode == "unsup" else None
    rows_sup = training_rows(data, limit) if mode == "sup" else None
    config = prepare_run(config, output, no_eval, device, trainable_layers, f"train simcse on {data.name}")

    from subspaces.models.encoder import resolve_model_path
    from subspaces.train.simcse import POOLER, set_dropout, train_simcse, unsup_examples

    rows = unsup_examples(texts, augmentation, config.seed) if texts is not None else rows_sup
    assert rows is not None
    # A sentence-transformers model keeps its pooling; a plain transformers folder has none: SimCSE's cls.
    chosen = pooler
    if chosen is None and not (resolve_model_path(model) / "modules.json").is_file():
        chosen = POOLER
    how = "chosen with --pooler" if pooler else ("SimCSE's; the base has none" if chosen else "the base model's")
    enc, pooling_note = load_for_training(
        model, config.seed, how, pooler=chosen, mlp_only_train=mode == "unsup", device=device
    )
    if mode == "unsup" and augmentation == "none":
        set_dropout(enc, 0.0)
    result = train_simcse(enc, rows, config, card_notes=[pooling_note])
    report(result, output, "STS-B dev")
