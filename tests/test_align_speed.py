"""The aligner's speed-ups compute what the straightforward versions compute (issue 24: less time, same map)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from scipy.stats import ortho_group

from subspaces.align import MiniVec2Vec
from subspaces.align.verify import csls_score
from test_align import FAST, clustered


def csls_reference(sims: np.ndarray, k: int = 5) -> float:
    """The CSLS score as first written: copies partitioned along each axis."""
    k_t, k_s = min(k, sims.shape[1]), min(k, sims.shape[0])
    r_t = -np.partition(-sims, k_t - 1, axis=1)[:, :k_t].mean(axis=1)
    r_s = -np.partition(-sims, k_s - 1, axis=0)[:k_s].mean(axis=0)
    return float((2 * sims - r_s[None, :]).max(axis=1).mean() - r_t.mean())


@pytest.mark.parametrize(("n_source", "n_target", "k"), [(700, 900, 5), (900, 40, 5), (30, 20, 50), (64, 64, 1)])
def test_csls_score_equals_the_straightforward_computation(n_source, n_target, k):
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(n_source, 16)), rng.normal(size=(n_target, 16))
    sims = (x @ y.T).astype(np.float32)
    kept = sims.copy()
    # The same selection; the means are summed in another order (float32 rounding).
    assert csls_score(sims, k) == pytest.approx(csls_reference(sims, k), rel=1e-6, abs=1e-7)
    np.testing.assert_array_equal(sims, kept)  # the caller's matrix is left as it was


@pytest.mark.filterwarnings("ignore::subspaces.errors.ConvergenceWarning")
def test_unconverged_passes_are_refined_only_if_no_later_pass_converges():
    """Without a budget (FAST has none), a pass whose structure did not converge waits; once a later pass
    converges it replaces it unrefined. Under a budget each pass is refined at once (the order first written): the
    same map."""
    rng = np.random.default_rng(2)
    q = ortho_group.rvs(8, random_state=2)
    source, target = clustered(rng, 1500), clustered(rng, 1500) @ q
    # Weak anchors (3 runs of one k-means start each): here the first pass fails and the second converges.
    settings = FAST | {
        "anchors": replace(FAST["anchors"], n_runs=3, kmeans_redo=1),
        "random_state": 2,
        "agreement_search": 0,  # the search would refine the waiting pass (tested in test_align.py)
    }
    lazy = MiniVec2Vec(**settings).fit(source, target)
    eager = MiniVec2Vec(**settings | {"max_seconds": 1e9}).fit(source, target)
    skipped, kept = lazy.diagnostics_.restarts
    assert skipped.structure_swapped[-1] > 0.1 >= kept.structure_swapped[-1]
    assert not skipped.refined and skipped.refine1_iterations == 0 and skipped.nn_similarity.final is None
    assert skipped.anchor_consistency_final is None and "refine1" not in skipped.stage_seconds
    assert all(r.refined for r in eager.diagnostics_.restarts)
    np.testing.assert_array_equal(lazy.matrix_, eager.matrix_)
    assert lazy.diagnostics_.chosen_restart == eager.diagnostics_.chosen_restart == 1
    for key in ("nn_similarity", "refine1_scores", "anchor_consistency_final", "structure_scores"):
        assert getattr(kept, key) == getattr(eager.diagnostics_.restarts[1], key), key
    assert skipped.structure_scores == eager.diagnostics_.restarts[0].structure_scores
    assert lazy.diagnostics_.trust == eager.diagnostics_.trust


@pytest.mark.filterwarnings("ignore::subspaces.errors.ConvergenceWarning")
def test_when_no_pass_converges_every_pass_is_refined_and_the_best_kept():
    rng = np.random.default_rng(0)
    source, target = clustered(rng, 1000, seed=0), clustered(rng, 1000, seed=1)  # no rotation maps one on the other
    settings = FAST | {"n_restarts": 2, "anchors": replace(FAST["anchors"], n_runs=2)}
    lazy = MiniVec2Vec(**settings).fit(source, target)
    eager = MiniVec2Vec(**settings | {"max_seconds": 1e9}).fit(source, target)
    assert lazy.diagnostics_.converged is False
    finals = [r.nn_similarity.final for r in lazy.diagnostics_.restarts]
    assert all(r.refined for r in lazy.diagnostics_.restarts) and None not in finals
    assert lazy.diagnostics_.chosen_restart == int(np.argmax(finals))
    np.testing.assert_array_equal(lazy.matrix_, eager.matrix_)


def test_the_polar_factor_falls_back_where_divide_and_conquer_does_not_converge(monkeypatch):
    """float32 gesdd failed on a finite 384 x 384 blend in a dev fit (singular values 1.0 ... 0.0613, 0.0613, 8e-8);
    the fit must go on with the QR-iteration SVD instead of crashing."""
    import scipy.linalg
    from scipy.linalg import LinAlgError

    from subspaces.align.procrustes import polar_factor

    svd, drivers = scipy.linalg.svd, []

    def failing_gesdd(a, *args, lapack_driver="gesdd", **kwargs):
        drivers.append(lapack_driver)
        if lapack_driver == "gesdd":
            raise LinAlgError("SVD did not converge")
        return svd(a, *args, lapack_driver=lapack_driver, **kwargs)

    monkeypatch.setattr(scipy.linalg, "svd", failing_gesdd)
    m = np.random.default_rng(0).normal(size=(32, 32))
    u, _, vt = np.linalg.svd(m)
    np.testing.assert_allclose(polar_factor(m), u @ vt, atol=1e-6)
    assert drivers == ["gesdd", "gesvd"]
    # gesdd can also return NaN factors without an error (integer-valued rows, issue 58): the same fallback.
    drivers.clear()

    def nan_gesdd(a, *args, lapack_driver="gesdd", **kwargs):
        drivers.append(lapack_driver)
        u, s, vt = svd(a, *args, lapack_driver=lapack_driver, **kwargs)
        return (np.full_like(u, np.nan), s, vt) if lapack_driver == "gesdd" else (u, s, vt)

    monkeypatch.setattr(scipy.linalg, "svd", nan_gesdd)
    np.testing.assert_allclose(polar_factor(m), u @ vt, atol=1e-6)
    assert drivers == ["gesdd", "gesvd"]
    monkeypatch.undo()  # NaN is refused by the real SVD's own check, before any fallback
    with pytest.raises(ValueError, match="infs or NaNs"):
        polar_factor(np.where(np.eye(32) > 0, np.nan, m))


@pytest.mark.parametrize("shape", [(64, 64), (64, 96), (96, 64)])
def test_the_polar_factor_equals_the_svd_one_also_where_m_is_rank_deficient(shape):
    from subspaces.align.procrustes import polar_factor

    rng = np.random.default_rng(0)
    full = rng.normal(size=shape)
    low_rank = rng.normal(size=(shape[0], 3)) @ rng.normal(size=(3, shape[1]))  # U V^T is not unique here
    for m in (full, low_rank):
        u, s, vt = np.linalg.svd(m, full_matrices=False)
        np.testing.assert_allclose(polar_factor(m), u @ vt, atol=1e-5) if m is full else None
        w = polar_factor(m)
        gram = w.T @ w if shape[0] >= shape[1] else w @ w.T
        np.testing.assert_allclose(gram, np.eye(min(shape)), atol=1e-5)
        # Every polar factor of m, unique or not, is a best orthogonal fit: <W, m> is the nuclear norm of m.
        assert np.sum(w * m) == pytest.approx(s.sum(), rel=1e-5)
