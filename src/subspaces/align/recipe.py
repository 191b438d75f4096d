"""The paper's own stages as one candidate pass of the fit: the author's notebook's settings (no structural stage)
on the library's kernels."""

from __future__ import annotations

from subspaces.align.params import AnchorParams, RefineParams

RECIPE_ANCHORS = AnchorParams(
    n_runs=30, n_clusters=20, sample=10_000, qap_method="2opt", kernel="gram", qap_restarts=30, relative_k=50
)
RECIPE_REFINE = RefineParams(
    n_iter=100,
    sample=1000,
    k=50,
    alpha=0.5,
    bidirectional=False,
    patience=100,
    score_every=100,
    average=False,
    orthogonalize=False,
    centroid_clusters=500,
    centroid_alpha=0.5,
    polish_iter=0,
)
RECIPE_MIN_ROWS = 4000  # below this many rows a side, the notebook's 500 centroids would hold a handful of rows each
RECIPE_BUDGET = 2.5  # the whole fit's bound, in units of the recipe candidate's own time
