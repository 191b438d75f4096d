"""Where datasets and caches live, and how many CPU threads to use. Resolved at call time, never at import time."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from subspaces.errors import DataError, SubspacesError

DATA_ENV = "SUBSPACES_DATA"
CACHE_ENV = "SUBSPACES_CACHE"
THREADS_ENV = "SUBSPACES_THREADS"
# The thread counts of the native pools we use: OpenMP (torch, faiss), OpenBLAS and MKL (numpy, scipy).
_POOL_ENVS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def data_dir() -> Path:
    """The datasets' folder: ``$SUBSPACES_DATA`` (an error if it is not a folder), else ``../shared/data``, else
    ``./data``."""
    env = os.environ.get(DATA_ENV)
    if env:
        path = Path(env).expanduser()
        if not path.is_dir():
            raise DataError(f"${DATA_ENV} points to {path}, which is not a folder")
        return path
    for candidate in (Path("../shared/data"), Path("data")):
        if candidate.is_dir():
            return candidate.resolve()
    raise DataError(f"no data folder found: set ${DATA_ENV}, or run from a folder that has ../shared/data or ./data")


def dataset_dir(name: str) -> Path:
    """The folder of one dataset, e.g. ``dataset_dir("stsb")``, with a clear error if it is missing."""
    path = data_dir() / name
    if not path.is_dir():
        raise DataError(f"dataset {name!r} not found under {data_dir()} (set ${DATA_ENV} to the folder that holds it)")
    return path


def cache_dir() -> Path:
    """A writable cache folder for derived artefacts (converted models, entity embeddings)."""
    env = os.environ.get(CACHE_ENV)
    xdg = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"  # set but empty is unset (the XDG spec)
    path = Path(env).expanduser() if env else Path(xdg) / "subspaces"
    path.mkdir(parents=True, exist_ok=True)
    return path


def available_cpus() -> int:
    """The cores this process may use: its CPU affinity, capped by a cgroup CPU quota (containers, CI runners)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = os.cpu_count() or 1
    quota = _cgroup_cpu_quota()
    if quota is not None:
        cpus = min(cpus, int(quota))  # a fraction of a core left over is not worth one more thread
    return max(1, cpus)


def _cgroup_cpu_quota(root: Path = Path("/sys/fs/cgroup")) -> float | None:
    """CPUs per period this cgroup may use (cgroup v2 ``cpu.max``, or v1 ``cfs_quota_us``), None when unlimited."""
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]  # v2: "max 100000" or "150000 100000"
    except (OSError, ValueError):
        try:
            quota = (root / "cpu" / "cpu.cfs_quota_us").read_text().strip()  # v1: -1 when unlimited
            period = (root / "cpu" / "cpu.cfs_period_us").read_text().strip()
        except OSError:
            return None
    try:
        value = int(quota) / int(period)
    except ValueError:  # "max"
        return None
    return value if value > 0 else None


def default_threads(*, under_load: bool = True) -> int:
    """Threads when none are asked for: ``$SUBSPACES_THREADS``, else ``$OMP_NUM_THREADS``, else the cores this
    process may use shared among ``torchrun``'s local processes, less the share other work keeps busy
    (:func:`idle_share`; not with ``under_load=False``): a pool as large as the cores waits on the busy ones.
    """
    explicit = _explicit_threads()
    if explicit is not None:
        return explicit
    local_processes = int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1)
    cores = max(1, available_cpus() // max(1, local_processes))
    return max(1, min(cores, round(cores * idle_share()))) if under_load else cores


def _explicit_threads() -> int | None:
    """The count ``$SUBSPACES_THREADS`` or ``$OMP_NUM_THREADS`` asks for, if either does."""
    for name in (THREADS_ENV, "OMP_NUM_THREADS"):
        value = os.environ.get(name, "").strip()
        if name == "OMP_NUM_THREADS":
            # OpenMP allows a list per nesting level ("4,2"); the outer level is the pool that runs our work.
            value = value.split(",")[0].strip()
        if value:
            try:
                return _positive(int(value), f"${name}")
            except ValueError:
                raise SubspacesError(f"${name} must be a positive integer, got {value!r}") from None
    return None


# Every usable core, when set_threads(None) gave some of them up to other work; else None (see encoding_threads).
_encoding_cores: int | None = None


def encoding_threads() -> int | None:
    """Threads for encoding under the load-aware default: every core, load or not (a forward pass is a few large
    products, not many small steps meeting at barriers). None when a count was asked for, when the default gave up
    no core, or before :func:`set_threads`: encoding then keeps the process's count."""
    return _encoding_cores


def idle_share() -> float:
    """1 - one-minute load average / the machine's cores (0..1; the load counts the whole host, so not the quota's
    cores); 1.0 where it cannot be read."""
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        return 1.0
    return max(0.0, 1.0 - load / max(1, os.cpu_count() or 1))


def set_threads(threads: int | None = None) -> int:
    """Use ``threads`` CPU threads (default: :func:`default_threads`) in every native pool; return the number.

    One count for torch, OpenMP and BLAS (threadpoolctl), faiss, and the environment variables that libraries not
    yet loaded read (nested full-size pools fight over the cores); idle OpenMP threads sleep
    (``OMP_WAIT_POLICY=PASSIVE`` unless set). Process-wide; :func:`scoped_threads` sets it for one block.
    """
    n, _ = _apply_threads(threads)
    return n


@contextmanager
def scoped_threads(threads: int | None = None) -> Iterator[int]:
    """Run a block on ``threads`` CPU threads (as :func:`set_threads`), then restore torch's, faiss's, the BLAS and
    OpenMP limits and the environment variables as they were (a library first loaded inside keeps the block's)."""
    global _encoding_cores
    saved_env = {name: os.environ.get(name) for name in (*_POOL_ENVS, "OMP_WAIT_POLICY")}
    saved_encoding = _encoding_cores
    torch, faiss = sys.modules.get("torch"), sys.modules.get("faiss")
    saved_torch = torch.get_num_threads() if torch is not None else None
    saved_faiss = faiss.omp_get_max_threads() if faiss is not None else None
    limiter = None
    try:
        n, limiter = _apply_threads(threads)
        yield n
    finally:
        if limiter is not None:
            limiter.restore_original_limits()
        _encoding_cores = saved_encoding
        for name, value in saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        if torch is not None:
            torch.set_num_threads(saved_torch)
        if faiss is not None:
            faiss.omp_set_num_threads(saved_faiss)


def _apply_threads(threads: int | None) -> tuple[int, Any]:
    """:func:`set_threads`' work; also returns threadpoolctl's limiter, which can put the earlier limits back."""
    global _encoding_cores
    n = default_threads() if threads is None else _positive(threads, "threads")
    if threads is None and _explicit_threads() is None:  # the load-aware default (read before the variables change)
        cores = default_threads(under_load=False)
        _encoding_cores = cores if cores > n else None
    else:
        _encoding_cores = None
    for name in _POOL_ENVS:
        os.environ[name] = str(n)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    if "torch" in sys.modules:  # else it reads OMP_NUM_THREADS when it loads
        import torch

        torch.set_num_threads(n)
    if "faiss" in sys.modules:
        import faiss

        faiss.omp_set_num_threads(n)
    from threadpoolctl import threadpool_limits

    # applied now, to every BLAS and OpenMP library loaded; kept until changed (or restored by scoped_threads)
    return n, threadpool_limits(limits=n)


def _positive(value: int, what: str) -> int:
    if value < 1:
        raise SubspacesError(f"{what} must be at least 1, got {value}")
    return value
