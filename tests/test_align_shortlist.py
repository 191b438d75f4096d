"""The aligner's shortlist search (``search.shortlist_dims``): near-exact neighbour lists from a projected scan."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from subspaces.align import MiniVec2Vec
from subspaces.align.neighbours import NeighbourIndex
from subspaces.align.params import SearchParams
from subspaces.align.preprocess import center_normalize, normalize_rows
from subspaces.errors import SubspacesError


def clustered_pair(rows: int, dim: int, clusters: int, noise: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Two unpaired samples of one anisotropic cluster mixture, the second rotated (plus noise) and shifted."""
    rng = np.random.default_rng(seed)
    scale = np.geomspace(4, 0.5, dim)
    centers = rng.normal(size=(clusters, dim)) * scale
    weights = rng.dirichlet(np.full(clusters, 2.0))

    def sample(n: int) -> np.ndarray:
        labels = rng.choice(clusters, n, p=weights)
        return centers[labels] + 0.5 * rng.normal(size=(n, dim)) * scale

    q, r = np.linalg.qr(rng.normal(size=(dim, dim)))
    q *= np.sign(np.diag(r))
    source = sample(rows)
    target = sample(rows) @ q + noise * rng.normal(size=(rows, dim)) + 1.0
    return source.astype(np.float32), target.astype(np.float32)


def anisotropic_rows(rng: np.random.Generator, n: int, dim: int = 128) -> np.ndarray:
    """Unit rows whose variance falls off across the axes, as an embedding's does (scales 4 to 0.5)."""
    return normalize_rows(rng.normal(size=(n, dim)) * np.geomspace(4, 0.5, dim)).astype(np.float32)


def recall(found: np.ndarray, true: np.ndarray) -> float:
    return float(np.mean([len(np.intersect1d(f, t)) / true.shape[1] for f, t in zip(found, true, strict=True)]))


def test_a_shortlist_as_large_as_the_set_or_as_wide_as_the_rows_is_exact_search():
    rng = np.random.default_rng(0)
    base, queries = anisotropic_rows(rng, 300, 32), anisotropic_rows(rng, 40, 32)
    exact_sims, exact_ids = NeighbourIndex(base).search(queries, 10)
    for settings in ({"shortlist_dims": 32}, {"shortlist_dims": 64}, {"shortlist_dims": 4, "shortlist_factor": 30}):
        sims, ids = NeighbourIndex(base, SearchParams(**settings)).search(queries, 10)
        np.testing.assert_array_equal(ids, exact_ids, err_msg=str(settings))
        np.testing.assert_allclose(sims, exact_sims, atol=1e-5)


def test_a_quarter_of_the_axes_finds_nearly_all_true_neighbours():
    rng = np.random.default_rng(0)
    base, queries = anisotropic_rows(rng, 2000), anisotropic_rows(rng, 200)
    exact = NeighbourIndex(base)
    shortlisted = NeighbourIndex(base, SearchParams(shortlist_dims=32, shortlist_factor=4))
    assert shortlisted.axes is not None and shortlisted.axes.shape == (128, 32)
    found = shortlisted.search(queries, 50)[1]
    assert recall(found, exact.search(queries, 50)[1]) >= 0.95  # 0.968 measured
    # k=1 (the label-free score) still re-ranks a few dozen candidates, not shortlist_factor rows
    assert recall(shortlisted.search(queries, 1)[1], exact.search(queries, 1)[1]) >= 0.95  # 0.98 measured


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"shortlist_dims": -1}, "search.shortlist_dims must be at least 0"),
        ({"shortlist_factor": 0}, "search.shortlist_factor must be at least 1"),
        ({"shortlist_dims": 1.5}, "search.shortlist_dims must be an integer"),
        ({"shortlist_dims": 64, "ann_lists": 128}, "two approximate searches"),
    ],
)
def test_bad_shortlist_settings_are_one_line_errors(settings, message):
    with pytest.raises(SubspacesError, match=message) as caught:
        MiniVec2Vec.from_params({"search": settings})
    assert "\n" not in str(caught.value)
    SearchParams(shortlist_dims=64, ann_lists=0)  # either one alone is fine


def test_a_fit_with_a_shortlist_gives_nearly_the_exact_fits_map():
    source, target = clustered_pair(2000, 64, 40, 0.1, 0)
    params = {
        "anchors": {"n_runs": 6, "n_clusters": 10, "sample": 1000, "kmeans_redo": 3, "n_pseudo_pairs": 1000},
        "structure": {"n_iter": 3, "n_clusters": 20, "sample": 1000},
        "refine": {"n_iter": 30, "sample": 500, "centroid_clusters": 40},
        "n_restarts": 1,
    }
    maps = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # convergence warnings are not what this checks
        for dims in (0, 16):
            aligner = MiniVec2Vec.from_params(params | {"search": {"probe_size": 500, "shortlist_dims": dims}})
            maps[dims] = aligner.fit(source, target).matrix_
    assert not np.array_equal(maps[0], maps[16])  # the shortlist did change some neighbour lists
    rows = center_normalize(source, source.mean(axis=0))
    agreement = np.mean(np.sum(normalize_rows(rows @ maps[0]) * normalize_rows(rows @ maps[16]), axis=1))
    # Mean cosine between the two maps' images of the source rows: 0.9977 measured (the exact fits of seeds 0
    # and 1 agree to 0.9959, so the shortlist moves the map less than the seed does).
    assert agreement >= 0.995
