"""``subspaces vectors search``: top-k cosine search of query vectors over an in-memory ``.npy`` corpus: exact, funnel,
or over the corpus's int8 / binary codes with rescoring."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, Optional

import typer

from subspaces.cli.common import ThreadsOpt, echo
from subspaces.cli.groups import vectors_app
from subspaces.errors import DataError, SubspacesError
from subspaces.io import (
    check_file,
    check_not_input,
    check_writable,
    load_embeddings,
    read_embedding_file,
    save_json,
    save_npy,
)
from subspaces.quantize import CALIBRATION_ROWS, Kind, dequantize, load_codes, sidecar
from subspaces.store.plans import RESCORE
from subspaces.store.search import BASES, SHORTLIST_FACTOR, search_quantized, search_vectors

if TYPE_CHECKING:
    Basis = str
else:  # the bases of vectors outside a store (an adapter is fitted inside one, `store shrink`): typer's choices
    Basis = Literal[tuple(b for b in BASES if b != "adapter")]


@vectors_app.command("search")
def search_cmd(
    corpus: Annotated[Path, typer.Option(help="Corpus vectors, .npy or .parquet (rows x dims).")],
    queries: Annotated[Path, typer.Option(help="Query vectors of the same model, .npy or .parquet.")],
    output: Annotated[Path, typer.Option("--output", "-o", help=".json (rows and scores) or .npy (rows only).")],
    k: Annotated[int, typer.Option("-k", min=1, help="Results per query.")] = 10,
    dims: Annotated[Optional[int], typer.Option(help="Funnel: shortlist on the first DIMS coordinates.")] = None,
    shortlist_factor: Annotated[
        Optional[int],
        typer.Option(min=1, help=f"With --dims: the shortlist, x k. Default: {SHORTLIST_FACTOR}.", show_default=False),
    ] = None,
    basis: Annotated[
        Basis, typer.Option(help="Funnel prefixes of the own coordinates or the principal axes.")
    ] = "model",
    quantize: Annotated[Optional[Kind], typer.Option(help="Search the corpus's int8 or binary codes.")] = None,
    rescore: Annotated[
        Optional[int],
        typer.Option(
            min=0, help=f"With --quantize: rescore this x k candidates (0: none; {RESCORE}).", show_default=False
        ),
    ] = None,
    calibration_rows: Annotated[
        Optional[int],
        typer.Option(min=2, help=f"With int8: rows the ranges are read from ({CALIBRATION_ROWS}).", show_default=False),
    ] = None,
    threads: ThreadsOpt = None,
) -> None:
    """Nearest corpus rows of every query vector by cosine: exact, funnel (prefix shortlist, full re-rank), or
    quantized (codes shortlist, rescored)."""
    import numpy as np

    if output.suffix not in (".json", ".npy"):
        raise DataError("--output must end in .json or .npy", path=output)
    if quantize is not None and dims is not None:
        raise SubspacesError("give --dims (funnel) or --quantize, not both")
    # An option that would do nothing with the others given is refused.
    if dims is None and basis == "pca":
        raise SubspacesError("--basis pca says whose prefix the funnel reads: give --dims too")
    if dims is None and shortlist_factor is not None:
        raise SubspacesError("--shortlist-factor sizes the funnel's shortlist: give --dims too, or drop it")
    if quantize is None and rescore is not None:
        raise SubspacesError("--rescore re-ranks the shortlist of --quantize: give --quantize too, or drop it")
    if quantize != "int8" and calibration_rows is not None:
        raise SubspacesError("--calibration-rows sets the ranges of --quantize int8: give it too, or drop it")
    shortlist_factor = SHORTLIST_FACTOR if shortlist_factor is None else shortlist_factor
    rescore = RESCORE if rescore is None else rescore
    calibration_rows = CALIBRATION_ROWS if calibration_rows is None else calibration_rows
    inputs = {"--corpus": corpus, "--queries": queries}
    for option, path in list(inputs.items()):
        if sidecar(path).is_file():  # a file of codes: its description is read too
            inputs[f"{option}'s codes description"] = sidecar(path)
    check_not_input(output, "--output", inputs)
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
        report: dict[str, Any] = {"k": int(rows.shape[1]), "dims": dims}
        report["shortlist"] = None if dims is None else shortlist_factor * k
        if quantize is not None:  # against: "dequantized codes" (int8), "float corpus" (binary) or None
            shortlist = min(len(c), rescore * k) if against else None
            report |= {"quantize": quantize, "shortlist": shortlist, "rescored_against": against}
        report |= {"rows": rows.tolist(), "scores": scores.round(6).tolist()}
        save_json(output, report)
    how = "exact" if dims is None else f"funnel at {dims} dims, shortlist {shortlist_factor * k}"
    if quantize is not None:
        how = f"{quantize} codes" + (f", {rescore * k} rescored against the {against}" if against else "")
    echo(f"{len(q)} queries over {len(c)} rows ({how}) in {seconds:.2f}s (index build included); wrote {output}")


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
