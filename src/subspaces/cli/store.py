"""``subspaces store create|add|import|export|delete|info|index|search|migrate|reembed|shrink|repair``: a vector
store."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from subspaces.cli.common import (
    JsonOpt,
    ModelOpt,
    RunOptions,
    ThreadsOpt,
    echo,
    recipe_options,
    runtime_options,
    show,
    table,
)
from subspaces.cli.groups import Command, store_app
from subspaces.cli.search import (
    CONDITION,
    HEAD,
    LIMITS,
    Basis,
    KOpt,
    QueryArg,
    QueryFileOpt,
    QueryVectorsOpt,
    query_texts,
    show_results,
)
from subspaces.errors import SubspacesError
from subspaces.io import load_embeddings, read_lines, save_json
from subspaces.quantize import CALIBRATION_ROWS, Kind
from subspaces.store import Store
from subspaces.store.core import import_vectors
from subspaces.store.demo import run as run_demo
from subspaces.store.encoders import Runtime
from subspaces.store.inputs import read_rows
from subspaces.store.migrate import MigrationSettings
from subspaces.store.plans import SearchSettings
from subspaces.store.shrink import ADAPTER_DEFAULTS, CANDIDATES
from subspaces.store.transfer import ImportSettings
from subspaces.vectors import normalize_rows

DirArg = Annotated[Path, typer.Argument(help="The store's folder.")]
RESUME = "every batch already written is committed whole; rerun the same command to add the rest"
# The runtime options of the commands that encode (--threads last); a store's vectors are float32 on every CPU
# unless --dtype asks otherwise.
ENCODERS, RAY = ("device", "dtype", "backend", "precision"), ("ray_option", "ray_address", "actors")
UpsertOpt = Annotated[
    bool, typer.Option("--upsert", help="Replace the stored rows whose id is given with other content (else refused).")
]
QueriesOpt = Annotated[
    Optional[Path],
    typer.Option(help="Sample queries (id<TAB>text a line, or .jsonl) to judge by; or --qrels' queries."),
]
QrelsOpt = Annotated[
    Optional[Path],
    typer.Option(help="Relevance judgements (qid<TAB>docid[<TAB>grade], TREC, .jsonl or .json): adds Recall@10."),
]


def _json_outside(json_path: Path | None, store: Path) -> None:
    """Refuse a ``--json`` file inside the store's folder, before any work: it could replace a store file."""
    if json_path is not None and json_path.resolve().is_relative_to(Path(store).resolve()):
        raise SubspacesError(f"--json {json_path} is inside the store {store}: write the report elsewhere")


class RayCommand(Command):
    """A command whose ``--ray`` takes an optional value: bare (last, or before another option) it means a local
    runtime. typer's parser has no optional option values, so the bare form is completed here before parsing."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        bare = {i for i, a in enumerate(args) if a == "--ray" and (i + 1 == len(args) or args[i + 1].startswith("-"))}
        end = args.index("--") if "--" in args else len(args)
        completed = [x for i, a in enumerate(args) for x in ((a, "local") if i in bare and i < end else (a,))]
        return super().parse_args(ctx, completed)


@store_app.command("create")
@runtime_options("device", "dtype", "threads")
def create_cmd(
    store: DirArg,
    model: ModelOpt,
    query_prompt: Annotated[Optional[str], typer.Option(help='Put before every query ("": none).')] = None,
    document_prompt: Annotated[Optional[str], typer.Option(help='Put before every stored text ("": none).')] = None,
    query_prompt_name: Annotated[Optional[str], typer.Option(help="Or: the query prompt, by name.")] = None,
    document_prompt_name: Annotated[Optional[str], typer.Option(help="Or: the document prompt, by name.")] = None,
    run: RunOptions = RunOptions(),
) -> None:
    """Make an empty store for MODEL in a new folder (the model's fingerprint and prompts are recorded).

    Prompts default to the model folder's query and document (or passage) prompts; adds encode texts after the
    document prompt, searches encode queries after the query prompt."""
    created = Store.create(
        store,
        model,
        device=run.device,
        dtype=run.dtype,
        query_prompt=query_prompt,
        document_prompt=document_prompt,
        query_prompt_name=query_prompt_name,
        document_prompt_name=document_prompt_name,
    )
    space = created.manifest.spaces[created.manifest.active]
    fp = space.model
    echo(f"created store {store} for {fp.label()} ({fp.dimension}-d, {fp.pooler}){_prompts_note(space.prompts)}")


def _prompts_note(prompts: dict[str, str]) -> str:
    shown = [f"{role} prompt {prompts[role]!r}" for role in ("query", "document") if role in prompts]
    return f"; {', '.join(shown)}" if shown else ""


@store_app.command("add", cls=RayCommand, interrupted=RESUME)
@runtime_options(*ENCODERS, *RAY, "threads")
def add_cmd(
    store: DirArg,
    input: Annotated[Path, typer.Option("--input", "-i", help="Text (one a line), .csv/.tsv or .jsonl; maybe .gz.")],
    id_field: Annotated[
        Optional[str], typer.Option(help="The id field (default: id, else a hash of the text).")
    ] = None,
    text_field: Annotated[str, typer.Option(help="The text field (a one-column CSV: that column).")] = "text",
    upsert: UpsertOpt = False,
    batch_size: Annotated[int, typer.Option(help="Texts per encoder batch.")] = 64,
    write_batch: Annotated[int, typer.Option(help="Rows per committed write (and per Ray block).")] = 1024,
    run: RunOptions = RunOptions(),
) -> None:
    """Encode and append the rows of INPUT the store lacks (rerun after an interruption to finish).

    Ids are INPUT's own, else a hash of the text; an id stored with another text is refused unless --upsert."""
    opened = run.open(store)  # first: a missing store fails before the input is read
    rows = read_rows(input, id_field=id_field, text_field=text_field)
    result = opened.add(
        rows.texts,
        None if rows.derived else rows.ids,
        rows.metadata,
        upsert=upsert,
        batch_size=batch_size,
        write_batch=write_batch,
        show_progress=True,
        ray=run.ray(),
        actors=run.actors,
    )
    replaced = f"replaced {result['replaced']:,}, " if upsert else ""
    notes = [f"{result['skipped']:,} already in the store"]
    if rows.repeated:
        notes.append(f"{rows.repeated:,} repeating an earlier text of the input")
    if rows.invisible:
        notes.append(f"{rows.invisible:,} with no visible text")
    echo(f"added {result['added']:,} rows, {replaced}skipped {', '.join(notes)}; {opened.count():,} rows in {store}")
    _warn_duplicates(store, {opened.manifest.active: opened.duplicates()})


def _warn_duplicates(store: Path, doubled: dict[str, int]) -> None:
    """A line per space that holds an id twice (two writers at once, before the write lock existed)."""
    for name, count in doubled.items():
        if count:
            echo(f"warning: {count:,} rows of space {name} repeat an id; `subspaces store repair {store}` removes them")


@store_app.command("info")
def info_cmd(
    store: DirArg,
    json_out: Annotated[bool, typer.Option("--json", help="Print the full record as JSON.")] = False,
    threads: ThreadsOpt = None,
) -> None:
    """The store's spaces: model, rows, table version, ANN index, bytes per vector of each copy."""
    import json

    info = Store.open(store).info()
    if json_out:
        print(json.dumps(info, indent=2))
        return
    rows = [
        [name, s["state"], s["model"]["name"], s["model"]["dimension"], s["rows"], s["version"], s["index"] or "-"]
        + [_bytes_per_vector(s)]
        for name, s in info["spaces"].items()
    ]
    header = ["space", "state", "model", "dim", "rows", "version", "index", "bytes/vector"]
    show(table(f"store {store}", header, rows))
    for name, space in info["spaces"].items():
        shrunk = space.get("shrink")
        if shrunk:
            picks = ", ".join(f"{d} dims: {basis}" for d, basis in shrunk["choice"].items())
            note = " (stale: rows changed since; rerun store shrink to measure again)" if shrunk["stale"] else ""
            echo(f"space {name} shrunk: {picks}{note}")
        if space.get("prompts"):
            echo(f"space {name}{_prompts_note(space['prompts'])[1:]}")
    _warn_duplicates(store, {name: space["duplicates"] for name, space in info["spaces"].items()})


@store_app.command("repair", interrupted="each delete is committed whole; rerun the same command to remove the rest")
def repair_cmd(store: DirArg, threads: ThreadsOpt = None) -> None:
    """Remove the rows that repeat an id (keeping the first), in every space. Needs no model."""
    report = Store.open(store).repair()
    for name, counts in report.items():
        differing = f" ({counts['differing']:,} of them with another text)" if counts["differing"] else ""
        echo(f"space {name}: removed {counts['removed']:,} rows repeating {counts['ids']:,} ids{differing}")


def _bytes_per_vector(space: dict) -> str:
    """The float copy's bytes per vector and, if there is one, the quantized copy's (marked when stale)."""
    text = f"{4 * space['model']['dimension']} float32"
    copy = space.get("quantized")
    if copy:
        text += f", {copy['bytes_per_vector']} {copy['kind']}" + (" (stale)" if copy["stale"] else "")
    return text


@store_app.command("index")
def index_cmd(
    store: DirArg,
    partitions: Annotated[Optional[int], typer.Option(help="IVF partitions (default about sqrt(rows)).")] = None,
    sub_vectors: Annotated[Optional[int], typer.Option(help="PQ sub-vectors; must divide the dimension.")] = None,
    quantize: Annotated[Optional[Kind], typer.Option(help="Instead: write the int8 or binary codes copy.")] = None,
    calibration_rows: Annotated[
        int, typer.Option(min=2, help="int8: rows the ranges are read from.")
    ] = CALIBRATION_ROWS,
    threads: ThreadsOpt = None,
) -> None:
    """Build LanceDB's IVF-PQ index over the active space (search it with --ann), or its --quantize copy."""
    if quantize is not None:
        if partitions is not None or sub_vectors is not None:
            raise SubspacesError("--partitions and --sub-vectors are IVF-PQ options; --quantize builds no IVF-PQ index")
        copy = Store.open(store).quantize(quantize, calibration_rows=calibration_rows)
        sampled = f", ranges from {copy['calibration_rows']:,} sampled rows" if copy["calibration_rows"] else ""
        echo(
            f"wrote the {copy['kind']} copy of space {copy['space']}: {copy['rows']:,} rows, "
            f"{copy['bytes_per_vector']} bytes a vector{sampled} (table version {copy['version']})"
        )
        return
    opened = Store.open(store)
    most = max(1, opened.count() // 256)  # LanceDB trains one partition per 256 rows at most
    if partitions is not None and partitions > most:
        raise SubspacesError(
            f"--partitions {partitions} is more than the {most} the {opened.count():,} rows can train "
            "(LanceDB needs 256 rows a partition); give fewer, or leave it out (about sqrt(rows))"
        )
    result = opened.index(num_partitions=partitions, num_sub_vectors=sub_vectors)
    echo(
        f"indexed {result['rows']:,} rows: IVF-PQ, {result['num_partitions']} partitions, "
        f"{result['num_sub_vectors']} sub-vectors"
    )


@store_app.command("search")
@runtime_options(*ENCODERS, "threads")
@recipe_options(SearchSettings, limits=LIMITS)
def search_cmd(
    store: DirArg,
    query: QueryArg = None,
    queries: QueryFileOpt = None,
    query_vectors: QueryVectorsOpt = None,
    where: Annotated[
        Optional[str], typer.Option(help="SQL filter applied before the top k, e.g. \"lang = 'en'\".")
    ] = None,
    json_path: JsonOpt = None,
    *,
    config: SearchSettings,
    model: Annotated[Optional[str], typer.Option("--model", "-m", help="Query model (default: the store's).")] = None,
    condition: Annotated[Optional[str], CONDITION] = None,
    head: Annotated[Optional[Path], HEAD] = None,
    run: RunOptions = RunOptions(),
) -> None:
    """The nearest rows of QUERY, or of each line of --queries (results in query order)."""
    import numpy as np

    if sum(x is not None for x in (query, queries, query_vectors)) != 1:
        raise SubspacesError("give one QUERY, --queries FILE or --query-vectors FILE.npy")
    if config.refine_factor is not None and not config.ann:
        raise SubspacesError("--refine-factor re-ranks the ANN index's candidates: give --ann too, or drop it")
    if config.shortlist is not None and (config.dims is None or config.rerank == "none"):
        raise SubspacesError("--shortlist sizes the funnel's shortlist: give --dims (with --rerank full), or drop it")
    if config.rescore is not None and not config.quantized:
        raise SubspacesError("--rescore re-ranks the shortlist of --quantized: give --quantized too, or drop it")
    _json_outside(json_path, store)
    opened = run.open(store)
    options = config.plan_options() | {"where": where, "condition": condition, "head": head}
    if query_vectors is not None:
        if model is not None or config.query_prompt is not None:
            raise SubspacesError(
                "--model and --query-prompt encode text queries; --query-vectors are searched in the active space"
            )
        vectors = load_embeddings(query_vectors)
        if not np.linalg.norm(vectors, axis=1).all():
            raise SubspacesError(f"{query_vectors}: a zero query vector has no direction to search by")
        results = opened.search_vectors(normalize_rows(vectors, dtype=np.float32), config.k, **options)
        for i, result in enumerate(results):
            result.query = f"vector {i}"
    else:
        texts = query_texts(query, queries)
        results = opened.search(
            texts, config.k, model=model, batch_size=config.batch_size, query_prompt=config.query_prompt, **options
        )
    show_results(results, json_path, condition=condition, columns=True)


@store_app.command(
    "migrate",
    cls=RayCommand,
    interrupted="the fitted map and every mapped batch are kept; rerun the same command to finish",
)
@runtime_options(*ENCODERS, *RAY, "threads")
@recipe_options(MigrationSettings, parse={"maps": lambda text: [m.strip() for m in text.split(",") if m.strip()]})
def migrate_cmd(
    store: DirArg,
    to: Annotated[Optional[str], typer.Option("--to", help="The new model (bundled name or folder).")] = None,
    query_side: Annotated[
        bool, typer.Option("--query-side", help="Keep the stored vectors; map the new model's queries into them.")
    ] = False,
    unpaired: Annotated[
        bool, typer.Option("--unpaired", help="With --query-side: fit mini-vec2vec on --texts, re-embedding nothing.")
    ] = False,
    texts: Annotated[
        Optional[Path],
        typer.Option(help="With --unpaired: domain texts drawn as the store's were (4 a dimension at least)."),
    ] = None,
    *,
    config: MigrationSettings,
    qrels: QrelsOpt = None,
    queries: QueriesOpt = None,
    commit: Annotated[
        bool, typer.Option("--commit", help="Make the pending migration's model the active one.")
    ] = False,
    rollback: Annotated[bool, typer.Option("--rollback", help="Undo the last --commit.")] = False,
    json_path: JsonOpt = None,
    run: RunOptions = RunOptions(),
) -> None:
    """Map the store into a new model's space beside the old one, or map a new model's queries into it
    (--query-side); --commit the switch or --rollback it."""
    _json_outside(json_path, store)
    if sum([to is not None, commit, rollback]) != 1:
        raise SubspacesError("give --to MODEL to migrate, --commit to switch to a pending migration, or --rollback")
    opened = run.open(store)
    if commit or rollback:
        active = opened.commit() if commit else opened.rollback()
        label = opened.manifest.spaces[active].model.label()
        done = "the old space is retired" if commit else "the rolled-back space is pending again (--commit redoes it)"
        echo(f"space {active} ({label}) is now active; {done}")
        return
    report = opened.migrate(
        to,
        **asdict(config),
        show_progress=True,
        ray=run.ray(),
        actors=run.actors,
        query_side=query_side,
        qrels=qrels,
        queries=queries,
        unpaired=unpaired,
        texts=texts,
    )
    if json_path is not None:
        save_json(json_path, report)
    _show_migration(store, to, report)


def _show_migration(store: Path, to: Any, report: dict[str, Any]) -> None:
    """The report a user decides by: top-10 overlap with a true re-embed per map, cost, and qrels figures."""
    after = (
        f"search with --model {to}: its queries are mapped into the stored vectors"
        if report.get("mode") == "query-side"
        else f"pending: search with --model {to}; commit with --commit"
    )
    candidates = report.get("candidates") or {}
    if candidates:
        rows = [
            [
                kind + (" (chosen)" if kind == report.get("map") else ""),
                value.get("selection@10"),
                value.get("overlap@10"),
                value.get("fit_seconds"),
            ]
            for kind, value in candidates.items()
        ]
        title = (
            f"maps {report.get('direction')}: top-10 overlap with a true re-embed "
            f"({report.get('heldout')} held-out rows)"
        )
        show(table(title, ["map", "selection pairs", "held-out rows", "fit s"], rows))
    skip = {"candidates", "qrels", "trust"}
    show(
        table(f"migration of {store} to {to} ({after})", ["", ""], [[k, v] for k, v in report.items() if k not in skip])
    )
    trust = report.get("trust")
    if trust:
        rows = [[k, v] for k, v in trust.items() if k != "problems"]
        show(table("the unpaired map's trust checks (label-free: no pairs, no labels)", ["", ""], rows))
    figures = report.get("qrels")
    if figures:  # a store without texts has no re-embedded sample to compare with (its note says so)
        wheres = [where for where in ("sample", "store") if where in figures]
        rows = [
            [f"{system} ({where})", *values.values()] for where in wheres for system, values in figures[where].items()
        ]
        title = (
            f"{figures['queries']} judged queries; {figures['note']}"
            if "sample" not in figures
            else f"{figures['queries']} judged queries; sample = {figures['sample_rows']:,} rows (held-out + judged), "
            f"store = every row; migrated Recall@10 = {figures['recall@10_of_reembed']} x a re-embed's"
        )
        show(table(title, ["search", "Recall@10", "nDCG@10"], rows))


@store_app.command("shrink", interrupted="nothing was recorded; rerun the same command")
def shrink_cmd(
    store: DirArg,
    dims: Annotated[str, typer.Option(help="Prefix sizes to shrink to, comma-separated, e.g. 32,64,128.")],
    heldout: Annotated[int, typer.Option(help="Stored rows held out of the fits, as queries (at most a fifth).")] = 500,
    adapter_basis: Annotated[Basis, typer.Option(help="What the adapter starts from.")] = ADAPTER_DEFAULTS["basis"],
    epochs: Annotated[int, typer.Option(help="The adapter's training epochs.")] = ADAPTER_DEFAULTS["epochs"],
    queries: QueriesOpt = None,
    qrels: Annotated[
        Optional[Path],
        typer.Option(
            help="Relevance judgements (qid<TAB>docid[<TAB>grade], TREC, .jsonl or .json): adds Recall@10 and nDCG@10."
        ),
    ] = None,
    seed: Annotated[int, typer.Option(help="Random seed (held-out sample, the adapter).")] = 0,
    json_path: JsonOpt = None,
    threads: ThreadsOpt = None,
) -> None:
    """Fit a Matryoshka adapter and the principal axes; per DIMS, --dims searches then read whichever basis keeps
    the full-size top 10 best on held-out rows or --queries."""
    _json_outside(json_path, store)
    report = Store.open(store).shrink(
        dims,
        heldout=heldout,
        seed=seed,
        queries=queries,
        qrels=qrels,
        adapter_params={"basis": adapter_basis, "epochs": epochs},
    )
    if json_path is not None:
        save_json(json_path, report)
    show_shrink(store, report)


def show_shrink(store: Path, report: dict[str, Any]) -> None:
    """The shrink report: per size, overlap@10 of each candidate and the one used."""
    rows = [
        [d, v["model_overlap@10"], v["pca_overlap@10"], v["adapter_overlap@10"], v["used"]]
        for d, v in report["dims"].items()
    ]
    title = (
        f"shrink of {store} (space {report['space']}, {report['model']}, {report['rows']:,} rows): top-10 of "
        f"truncated vs full-size search, {report['metric'].split(', ', 1)[1]}"
    )
    show(table(title, ["dims", "raw truncation", "principal axes", "adapter", "used"], rows))
    figures = report.get("qrels")
    if figures:
        full = figures["full"]
        judged = [
            [d] + [f"{figures[d][c]['recall@10']:.3f} / {figures[d][c]['ndcg@10']:.3f}" for c in CANDIDATES]
            for d in report["dims"]
        ]
        heading = (
            f"Recall@10 / nDCG@10 of {figures['queries']} judged queries over the whole store "
            f"(full size: {full['recall@10']:.3f} / {full['ndcg@10']:.3f})"
        )
        show(table(heading, ["dims", "raw truncation", "principal axes", "adapter"], judged))
    echo(
        f"adapter ({report['adapter_basis']} start) fitted in {report['adapter_fit_seconds']} s; "
        f"shrink took {report['seconds']} s; search with --dims D reads the basis used for D"
    )


@store_app.command(
    "reembed", interrupted="every batch re-embedded is committed and recorded; rerun the same command to continue"
)
@runtime_options(*ENCODERS, "threads")
def reembed_cmd(
    store: DirArg,
    budget: Annotated[Optional[int], typer.Option(help="Rows to re-embed in this run (oldest-mapped first).")] = None,
    seconds: Annotated[Optional[float], typer.Option(help="Or: stop starting batches after this long.")] = None,
    space: Annotated[
        Optional[str], typer.Option(help="The mapped space (default: the pending one, else active).")
    ] = None,
    run: RunOptions = RunOptions(),
) -> None:
    """Replace a migration's mapped rows by true vectors of its model, a budget at a time (resumable)."""
    opened = run.open(store)
    report = opened.reembed(budget=budget, seconds=seconds, space=space, show_progress=True)
    echo(
        f"re-embedded {report['reembedded']:,} rows of space {report['space']} in {report['seconds']} s; "
        f"{report['native']:,} of {report['rows']:,} rows are native ({report['native_fraction']}), "
        f"{report['mapped']:,} still mapped"
        + (f" ({report['without_text']:,} without a text to re-embed)" if report["without_text"] else "")
    )


@store_app.command("demo", interrupted=RESUME)
def demo_cmd(
    store: Annotated[Path, typer.Argument(help="The demo store's folder (reused when rerun).")] = Path(
        "outputs/store-demo"
    ),
    model: ModelOpt = "minilm-l6",
    n: Annotated[int, typer.Option(help="WordNet sentences in the store.")] = 3000,
    k: KOpt = 5,
    dims: Annotated[int, typer.Option(help="Funnel prefix.")] = 128,
    shortlist: Annotated[int, typer.Option(help="Funnel shortlist, a multiple of k.")] = 10,
    basis: Annotated[Basis, typer.Option(help="Whose first DIMS axes the funnel reads: the model's or pca.")] = "pca",
    to: Annotated[str, typer.Option("--to", help="Migrate to this model ('' skips it).")] = "paraphrase-l3",
    pairs: Annotated[int, typer.Option(help="Re-embedded pairs each migration is fitted on.")] = 300,
    heldout: Annotated[int, typer.Option(help="Held-out rows each migration and the shrink are measured on.")] = 300,
    shrink_dims: Annotated[int, typer.Option(help="store shrink to this many dimensions (0 skips it).")] = 64,
    threads: ThreadsOpt = None,
) -> None:
    """A store of N WordNet sentences on MODEL searched exactly and by funnel, migrated to --to and shrunk."""
    demo = run_demo(
        store,
        model=model,
        n=n,
        k=k,
        dims=dims,
        shortlist=shortlist,
        basis=basis,
        to=to or None,
        pairs=pairs,
        heldout=heldout,
        shrink_dims=shrink_dims or None,
    )
    state = "rebuilt (it held another model)" if demo.rebuilt else ("reused" if not demo.added else "built")
    echo(
        f"store {state}: {demo.rows:,} WordNet sentences on {demo.model}, {demo.added:,} added "
        f"in {demo.add_seconds:.1f}s"
    )
    for result in demo.results:
        exact, funnel = result["exact"], result["funnel"]
        rows = [
            [f"{e_score:.3f}", e_text, "=" if e_id == f_id else f_text]
            for e_id, e_score, e_text, f_id, f_text in zip(
                exact["ids"], exact["scores"], exact["texts"], funnel["ids"], funnel["texts"], strict=True
            )
        ]
        title = f"{result['query']}  (funnel top-{k} overlap {result['overlap']:.0%})"
        show(table(title, ["score", "exact", f"funnel {demo.dims}d x{demo.shortlist}"], rows))
    axes = "the store's principal axes" if demo.basis == "pca" else "the model's coordinates"
    slow = " (a store this small is scanned as fast whole; the funnel pays from ~100k rows)"
    echo(
        f"search: exact {demo.exact_ms:.2f} ms/query; funnel ({demo.dims} of {axes}, a shortlist of "
        f"{demo.shortlist} x k re-ranked at full size) {demo.funnel_ms:.2f} ms/query"
        + (slow if demo.funnel_ms >= demo.exact_ms else "")
    )  # the search times, under the tables
    _show_demo_steps(demo)
    searches = ["-k 10", "--dims 128 --basis pca --shortlist 10"]
    if demo.query_side is not None:
        searches.append(f"--model {to}")
    if demo.shrink is not None:
        searches.append(f"--dims {shrink_dims}")
    echo(f"the store lies in {demo.path.resolve()}")  # unwrapped, as what follows: the commands copy whole
    for i, options in enumerate(searches):
        echo(f'{"try:  " if i == 0 else "      "} subspaces store search {demo.path} "your query" {options}')
    echo(f"       subspaces store info {demo.path}")
    echo(f"the STS table: subspaces model eval --model {demo.model} --json outputs/sts-{demo.model}.json")


def _show_demo_steps(demo: Any) -> None:
    """The demo's migration and shrink steps: each report's figures and the query's hits beside the exact ones."""
    exact = demo.results[0]["exact"]

    def hits(step: dict[str, Any], label: str) -> None:
        found = step["hits"]
        same = len(set(found["ids"]) & set(exact["ids"]))
        rows = [
            [f"{score:.3f}", text, "yes" if row in exact["ids"] else ""]
            for row, score, text in zip(found["ids"], found["scores"], found["texts"], strict=True)
        ]
        title = f"{step['query']}  ({label}; {same} of its top {len(rows)} in the {demo.model} exact top {len(rows)})"
        show(table(title, ["score", "text", f"in {demo.model}'s"], rows))

    if demo.query_side is not None:
        step, report = demo.query_side, demo.query_side["report"]
        echo(
            f"query-side migration to {step['to']}: {report['pairs']} pairs, map {report['map']}, overlap@10 "
            f"with a true re-embed {report.get('overlap@10')} on {report['heldout']} held-out rows; "
            f"{report.get('map_us_per_query')} us a query to map; {step['seconds']:.1f}s"
        )
        hits(demo.query_side, "the new model's query, mapped into the stored vectors")
    if demo.rewrite is not None:
        step, report = demo.rewrite, demo.rewrite["report"]
        echo(
            f"rewrite to {step['to']} (every row mapped into a pending space; --commit switches): "
            f"{report['pairs']} pairs, map {report['map']}, overlap@10 with a true re-embed "
            f"{report.get('overlap@10')} on {report['heldout']} held-out rows; migrate "
            f"{report.get('migrate_seconds')}s against an estimated "
            f"{report.get('reembed_seconds_estimate')}s to re-embed every row; {step['seconds']:.1f}s"
        )
        hits(demo.rewrite, "the new model's query against the rewritten rows")
    if demo.shrink is not None:
        step, report = demo.shrink, demo.shrink["report"]
        for size, figures in report["dims"].items():
            echo(
                f"shrink to {size} dims: overlap@10 of truncated vs full-size search on {report['heldout']} held-out "
                f"rows: raw truncation {figures['model_overlap@10']}, principal axes {figures['pca_overlap@10']}, "
                f"adapter {figures['adapter_overlap@10']}; used: {figures['used']}; {step['seconds']:.1f}s"
            )
            hits(demo.shrink, f"funnel on {size} dims of the {figures['used']} basis, re-ranked at full size")


@store_app.command(
    "import",
    cls=RayCommand,
    interrupted="every batch already written is committed whole; rerun the same command to import the rest",
)
@runtime_options("device", "dtype", *RAY, "threads")
@recipe_options(ImportSettings, only=("vector_field", "id_field", "text_field", "batch_rows"))
def import_cmd(
    store: DirArg,
    vectors: Annotated[
        Path, typer.Option(help="The vectors: .npy, .parquet, .arrow, .jsonl or a LanceDB folder (with --table).")
    ],
    table_name: Annotated[Optional[str], typer.Option("--table", help="The LanceDB table to import.")] = None,
    ids: Annotated[Optional[Path], typer.Option(help="Ids, one a line (.txt, or .jsonl of strings).")] = None,
    texts: Annotated[
        Optional[Path], typer.Option(help="Texts, one a line (.txt, or .jsonl of strings or null).")
    ] = None,
    metadata: Annotated[Optional[Path], typer.Option(help="Metadata, one JSON object (or null) a line.")] = None,
    model: Annotated[
        Optional[str], typer.Option("--model", "-m", help="The vectors' model (checked on a sample of the texts).")
    ] = None,
    foreign: Annotated[Optional[str], typer.Option(help="Or: a label for a model this machine cannot run.")] = None,
    dim: Annotated[Optional[int], typer.Option("--dim", help="With --foreign: the vectors' dimension.")] = None,
    *,
    config: ImportSettings,
    upsert: UpsertOpt = False,
    run: RunOptions = RunOptions(),
) -> None:
    """Import vectors another tool wrote into the store (made if new), without encoding them.

    The whole input is checked first; nothing is written unless all of it passes. Rerun after an interruption.
    --config also sets check_rows and min_cosine (ImportSettings)."""
    if (model is None) == (foreign is None):
        raise SubspacesError("declare the vectors' model: --model NAME_OR_FOLDER, or --foreign LABEL (one of them)")
    if dim is not None and foreign is None:
        raise SubspacesError("--dim declares a foreign model's dimension: give it with --foreign")
    opened, report = import_vectors(
        store,
        vectors,
        model=model,
        foreign=foreign,
        dimension=dim,
        runtime=Runtime(run.device, dtype=run.dtype),
        table=table_name,
        ids=ids,
        texts=texts,
        metadata=metadata,
        upsert=upsert,
        show_progress=True,
        ray=run.ray(),
        actors=run.actors,
        **asdict(config),
    )
    replaced = f"replaced {report['replaced']:,}, " if "replaced" in report else ""
    cosine = report.get("mean_cosine")  # present where the declared model was checked
    checked = f"; the declared model re-encodes their texts at mean cosine {cosine}" if cosine is not None else ""
    echo(
        f"imported {report['added']:,} of {report['rows']:,} {report['dimension']}-d vectors, {replaced}skipped "
        f"{report['skipped']:,} already in the store{checked}; {opened.count():,} rows in {store}"
    )


@store_app.command("export")
def export_cmd(
    store: DirArg,
    output: Annotated[
        Path, typer.Option("--output", "-o", help="F.parquet, or F.npy (with F.ids/texts/metadata.jsonl).")
    ],
    space: Annotated[Optional[str], typer.Option(help="The space to export (default: the active one).")] = None,
    threads: ThreadsOpt = None,
) -> None:
    """Write every row of a space (ids, texts, metadata, vectors) to parquet or npy; `store import` reads it back."""
    report = Store.open(store).export(output, space=space)
    echo(
        f"exported {report['rows']:,} {report['dimension']}-d rows of space {report['space']} to "
        + ", ".join(report["files"])
    )


@store_app.command("delete", interrupted="each delete is committed whole; rerun the same command to delete the rest")
def delete_cmd(
    store: DirArg,
    ids: Annotated[Path, typer.Option(help="The ids to delete, one a line.")],
    threads: ThreadsOpt = None,
) -> None:
    """Delete rows by id from every space of the store (their quantized copies become stale). Needs no model."""
    report = Store.open(store).delete(read_lines(ids))
    missing = f" ({report['missing']:,} ids were not in the store)" if report["missing"] else ""
    echo(f"deleted {report['deleted']:,} rows{missing}")
