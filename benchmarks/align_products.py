"""The search product on this CPU, each way the aligner could run it (the figures in ``subspaces.align.precision``'s
docstring): a 1,024 x 384 query batch against 9,653 x 384 unit rows, the shapes of a refine-1 step on the captions
pool. Times torch's float32 product (MKL), numpy's (OpenBLAS) at one and two BLAS threads, the blocked product
(``precision.blocked_product``), torch's bfloat16 product, and the whole k=50 search by faiss's flat index and by
``NeighbourIndex`` in float32, all inside ``fit``'s thread setting (one BLAS thread) unless named; and whether
OpenBLAS's two-thread product gives the bits of its one-thread one (the blocked product does, by construction).

    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/align_products.py
"""

from __future__ import annotations

import time

import faiss
import numpy as np
import torch
from threadpoolctl import threadpool_limits

from subspaces.align.neighbours import NeighbourIndex
from subspaces.align.precision import blocked_product, native_bfloat16


def milliseconds(work, repeat: int = 5) -> float:
    work()
    start = time.perf_counter()
    for _ in range(repeat):
        work()
    return (time.perf_counter() - start) / repeat * 1000


def main() -> None:
    rng = np.random.default_rng(0)
    base = rng.normal(size=(9653, 384)).astype(np.float32)
    base /= np.linalg.norm(base, axis=1, keepdims=True)
    queries = rng.normal(size=(1024, 384)).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    columns = np.ascontiguousarray(base.T)
    tq, tc = torch.from_numpy(queries), torch.from_numpy(columns)
    print(f"torch threads {torch.get_num_threads()}, native bfloat16 {native_bfloat16()}")
    with threadpool_limits(limits=2, user_api="blas"):
        two = queries @ columns
        print(f"numpy product, 2 BLAS threads: {milliseconds(lambda: queries @ columns):.0f} ms")
    with threadpool_limits(limits=1, user_api="blas"):  # as inside fit
        one = queries @ columns
        print(f"numpy product, 1 BLAS thread: {milliseconds(lambda: queries @ columns):.0f} ms")
        print(f"torch float32 product (MKL), {torch.get_num_threads()} threads: {milliseconds(lambda: tq @ tc):.0f} ms")
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        print(f"torch float32 product (MKL), 1 thread: {milliseconds(lambda: tq @ tc):.0f} ms")
        torch.set_num_threads(threads)
        print(f"blocked product: {milliseconds(lambda: blocked_product(queries, columns)):.0f} ms")
        low_q, low_c = tq.to(torch.bfloat16), tc.to(torch.bfloat16)
        print(f"torch bfloat16 product: {milliseconds(lambda: low_q @ low_c, repeat=1):.0f} ms")
        flat = faiss.IndexFlatIP(384)
        flat.add(base)
        print(f"faiss flat search, k=50: {milliseconds(lambda: flat.search(queries, 50)):.0f} ms")
        index = NeighbourIndex(base, precision="float32")
        print(f"NeighbourIndex float32 neighbours, k=50: {milliseconds(lambda: index.neighbours(queries, 50)):.0f} ms")
    same = np.array_equal(one, two)
    print(f"OpenBLAS on 2 threads gives the 1-thread bits: {same} (max difference {np.abs(one - two).max():.1e})")


if __name__ == "__main__":
    main()
