"""The store's encoding and mapping on Ray Data: ``map_batches`` over an actor pool, each actor loading its
model (or aligner) once; the driver commits the results through the store's own atomic, idempotent appends.

Why the driver writes: the store is a folder on the driver's disk, which the workers of a cluster do not see,
and each commit of one whole block keeps the store's guarantees (a reader sees a block whole or not at all; a
rerun after a kill adds exactly the missing ids). What a cluster scales is the encoding, the costly part.

Workers need ``subspaces`` installed and the model under the same name or path (a bundled name always is); a
model given as an object is shipped to them through Ray's object store instead.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from subspaces.errors import SubspacesError

LOCAL = "local"


def start(address: str | bool | None, *, num_cpus: int | None = None) -> None:
    """Connect to the Ray cluster at ``address``, or start a local runtime of ``num_cpus`` CPUs (``True``,
    ``"local"`` or None). A runtime already started in this process is reused."""
    try:
        import ray
    except ImportError:
        raise SubspacesError("--ray needs Ray Data: pip install 'subspaces[ray]'") from None
    if ray.is_initialized():
        return
    from subspaces.config import default_threads

    options: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, "configure_logging": False}
    if isinstance(address, str) and address != LOCAL:
        ray.init(address=address, **options)
    else:
        ray.init(num_cpus=num_cpus or default_threads(), **options)
    ray.data.DataContext.get_current().enable_progress_bars = False  # the store shows its own progress


def _pool_size(actors: int | None) -> int:
    import ray

    return actors or max(1, int(ray.cluster_resources().get("CPU", 1)))


def _gpus(device: str | None) -> float | None:
    """One GPU per actor for a CUDA device; otherwise one CPU (and Ray sets the actor's threads to 1)."""
    return 1.0 if device and device.startswith("cuda") else None


class _Encode:
    """An actor: loads the model once (and checks it is the store's), then encodes blocks of (id, text, metadata)
    into the store's rows."""

    def __init__(self, model: Any, runtime: Any, expected: Any, batch_size: int) -> None:
        from subspaces.store.encoders import load

        self.encoder, fingerprint = load(model, expected.name, runtime)
        expected.check(fingerprint, what="the model on this Ray worker")
        self.dim = expected.dimension
        self.batch_size = batch_size

    def __call__(self, block: Any) -> Any:
        from subspaces.models.encoder import encode
        from subspaces.store.core import _batch

        texts = block.column("text").to_pylist()
        vectors = encode(self.encoder, texts, batch_size=self.batch_size, normalize=True)
        metadata = block.column("metadata").to_pylist()
        return _batch(self.dim, block.column("id").to_pylist(), texts, vectors, metadata)


class _Map:
    """An actor: maps blocks of store rows into a new model's space with a fitted aligner."""

    def __init__(self, aligner: Any, dim: int) -> None:
        self.aligner = aligner
        self.dim = dim

    def __call__(self, block: Any) -> Any:
        from subspaces.store import search as ops
        from subspaces.store.core import _batch, _vectors

        source = _vectors(block.column("vector"), block.schema.field("vector").type.list_size)
        mapped = ops.unit_prefix(self.aligner.transform(source))
        return _batch(self.dim, block.column("id"), block.column("text"), mapped, block.column("metadata").to_pylist())


def _blocks(table: Any, rows: int, actors: int) -> list[Any]:
    """``table`` cut into blocks of at most ``rows``, and at least one per actor: the unit Ray hands to an
    actor, and the unit the store commits."""
    rows = max(1, min(rows, -(-table.num_rows // actors)))
    return [table.slice(start, rows) for start in range(0, table.num_rows, rows)]


def encode_rows(
    ids: Sequence[str],
    texts: Sequence[str],
    metadata: Sequence[str | None],
    *,
    model: Any,
    runtime: Any,
    expected: Any,
    batch_size: int,
    block_rows: int,
    actors: int | None = None,
) -> Iterator[Any]:
    """The store rows (Arrow tables of at most ``block_rows``) of these texts, encoded by an actor pool, in the
    order blocks finish. ``model``: a name or folder each actor loads (checked against ``expected``, the store's
    fingerprint), or a loaded model to ship; ``metadata``: JSON strings or None."""
    import pyarrow as pa
    import ray

    table = pa.table(
        {
            "id": pa.array(ids, pa.string()),
            "text": pa.array(texts, pa.string()),
            "metadata": pa.array(metadata, pa.string()),
        }
    )
    size = _pool_size(actors)
    dataset = ray.data.from_arrow(_blocks(table, block_rows, size)).map_batches(
        _Encode,
        fn_constructor_kwargs={"model": model, "runtime": runtime, "expected": expected, "batch_size": batch_size},
        batch_size=None,  # one block per call: the block is the unit of commit
        batch_format="pyarrow",
        compute=ray.data.ActorPoolStrategy(size=size),
        num_cpus=None if _gpus(runtime.device) else 1.0,
        num_gpus=_gpus(runtime.device),
    )
    yield from dataset.iter_batches(batch_size=None, batch_format="pyarrow")


def map_rows(table: Any, aligner: Any, dim: int, *, block_rows: int, actors: int | None = None) -> Iterator[Any]:
    """``table``'s rows (id, text, vector, metadata) mapped by ``aligner`` into ``dim``-d unit vectors, block by
    block, by an actor pool."""
    import ray

    size = _pool_size(actors)
    dataset = ray.data.from_arrow(_blocks(table, block_rows, size)).map_batches(
        _Map,
        fn_constructor_kwargs={"aligner": aligner, "dim": dim},
        batch_size=None,
        batch_format="pyarrow",
        compute=ray.data.ActorPoolStrategy(size=size),
        num_cpus=1.0,
    )
    yield from dataset.iter_batches(batch_size=None, batch_format="pyarrow")


def encode_texts(texts: Sequence[str], **options: Any) -> np.ndarray:
    """Unit vectors of ``texts`` in input order, encoded by an actor pool (:func:`encode_rows`' options)."""
    from subspaces.store.core import _vectors

    order = [str(i) for i in range(len(texts))]
    out = np.empty((len(texts), options["expected"].dimension), dtype=np.float32)
    for block in encode_rows(order, list(texts), [None] * len(texts), **options):
        rows = np.asarray(block.column("id").to_pylist(), dtype=np.int64)
        out[rows] = _vectors(block.column("vector"), out.shape[1])
    return out
