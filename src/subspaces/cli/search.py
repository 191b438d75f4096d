"""``subspaces search``: top-k cosine search of query vectors over an in-memory ``.npy`` corpus, exact or funnel."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from subspaces.cli.common import ThreadsOpt, console, user_errors
from subspaces.cli.groups import app


def search_vectors(
    corpus, queries, k: int, dims: int | None = None, shortlist_factor: int = 10
) -> tuple[object, object]:
    """Scores and corpus rows (each queries × k) by cosine; with ``dims``, a funnel that shortlists
    ``shortlist_factor × k`` rows on the first ``dims`` coordinates and re-ranks them at full dimension."""
    from subspaces.adapt.adapter import check_vectors
    from subspaces.errors import DimensionError, SubspacesError
    from subspaces.store.search import exact, flat_index, funnel, unit_prefix

    corpus = unit_prefix(check_vectors(corpus, "corpus"))
    queries = unit_prefix(check_vectors(queries, "queries"))
    if queries.shape[1] != corpus.shape[1]:
        raise DimensionError(f"queries have {queries.shape[1]} dimensions, the corpus {corpus.shape[1]}")
    if dims is None:
        return exact(flat_index(corpus), queries, k)
    if not 0 < dims <= corpus.shape[1]:
        raise DimensionError(f"--dims {dims} is outside 1..{corpus.shape[1]}")
    if shortlist_factor < 1:
        raise SubspacesError(f"--shortlist-factor must be at least 1, got {shortlist_factor}")
    return funnel(flat_index(unit_prefix(corpus, dims)), corpus, queries, k, shortlist_factor * k)


@app.command("search")
@user_errors
def search_cmd(
    corpus: Annotated[Path, typer.Option(help="Corpus vectors, .npy or .parquet (rows x dims).")],
    queries: Annotated[Path, typer.Option(help="Query vectors of the same model, .npy or .parquet.")],
    output: Annotated[
        Path, typer.Option("--output", "-o", help=".json (rows and scores) or .npy (rows only, queries x k).")
    ],
    k: Annotated[int, typer.Option("-k", min=1, help="Results per query.")] = 10,
    dims: Annotated[
        Optional[int], typer.Option(help="Funnel: shortlist on the first DIMS coordinates (default: exact search).")
    ] = None,
    shortlist_factor: Annotated[int, typer.Option(min=1, help="Funnel shortlist size, as a multiple of k.")] = 10,
    threads: ThreadsOpt = None,
) -> None:
    """Nearest corpus rows of every query vector by cosine: exact, or funnel (prefix shortlist, full re-rank)."""
    import time

    import numpy as np

    from subspaces.errors import DataError
    from subspaces.io import load_embeddings, save_json, save_npy

    if output.suffix not in (".json", ".npy"):
        raise DataError("--output must end in .json or .npy", path=output)
    c, q = load_embeddings(corpus), load_embeddings(queries)
    start = time.perf_counter()
    scores, rows = search_vectors(c, q, k, dims, shortlist_factor)
    seconds = time.perf_counter() - start
    rows, scores = np.asarray(rows, dtype=np.int64), np.asarray(scores, dtype=np.float32)
    if output.suffix == ".npy":
        save_npy(output, rows)
    else:
        report = {
            "k": int(rows.shape[1]),
            "dims": dims,
            "shortlist": None if dims is None else shortlist_factor * k,
            "rows": rows.tolist(),
            "scores": scores.round(6).tolist(),
        }
        save_json(output, report)
    how = "exact" if dims is None else f"funnel at {dims} dims, shortlist {shortlist_factor * k}"
    console.print(
        f"{len(q)} queries over {len(c)} rows ({how}) in {seconds:.2f}s (index build included); wrote {output}",
        highlight=False,
    )
