"""``subspaces vectors search``: top-k cosine search of query vectors over an in-memory ``.npy`` corpus: exact, funnel,
or over the corpus's int8 / binary codes with rescoring."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal, Optional

import typer

from subspaces.cli.common import ThreadsOpt, echo, user_errors
from subspaces.cli.groups import vectors_app
from subspaces.errors import DataError, DimensionError, SubspacesError
from subspaces.io import check_file, check_writable, load_embeddings, read_embedding_file, save_json, save_npy
from subspaces.quantize import Kind, calibrate_int8, calibration_sample, dequantize, load_codes, sidecar


def search_vectors(
    corpus, queries, k: int, dims: int | None = None, shortlist_factor: int = 10, basis: str = "model"
) -> tuple[object, object]:
    """Scores and corpus rows (each queries × k) by cosine; with ``dims``, a funnel that shortlists
    ``shortlist_factor × k`` rows on the first ``dims`` coordinates (``basis="pca"``: of the corpus's principal
    axes) and re-ranks them at full dimension, as the store's funnel does."""
    from subspaces.adapt.adapter import check_vectors
    from subspaces.store.search import (
        BASES,
        exact,
        flat_index,
        funnel,
        int8_index,
        prefix_rows,
        scans_codes,
        unit_prefix,
    )
    from subspaces.vectors import principal_axes

    if basis not in BASES:
        raise SubspacesError(f"--basis must be one of {', '.join(BASES)}, got {basis!r}")
    if basis == "pca" and dims is None:
        raise SubspacesError("--basis pca says whose prefix the funnel reads: give --dims too")
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
    axes = principal_axes(corpus) if basis == "pca" else None
    prefixes = prefix_rows(corpus, dims, axes)
    index = int8_index(prefixes) if scans_codes(len(corpus), len(queries)) else flat_index(prefixes)
    return funnel(index, corpus, queries, k, shortlist_factor * k, prefix_queries=prefix_rows(queries, dims, axes))


def search_quantized(
    corpus, queries, k: int, kind: str, rescore: int | None = 4, calibration_rows: int = 10_000
) -> tuple[object, object, str | None]:
    """Scores, corpus rows and what the shortlist was rescored against, searching the corpus's codes by cosine.

    The rows are unit-normalised, then quantized: int8 with ranges calibrated on a seeded sample of
    ``calibration_rows`` rows, binary by sign. A shortlist of ``rescore x k`` rows (None: none) is rescored by the
    float query, against the dequantized codes (int8: what a store of codes alone can do) or against the float
    corpus (binary: one bit a dimension is too coarse to re-rank by)."""
    from subspaces.adapt.adapter import check_vectors
    from subspaces.quantize import quantize, search
    from subspaces.store.search import unit_prefix

    corpus = unit_prefix(check_vectors(corpus, "corpus"))
    queries = unit_prefix(check_vectors(queries, "queries"))
    if queries.shape[1] != corpus.shape[1]:
        raise DimensionError(f"queries have {queries.shape[1]} dimensions, the corpus {corpus.shape[1]}")
    cal = calibrate_int8(calibration_sample(corpus, calibration_rows)) if kind == "int8" else None
    codes = quantize(corpus, kind, cal)  # type: ignore[arg-type]
    floats = corpus if kind == "binary" else None
    scores, rows = search(queries, codes, kind=kind, k=k, calibration=cal, rescore=rescore, corpus=floats)  # type: ignore[arg-type]
    against = None if rescore is None else ("float corpus" if floats is not None else "dequantized codes")
    return scores, rows, against


# The defaults of options that only mean something beside another (given alone, they are refused).
SHORTLIST_FACTOR, RESCORE, CALIBRATION_ROWS = 10, 4, 10_000


# The bases of ``store.search.BASES`` a vector file has: its own coordinates or its principal axes (no adapter).
Basis = Literal["model", "pca"]


@vectors_app.command("search")
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
    shortlist_factor: Annotated[
        Optional[int],
        typer.Option(
            min=1, help="With --dims: funnel shortlist size, as a multiple of k. Default: 10.", show_default=False
        ),
    ] = None,
    basis: Annotated[
        Basis,
        typer.Option(
            help="Funnel prefixes of the vectors' own coordinates (model) or the corpus's principal axes (pca)."
        ),
    ] = "model",
    quantize: Annotated[
        Optional[Kind],
        typer.Option(help="Search the corpus's int8 (calibrated) or binary codes instead of its floats."),
    ] = None,
    rescore: Annotated[
        Optional[int],
        typer.Option(
            min=0,
            help="With --quantize: rescore RESCORE x k candidates by the float query (0: no rescoring). Default: 4.",
            show_default=False,
        ),
    ] = None,
    calibration_rows: Annotated[
        Optional[int],
        typer.Option(
            min=2,
            help="With --quantize int8: rows of the seeded sample the ranges are read from. Default: 10000.",
            show_default=False,
        ),
    ] = None,
    threads: ThreadsOpt = None,
) -> None:
    """Nearest corpus rows of every query vector by cosine: exact, funnel (prefix shortlist, full re-rank), or
    quantized (codes shortlist, rescored)."""
    import time

    import numpy as np

    if output.suffix not in (".json", ".npy"):
        raise DataError("--output must end in .json or .npy", path=output)
    if quantize is not None and dims is not None:
        raise SubspacesError("give --dims (funnel) or --quantize, not both")
    _check_context(dims, shortlist_factor, basis, quantize, rescore, calibration_rows)
    shortlist_factor = SHORTLIST_FACTOR if shortlist_factor is None else shortlist_factor
    rescore = RESCORE if rescore is None else rescore
    calibration_rows = CALIBRATION_ROWS if calibration_rows is None else calibration_rows
    check_writable(output, "--output")
    c, q = _load_vectors(corpus, "--corpus"), _load_vectors(queries, "--queries")
    start = time.perf_counter()
    against = None
    if quantize is None:
        scores, rows = search_vectors(c, q, k, dims, shortlist_factor, basis)
    else:
        scores, rows, against = search_quantized(c, q, k, quantize, rescore or None, calibration_rows)
    seconds = time.perf_counter() - start
    rows, scores = np.asarray(rows, dtype=np.int64), np.asarray(scores, dtype=np.float32)
    if output.suffix == ".npy":
        save_npy(output, rows)
    else:
        report = {
            "k": int(rows.shape[1]),
            "dims": dims,
            "shortlist": None if dims is None else shortlist_factor * k,
            **({} if quantize is None else _quantized_report(quantize, len(c), k, rescore, against)),
            "rows": rows.tolist(),
            "scores": scores.round(6).tolist(),
        }
        save_json(output, report)
    how = "exact" if dims is None else f"funnel at {dims} dims, shortlist {shortlist_factor * k}"
    if quantize is not None:
        how = f"{quantize} codes" + (f", {rescore * k} rescored against the {against}" if against else "")
    echo(f"{len(q)} queries over {len(c)} rows ({how}) in {seconds:.2f}s (index build included); wrote {output}")


def _check_context(
    dims: int | None,
    shortlist_factor: int | None,
    basis: str,
    quantize: str | None,
    rescore: int | None,
    calibration: int | None,
) -> None:
    """Refuse an option that would do nothing with the others given (as ``--basis pca`` without ``--dims`` is)."""
    if dims is None and basis == "pca":
        raise SubspacesError("--basis pca says whose prefix the funnel reads: give --dims too")
    if dims is None and shortlist_factor is not None:
        raise SubspacesError("--shortlist-factor sizes the funnel's shortlist: give --dims too, or drop it")
    if quantize is None and rescore is not None:
        raise SubspacesError("--rescore re-ranks the shortlist of --quantize: give --quantize too, or drop it")
    if quantize != "int8" and calibration is not None:
        raise SubspacesError("--calibration-rows sets the ranges of --quantize int8: give it too, or drop it")


def _load_vectors(path: Path, what: str):
    """Float vectors from ``path``; a file of codes (``encode --quantize``: its ``.quant.json`` beside it) is
    dequantized (int8: each code's interval centre; binary: -1/+1 a bit), so its scores are cosines of those
    vectors, not of the code numbers read as floats. Integer arrays without that description are refused."""
    import numpy as np

    if sidecar(path).is_file():
        check_file(path)
        codes, kind, dim, cal = load_codes(path)
        if codes.ndim != 2 or codes.dtype != (np.int8 if kind == "int8" else np.uint8):
            raise DataError(
                f"holds {codes.dtype} {codes.shape}, not the {kind} codes {sidecar(path).name} describes", path
            )
        echo(f"{what} {path} holds {kind} codes ({sidecar(path).name}): searched as their dequantized vectors")
        return dequantize(codes, kind, dim, cal)
    array, _ = read_embedding_file(path, mmap=True)
    if np.issubdtype(array.dtype, np.integer) and array.dtype.itemsize == 1:
        raise DataError(
            f"holds {array.dtype} numbers, not float vectors: codes of `encode --quantize`? their description "
            f"{sidecar(path).name} is missing beside it",
            path,
        )
    return load_embeddings(path)


def _quantized_report(kind: str, rows: int, k: int, rescore: int, against: str | None) -> dict:
    return {
        "quantize": kind,
        "shortlist": min(rows, rescore * k) if against else None,
        "rescored_against": against,  # "dequantized codes" (int8), "float corpus" (binary) or None
    }
