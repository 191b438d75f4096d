"""Metrics for conditional similarity (cosines against labels in [0, 1]), overall and on seen / unseen conditions:
binary tasks (WiC) accuracy at a dev threshold, ROC-AUC and Spearman; graded ones (C-STS) Spearman, Pearson, MSE.
Metrics that do not apply are left out."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.stats import pearsonr, spearmanr
from sklearn.metrics import roc_auc_score


def choose_threshold(scores: np.ndarray, labels: np.ndarray) -> float:
    """The cut that maximises accuracy of ``score >= t`` on (dev) data; midpoints between sorted scores."""
    scores, labels = np.asarray(scores, dtype=np.float64), np.asarray(labels) > 0.5
    order = np.argsort(scores)
    s, y = scores[order], labels[order]
    # Predict positive for everything from position i on: correct = negatives before i + positives from i.
    neg_before = np.concatenate([[0], np.cumsum(~y)])
    pos_from = np.concatenate([np.cumsum(y[::-1])[::-1], [0]])
    correct = neg_before + pos_from
    # Only cut between distinct scores.
    valid = np.ones(len(s) + 1, dtype=bool)
    valid[1:-1] = s[1:] > s[:-1]
    best = int(np.argmax(np.where(valid, correct, -1)))
    if best == 0:
        return float(s[0] - 1e-6)
    if best == len(s):
        return float(s[-1] + 1e-6)
    return float((s[best - 1] + s[best]) / 2)


def conditional_metrics(
    scores: np.ndarray,
    labels01: Sequence[float],
    *,
    binary: bool,
    threshold: float | None = None,
    seen: np.ndarray | None = None,
) -> dict[str, object]:
    """``{"metrics": ..., "seen": ..., "unseen": ..., "n": ...}``; ``seen`` is a boolean mask over rows."""
    labels = np.asarray(labels01, dtype=np.float64)
    scores = np.asarray(scores, dtype=np.float64)

    def metrics(mask: np.ndarray) -> dict[str, float]:
        s, y = scores[mask], labels[mask]
        out: dict[str, float] = {}
        if binary:
            if threshold is not None:
                out["accuracy"] = float(((s >= threshold) == (y > 0.5)).mean())
            if len(np.unique(y)) == 2:
                out |= {"auc": float(roc_auc_score(y > 0.5, s)), "spearman": float(spearmanr(s, y).statistic)}
            return out
        out["mse"] = float(np.mean((s - y) ** 2))
        if len(s) > 1 and np.ptp(s) > 0 and np.ptp(y) > 0:
            out |= {"spearman": float(spearmanr(s, y).statistic), "pearson": float(pearsonr(s, y).statistic)}
        return out

    everything = np.ones(len(scores), dtype=bool)
    result: dict[str, object] = {"metrics": metrics(everything), "n": int(len(scores))}
    if seen is not None:
        seen = np.asarray(seen, dtype=bool)
        for name, mask in (("seen", seen), ("unseen", ~seen)):
            if mask.any():
                result[name] = {**metrics(mask), "n": int(mask.sum()), "share": float(mask.mean())}
    return result
