"""The search command family: ``vectors search`` (vector files), ``store search`` (a store) and ``cond search`` (a
corpus under a condition). Their shared options are declared here once, and :func:`show_results` prints or writes
every one's results in one shape."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, Optional

import typer

from subspaces.cli.common import JsonOpt, ThreadsOpt, echo, setting_option, show, table
from subspaces.cli.groups import vectors_app
from subspaces.errors import DataError, SubspacesError
from subspaces.io import (
    check_file,
    check_not_input,
    check_writable,
    load_embeddings,
    read_embedding_file,
    read_queries,
    save_json,
    save_npy,
)
from subspaces.quantize import CALIBRATION_ROWS, Kind, dequantize, load_codes, sidecar
from subspaces.store.plans import RESCORE, SearchSettings
from subspaces.store.results import SearchResult
from subspaces.store.search import BASES, SHORTLIST_FACTOR, search_quantized, search_vectors

if TYPE_CHECKING:
    Basis = str
else:  # the bases a basis is fitted from (`store shrink --adapter-basis`, `store demo --basis`): typer's choices
    Basis = Literal[tuple(b for b in BASES if b != "adapter")]

# The family's options, each declared once. Where one command requires an option another makes optional, the
# option's declaration is shared and each command gives its own type.
QueryArg = Annotated[Optional[str], typer.Argument(help="One query text (or give --queries).", show_default=False)]
QueryFileOpt = Annotated[Optional[Path], typer.Option(help="A file of query texts, one a line (no blank lines).")]
QueryVectorsOpt = Annotated[
    Optional[Path],
    typer.Option(help="Query vectors instead of texts (.npy or .parquet), of the corpus's model (a store's: any)."),
]
CORPUS = typer.Option("--corpus", help="Corpus vectors (.npy or .parquet, rows x dims) of the queries' model.")
# The options the family shares with SearchSettings are its fields (name, flags, type, default, help), with these
# range checks before a command runs; `store search` derives them with the rest, the others declare them.
LIMITS: dict[str, dict[str, Any]] = {"k": {"min": 1}, "shortlist": {"min": 1}, "rescore": {"min": 0}}
if TYPE_CHECKING:
    KOpt = int
    DimsOpt = Optional[int]
    ShortlistOpt = Optional[int]
    RescoreOpt = Optional[int]
    BasisOpt = Optional[str]
else:
    KOpt, DimsOpt, ShortlistOpt, BasisOpt, RescoreOpt = (
        setting_option(SearchSettings, name, **LIMITS.get(name, {}))
        for name in ("k", "dims", "shortlist", "basis", "rescore")
    )
CONDITION = typer.Option("--condition", "-c", help="Rank under this condition (needs --head).")
HEAD = typer.Option("--head", help="A Hyper-CL tri-encoder folder (`cond train --arch tri`); a store's: on its model.")

SHOWN = 20  # queries printed as tables; --json writes every one


def query_texts(query: str | None, queries: Path | None) -> list[str]:
    """QUERY, or the lines of --queries (one of them: both is refused, so no query is silently dropped)."""
    if query is not None and queries is not None:
        raise SubspacesError("give a QUERY or --queries FILE, not both")
    if query is not None:
        return [query]
    if queries is None:
        raise SubspacesError("give a QUERY or --queries FILE")
    return read_queries(queries)


def pick(value: Any, old: Any, flag: str, old_flag: str) -> Any:
    """An option's value, given by its name or its older hidden spelling (both: refused)."""
    if value is not None and old is not None:
        raise SubspacesError(f"{old_flag} is the older spelling of {flag}: give {flag} once")
    return old if value is None else value


def show_results(
    results: Sequence[SearchResult],
    json_path: Path | None,
    *,
    report: dict[str, Any] | None = None,
    condition: str | None = None,
    rows: bool = False,
    columns: bool = False,
) -> None:
    """Every search command's results: with --json ``{**report, "results": [{"query", "hits": [{"rank", "id",
    "score", "text", "metadata"}]}]}`` (text, metadata: where known), else a table a query (rank, id, score, text)
    for the first :data:`SHOWN`. ``rows``: the ids are row numbers (also ``row``, as before); ``columns``: each
    query also keeps its ``ids``, ``scores``, ``texts`` and ``metadata`` lists (store search wrote those)."""
    if json_path is not None:
        entries = [
            {"query": r.query, **({k: v for k, v in r.to_dict().items() if k != "query"} if columns else {})}
            | {"hits": _hits(r, rows)}
            for r in results
        ]
        save_json(json_path, {**(report or {}), "results": entries})
        echo(f"wrote {len(results):,} results to {json_path}")
        return
    for result in results[:SHOWN]:
        header = ["rank", "row" if rows else "id", "score"] + (["text"] if result.texts else [])
        cells = [
            [hit["rank"], hit["id"], f"{hit['score']:.4f}"] + ([hit["text"] or ""] if "text" in hit else [])
            for hit in _hits(result, rows)
        ]
        title = f"{result.query}" + (f" | {condition}" if condition is not None else "")
        show(table(title, header, cells))
    if len(results) > SHOWN:
        echo(f"(first {SHOWN} of {len(results):,} queries shown; use --json OUT for all)")


def _hits(result: SearchResult, rows: bool) -> list[dict[str, Any]]:
    hits = []
    for i, (id, score) in enumerate(zip(result.ids, result.scores, strict=True)):
        hit: dict[str, Any] = {"rank": i + 1, "id": id} | ({"row": id} if rows else {}) | {"score": score}
        hit |= {"text": result.texts[i]} if result.texts else {}
        hits.append(hit | ({"metadata": result.metadata[i]} if result.metadata else {}))
    return hits


@vectors_app.command("search")
def search_cmd(
    corpus: Annotated[Path, CORPUS],
    query_vectors: QueryVectorsOpt = None,
    k: KOpt = SearchSettings.k,
    dims: DimsOpt = None,
    shortlist: ShortlistOpt = None,
    basis: BasisOpt = "model",
    quantize: Annotated[Optional[Kind], typer.Option(help="Search the corpus's int8 or binary codes.")] = None,
    rescore: RescoreOpt = None,
    calibration_rows: Annotated[
        Optional[int],
        typer.Option(min=2, help=f"With int8: rows the ranges are read from ({CALIBRATION_ROWS}).", show_default=False),
    ] = None,
    json_path: JsonOpt = None,
    output: Annotated[
        Optional[Path], typer.Option("--output", "-o", help="Or: .json (as --json) or .npy (the rows only).")
    ] = None,
    old_queries: Annotated[Optional[Path], typer.Option("--queries", hidden=True)] = None,
    shortlist_factor: Annotated[Optional[int], typer.Option(min=1, hidden=True)] = None,
    threads: ThreadsOpt = None,
) -> None:
    """Nearest corpus rows of every query vector by cosine: exact, funnel (prefix shortlist, full re-rank), or
    quantized (codes shortlist, rescored)."""
    import numpy as np

    queries = pick(query_vectors, old_queries, "--query-vectors", "--queries")
    shortlist = pick(shortlist, shortlist_factor, "--shortlist", "--shortlist-factor")
    if queries is None:
        raise SubspacesError("give the queries: --query-vectors FILE")
    if output is not None and output.suffix not in (".json", ".npy"):
        raise DataError("--output must end in .json or .npy", path=output)
    if output is not None and output.suffix == ".json":
        if json_path is not None:
            raise SubspacesError("--output FILE.json writes what --json does: give one of them")
        json_path = output
    if quantize is not None and dims is not None:
        raise SubspacesError("give --dims (funnel) or --quantize, not both")
    if basis == "adapter":
        raise SubspacesError("--basis adapter reads a store's `store shrink` adapter: search the store")
    # An option that would do nothing with the others given is refused.
    if dims is None and basis == "pca":
        raise SubspacesError("--basis pca says whose prefix the funnel reads: give --dims too")
    if dims is None and shortlist is not None:
        given = "--shortlist" if shortlist_factor is None else "--shortlist-factor"
        raise SubspacesError(f"{given} sizes the funnel's shortlist: give --dims too, or drop it")
    if quantize is None and rescore is not None:
        raise SubspacesError("--rescore re-ranks the shortlist of --quantize: give --quantize too, or drop it")
    if quantize != "int8" and calibration_rows is not None:
        raise SubspacesError("--calibration-rows sets the ranges of --quantize int8: give it too, or drop it")
    shortlist = SHORTLIST_FACTOR if shortlist is None else shortlist
    rescore = RESCORE if rescore is None else rescore
    calibration_rows = CALIBRATION_ROWS if calibration_rows is None else calibration_rows
    queries_flag = "--queries" if old_queries is not None else "--query-vectors"
    inputs = {"--corpus": corpus, queries_flag: queries}
    for option, path in list(inputs.items()):
        if sidecar(path).is_file():  # a file of codes: its description is read too
            inputs[f"{option}'s codes description"] = sidecar(path)
    if output is not None:
        check_not_input(output, "--output", inputs)
        check_writable(output, "--output")
    c, q = _load_vectors(corpus, "--corpus"), _load_vectors(queries, queries_flag)
    start = time.perf_counter()
    against = None
    if quantize is None:
        scores, rows = search_vectors(c, q, k, dims, shortlist, basis or "model")
    else:
        scores, rows, against = search_quantized(c, q, k, quantize, rescore or None, calibration_rows)
    seconds = time.perf_counter() - start
    rows, scores = np.asarray(rows, dtype=np.int64), np.asarray(scores, dtype=np.float32).round(6)
    how = "exact" if dims is None else f"funnel at {dims} dims, shortlist {shortlist * k}"
    if quantize is not None:
        how = f"{quantize} codes" + (f", {rescore * k} rescored against the {against}" if against else "")
    echo(f"{len(q)} queries over {len(c)} rows ({how}) in {seconds:.2f}s (index build included)")
    if output is not None and output.suffix == ".npy":
        save_npy(output, rows)
        echo(f"wrote {output}")
    funnel = None if dims is None else shortlist * k
    report: dict[str, Any] = {"k": int(rows.shape[1]), "dims": dims, "shortlist": funnel}
    if quantize is not None:  # against: "dequantized codes" (int8), "float corpus" (binary) or None
        rescored = min(len(c), rescore * k) if against else None
        report |= {"quantize": quantize, "shortlist": rescored, "rescored_against": against}
    report |= {"rows": rows.tolist(), "scores": scores.tolist()}  # the rows and scores also as columns, as before
    results = [
        SearchResult(query=f"vector {i}", ids=r.tolist(), scores=s.tolist(), texts=[])
        for i, (r, s) in enumerate(zip(rows, scores, strict=True))
    ]
    if output is None or json_path is not None:
        show_results(results, json_path, report=report, rows=True)


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
