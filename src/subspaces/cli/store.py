"""``subspaces store create|add|info|index|search|migrate``: a vector store in a LanceDB folder."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from subspaces.cli.common import ThreadsOpt, console, show, table, user_errors
from subspaces.cli.groups import app

store_app = typer.Typer(
    help="A vector store (LanceDB folder): add texts, search them exactly, by ANN or by Matryoshka funnel, migrate.",
    no_args_is_help=True,
)
app.add_typer(store_app, name="store")

DirArg = Annotated[Path, typer.Argument(help="The store's folder.")]
RESUME = "every batch already written is committed whole; rerun the same command to add the rest"


class Rerank(str, Enum):
    full = "full"
    none = "none"


@store_app.command("create")
@user_errors
def create_cmd(
    store: DirArg,
    model: Annotated[str, typer.Option("--model", "-m", help="Bundled model name or a local folder.")],
    threads: ThreadsOpt = None,
) -> None:
    """Make an empty store for MODEL in a new folder (the model's fingerprint is recorded)."""
    from subspaces.store import Store

    created = Store.create(store, model)
    fp = created.manifest.spaces[created.manifest.active].model
    console.print(f"created store {store} for {fp.label()} ({fp.dimension}-d, {fp.pooler})", highlight=False)


@store_app.command("add")
@user_errors(interrupted=RESUME)
def add_cmd(
    store: DirArg,
    input: Annotated[Path, typer.Option("--input", "-i", help="texts.txt[.gz] (id = 0-based line number) or .jsonl.")],
    id_field: Annotated[Optional[str], typer.Option(help="JSON lines: the id field (default: id, else line).")] = None,
    text_field: Annotated[str, typer.Option(help="JSON lines: the text field.")] = "text",
    batch_size: Annotated[int, typer.Option(help="Texts per encoder batch.")] = 64,
    write_batch: Annotated[int, typer.Option(help="Rows per committed write.")] = 1024,
    threads: ThreadsOpt = None,
) -> None:
    """Encode and append the rows of INPUT whose ids the store lacks (rerun after an interruption to finish)."""
    from subspaces.store import Store
    from subspaces.store.inputs import read_rows

    opened = Store.open(store)  # first: a missing store fails before the input is read
    rows = read_rows(input, id_field=id_field, text_field=text_field)
    result = opened.add(
        rows.texts, rows.ids, rows.metadata, batch_size=batch_size, write_batch=write_batch, progress=True
    )
    console.print(
        f"added {result['added']:,} rows, skipped {result['skipped']:,} already in the store; "
        f"{opened.count():,} rows in {store}",
        highlight=False,
    )


@store_app.command("info")
@user_errors
def info_cmd(
    store: DirArg,
    json_out: Annotated[bool, typer.Option("--json", help="Print the full record as JSON.")] = False,
    threads: ThreadsOpt = None,
) -> None:
    """The store's spaces: model, rows, table version, ANN index, migration report."""
    import json

    from subspaces.store import Store

    info = Store.open(store).info()
    if json_out:
        print(json.dumps(info, indent=2))
        return
    rows = [
        [name, s["state"], s["model"]["name"], s["model"]["dimension"], s["rows"], s["version"], s["index"] or "-"]
        for name, s in info["spaces"].items()
    ]
    show(table(f"store {store}", ["space", "state", "model", "dim", "rows", "version", "index"], rows))


@store_app.command("index")
@user_errors
def index_cmd(
    store: DirArg,
    partitions: Annotated[Optional[int], typer.Option(help="IVF partitions (default about sqrt(rows)).")] = None,
    sub_vectors: Annotated[Optional[int], typer.Option(help="PQ sub-vectors; must divide the dimension.")] = None,
    threads: ThreadsOpt = None,
) -> None:
    """Build LanceDB's IVF-PQ index over the active space (search it with --ann)."""
    from subspaces.store import Store

    result = Store.open(store).index(num_partitions=partitions, num_sub_vectors=sub_vectors)
    console.print(
        f"indexed {result['rows']:,} rows: IVF-PQ, {result['num_partitions']} partitions, "
        f"{result['num_sub_vectors']} sub-vectors",
        highlight=False,
    )


@store_app.command("search")
@user_errors
def search_cmd(
    store: DirArg,
    query: Annotated[Optional[str], typer.Argument(help="One query (or give --queries).")] = None,
    queries: Annotated[Optional[Path], typer.Option(help="A file of queries, one a line.")] = None,
    json_path: Annotated[Optional[Path], typer.Option("--json", help="Write the results to this JSON file.")] = None,
    k: Annotated[int, typer.Option("-k", help="Results per query.")] = 10,
    dims: Annotated[Optional[int], typer.Option(help="Search the first DIMS coordinates (Matryoshka prefix).")] = None,
    rerank: Annotated[Rerank, typer.Option(help="With --dims: re-rank the shortlist by full vectors (funnel).")] = (
        Rerank.full
    ),
    shortlist: Annotated[Optional[int], typer.Option(help="Funnel candidates per query (default 10 x k).")] = None,
    ann: Annotated[bool, typer.Option("--ann", help="Use the store's ANN index (`store index`).")] = False,
    model: Annotated[
        Optional[str], typer.Option("--model", "-m", help="Query model (default: the store's; must match a space).")
    ] = None,
    batch_size: Annotated[int, typer.Option(help="Queries per encoder batch.")] = 64,
    threads: ThreadsOpt = None,
) -> None:
    """The nearest rows of QUERY, or of each line of --queries (results in query order)."""
    from subspaces.errors import SubspacesError
    from subspaces.io import read_lines, save_json
    from subspaces.store import Store

    if (query is None) == (queries is None):
        raise SubspacesError("give one QUERY or --queries FILE")
    opened = Store.open(store)
    texts = [query] if query is not None else read_lines(queries)  # type: ignore[arg-type]
    results = opened.search(
        texts, k, model=model, dims=dims, rerank=rerank.value, shortlist=shortlist, ann=ann, batch_size=batch_size
    )
    if json_path is not None:
        save_json(json_path, {"results": results})
        console.print(f"wrote {len(results):,} results to {json_path}", highlight=False)
        return
    for result in results[:20]:
        rows = [[i, f"{s:.4f}", t] for i, s, t in zip(result["ids"], result["scores"], result["texts"], strict=True)]
        show(table(f"{result['query']}", ["id", "score", "text"], rows))
    if len(results) > 20:
        console.print(f"(first 20 of {len(results):,} queries shown; use --json OUT for all)")


@store_app.command("migrate")
@user_errors(interrupted="the fitted aligner and every mapped batch are kept; rerun the same command to finish")
def migrate_cmd(
    store: DirArg,
    to: Annotated[Optional[str], typer.Option("--to", help="The new model (bundled name or folder).")] = None,
    pairs: Annotated[int, typer.Option(help="Store texts embedded by the new model to fit the map.")] = 20_000,
    heldout: Annotated[int, typer.Option(help="Held-out rows to measure the mapped vectors on.")] = 1_000,
    commit: Annotated[bool, typer.Option("--commit", help="Make the pending migration's model the active one.")] = (
        False
    ),
    seed: Annotated[int, typer.Option(help="Random seed (samples, the aligner).")] = 0,
    threads: ThreadsOpt = None,
) -> None:
    """Map the store into a new model's space beside the old one (both searchable), or --commit the switch."""
    from subspaces.errors import SubspacesError
    from subspaces.store import Store

    if (to is None) == (not commit):
        raise SubspacesError("give --to MODEL to migrate, or --commit to switch to a pending migration")
    opened = Store.open(store)
    if commit:
        active = opened.commit()
        label = opened.manifest.spaces[active].model.label()
        console.print(f"space {active} ({label}) is now active; the old space is retired", highlight=False)
        return
    report = opened.migrate(to, pairs=pairs, heldout=heldout, seed=seed, progress=True)
    rows = [[key, value] for key, value in report.items()]
    show(
        table(f"migration of {store} to {to} (pending: search with --model {to}; commit with --commit)", ["", ""], rows)
    )
