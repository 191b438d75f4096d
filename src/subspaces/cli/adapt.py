"""``subspaces adapt fit|apply``: a Matryoshka adapter for stored embeddings (no encoder, no texts)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from subspaces.adapt import MatryoshkaAdapter, adapt_file
from subspaces.adapt.adapter import check_vectors
from subspaces.cli.common import ThreadsOpt, echo, estimator_options, out, table
from subspaces.cli.groups import adapt_app
from subspaces.errors import DataError
from subspaces.io import check_file, check_writable, load_embeddings
from subspaces.vectors import parse_dims, resolve_dims


@adapt_app.command(
    "fit", interrupted="nothing was written (the adapter is saved only once the fit ends); rerun to fit again"
)
@estimator_options(
    MatryoshkaAdapter,
    into="adapter",
    only=(
        "dims", "hidden", "epochs", "batch_size", "lr", "topk", "pair_weight", "topk_weight", "rec_weight",
        "rank_weight", "var_weight", "corr_weight", "sup_weight", "basis", "random_state",
    ),
    flags={"random_state": "--seed"},
    parse={"dims": parse_dims},  # "16,32,full"; a typo fails before the vectors are read
    fixed={"verbose": True},
)  # fmt: skip
def fit_cmd(
    embeddings: Annotated[Path, typer.Option(help="Stored vectors, .npy or .parquet (one embedding column).")],
    output: Annotated[Path, typer.Option("--output", "-o", help="Folder to write the fitted adapter to.")],
    pairs: Annotated[Optional[Path], typer.Option(help=".npy of (query row, positive row) pairs: supervised.")] = None,
    *,
    adapter: MatryoshkaAdapter,
    threads: ThreadsOpt = None,
) -> None:
    """Fit a residual map whose prefixes keep the full vectors' neighbourhoods; the full vector stays close."""
    import numpy as np

    check_writable(output, "--output", folder=True)
    adapter.check_params()  # a bad weight fails now, not after the vectors are read or trained on
    x = load_embeddings(embeddings)
    adapter.dims = wanted = resolve_dims(adapter.dims, x.shape[1], order="increasing", what="--dims")
    x = check_vectors(x, str(embeddings))
    pair_rows = None
    if pairs is not None:
        check_file(pairs)
        try:
            pair_rows = np.load(pairs, allow_pickle=False)
        except (ValueError, EOFError, OSError) as exc:
            raise DataError(f"not a readable .npy array: {exc or 'empty file'}", path=pairs) from exc
    echo(f"fitting a Matryoshka adapter on {x.shape[0]} x {x.shape[1]} vectors, prefixes {wanted}")
    adapter.fit(x, pairs=pair_rows)
    adapter.verbose = False
    adapter.save(output)
    terms = adapter.loss_terms_
    rows = [[name, f"{terms['start'][name]:.4g}", f"{terms['end'][name]:.4g}"] for name in terms["start"]]
    out.print(table("loss terms on a fixed batch (unweighted, mean over prefixes)", ["term", "start", "end"], rows))
    echo(f"fitted in {adapter.fit_seconds_:.1f}s; wrote {output}")


@adapt_app.command("apply")
def apply_cmd(
    adapter_dir: Annotated[Path, typer.Argument(help="Folder written by `adapt fit`.")],
    input: Annotated[Path, typer.Argument(help="Vectors to adapt, .npy or .parquet (one embedding column).")],
    output: Annotated[Path, typer.Argument(help="Where to write the adapted vectors (.npy or .parquet).")],
    chunk_size: Annotated[int, typer.Option(min=1, help="Rows adapted per chunk.")] = 65_536,
    threads: ThreadsOpt = None,
) -> None:
    """Adapt a stored collection in chunks; written atomically, the input untouched."""

    check_writable(output, "OUTPUT")

    adapter = MatryoshkaAdapter.load(adapter_dir)
    n = adapt_file(adapter, input, output, chunk_size=chunk_size, show_progress=True)
    echo(f"adapted {n} vectors ({adapter.n_features_in_}-d) into {output}")
