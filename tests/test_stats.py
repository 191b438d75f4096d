"""The paired bootstrap: what it resamples, and that its interval can exclude zero or fail to."""

import numpy as np
import pytest
from scipy.stats import spearmanr

from subspaces.errors import SubspacesError
from subspaces.eval.stats import paired_bootstrap


def mean(values, rows):
    return float(np.mean(values))


def test_equal_systems_differ_by_exactly_zero():
    a = np.random.default_rng(0).normal(size=200)
    result = paired_bootstrap(a, a.copy(), mean, n=200)
    assert (result.diff, result.low, result.high) == (0.0, 0.0, 0.0)
    assert not result.excludes_zero


def test_a_shared_row_difficulty_cancels_and_a_small_gain_is_detected():
    rng = np.random.default_rng(1)
    difficulty = rng.normal(scale=10.0, size=500)  # dwarfs the gain: two separate intervals would overlap
    b = difficulty + rng.normal(scale=0.1, size=500)
    a = difficulty + 0.2 + rng.normal(scale=0.1, size=500)
    result = paired_bootstrap(a, b, mean, n=500)
    assert result.diff == pytest.approx(0.2, abs=0.03)
    assert result.excludes_zero and result.low > 0.15 and result.high < 0.25


def test_noise_alone_gives_an_interval_around_zero():
    rng = np.random.default_rng(2)
    a, b = rng.normal(size=300), rng.normal(size=300)
    result = paired_bootstrap(a, b, mean, n=500)
    assert result.low < 0 < result.high


def test_strata_keep_each_group_whole_and_rows_index_gold():
    strata = np.array([0] * 30 + [1] * 70)
    gold = np.random.default_rng(3).normal(size=100)
    seen = []

    def per_group_spearman(values, rows):
        seen.append(np.bincount(strata[rows], minlength=2))
        return float(np.mean([spearmanr(values[strata[rows] == g], gold[rows][strata[rows] == g])[0] for g in (0, 1)]))

    a = gold + np.random.default_rng(4).normal(scale=0.5, size=100)
    b = np.random.default_rng(5).normal(size=100)
    result = paired_bootstrap(a, b, per_group_spearman, n=50, strata=strata)
    assert all(list(counts) == [30, 70] for counts in seen)
    assert result.excludes_zero and result.diff > 0.5


def test_rows_must_align():
    with pytest.raises(SubspacesError, match="row-aligned"):
        paired_bootstrap(np.zeros(3), np.zeros(4), mean)


def test_shift_is_near_zero_for_a_row_average_and_large_for_a_clustering_score():
    from sklearn.metrics import v_measure_score

    rng = np.random.default_rng(3)
    gold = rng.integers(0, 40, 600)  # many classes, few rows per cell: the plug-in entropies' bias is large
    good = np.where(rng.random(600) < 0.8, gold, rng.integers(0, 40, 600))
    poor = np.where(rng.random(600) < 0.3, gold, rng.integers(0, 40, 600))
    average = paired_bootstrap(good == gold, poor == gold, lambda v, r: float(np.mean(v)), n=300)
    assert abs(average.shift) < 0.01 and average.low <= average.diff <= average.high
    vmeasure = paired_bootstrap(good, poor, lambda v, r: v_measure_score(gold[r], v), n=300)
    # duplicated rows flatter the poorer clustering more: the resampled differences shrink towards 0
    assert vmeasure.shift < -0.02
