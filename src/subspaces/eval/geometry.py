"""Alignment and uniformity (Wang & Isola, 2020) of the rows made unit, as in the SimCSE paper; lower is better."""

from __future__ import annotations

import numpy as np
import torch

from subspaces.vectors import normalize_rows


def _tensor(x: np.ndarray | torch.Tensor) -> torch.Tensor:
    return normalize_rows(torch.as_tensor(x, dtype=torch.float32))


def alignment(x: np.ndarray | torch.Tensor, y: np.ndarray | torch.Tensor, alpha: float = 2.0) -> float:
    """E ||f(x) - f(y)||^alpha over positive pairs (rows of ``x`` and ``y``)."""
    a, b = _tensor(x), _tensor(y)
    return float((a - b).norm(dim=1).pow(alpha).mean())


def uniformity(x: np.ndarray | torch.Tensor, t: float = 2.0, max_rows: int = 20000) -> float:
    """log E exp(-t ||f(x) - f(y)||^2) over all distinct pairs (the first ``max_rows`` rows)."""
    a = _tensor(x)[:max_rows]
    if a.shape[0] < 2:
        raise ValueError("uniformity needs at least two embeddings")
    sq = torch.pdist(a, p=2).pow(2)
    return float(torch.logsumexp(-t * sq, dim=0) - np.log(sq.numel()))
