"""``subspaces align fit|apply|eval``: unsupervised alignment of embedding spaces (mini-vec2vec)."""

from __future__ import annotations

import warnings
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from subspaces.cli.common import console, out, table, user_errors
from subspaces.errors import ConvergenceWarning
from subspaces.cli.groups import align_app


class QapMethod(str, Enum):
    faq = "faq"
    two_opt = "2opt"


class AnchorKernel(str, Enum):
    cosine = "cosine"
    gram = "gram"


def _embed(model: str, texts_path: Path):
    from subspaces.io import read_lines
    from subspaces.models.encoder import encode, load_encoder

    texts = read_lines(texts_path)
    console.print(f"embedding {len(texts)} texts of {texts_path} with {model}")
    return encode(load_encoder(model), texts, show_progress=True)


def _check_side(name: str, emb: Optional[Path], model: Optional[str], texts: Optional[Path]) -> None:
    from subspaces.errors import SubspacesError

    if emb is not None and (model is not None or texts is not None):
        raise SubspacesError(f"give either --{name}-emb or --{name} with --{name}-texts, not both")
    if emb is None and (model is None or texts is None):
        raise SubspacesError(f"give --{name}-emb FILE, or --{name} MODEL with --{name}-texts FILE")
    for path in (emb, texts):
        if path is not None and not path.is_file():
            raise SubspacesError(f"{path}: file not found")
    if model is not None:
        from subspaces.models.encoder import resolve_model_path

        resolve_model_path(model)  # an unknown name fails now, not after the other side is embedded


def _load_side(emb: Optional[Path], model: Optional[str], texts: Optional[Path]):
    from subspaces.io import load_embeddings

    return load_embeddings(emb) if emb is not None else _embed(model, texts)


@align_app.command("fit")
@user_errors
def fit_cmd(
    output: Annotated[Path, typer.Option("--output", "-o", help="Folder to write the fitted aligner to.")],
    source_emb: Annotated[Optional[Path], typer.Option(help="Source-model vectors (.npy/.parquet).")] = None,
    target_emb: Annotated[Optional[Path], typer.Option(help="Target-model vectors of *other* texts.")] = None,
    source: Annotated[Optional[str], typer.Option(help="Source model, to embed --source-texts first.")] = None,
    source_texts: Annotated[Optional[Path], typer.Option(help="Texts for the source model, one a line.")] = None,
    target: Annotated[Optional[str], typer.Option(help="Target model, to embed --target-texts first.")] = None,
    target_texts: Annotated[Optional[Path], typer.Option(help="Texts for the target model, one a line.")] = None,
    n_anchor_runs: Annotated[int, typer.Option(help="k-means runs pooled into anchors.")] = 30,
    n_anchor_clusters: Annotated[int, typer.Option(help="Clusters per anchor run.")] = 20,
    anchor_sample: Annotated[int, typer.Option(help="Rows sampled from each space per run.")] = 10_000,
    kmeans_iter: Annotated[int, typer.Option(help="Lloyd iterations of every k-means.")] = 25,
    kmeans_redo: Annotated[int, typer.Option(help="Random starts per anchor k-means; lowest inertia kept.")] = 1,
    qap_method: Annotated[QapMethod, typer.Option(help="scipy quadratic-assignment solver.")] = QapMethod.faq,
    anchor_kernel: Annotated[AnchorKernel, typer.Option(help="QAP kernel: cosines of unit centroids, or the double-centred Gram of raw cluster means (the notebook's).")] = AnchorKernel.cosine,
    qap_restarts: Annotated[int, typer.Option(help="Solver starts per run, each polished by swaps; best kept.")] = 30,
    anchor_keep: Annotated[float, typer.Option(help="Fraction of runs kept, best matching agreement first.")] = 1.0,
    n_restarts: Annotated[int, typer.Option(help="At most this many independent passes; best label-free score wins.")] = 3,
    converged_swap_share: Annotated[float, typer.Option(help="No further restarts once a pass's last structural round swapped at most this share of pairs; negative = always run all restarts.")] = 0.1,
    n_pseudo_pairs: Annotated[int, typer.Option(help="Source rows used for the initial map.")] = 10_000,
    relative_k: Annotated[int, typer.Option(help="Neighbours averaged in relative space.")] = 50,
    structure_iter: Annotated[int, typer.Option(help="Maximum structural-refinement rounds (0 skips it).")] = 10,
    structure_clusters: Annotated[int, typer.Option(help="Clusters per structural k-means.")] = 50,
    structure_runs: Annotated[int, typer.Option(help="Seeded k-means pairs per structural round.")] = 4,
    structure_sample: Annotated[int, typer.Option(help="Rows per structural k-means.")] = 10_000,
    structure_steps: Annotated[int, typer.Option(help="Refine-1 steps after each structural correction.")] = 5,
    structure_patience: Annotated[int, typer.Option(help="Stop after this many rounds without gain.")] = 2,
    structure_stop_swap_share: Annotated[float, typer.Option(help="End structural refinement at the first round that swaps at most this share of pairs; negative = run until patience.")] = 0.02,
    refine_iter: Annotated[int, typer.Option(help="Maximum refine-1 iterations.")] = 100,
    refine_sample: Annotated[int, typer.Option(help="Source rows per refine-1 iteration.")] = 1024,
    refine_k: Annotated[int, typer.Option(help="Target neighbours averaged in refine-1.")] = 50,
    refine_alpha: Annotated[float, typer.Option(help="Blend weight of each refine-1 map.")] = 0.5,
    refine_bidirectional: Annotated[bool, typer.Option("--refine-bidirectional/--no-refine-bidirectional", help="Also pair target rows with mapped-back source neighbour means.")] = True,
    refine_patience: Annotated[int, typer.Option(help="Stop after this many iterations without gain.")] = 30,
    refine_score_every: Annotated[int, typer.Option(help="Score the map only every so many refine-1 iterations.")] = 5,
    refine_average: Annotated[bool, typer.Option("--refine-average/--no-refine-average", help="Also try the average of the last half of the refine-1 iterates; keep it if it scores higher.")] = True,
    refine_tol: Annotated[float, typer.Option(help="Smallest label-free score gain that counts.")] = 1e-4,
    centroid_clusters: Annotated[int, typer.Option(help="k of refine-2's k-means (0 skips refine-2).")] = 500,
    centroid_alpha: Annotated[float, typer.Option(help="Blend weight of refine-2's map.")] = 0.5,
    orthogonalize: Annotated[bool, typer.Option("--orthogonalize/--no-orthogonalize", help="Project blended maps back to orthogonal.")] = True,
    ann_lists: Annotated[int, typer.Option(help="IVF cells of the refinement indexes (0 = exact search; IVF is faster, less accurate).")] = 0,
    ann_probe: Annotated[int, typer.Option(help="IVF cells visited per query.")] = 8,
    probe_size: Annotated[int, typer.Option(help="Rows of each space used for the label-free score.")] = 2048,
    seed: Annotated[int, typer.Option(help="Random seed (samples, k-means, QAP starts).")] = 0,
) -> None:
    """Learn a linear map from the source space into the target space from UNPAIRED vectors (row counts may differ)."""
    from subspaces.align import MiniVec2Vec
    from subspaces.errors import SubspacesError

    # Everything is checked before any file is read or text embedded: a typo must not cost an embedding run.
    if output.exists() and not output.is_dir():
        raise SubspacesError(f"--output {output} exists and is not a folder")
    _check_side("source", source_emb, source, source_texts)
    _check_side("target", target_emb, target, target_texts)
    aligner = MiniVec2Vec(
        n_anchor_runs=n_anchor_runs, n_anchor_clusters=n_anchor_clusters, anchor_sample=anchor_sample,
        kmeans_iter=kmeans_iter, kmeans_redo=kmeans_redo, qap_method=qap_method.value,
        anchor_kernel=anchor_kernel.value, qap_restarts=qap_restarts, anchor_keep=anchor_keep,
        n_restarts=n_restarts, converged_swap_share=None if converged_swap_share < 0 else converged_swap_share,
        n_pseudo_pairs=n_pseudo_pairs, relative_k=relative_k,
        structure_iter=structure_iter, structure_clusters=structure_clusters, structure_runs=structure_runs,
        structure_sample=structure_sample, structure_steps=structure_steps, structure_patience=structure_patience,
        structure_stop_swap_share=None if structure_stop_swap_share < 0 else structure_stop_swap_share,
        refine_iter=refine_iter, refine_sample=refine_sample, refine_k=refine_k, refine_alpha=refine_alpha,
        refine_bidirectional=refine_bidirectional, refine_patience=refine_patience,
        refine_score_every=refine_score_every, refine_average=refine_average, refine_tol=refine_tol,
        centroid_clusters=centroid_clusters, centroid_alpha=centroid_alpha, orthogonalize=orthogonalize,
        ann_lists=ann_lists, ann_probe=ann_probe, probe_size=probe_size, random_state=seed, verbose=True,
    )
    aligner.check_params()
    a = _load_side(source_emb, source, source_texts)
    b = _load_side(target_emb, target, target_texts)
    console.print(f"fitting mini-vec2vec: source {a.shape[0]} x {a.shape[1]}, target {b.shape[0]} x {b.shape[1]}")
    with warnings.catch_warnings(record=True) as caught:  # shown after the diagnostics they refer to
        warnings.simplefilter("always", ConvergenceWarning)
        aligner.fit(a, b)
    aligner.verbose = False  # progress bars were for this run; a loaded aligner stays quiet unless asked
    aligner.save(output)
    d = aligner.diagnostics_
    stats = {  # one row per statistic, one column per restart: stays readable however many restarts ran
        "QAP agreement": lambda r: r["qap_agreement"],
        "nn-sim initial": lambda r: r["nn_similarity"]["initial"],
        "nn-sim structure": lambda r: r["nn_similarity"]["structure"],
        "nn-sim refine-1": lambda r: r["nn_similarity"]["refine1"],
        "nn-sim final": lambda r: r["nn_similarity"]["final"],
        "last share swapped": lambda r: r["structure_swapped"][-1] if r["structure_swapped"] else float("nan"),
        "refine-1 iterations": lambda r: r["refine1_iterations"],
        "anchor consistency": lambda r: r["anchor_consistency_final"],
    }
    columns = ["statistic"] + [f"restart {i}{' (kept)' if i == d['chosen_restart'] else ''}"
                               for i in range(len(d["restarts"]))]
    rows = [[name] + [f"{v:.4f}" if isinstance(v := get(r), float) else str(v) for r in d["restarts"]]
            for name, get in stats.items()]
    out.print(table("label-free diagnostics", columns, rows))
    out.print(f"orthogonality gap {d['orthogonality_gap']:.2e}")
    for warning in caught:
        if issubclass(warning.category, ConvergenceWarning):
            console.print(f"[bold yellow]warning:[/] {warning.message}")
        else:
            warnings.showwarning(warning.message, warning.category, warning.filename, warning.lineno)
    console.print(f"fitted in {aligner.fit_seconds_:.1f}s; wrote {output}")


@align_app.command("apply")
@user_errors
def apply_cmd(
    aligner_dir: Annotated[Path, typer.Argument(help="Folder written by `align fit`.")],
    input: Annotated[Path, typer.Argument(help="Source-model vectors, .npy or .parquet (one embedding column).")],
    output: Annotated[Path, typer.Argument(help="Where to write the mapped vectors (.npy or .parquet).")],
    centered: Annotated[bool, typer.Option("--centered/--target-space", help="Unit vectors in the centred target space, or (default) in the target model's own coordinates.")] = False,
    chunk_size: Annotated[int, typer.Option(min=1, help="Rows mapped per chunk.")] = 65_536,
) -> None:
    """Map a stored collection into the target space, in chunks; the output is written atomically, the input untouched."""
    from subspaces.align import MiniVec2Vec
    from subspaces.align.apply import apply_to_file

    aligner = MiniVec2Vec.load(aligner_dir)
    n = apply_to_file(aligner, input, output, centered=centered, chunk_size=chunk_size, progress=True)
    console.print(f"mapped {n} vectors {aligner.n_features_in_}-d -> {aligner.n_features_out_}-d into {output}")


@align_app.command("eval")
@user_errors
def eval_cmd(
    aligner_dir: Annotated[Path, typer.Argument(help="Folder written by `align fit`.")],
    source_emb: Annotated[Path, typer.Option(help="Held-out source vectors; row i pairs with target row i.")],
    target_emb: Annotated[Path, typer.Option(help="Held-out target vectors of the same texts.")],
    json_path: Annotated[Optional[Path], typer.Option("--json", help="Write the report here (atomically).")] = None,
    pool_size: Annotated[int, typer.Option(min=1, help="Candidates per retrieval pool (consecutive rows; the last pool holds the rest).")] = 8192,
    source_name: Annotated[Optional[str], typer.Option(help="Name of the source model in the report.")] = None,
    target_name: Annotated[Optional[str], typer.Option(help="Name of the target model in the report.")] = None,
) -> None:
    """Top-1, mean rank and cosine on paired held-out vectors, beside identity and oracle-Procrustes baselines."""
    from subspaces.align import MiniVec2Vec, evaluate_alignment
    from subspaces.io import load_embeddings, save_json

    aligner = MiniVec2Vec.load(aligner_dir)
    report = {"source": source_name or source_emb.stem, "target": target_name or target_emb.stem}
    report |= evaluate_alignment(aligner, load_embeddings(source_emb), load_embeddings(target_emb), pool_size=pool_size)
    report["fit_seconds"] = aligner.fit_seconds_
    if json_path is not None:
        save_json(json_path, report)
    rows = [["mini-vec2vec", report["top1"], report["mean_rank"], report["cosine"]]]
    for name in ("identity", "oracle", "oracle_cross_fitted"):
        if report.get(name) is not None:
            rows.append([name, report[name]["top1"], report[name]["mean_rank"], report[name]["cosine"]])
    title = f"{report['source']} -> {report['target']}: {report['n_eval']} pairs, pools of {report['pool_size']}"
    out.print(table(title, ["map", "top-1", "mean rank", "cosine"], [[r[0], f"{r[1]:.4f}", f"{r[2]:.2f}", f"{r[3]:.4f}"] for r in rows]))
