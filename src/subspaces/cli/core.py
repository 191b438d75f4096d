"""The `model` commands: `list`, `encode`, `eval` (the STS table)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from subspaces.cli.common import (
    BatchSizeOpt,
    JsonOpt,
    ModelOpt,
    PoolerOpt,
    RunOptions,
    ThreadsOpt,
    echo,
    out,
    runtime_options,
    show,
    table,
)
from subspaces.cli.groups import model_app
from subspaces.data.sts import TASKS, Variant, load_stsb
from subspaces.errors import SubspacesError
from subspaces.io import (
    TEXT_SUFFIXES,
    base_suffix,
    check_not_input,
    check_writable,
    embedding_format,
    read_texts,
    save_embeddings,
    save_json,
)
from subspaces.models.backends import resolve_dtype
from subspaces.models.registry import check_model, known_models
from subspaces.quantize import Kind, calibrate_int8, calibration_sample, quantize, save_codes, sidecar

# The runtime options of `model encode` and `model eval`, in their help screens' order.
RUNTIME = ("device", "threads", "backend", "precision", "dtype")


@model_app.command("list")
def models_cmd(threads: ThreadsOpt = None) -> None:
    """List the bundled models (resolved offline from installed packages)."""
    rows = []
    for name, m in sorted(known_models().items()):
        if m.missing():
            where = f"not installed: {m.install_hint}"
        else:
            try:
                where = str(m.resolve())
            except Exception as exc:  # noqa: BLE001 - show why a model is unavailable, keep listing
                where = f"unavailable: {exc}"
        rows.append([name, m.dim, m.package, m.description, where])
    show(table("bundled models", ["name", "dim", "package", "description", "path"], rows))


@model_app.command(
    "encode", interrupted="no embeddings were written (OUTPUT is written only when every text is encoded)"
)
@runtime_options(*RUNTIME)
def encode_cmd(
    model: ModelOpt,
    input: Annotated[
        Path, typer.Option("--input", "-i", help="Text file (one a line; - reads stdin), .jsonl or .csv; maybe .gz.")
    ],
    output: Annotated[
        Path, typer.Option("--output", "-o", help=".npy, .parquet or .jsonl (text and embedding a line).")
    ],
    text_field: Annotated[
        Optional[str],
        typer.Option(help="The .jsonl field or .csv column of the text. Default: text.", show_default=False),
    ] = None,
    batch_size: BatchSizeOpt = 64,
    truncate_dim: Annotated[Optional[int], typer.Option(help="Keep only the first N dimensions (Matryoshka).")] = None,
    normalize: Annotated[bool, typer.Option("--normalize/--no-normalize", help="L2-normalise rows.")] = False,
    pooler: PoolerOpt = None,
    max_seq_length: Annotated[Optional[int], typer.Option(help="Tokens read per text (default: the model's).")] = None,
    run: RunOptions = RunOptions(),
    quantize: Annotated[
        Optional[Kind], typer.Option(help="Write int8 or binary codes (.npy), described in OUTPUT.quant.json.")
    ] = None,
) -> None:
    """Embed a text file: one row per input line (blank lines included, as zero-length texts), JSON line or CSV
    row, in input order."""

    # Everything the user typed is checked before torch is imported: a bad value fails in a moment.
    if output.is_dir():
        raise SubspacesError(f"--output {output} is a folder; name the file to write (.npy, .parquet or .jsonl)")
    embedding_format(output)
    if quantize is not None and output.suffix.lower() != ".npy":
        raise SubspacesError(f"--quantize writes a .npy file of codes, not {output.suffix}")
    structured = str(input) != "-" and base_suffix(input) in TEXT_SUFFIXES
    if text_field is not None and not structured:
        raise SubspacesError(f"--text-field names a field of .jsonl or a column of .csv input, not of {input}")
    _check_positive(batch_size=batch_size, truncate_dim=truncate_dim, max_seq_length=max_seq_length)
    check_not_input(output, "--output", {"--input": input})
    check_writable(output, "--output")
    if quantize is not None:
        check_not_input(sidecar(output), "--output's description", {"--input": input})
        check_writable(sidecar(output), "--output's description")
    check_model(model)
    run.check()
    texts = read_texts(input, text_field=text_field or "text")
    blank = sum(not t.strip() for t in texts)
    if blank:
        kept = "kept so rows match lines" if not structured else "kept so rows match the input's rows"
        echo(f"{blank} blank text(s) are embedded as empty texts ({kept})", label="note:", style="yellow")
    from subspaces.models.encoder import count_truncated, encode, load_encoder

    enc = load_encoder(model, pooler=pooler, max_seq_length=max_seq_length, **run.encoder())
    if run.dtype != "float32":  # the choice is recorded where the command says what it did
        echo(f"encoding in {resolve_dtype(run.dtype, run.backend)} (--dtype {run.dtype})", label="note:")
    long = count_truncated(enc, texts)
    if long:
        echo(
            f"{long} of {len(texts)} texts are longer than {enc.max_seq_length} tokens; "
            "the model reads only their first tokens (--max-seq-length to change)",
            label="note:",
            style="yellow",
        )
    source = "stdin" if str(input) == "-" else Path(input).name
    emb = encode(
        enc,
        texts,
        batch_size=batch_size,
        normalize=normalize,
        truncate_dim=truncate_dim,
        show_progress=True,
        description=f"encode {source} with {model}",
    )
    if quantize is not None:
        _save_quantized(output, emb, quantize)
        return
    save_embeddings(output, emb, texts if output.suffix.lower() == ".jsonl" else None)
    echo(f"wrote {emb.shape[0]} x {emb.shape[1]} embeddings to {output}")


def _save_quantized(output: Path, emb, kind: str) -> None:
    cal = None
    if kind == "int8":
        cal = calibrate_int8(calibration_sample(emb))  # a seeded sample: same file, same ranges
    codes = quantize(emb, kind, cal)  # type: ignore[arg-type]
    save_codes(output, codes, kind, emb.shape[1], cal)  # type: ignore[arg-type]
    echo(
        f"wrote {codes.shape[0]} x {emb.shape[1]} {kind} codes ({codes.shape[1]} bytes a row) to {output}, "
        f"their description to {sidecar(output)}"
    )


def _check_positive(**values: int | None) -> None:
    for name, value in values.items():
        if value is not None and value < 1:
            raise SubspacesError(f"--{name.replace('_', '-')} must be at least 1, got {value}")


@model_app.command("eval")
@runtime_options(*RUNTIME)
def eval_sts_cmd(
    model: ModelOpt = "minilm-l6",
    pooler: PoolerOpt = None,
    variant: Annotated[Variant, typer.Option(help="original, or senteval: SentEval's tokenised files.")] = "original",
    tasks: Annotated[
        Optional[str], typer.Option(help="Comma-separated tasks (default: all of STS12-16, STS-B, SICK-R).")
    ] = None,
    truncate_dim: Annotated[Optional[int], typer.Option(help="Evaluate the first N dimensions only.")] = None,
    batch_size: BatchSizeOpt = 128,
    json_path: JsonOpt = None,
    run: RunOptions = RunOptions(),
) -> None:
    """The SimCSE STS table: cosine similarity, Spearman x 100, plus alignment and uniformity."""
    from subspaces.eval.sts import STSEvaluator

    _check_positive(batch_size=batch_size, truncate_dim=truncate_dim)
    check_model(model)
    run.check()
    chosen = [t.strip() for t in tasks.split(",")] if tasks else list(TASKS)
    evaluator = STSEvaluator(tasks=chosen, variant=variant, batch_size=batch_size, truncate_dim=truncate_dim)
    evaluator.check()  # the data is read before the model loads: a missing folder fails in a second
    load_stsb("test", variant)  # alignment and uniformity read STS-B test, whatever the tasks
    from subspaces.models.encoder import load_encoder

    enc = load_encoder(model, pooler=pooler, **run.encoder())
    runs_in = resolve_dtype(run.dtype, run.backend)
    if run.dtype != "float32":
        echo(f"evaluating in {runs_in} (--dtype {run.dtype})", label="note:")
    scores = evaluator(enc)
    result = {
        "model": model,
        "backend": run.backend,
        "precision": run.precision,
        "dtype": runs_in,
        "pooler": pooler,
        "variant": variant,
        "truncate_dim": truncate_dim,
        "tasks": {t: scores[t] for t in chosen},
        "avg": scores["avg"],
        "alignment": scores["alignment"],
        "uniformity": scores["uniformity"],
    }
    show(table(f"STS ({variant}) — {model}", [*chosen, "avg"], [[*(scores[t] for t in chosen), scores["avg"]]]))
    out.print(f"alignment {scores['alignment']:.4f}   uniformity {scores['uniformity']:.4f}")
    if json_path:
        save_json(json_path, result)
