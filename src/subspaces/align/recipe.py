"""The paper's own stages as one candidate pass of the fit: the author's notebook's settings (below; no structural
stage) on the library's kernels. Its anchors compare cluster shapes only, so the candidate does not depend on the
target's coordinates.
"""

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
# The notebook's 500 refine-2 centroids and 10,000-row anchor samples are sized for pools of thousands; below
# this many rows a side the candidate is not run (it would cluster a handful of rows per centroid).
RECIPE_MIN_ROWS = 4000
RECIPE_BUDGET = 2.5  # the whole fit's bound, in units of the recipe candidate's own time
