"""Hyper-CL's two analyses of what a condition head does to the embedding space.

- :func:`expressiveness`: the spread of ``||W_c||_F`` across conditions (variance, and the scale-free coefficient
  of variation, since cosine ignores scale).
- :func:`cluster_impurity`: the size-weighted entropy of conditions inside k-means clusters (k = conditions) over
  ``log k``, before and after each sentence is projected under its own condition. Both: docs/cond.md.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from subspaces.errors import SubspacesError
from subspaces.models.heads import ConditionHead, HypernetHead
from subspaces.models.triencoder import TriEncoder
from subspaces.vectors import normalize_rows


def frobenius_norms(head: ConditionHead, condition_emb: torch.Tensor, batch_size: int = 64) -> np.ndarray:
    """``||W_c||_F`` per condition, without forming d×d matrices for low-rank heads.

    For ``W = W1 W2ᵀ``: ``||W||_F² = Σ (W1ᵀW1) ⊙ (W2ᵀW2)`` (K×K products instead of d×d).
    """
    out = []
    with torch.no_grad():
        for start in range(0, len(condition_emb), batch_size):
            c = condition_emb[start : start + batch_size]
            if isinstance(head, HypernetHead) and head.rank is not None:
                w1, w2 = head.condition_params(c)
                gram = (w1.transpose(1, 2) @ w1) * (w2.transpose(1, 2) @ w2)
                out.append(gram.sum(dim=(1, 2)).clamp_min(0).sqrt())
            else:
                out.append(torch.linalg.matrix_norm(head.projection_matrix(c)))
    return torch.cat(out).numpy()


def expressiveness(head: ConditionHead, condition_emb: torch.Tensor) -> dict[str, float]:
    norms = frobenius_norms(head, condition_emb)
    mean = float(norms.mean())
    return {
        "conditions": int(len(norms)),
        "frobenius_mean": mean,
        "frobenius_variance": float(norms.var()),
        "frobenius_cv": float(norms.std() / mean) if mean > 0 else float("nan"),
    }


def normalized_cluster_entropy(cluster_ids: np.ndarray, groups: Sequence[str]) -> float:
    """Size-weighted mean entropy of ``groups`` inside each cluster, divided by ``log(#groups)``."""
    n_groups = len(set(groups))
    if n_groups < 2:
        raise SubspacesError("cluster impurity needs at least two conditions")
    total = len(groups)
    impurity = 0.0
    for cluster in np.unique(cluster_ids):
        members = [g for g, k in zip(groups, cluster_ids, strict=True) if k == cluster]
        p = np.array(list(Counter(members).values()), dtype=np.float64) / len(members)
        impurity += len(members) / total * float(-(p * np.log(p)).sum())
    return impurity / float(np.log(n_groups))


def cluster_impurity(
    model: TriEncoder,
    sentences: Sequence[str],
    conditions: Sequence[str],
    *,
    random_state: int = 0,
) -> dict[str, Any]:
    """Impurity of k-means clusters of ``sentences`` (labelled by ``conditions``) before vs after projection."""
    from sklearn.cluster import KMeans

    if len(sentences) != len(conditions):
        raise SubspacesError("sentences and conditions differ in length")
    k = len(set(conditions))
    model.eval()
    with torch.no_grad():
        raw = model.embed_sentences(sentences)
        projected = model.project(sentences, conditions)

    def impurity(x: torch.Tensor) -> float:
        x = normalize_rows(x).numpy()
        ids = KMeans(n_clusters=k, n_init=10, random_state=random_state).fit_predict(x)
        return normalized_cluster_entropy(ids, list(conditions))

    return {"conditions": k, "sentences": len(sentences), "before": impurity(raw), "after": impurity(projected)}
