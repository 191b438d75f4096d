"""Scores and plots only the benchmarks read: two label-free scores of an alignment map that the protocol
compares with the library's trust score, and SimCSE's alignment/uniformity trajectory plot."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from subspaces.align.preprocess import normalize_rows
from subspaces.io import atomic_path


def mutual_nn_rate(sims: np.ndarray) -> float:
    """Share of mapped source rows whose nearest target row has them as its nearest mapped source row.

    A hub is the nearest neighbour of many rows but mutual with at most one, so a hub-making map loses here.
    """
    forward = sims.argmax(axis=1)
    backward = sims.argmax(axis=0)
    return float((backward[forward] == np.arange(len(sims))).mean())


def knn_mixing(mapped_source: np.ndarray, target: np.ndarray, k: int = 10) -> float:
    """How well the mapped source rows mix with the target rows: the share of each row's ``k`` nearest rows
    (both sets pooled, itself left out) that come from the other set, over that share's value for two samples of
    one distribution; 1: indistinguishable (a two-sample k-NN statistic, Schilling 1986), 0: apart.

    A right map makes the mapped source another sample of the target distribution; a wrong one, a hub-making
    one included, leaves mapped rows nearer each other than the target rows.
    """
    rows = np.vstack([normalize_rows(mapped_source), target]).astype(np.float32)
    n_source, n = len(mapped_source), len(rows)
    sims = rows @ rows.T
    np.fill_diagonal(sims, -np.inf)
    k = min(k, n - 1)
    ids = np.argpartition(-sims, k - 1, axis=1)[:, :k]
    from_source = ids < n_source
    is_source = np.arange(n) < n_source
    cross = np.where(is_source[:, None], ~from_source, from_source).mean(axis=1)
    # Under perfect mixing a row's neighbours are drawn from the other n - 1 rows at random.
    expected = np.where(is_source, n - n_source, n_source) / (n - 1)
    return float(0.5 * ((cross / expected)[is_source].mean() + (cross / expected)[~is_source].mean()))


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
