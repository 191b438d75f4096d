"""SimCSE's alignment/uniformity trajectory plot (notes/simcse.md's PNGs), drawn from a run's JSON history."""

from __future__ import annotations

from pathlib import Path

from subspaces.io import atomic_path


def plot_alignment_uniformity(trajectories, path):
    """Each run's (uniformity, alignment) records (``trajectories``: label -> ``[{"step", "alignment",
    "uniformity"}]``, a run's JSON history) as a line from a hollow marker to a filled one; returns the path."""
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
