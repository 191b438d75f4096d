"""Where a benchmark ran: CPU model and the features that change speed, threads, library versions, commit."""

from __future__ import annotations

import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

from subspaces.numerics import cpu_model

ROOT = Path(__file__).resolve().parents[2]
# CPU flags that change which kernels run (bfloat16 and AMX matmuls, AVX-512); the rest are not recorded
FEATURES = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_int8", "amx_tile")


def cpu() -> dict[str, Any]:
    """The CPU's model name and which of ``FEATURES`` it has (``/proc/cpuinfo``'s flags; none where it is absent)."""
    info = Path("/proc/cpuinfo")
    lines = info.read_text().splitlines() if info.is_file() else []
    present = set(next((line.split(":", 1)[1] for line in lines if line.startswith("flags")), "").split())
    return {"model": cpu_model(), "cores": os.cpu_count(), "features": {f: f in present for f in FEATURES}}


def versions() -> dict[str, str | None]:
    found: dict[str, str | None] = {"python": platform.python_version()}
    for name in ("numpy", "torch", "subspaces"):
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def stdout_of(*command: str, timeout: float = 10) -> str | None:
    """A command's standard output, stripped, run in the checkout; None where it cannot run or fails."""
    try:
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip()


def commit() -> dict[str, Any]:
    """The checkout's commit, and whether its files (new ones too) differ from it."""
    status = stdout_of("git", "status", "--porcelain")
    return {"commit": stdout_of("git", "rev-parse", "HEAD"), "dirty": None if status is None else bool(status)}


def threads() -> dict[str, Any]:
    import torch  # a dependency of subspaces

    found: dict[str, Any] = {v: os.environ.get(v) for v in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    return found | {"torch": torch.get_num_threads()}


def environment() -> dict[str, Any]:
    return {"cpu": cpu(), "threads": threads(), "versions": versions(), "git": commit(), "host": platform.node()}
