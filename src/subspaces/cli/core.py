"""Foundation commands: ``models``, ``encode``, ``eval sts``, ``train simcse``."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from subspaces.cli.common import LimitOpt, MaxLengthOpt, MaxStepsOpt, ModelOpt, NoEvalOpt, ResumeOpt, SaveStepsOpt, SeedOpt, console, out, table, user_errors
from subspaces.cli.groups import app, eval_app, train_app


class Pooler(str, Enum):
    """``subspaces.models.pooling.POOLERS`` as CLI choices; spelled out so ``--help`` need not import torch."""

    cls = "cls"
    cls_before_pooler = "cls_before_pooler"
    mean = "mean"
    avg_first_last = "avg_first_last"
    avg_top2 = "avg_top2"


class Variant(str, Enum):
    original = "original"
    senteval = "senteval"


class Mode(str, Enum):
    unsup = "unsup"
    sup = "sup"


class Augmentation(str, Enum):
    dropout = "dropout"
    none = "none"
    delete_one_word = "delete_one_word"




@app.command("models")
@user_errors
def models_cmd() -> None:
    """List the bundled models (resolved offline from installed packages)."""
    from subspaces.models.registry import known_models

    rows = []
    for name, m in sorted(known_models().items()):
        try:
            where = str(m.resolve())
        except Exception as exc:  # noqa: BLE001 - show why a model is unavailable, keep listing
            where = f"[unavailable: {exc}]"
        rows.append([name, m.dim, m.package, m.description, where])
    out.print(table("bundled models", ["name", "dim", "package", "description", "path"], rows))


@app.command("encode")
@user_errors
def encode_cmd(
    model: ModelOpt,
    input: Annotated[Path, typer.Option("--input", "-i", help="Text file, one sentence a line (.txt or .txt.gz).")],
    output: Annotated[Path, typer.Option("--output", "-o", help="Where to write the .npy (written atomically).")],
    batch_size: Annotated[int, typer.Option(help="Sentences per forward pass.")] = 64,
    truncate_dim: Annotated[Optional[int], typer.Option(help="Keep only the first N dimensions (Matryoshka).")] = None,
    normalize: Annotated[bool, typer.Option("--normalize/--no-normalize", help="L2-normalise rows.")] = False,
    pooler: Annotated[Optional[Pooler], typer.Option(help="Override the model's pooling.")] = None,
) -> None:
    """Embed a text file: one row per input line (blank lines included, as zero-length texts), in input order."""
    from subspaces.errors import SubspacesError
    from subspaces.io import read_lines, save_npy

    if output.is_dir():
        raise SubspacesError(f"--output {output} is a folder; name the .npy file to write")
    texts = read_lines(input, skip_blank=False)  # before torch is imported: a bad path fails in a moment
    blank = sum(not t.strip() for t in texts)
    if blank:
        console.print(f"[yellow]note:[/] {blank} blank line(s) are embedded as empty texts (kept so rows match lines)")
    from subspaces.models.encoder import encode, load_encoder

    enc = load_encoder(model, pooler=pooler.value if pooler else None)
    emb = encode(enc, texts, batch_size=batch_size, normalize=normalize, truncate_dim=truncate_dim, show_progress=True)
    save_npy(output, emb)
    console.print(f"wrote {emb.shape[0]} x {emb.shape[1]} embeddings to {output}")


@eval_app.command("sts")
@user_errors
def eval_sts_cmd(
    model: ModelOpt = "minilm-l6",
    pooler: Annotated[Optional[Pooler], typer.Option(help="Override the model's pooling.")] = None,
    variant: Annotated[Variant, typer.Option(help="original: raw files; senteval: SentEval's tokenised, lower-cased ones.")] = Variant.original,
    tasks: Annotated[Optional[str], typer.Option(help="Comma-separated subset of STS12..STS16,STSBenchmark,SICKRelatedness.")] = None,
    truncate_dim: Annotated[Optional[int], typer.Option(help="Evaluate the first N dimensions only.")] = None,
    batch_size: Annotated[int, typer.Option()] = 128,
    json_path: Annotated[Optional[Path], typer.Option("--json", help="Write the results as JSON here.")] = None,
) -> None:
    """The SimCSE STS table: cosine similarity, Spearman x 100, plus alignment and uniformity."""
    from subspaces.data.sts import TASKS
    from subspaces.eval.sts import STSEvaluator
    from subspaces.io import save_json
    from subspaces.models.encoder import load_encoder

    chosen = [t.strip() for t in tasks.split(",")] if tasks else list(TASKS)
    evaluator = STSEvaluator(tasks=chosen, variant=variant.value, batch_size=batch_size, truncate_dim=truncate_dim)
    enc = load_encoder(model, pooler=pooler.value if pooler else None)
    scores = evaluator(enc)
    result = {
        "model": model,
        "pooler": pooler.value if pooler else None,
        "variant": variant.value,
        "truncate_dim": truncate_dim,
        "tasks": {t: scores[t] for t in chosen},
        "avg": scores["avg"],
        "alignment": scores["alignment"],
        "uniformity": scores["uniformity"],
    }
    out.print(table(f"STS ({variant.value}) — {model}", [*chosen, "avg"], [[*(scores[t] for t in chosen), scores["avg"]]]))
    out.print(f"alignment {scores['alignment']:.4f}   uniformity {scores['uniformity']:.4f}")
    if json_path:
        save_json(json_path, result)


@train_app.command("simcse")
@user_errors
def train_simcse_cmd(
    data: Annotated[Path, typer.Option(help="unsup: text file, one sentence a line; sup: CSV with sent0,sent1[,hard_neg].")],
    output: Annotated[Path, typer.Option("--output", "-o", help="Folder for the trained model, checkpoint.pt and trainer_state.json.")],
    mode: Annotated[Mode, typer.Option(help="unsup: dropout views; sup: NLI triplets with hard negatives.")] = Mode.unsup,
    model: ModelOpt = "minilm-l6",
    batch_size: Annotated[Optional[int], typer.Option(help="Per process. Default: 64 unsup, 512 sup.")] = None,
    lr: Annotated[Optional[float], typer.Option(help="Default: 3e-5 unsup, 5e-5 sup.")] = None,
    epochs: Annotated[Optional[int], typer.Option(help="Default: 1 unsup, 3 sup.")] = None,
    max_steps: MaxStepsOpt = None,
    max_length: MaxLengthOpt = 32,
    temperature: Annotated[float, typer.Option(help="InfoNCE temperature.")] = 0.05,
    hard_negative_weight: Annotated[float, typer.Option(help="Log-weight added to each anchor's own hard-negative logit.")] = 0.0,
    pooler: Annotated[Optional[Pooler], typer.Option(help="Default: cls (MLP in training only for unsup).")] = None,
    augmentation: Annotated[Augmentation, typer.Option(help="unsup views: dropout, none (dropout off), delete_one_word.")] = Augmentation.dropout,
    eval_steps: Annotated[int, typer.Option(help="Evaluate on STS-B dev every N steps (0: only at the end).")] = 125,
    save_steps: SaveStepsOpt = 125,
    no_eval: NoEvalOpt = False,
    limit: LimitOpt = None,
    seed: SeedOpt = 42,
    resume: ResumeOpt = True,
) -> None:
    """SimCSE: unsupervised (dropout) or supervised (NLI triplets) InfoNCE training."""
    from subspaces.data.nli import is_csv, training_rows
    from subspaces.data.text import read_corpus
    from subspaces.errors import SubspacesError
    from subspaces.models.encoder import load_encoder
    from subspaces.train.simcse import DEFAULTS, SimCSEConfig, set_dropout, train_simcse, unsup_examples

    d = DEFAULTS[mode.value]
    # The data is read before the model loads: a bad file fails in a second, not after the load.
    if mode is Mode.unsup:
        if is_csv(data):
            raise SubspacesError(f"{data} is a CSV: unsupervised SimCSE reads one sentence a line "
                                 "(pairs/triplets train with --mode sup)")
        rows = unsup_examples(read_corpus(data, limit=limit), augmentation.value, seed)
    else:
        rows = training_rows(data, limit)
    pool = pooler.value if pooler else str(d["pooler"])
    enc = load_encoder(model, pooler=pool, mlp_only_train=bool(d["mlp_only_train"]))
    if mode is Mode.unsup and augmentation is Augmentation.none:
        set_dropout(enc, 0.0)
    config = SimCSEConfig(
        output_dir=str(output),
        mode=mode.value,
        batch_size=batch_size if batch_size is not None else int(d["batch_size"]),
        lr=lr if lr is not None else float(d["lr"]),
        epochs=epochs if epochs is not None else int(d["epochs"]),
        max_steps=max_steps,
        max_length=max_length,
        temperature=temperature,
        hard_negative_weight=hard_negative_weight,
        eval_steps=eval_steps,
        save_steps=save_steps,
        stsb_dev=not no_eval,
        seed=seed,
        resume=resume,
    )
    result = train_simcse(enc, rows, config)
    console.print(
        f"trained {result.steps} steps in {result.seconds:.0f}s ({result.samples_per_second:.1f} samples/s); "
        f"best STS-B dev {result.best_score if result.best_score is not None else '-'}; model in {output}"
    )
