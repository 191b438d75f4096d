"""The float type of the aligner's ranking products (:mod:`subspaces.align.precision`), and a record of the CPU a
fit ran on; every other numeric path runs in float32 and records so.

The setting: an explicit ``precision=``; else :func:`set_precision` or ``$SUBSPACES_PRECISION`` (``float32``,
``bfloat16``, ``auto``: bfloat16 where the CPU multiplies it natively); else float32, since bfloat16 reorders
near-ties and so gives other maps on other CPUs (docs/align.md).
"""

from __future__ import annotations

import os
import platform
from functools import cache
from pathlib import Path
from typing import Any

from subspaces.errors import SubspacesError

PRECISIONS = ("float32", "bfloat16", "auto")
PRECISION_ENV = "SUBSPACES_PRECISION"
DEFAULT_PRECISION = "float32"

_chosen: str | None = None  # set_precision's value; None: $SUBSPACES_PRECISION, else the default


def _check(precision: str, where: str) -> str:
    if precision not in PRECISIONS:
        raise SubspacesError(f"{where} must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    return precision


def set_precision(precision: str | None) -> None:
    """The process's precision for every path not given one explicitly (``None``: back to the environment's)."""
    global _chosen
    _chosen = None if precision is None else _check(precision, "precision")


def default_precision() -> str:
    """The setting of a path given none: :func:`set_precision`'s, else ``$SUBSPACES_PRECISION``, else float32."""
    if _chosen is not None:
        return _chosen
    env = os.environ.get(PRECISION_ENV, "").strip()
    return _check(env, f"${PRECISION_ENV}") if env else DEFAULT_PRECISION


def resolve(precision: str | None = None) -> str:
    """``"float32"`` or ``"bfloat16"``: the float type a path with setting ``precision`` (``None``: the default)
    runs its products in."""
    chosen = default_precision() if precision is None else _check(precision, "precision")
    if chosen == "auto":
        return "bfloat16" if native_bfloat16() else "float32"
    return chosen


def _torch_cpu_has(*checks: str) -> bool:
    """Whether any of torch's CPU capability checks (``torch.cpu._is_*_supported``) says yes."""
    import torch

    cpu: Any = torch.cpu
    return any(bool(getattr(cpu, name, lambda: False)()) for name in checks)


@cache
def native_bfloat16() -> bool:
    """Whether this CPU multiplies bfloat16 natively."""
    return _torch_cpu_has("_is_amx_tile_supported", "_is_avx512_bf16_supported")


def _cpuinfo(field: str) -> str | None:
    """The value of the first ``field`` line of ``/proc/cpuinfo``; None where there is none (not Linux)."""
    try:
        lines = Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    return next((line.split(":", 1)[1].strip() for line in lines if line.startswith(field)), None)


@cache
def native_int8() -> bool:
    """Whether this CPU has int8 dot-product instructions (AVX512-VNNI, AVX-VNNI or AMX), what static int8 graphs
    run on: ``/proc/cpuinfo``'s flags (no torch import), else torch's own checks."""
    flags = _cpuinfo("flags")
    if flags is None:
        return _torch_cpu_has("_is_vnni_supported", "_is_amx_tile_supported")
    return bool({"avx512_vnni", "avx_vnni", "amx_int8"} & set(flags.split()))


@cache
def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``; ``platform.processor()`` elsewhere)."""
    return _cpuinfo("model name") or platform.processor() or platform.machine()


def cpu_record(precision: str | None = None) -> dict[str, Any]:
    """What a fitted object records of where it was fitted: the float type its products ran in, the CPU's model
    and whether it multiplies bfloat16 natively (a result fitted in bfloat16 may differ on the other kind)."""
    return {"precision": resolve(precision), "cpu": cpu_model(), "native_bfloat16": native_bfloat16()}
