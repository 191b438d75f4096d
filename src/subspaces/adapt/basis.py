"""An orthogonal basis ordered by variance: what makes the prefixes of any model's vectors usable.

Rows rotated by an orthogonal matrix keep every inner product and norm, so nothing at full size changes; in the
rows' principal axes the first ``d`` coordinates carry the most variance any ``d`` axes can. The store's funnel
search reads prefixes in this basis (``basis="pca"``), and the Matryoshka adapter can start from it.
"""

from __future__ import annotations

import numpy as np


def principal_axes(vectors: np.ndarray, *, sample: int = 20_000, seed: int = 0) -> np.ndarray:
    """The rows' principal axes (``dim x dim``, orthonormal columns, largest variance first), from the covariance
    of the centred rows of a seeded sample of at most ``sample`` rows. Applied to the rows as they are (not
    centred), the rotation keeps every inner product."""
    if len(vectors) > sample:  # sample before the float64 copy: a store's rows can be many
        vectors = vectors[np.sort(np.random.default_rng(seed).choice(len(vectors), sample, replace=False))]
    x = np.asarray(vectors, dtype=np.float64)
    x = x - x.mean(axis=0)
    _, axes = np.linalg.eigh(x.T @ x)  # ascending eigenvalues
    return np.ascontiguousarray(axes[:, ::-1], dtype=np.float32)
