"""The float type of the aligner's two hot products: a query batch against a whole space (neighbour search) and
every row against every centroid (k-means).

Both only *rank* (which rows are nearest, which centroid is closest); the values that are kept (neighbour means,
centroids, returned similarities) are recomputed in float32 from the float32 rows. Ranking tolerates bfloat16's
8-bit mantissa: on a 16k-row dev pool its top-50 lists hold 99.2 % of the exact float32 lists, and the means of
the two lists have a cosine of 0.9996 (``benchmarks/notes/align.md``). Where the CPU multiplies bfloat16 natively
(AMX tiles or AVX512-BF16) a bfloat16 product runs at about 4x the float32 rate, so ``"auto"`` takes it there and
float32 elsewhere. torch's bfloat16 products gave the same bits at 1 and 2 threads (the aligner's
reproducibility test runs them).
"""

from __future__ import annotations

from functools import cache
from typing import Any

PRECISIONS = ("auto", "float32", "bfloat16")


@cache
def native_bfloat16() -> bool:
    """Whether this CPU multiplies bfloat16 natively (torch's own capability checks)."""
    import torch

    cpu: Any = torch.cpu
    checks = ("_is_amx_tile_supported", "_is_avx512_bf16_supported")
    return any(bool(getattr(cpu, name, lambda: False)()) for name in checks)


def resolve(precision: str) -> str:
    """``"float32"`` or ``"bfloat16"`` for a setting of :data:`PRECISIONS`."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    if precision == "auto":
        return "bfloat16" if native_bfloat16() else "float32"
    return precision


def torch_dtype(precision: str):
    import torch

    return torch.bfloat16 if resolve(precision) == "bfloat16" else torch.float32
