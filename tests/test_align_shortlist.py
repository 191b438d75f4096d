"""The aligner's shortlist search (``search.shortlist_dims``): near-exact neighbour lists from a projected scan;
and the rule by which ``benchmarks/align_speed_dev.py`` chooses among such speed settings."""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from subspaces.align import MiniVec2Vec
from subspaces.align.neighbours import NeighbourIndex
from subspaces.align.params import SearchParams
from subspaces.align.preprocess import center_normalize, normalize_rows
from subspaces.errors import SubspacesError

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from align_profile import clustered_pair
from align_speed_dev import choose


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
        sims, ids = NeighbourIndex(base, **settings).search(queries, 10)
        np.testing.assert_array_equal(ids, exact_ids, err_msg=str(settings))
        np.testing.assert_allclose(sims, exact_sims, atol=1e-5)


def test_a_quarter_of_the_axes_finds_nearly_all_true_neighbours():
    rng = np.random.default_rng(0)
    base, queries = anisotropic_rows(rng, 2000), anisotropic_rows(rng, 200)
    exact = NeighbourIndex(base)
    shortlisted = NeighbourIndex(base, shortlist_dims=32, shortlist_factor=4)
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


def test_the_index_refuses_ivf_and_a_shortlist_together_and_bad_values():
    base = anisotropic_rows(np.random.default_rng(0), 100, 16)
    with pytest.raises(SubspacesError, match="one approximate search"):
        NeighbourIndex(base, n_lists=2, shortlist_dims=4)
    with pytest.raises(SubspacesError, match="shortlist_factor at least 1"):
        NeighbourIndex(base, shortlist_dims=4, shortlist_factor=0)


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


def test_the_speed_study_picks_the_fastest_variant_that_keeps_top1_everywhere(tmp_path):
    # (variant, pool) -> top-1 and fit/recipe ratio of seeds 0 and 1; the recipe scores 0.85 on every cell
    cells = {
        ("default", "p1"): ([0.90, 0.91], 0.8),
        ("default", "p2"): ([0.95, 0.95], 0.9),
        ("refine-iter-50", "p1"): ([0.899, 0.903], 0.5),  # within 0.005 of the default's mean: eligible
        ("refine-iter-50", "p2"): ([0.95, 0.945], 0.6),
        ("one-directional", "p1"): ([0.88, 0.89], 0.3),  # 0.02 below the default on p1
        ("one-directional", "p2"): ([0.95, 0.95], 0.3),
        ("score-every-10", "p1"): ([0.97, 0.84], 0.2),  # a fit below the recipe
        ("score-every-10", "p2"): ([0.95, 0.95], 0.2),
        ("light-refine", "p1"): ([0.95, 0.95], 0.1),
        ("light-refine", "p2"): ([0.95], 0.1),  # seed 1 missing
    }
    for (variant, pool), (top1, ratio) in cells.items():
        for seed, value in enumerate(top1):
            row = {"variant": variant, "pool": pool, "seed": seed, "top1": value, "recipe_top1": 0.85}
            row |= {"fit_seconds": 100 * ratio, "recipe_fit_seconds": 100.0, "ratio": ratio, "converged": True}
            (tmp_path / f"{pool}-seed{seed}-{variant}.json").write_text(json.dumps(row))
    report = choose(tmp_path)
    assert report["eligible_worst_ratio"] == {"default": 0.9, "refine-iter-50": 0.6}
    assert report["chosen"] == "refine-iter-50" and report["params"] == {"refine": {"n_iter": 50}}
    assert json.loads((tmp_path / "chosen.json").read_text())["chosen"] == "refine-iter-50"
