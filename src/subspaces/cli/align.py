"""``subspaces align fit|apply|eval``: unsupervised alignment of embedding spaces (mini-vec2vec)."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from subspaces.align import MiniVec2Vec, evaluate_alignment
from subspaces.align.apply import apply_to_file
from subspaces.cli.common import JsonOpt, ThreadsOpt, echo, estimator_options, out, table
from subspaces.cli.groups import align_app
from subspaces.errors import ConvergenceWarning, SubspacesError
from subspaces.io import check_file, check_not_input, load_embeddings, read_lines, save_json


def _check_side(name: str, emb: Optional[Path], model: Optional[str], texts: Optional[Path]) -> None:
    if emb is not None and (model is not None or texts is not None):
        raise SubspacesError(f"give either --{name}-emb or --{name} with --{name}-texts, not both")
    if emb is None and (model is None or texts is None):
        raise SubspacesError(f"give --{name}-emb FILE, or --{name} MODEL with --{name}-texts FILE")
    for path in (emb, texts):
        if path is not None:
            check_file(path)
    if model is not None:
        from subspaces.models.encoder import resolve_model_path

        resolve_model_path(model)  # an unknown name fails now, not after the other side is embedded


def _load_side(emb: Optional[Path], model: Optional[str], texts: Optional[Path], device: str):
    """One side's vectors: read from ``emb``, or ``texts`` embedded by ``model`` (:func:`_check_side` checked)."""
    if emb is not None:
        return load_embeddings(emb)
    from subspaces.models.encoder import encode, load_encoder

    assert model is not None and texts is not None  # _check_side refused anything else
    lines = read_lines(texts)
    echo(f"embedding {len(lines)} texts of {texts} with {model}")
    return encode(load_encoder(model, device=device), lines, show_progress=True)


def _load_pairs(source: Optional[Path], target: Optional[Path]):
    """The known pairs of ``--pairs-source`` / ``--pairs-target`` (row i of each: the same text), or None."""
    if source is None and target is None:
        return None
    if source is None or target is None:
        raise SubspacesError("give --pairs-source and --pairs-target together (row i of each embeds the same text)")
    for path in (source, target):
        check_file(path)
    return load_embeddings(source), load_embeddings(target)


def _start(record) -> str:
    """What a pass without matched anchors started from, for the diagnostics table."""
    return "identity start" if record.label == "identity start" else "known pairs"


def _print_diagnostics(aligner) -> None:
    """The fit's label-free diagnostics: one column per pass, then the checks that judged the kept map."""
    d = aligner.diagnostics_
    stats = {  # one row per statistic, one column per restart: stays readable however many restarts ran
        "QAP agreement": lambda r: r.qap_agreement if r.qap_agreement is not None else _start(r),
        "nn-sim initial": lambda r: r.nn_similarity.initial,
        "nn-sim structure": lambda r: r.nn_similarity.structure,
        # a pass that a later converged one replaced is not refined (its refinement would be thrown away)
        "nn-sim refine-1": lambda r: r.nn_similarity.refine1 if r.refined else "not refined",
        "nn-sim final": lambda r: r.nn_similarity.final if r.refined else "not refined",
        "last share swapped": lambda r: r.structure_swapped[-1] if r.structure_swapped else float("nan"),
        "refine-1 iterations": lambda r: r.refine1_iterations,
        "anchor consistency": lambda r: r.anchor_consistency_final,
    }
    anchored_kept = d.kept not in ("identity reference", "paper recipe")  # else a candidate is the map
    columns = ["statistic"] + [
        f"{r.label}{' (kept)' if anchored_kept and i == d.chosen_restart else ''}" for i, r in enumerate(d.restarts)
    ]
    rows = [
        [name] + [f"{v:.4f}" if isinstance(v := get(r), float) else str(v) for r in d.restarts]
        for name, get in stats.items()
    ]
    out.print(table("label-free diagnostics", columns, rows))
    out.print(f"orthogonality gap {d.orthogonality_gap:.2e}")
    check = d.agreement
    if check.agreement is not None:
        searched = f", best of {check.compared} passes" if check.search is not None else ""
        out.print(
            f"agreement with an independent pass: {check.agreement:.3f}{searched} (trusted: >= "
            f"{check.threshold:g}); confidence {aligner.confidence_:.2f}"
        )
    else:
        out.print(f"agreement with an independent pass: not checked ({check.skipped})")
    reference = d.identity_reference
    if reference.trust is not None:
        kept = d.kept == "identity reference"
        out.print(
            f"identity candidate (a pass from the identity{', KEPT' if kept else ''}): trust score "
            f"{reference.trust:.4f}, {reference.lift:+.2f} x chance level against the anchored map's "
            f"(kept or flagged above {reference.margin:g})"
        )
    if d.kept_why:
        out.print(d.kept_why)
    paired = d.paired_check
    if paired is not None:
        verdict = f"confidence {aligner.confidence_:.2f}" if paired.judged else "too few to judge the map by"
        out.print(
            f"known pairs placed nearest their own target among the {paired.scored} pairs (in-sample): "
            f"{paired.top1:.3f}; {verdict}"
        )


@align_app.command(
    "fit",
    interrupted="nothing was written (the aligner is saved only once the fit ends); rerun to fit again",
)
@estimator_options(
    MiniVec2Vec,
    into="aligner",
    only=("n_restarts", "init", "max_seconds", "random_state"),
    build=lambda **params: MiniVec2Vec.from_params(params),  # the file's stages nest: {"refine": {"n_iter": 50}}
    flags={"random_state": "--seed"},
    fixed={"verbose": True},
    alias="--params",
)
def fit_cmd(
    output: Annotated[Path, typer.Option("--output", "-o", help="Folder to write the fitted aligner to.")],
    source_emb: Annotated[Optional[Path], typer.Option(help="Source-model vectors (.npy/.parquet).")] = None,
    target_emb: Annotated[Optional[Path], typer.Option(help="Target-model vectors of *other* texts.")] = None,
    source: Annotated[Optional[str], typer.Option(help="Source model, to embed --source-texts first.")] = None,
    source_texts: Annotated[Optional[Path], typer.Option(help="Texts for the source model, one a line.")] = None,
    target: Annotated[Optional[str], typer.Option(help="Target model, to embed --target-texts first.")] = None,
    target_texts: Annotated[Optional[Path], typer.Option(help="Texts for the target model, one a line.")] = None,
    pairs_source: Annotated[
        Optional[Path], typer.Option(help="Known pairs: source-model vectors of some texts.")
    ] = None,
    pairs_target: Annotated[
        Optional[Path], typer.Option(help="Known pairs: target-model vectors, row for row.")
    ] = None,
    *,
    aligner: MiniVec2Vec,
    device: Annotated[str, typer.Option(help="Torch device for embedding --source-texts / --target-texts.")] = "cpu",
    threads: ThreadsOpt = None,
) -> None:
    """Learn a linear map from the source space into the target space from UNPAIRED vectors (row counts may differ).

    --config FILE sets any MiniVec2Vec parameter, the stages' settings nested: {"refine": {"n_iter": 50}}."""
    # Everything is checked before any file is read or text embedded: a typo must not cost an embedding run.
    if output.exists() and not output.is_dir():
        raise SubspacesError(f"--output {output} exists and is not a folder")
    _check_side("source", source_emb, source, source_texts)
    _check_side("target", target_emb, target, target_texts)
    if source is not None or target is not None:
        from subspaces.models.encoder import resolve_device

        resolve_device(device)
    aligner.check_params()
    pairs = _load_pairs(pairs_source, pairs_target)
    a = _load_side(source_emb, source, source_texts, device)
    b = _load_side(target_emb, target, target_texts, device)
    known = f", {len(pairs[0])} known pairs" if pairs is not None else ""
    echo(f"fitting mini-vec2vec: source {a.shape[0]} x {a.shape[1]}, target {b.shape[0]} x {b.shape[1]}{known}")
    with warnings.catch_warnings(record=True) as caught:  # shown after the diagnostics they refer to
        warnings.simplefilter("always", ConvergenceWarning)
        aligner.fit(a, b, pairs=pairs)
    aligner.verbose = False  # progress bars were for this run; a loaded aligner stays quiet unless asked
    aligner.save(output)
    _print_diagnostics(aligner)
    for warning in caught:
        if issubclass(warning.category, ConvergenceWarning):
            echo(str(warning.message), label="warning:", style="bold yellow")
        else:
            warnings.showwarning(warning.message, warning.category, warning.filename, warning.lineno)
    if not aligner.converged_:
        echo("this map is not trusted; `align apply` refuses it unless --force", label="warning:", style="bold yellow")
    d = aligner.diagnostics_
    echo(
        f"fitted in {aligner.fit_seconds_:.1f}s ({d.precision} products on {d.cpu}, "
        f"{'native' if d.native_bfloat16 else 'no native'} bfloat16); wrote {output}"
    )


@align_app.command("apply")
def apply_cmd(
    aligner_dir: Annotated[Path, typer.Argument(help="Folder written by `align fit`.")],
    input: Annotated[Path, typer.Argument(help="Source-model vectors, .npy or .parquet (one embedding column).")],
    output: Annotated[Path, typer.Argument(help="Where to write the mapped vectors (.npy or .parquet).")],
    centered: Annotated[
        bool, typer.Option("--centered/--target-space", help="Unit vectors in the centred or the target's own space.")
    ] = False,
    chunk_size: Annotated[int, typer.Option(min=1, help="Rows mapped per chunk.")] = 65_536,
    threads: ThreadsOpt = None,
    force: Annotated[
        bool, typer.Option("--force", help="Apply a map that `align fit` flagged as not trusted.")
    ] = False,
) -> None:
    """Map a stored collection into the target space, in chunks; written atomically, the input untouched."""

    aligner = MiniVec2Vec.load(aligner_dir)
    if not force:
        aligner.check_trusted(aligner_dir)
    n = apply_to_file(aligner, input, output, centered=centered, chunk_size=chunk_size, show_progress=True, force=True)
    echo(f"mapped {n} vectors {aligner.n_features_in_}-d -> {aligner.n_features_out_}-d into {output}")


@align_app.command("eval")
def eval_cmd(
    aligner_dir: Annotated[Path, typer.Argument(help="Folder written by `align fit`.")],
    source_emb: Annotated[Path, typer.Option(help="Held-out source vectors; row i pairs with target row i.")],
    target_emb: Annotated[Path, typer.Option(help="Held-out target vectors of the same texts.")],
    json_path: JsonOpt = None,
    pool_size: Annotated[int, typer.Option(min=1, help="Candidates per retrieval pool (consecutive rows).")] = 8192,
    source_name: Annotated[Optional[str], typer.Option(help="Name of the source model in the report.")] = None,
    target_name: Annotated[Optional[str], typer.Option(help="Name of the target model in the report.")] = None,
    threads: ThreadsOpt = None,
) -> None:
    """Top-1, mean rank and cosine on paired held-out vectors, beside identity and oracle-Procrustes baselines."""

    saved = sorted(p for p in aligner_dir.iterdir() if p.is_file()) if aligner_dir.is_dir() else []
    check_not_input(
        json_path, "--json", {"--source-emb": source_emb, "--target-emb": target_emb, "aligner folder's": saved}
    )
    aligner = MiniVec2Vec.load(aligner_dir)
    report: dict[str, Any] = {"source": source_name or source_emb.stem, "target": target_name or target_emb.stem}
    scores = evaluate_alignment(aligner, load_embeddings(source_emb), load_embeddings(target_emb), pool_size=pool_size)
    report |= scores.to_dict()
    report["fit_seconds"] = aligner.fit_seconds_
    if json_path is not None:
        save_json(json_path, report)
    rows = [["mini-vec2vec", report["top1"], report["mean_rank"], report["cosine"]]]
    for name in ("identity", "oracle", "oracle_cross_fitted"):
        if report.get(name) is not None:
            rows.append([name, report[name]["top1"], report[name]["mean_rank"], report[name]["cosine"]])
    title = f"{report['source']} -> {report['target']}: {report['n_eval']} pairs, pools of {report['pool_size']}"
    out.print(
        table(
            title,
            ["map", "top-1", "mean rank", "cosine"],
            [[r[0], f"{r[1]:.4f}", f"{r[2]:.2f}", f"{r[3]:.4f}"] for r in rows],
        )
    )
