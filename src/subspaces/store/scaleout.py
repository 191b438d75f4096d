"""The store's encoding, mapping and importing on Ray: ``map_batches`` over an actor pool, each actor loading its
model (or aligner) once, the driver committing whole blocks through the store's own appends (the store is a
folder on its disk). Workers need ``subspaces`` and the model under the same name or path; a model object is
shipped through Ray's object store. See docs/store.md ("Scale-out on Ray Data").
"""

from __future__ import annotations

import os
import warnings
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from subspaces.config import default_threads
from subspaces.errors import SubspacesError
from subspaces.store.encoders import encode, load
from subspaces.store.fingerprint import ModelFingerprint
from subspaces.store.table import block_of, vectors_of
from subspaces.vectors import normalize_rows

LOCAL = "local"
CONNECT_TIMEOUT_S = 5.0  # how long a cluster's address may take to accept a connection before it is refused
ADDRESS_HELP = "--ray alone (a local runtime), --ray auto, --ray HOST:PORT or --ray ray://HOST:PORT"
_started_local = False  # whether this process started the runtime it uses (then its actors are ours to set up)


def choose(ray: str | None, address: str | None = None, *, note: Callable[[str], None] | None = None) -> str | bool:
    """What ``--ray [ADDRESS]`` (or the deprecated ``--ray-address``) asks for, checked before any work."""
    if address is not None:
        if note is not None:
            note("--ray-address is deprecated and goes in the next release: write --ray ADDRESS")
        if ray not in (None, LOCAL, address):
            raise SubspacesError(f"--ray {ray} and --ray-address {address} name two clusters; give one: --ray ADDRESS")
        ray = address
    if ray is None:
        return False
    if ray != LOCAL:
        check_address(ray)
    return ray


def check_address(address: str, timeout: float = CONNECT_TIMEOUT_S) -> None:
    """Refuse, within ``timeout`` seconds, a cluster address that is malformed or accepts no connection."""
    import socket

    target = _resolve_auto() if address == "auto" else address
    host, port = _host_port(target, address)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except OSError as exc:
        reason = "no answer" if isinstance(exc, TimeoutError) else (exc.strerror or type(exc).__name__)
        shown = address if target == address else f"{address} ({target})"
        raise SubspacesError(
            f"cannot reach the Ray cluster at {shown}: {reason} within {timeout:g} s; nothing was done"
        ) from None


def _host_port(target: str, given: str) -> tuple[str, int]:
    host, sep, port = target.removeprefix("ray://").rpartition(":")
    host = host.strip("[]")  # an IPv6 literal: [::1]:6379
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise SubspacesError(f"--ray {given!r} is not a Ray address: use {ADDRESS_HELP}")
    return host, int(port)


def _resolve_auto() -> str:
    """The address ``auto`` stands for ($RAY_ADDRESS, or the last ``ray start`` here), as Ray resolves it."""
    try:
        from ray._private.services import canonicalize_bootstrap_address
    except ImportError:
        raise SubspacesError("--ray needs Ray Data: pip install 'subspaces[ray]'") from None
    try:
        found = canonicalize_bootstrap_address("auto")
    except (ConnectionError, ValueError) as exc:
        raise SubspacesError(
            f"--ray auto: no running Ray cluster found on this machine ({' '.join(str(exc).split())[:200]}); "
            "start one with `ray start --head`, or give its HOST:PORT"
        ) from None
    if not found:
        raise SubspacesError("--ray auto: no running Ray cluster found on this machine; give its HOST:PORT")
    return str(found)


def start(address: str | bool | None, *, num_cpus: int | None = None) -> None:
    """Connect to the Ray cluster at ``address`` (checked first: :func:`check_address`), or start a local runtime of
    ``num_cpus`` CPUs (``True``, ``"local"`` or None), this process's: without the dashboard, and stopped with the
    process however it ends (:func:`_reap_with`). A runtime already started in this process is reused."""
    global _started_local
    try:
        import ray
    except ImportError:
        raise SubspacesError("--ray needs Ray Data: pip install 'subspaces[ray]'") from None
    if ray.is_initialized():
        return
    options: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, "configure_logging": False}
    if isinstance(address, str) and address != LOCAL:
        check_address(address)
        try:
            ray.init(address=address, **options)
        except (ConnectionError, TimeoutError, RuntimeError) as exc:
            raise SubspacesError(f"could not join the Ray cluster at {address}: {' '.join(str(exc).split())}") from None
    else:
        import psutil  # a dependency of Ray's

        before = {child.pid for child in psutil.Process().children()}
        with warnings.catch_warnings():
            # lancedb's at-fork warning, in each child Ray forks: they exec Ray's programs and never touch lancedb
            warnings.filterwarnings("ignore", message="lancedb fork support is experimental", category=RuntimeWarning)
            # "local" also when $RAY_ADDRESS is set: --ray alone means a runtime of our own
            ray.init(address=LOCAL, num_cpus=num_cpus or default_threads(), **options)
        _started_local = True
        _reap_with(os.getpid(), [c.pid for c in psutil.Process().children() if c.pid not in before])
    ray.data.DataContext.get_current().enable_progress_bars = False  # the store shows its own progress


# Run as `python -c _REAPER DRIVER ROOT...`: while DRIVER and a ROOT live, remember every process of the ROOT trees;
# then SIGKILL what is left of them (some of Ray's agents outlive a killed driver, ignoring SIGTERM).
_REAPER = """
import signal, sys, time
import psutil
for name in ("SIGINT", "SIGTERM", "SIGHUP"):
    signal.signal(getattr(signal, name), signal.SIG_IGN)  # a Ctrl-C or kill of the group: stay to clean up
def alive(process):
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
def process(pid):
    try:
        return psutil.Process(int(pid))
    except psutil.Error:
        return None
driver = process(sys.argv[1])
roots = [r for r in map(process, sys.argv[2:]) if r is not None]
known = {r.pid: r for r in roots}
while driver is not None and alive(driver) and any(alive(r) for r in roots):
    for root in roots:
        try:
            for p in [root, *root.children(recursive=True)]:
                known.setdefault(p.pid, p)
        except psutil.Error:
            pass
    time.sleep(1)
time.sleep(1)  # a runtime shut down cleanly stops itself: this only reaps what outlived it
left = [p for p in known.values() if alive(p)]  # is_running compares start times: never a reused pid
for p in left:
    try:
        p.kill()
    except psutil.Error:
        pass
psutil.wait_procs(left, timeout=10)
"""


def _reap_with(driver: int, roots: list[int]) -> Any:
    """Start the watcher that kills the processes of ``roots`` (and their descendants) once ``driver`` is gone;
    returns its ``Popen``. It ignores the signals a group gets (Ctrl-C, a terminal closing), to outlive them."""
    import subprocess
    import sys

    if not roots:
        return None
    return subprocess.Popen(
        [sys.executable, "-c", _REAPER, str(driver), *map(str, roots)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _pool_size(actors: int | None) -> int:
    import ray

    return actors or max(1, int(ray.cluster_resources().get("CPU", 1)))


class _Encode:
    """An actor: loads the model once (checked), then encodes blocks of (id, text, metadata) into rows."""

    def __init__(self, model: Any, runtime: Any, expected: Any, batch_size: int, prompt: str | None = None) -> None:
        self.encoder, fingerprint = load(model, expected.name, runtime)
        self.prompt = prompt  # the space's document prompt (None: the model's default)
        expected.check(fingerprint, what="the model on this Ray worker")
        self.dim = expected.dimension
        self.batch_size = batch_size

    def __call__(self, block: Any) -> Any:
        texts = block.column("text").to_pylist()
        vectors = encode(self.encoder, texts, self.prompt, batch_size=self.batch_size, show_progress=None)
        metadata = block.column("metadata").to_pylist()
        return block_of(self.dim, block.column("id").to_pylist(), texts, vectors, metadata)


class _Map:
    """An actor: maps blocks of store rows into a new model's space with a fitted aligner."""

    def __init__(self, aligner: Any, dim: int) -> None:
        self.aligner = aligner
        self.dim = dim

    def __call__(self, block: Any) -> Any:
        source = vectors_of(block.column("vector"), block.schema.field("vector").type.list_size)
        mapped = normalize_rows(self.aligner.transform(source), dtype=np.float32)
        return block_of(
            self.dim, block.column("id"), block.column("text"), mapped, block.column("metadata").to_pylist()
        )


def _blocks(table: Any, rows: int, actors: int) -> list[Any]:
    """``table`` in blocks of at most ``rows``, at least one per actor (the unit of commit)."""
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
    prompt: str | None = None,
) -> Iterator[Any]:
    """The store rows of these texts, ``block_rows`` a block, encoded by an actor pool as blocks finish."""
    import pyarrow as pa

    columns = {"id": ids, "text": texts, "metadata": metadata}
    table = pa.table({name: pa.array(values, pa.string()) for name, values in columns.items()})
    options = {"model": model, "runtime": runtime, "expected": expected, "batch_size": batch_size, "prompt": prompt}
    gpus = 1.0 if runtime.device and runtime.device.startswith("cuda") else None  # else one CPU (and one thread)
    yield from _pool(table, _Encode, options, block_rows, actors, num_cpus=None if gpus else 1.0, num_gpus=gpus)


def map_rows(table: Any, aligner: Any, dim: int, *, block_rows: int, actors: int | None = None) -> Iterator[Any]:
    """``table``'s rows mapped by ``aligner`` into ``dim``-d unit vectors by an actor pool."""
    yield from _pool(table, _Map, {"aligner": aligner, "dim": dim}, block_rows, actors, num_cpus=1.0)


def _pool(
    table: Any, actor: type, options: dict[str, Any], block_rows: int, actors: int | None, **resources: Any
) -> Iterator[Any]:
    """``actor(**options)`` on each whole block of ``table`` by an actor pool, in the order they finish."""
    import ray

    size = _pool_size(actors)
    # no restarts on a runtime of our own: a local actor dies only of what a restart repeats, and blocks are committed
    # whole (a rerun adds the rest); on a cluster, where a node can come back, they stay on
    restarts: dict[str, Any] = {"max_restarts": 0} if _started_local else {}
    dataset = ray.data.from_arrow(_blocks(table, block_rows, size)).map_batches(
        actor,
        fn_constructor_kwargs=options,
        batch_size=None,
        batch_format="pyarrow",
        compute=ray.data.ActorPoolStrategy(size=size),
        **resources,
        **restarts,
    )
    yield from dataset.iter_batches(batch_size=None, batch_format="pyarrow")


def prepare_chunks(
    chunks: Iterable[Any], prepare: Callable[..., Any], *shared: Any, actors: int | None = None
) -> Iterator[Any]:
    """``prepare(chunk, *shared)`` of each chunk as Ray tasks (two per CPU in flight), in input order."""
    import ray

    size = _pool_size(actors)
    task = ray.remote(num_cpus=1, max_retries=0 if _started_local else 3)(prepare)
    refs = [ray.put(value) for value in shared]
    pending: deque[Any] = deque()
    for chunk in chunks:
        pending.append(task.remote(chunk, *refs))
        if len(pending) >= 2 * size:
            yield ray.get(pending.popleft())
    while pending:
        yield ray.get(pending.popleft())


def encode_texts(texts: Sequence[str], **options: Any) -> np.ndarray:
    """Unit vectors of ``texts`` in input order, encoded by an actor pool (:func:`encode_rows`' options)."""
    order = [str(i) for i in range(len(texts))]
    out = np.empty((len(texts), options["expected"].dimension), dtype=np.float32)
    for block in encode_rows(order, list(texts), [None] * len(texts), **options):
        rows = np.asarray(block.column("id").to_pylist(), dtype=np.int64)
        out[rows] = vectors_of(block.column("vector"), out.shape[1])
    return out


def shippable(model: Any | None, record: ModelFingerprint, loaded: Any) -> Any:
    """What a Ray worker loads its encoder from: the name given or recorded, else the model itself."""
    if isinstance(model, (str, os.PathLike)):
        return str(model)
    if model is None and record.name:
        return record.name
    return loaded
