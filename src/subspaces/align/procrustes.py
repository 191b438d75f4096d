"""Orthogonal Procrustes, also between spaces of different dimension: ``argmin_W ||X W - Y||_F`` over W with
orthonormal columns (d_x >= d_y) or rows (d_x < d_y) is ``U V^T`` from the thin SVD ``X^T Y = U S V^T`` (with
unequal dims, the same as zero-padding the smaller space)."""

from __future__ import annotations

from typing import Any

import numpy as np


def procrustes(
    x: np.ndarray, y: np.ndarray, weights: np.ndarray | None = None, *, scaled: bool = False, dtype: Any = np.float32
) -> np.ndarray:
    """The (semi-)orthogonal ``W`` (d_x x d_y) that best maps rows of ``x`` onto the paired rows of ``y``, in
    ``dtype``; ``scaled``: times the one scale that best fits it, ``trace(S) / |x|^2``."""
    if x.shape[0] != y.shape[0]:
        raise ValueError(f"procrustes needs paired rows, got {x.shape[0]} and {y.shape[0]}")
    cross = (x * weights[:, None]).T @ y if weights is not None else x.T @ y
    w, singular_values = _polar(cross, dtype)
    return w * (singular_values.sum() / max(float((x**2).sum()), 1e-12)) if scaled else w


def polar_factor(m: np.ndarray) -> np.ndarray:
    """``U V^T`` of ``m = U S V^T`` (float32): the (semi-)orthogonal matrix nearest ``m``."""
    return _polar(m, np.float32)[0]


def _polar(m: np.ndarray, dtype: Any) -> tuple[np.ndarray, np.ndarray]:
    """``U V^T`` and ``S`` of ``m = U S V^T``, by LAPACK's divide-and-conquer SVD (``gesdd``) in ``dtype``; where
    it does not converge or returns non-finite factors, the QR-iteration SVD (``gesvd``) in float64. NaN or inf in
    ``m``: scipy's ``ValueError``."""
    from scipy.linalg import LinAlgError, svd

    m = np.asarray(m)
    try:
        u, s, vt = svd(m.astype(dtype), full_matrices=False, lapack_driver="gesdd")
        if not (np.isfinite(u).all() and np.isfinite(vt).all()):
            raise LinAlgError("gesdd returned non-finite factors")
    except LinAlgError:  # finite here: svd's own check has passed
        u, s, vt = svd(m.astype(np.float64), full_matrices=False, check_finite=False, lapack_driver="gesvd")
    return (u @ vt).astype(dtype), s


def orthogonality_gap(w: np.ndarray) -> float:
    """``||W^T W - I||_F / sqrt(r)`` on the smaller side: 0 for a (semi-)orthogonal map."""
    gram = w.T @ w if w.shape[0] >= w.shape[1] else w @ w.T
    r = gram.shape[0]
    return float(np.linalg.norm(gram - np.eye(r, dtype=gram.dtype)) / np.sqrt(r))
