"""Alignment and uniformity (Wang & Isola, 2020), as used throughout the SimCSE paper.

Both take L2-normalised embeddings. Lower is better for each.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from subspaces.io import atomic_path
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


def plot_alignment_uniformity(trajectories, path):
    """Draw each run's (uniformity, alignment) checkpoints as a trajectory, as in SimCSE's Figure 2; returns the path.

    ``trajectories`` maps a label to a list of ``{"step", "alignment", "uniformity"}`` records (a run's JSON
    history); each line runs from its first record (a hollow marker) to its last (a filled one).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not trajectories or not any(trajectories.values()):
        raise ValueError("no alignment/uniformity records to plot")
    path = Path(path)
    fig, ax = plt.subplots(figsize=(6, 4.5))
    for label, records in trajectories.items():
        points = sorted((r["step"], r["uniformity"], r["alignment"]) for r in records)
        if not points:
            continue
        _, u, a = zip(*points, strict=True)
        (line,) = ax.plot(u, a, "-", lw=1.2, alpha=0.85, label=label)
        ax.plot(u[0], a[0], "o", mfc="none", color=line.get_color())
        ax.plot(u[-1], a[-1], "o", color=line.get_color())
    ax.set_xlabel("uniformity (lower is better)")
    ax.set_ylabel("alignment (lower is better)")
    ax.set_title("alignment vs uniformity on STS-B dev (hollow: start, filled: end)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=120)
    plt.close(fig)
    return path
