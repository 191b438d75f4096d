"""mini-vec2vec aligner: stages checked against hand computations, and the whole fit on synthetic spaces."""

from __future__ import annotations

import warnings
from dataclasses import replace

import numpy as np
import pytest
from scipy.stats import ortho_group

from subspaces.align import MiniVec2Vec, evaluate_alignment, retrieval_metrics
from subspaces.align.anchors import cluster_means, kmeans
from subspaces.align.matching import gram_factor, match_centroids
from subspaces.align.metrics import cross_fitted_oracle
from subspaces.align.neighbours import NeighbourIndex, mean_of_rows, neighbour_means
from subspaces.align.params import AnchorParams, RefineParams, SearchParams, StructureParams
from subspaces.align.preprocess import center_normalize, normalize_rows
from subspaces.align.procrustes import orthogonality_gap, polar_factor, procrustes
from subspaces.align.refine import NeighbourStep, refine_by_neighbours, refine_by_structure
from subspaces.align.verify import IDENTITY_REFERENCE_MARGIN, bidirectional_nn_similarity
from subspaces.errors import ConvergenceWarning, DataError, DimensionError, SubspacesError
from subspaces.numerics import cpu_record
from subspaces.numerics import resolve as resolve_precision

# Small but complete settings: every stage runs, on a few thousand rows.
FAST = {
    # kmeans_redo=3: steadier anchor partitions; one pass then succeeds on these spaces 11 times in 12 (5 in 12
    # with 1 start), so the tests do not hang on one lucky pass (seeds 0-11).
    "anchors": AnchorParams(n_runs=6, n_clusters=10, sample=1000, kmeans_redo=3, n_pseudo_pairs=1000),
    "refine": RefineParams(n_iter=30, sample=500, centroid_clusters=40),
    "search": SearchParams(probe_size=500),
    "n_restarts": 4,
    "random_state": 0,
    "max_seconds": None,  # the library's default bound makes every pass refine at once; tests of it say so
}
QUICK = FAST | {  # for tests that do not judge the map
    "n_restarts": 1,
    "anchors": replace(FAST["anchors"], n_runs=2),
    "refine": replace(FAST["refine"], n_iter=5),
}


def clustered(rng: np.random.Generator, n: int, dim: int = 8, n_clusters: int = 10, seed: int = 0) -> np.ndarray:
    """Anisotropic Gaussian clusters of unequal weight: a distinctive shape that survives rotation."""
    layout = np.random.default_rng(seed)
    scale = np.geomspace(4, 0.5, dim)
    centers = layout.normal(size=(n_clusters, dim)) * scale
    weights = layout.dirichlet(np.full(n_clusters, 2.0))
    labels = rng.choice(n_clusters, n, p=weights)
    return centers[labels] + 0.3 * rng.normal(size=(n, dim)) * scale


def test_procrustes_matches_hand_computation():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(50, 4))
    y = rng.normal(size=(50, 4))
    u, _, vt = np.linalg.svd(x.T @ y)
    np.testing.assert_allclose(procrustes(x, y), u @ vt, atol=1e-5)
    # and it recovers an exact rotation
    q = ortho_group.rvs(4, random_state=1)
    np.testing.assert_allclose(procrustes(x, x @ q), q, atol=1e-5)


def test_procrustes_between_different_dimensions_is_semi_orthogonal():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(100, 6))
    q = ortho_group.rvs(9, random_state=2)[:6]  # 6 x 9 with orthonormal rows
    w = procrustes(x, x @ q)
    assert w.shape == (6, 9)
    np.testing.assert_allclose(w, q, atol=1e-5)
    assert orthogonality_gap(w) < 1e-5
    blended = 0.5 * w + 0.5 * procrustes(x, rng.normal(size=(100, 9)))
    assert orthogonality_gap(blended) > 0.01
    assert orthogonality_gap(polar_factor(blended)) < 1e-5


def test_qap_recovers_permuted_centroids():
    rng = np.random.default_rng(0)
    centroids = kmeans(center_normalize(clustered(rng, 2000), np.zeros(8)), 10, seed=0)
    perm = rng.permutation(10)
    q = ortho_group.rvs(8, random_state=3)
    # target centroid perm[i] is source centroid i, rotated: the shapes agree, the coordinates do not.
    target = np.empty_like(centroids)
    target[perm] = centroids @ q
    match = match_centroids(centroids, target, n_restarts=5, rng=rng)
    np.testing.assert_array_equal(match.permutation, perm)
    assert match.agreement == pytest.approx(1.0, abs=1e-6)


def test_recovers_a_random_rotation_between_unpaired_clustered_spaces():
    rng = np.random.default_rng(0)
    q = ortho_group.rvs(8, random_state=1)
    source = clustered(rng, 2000)
    target = clustered(rng, 2000) @ q + 3.0  # different rows, rotated and shifted
    held_out = clustered(rng, 500)
    aligner = MiniVec2Vec(**FAST).fit(source, target)
    report = evaluate_alignment(aligner, held_out, held_out @ q + 3.0)
    assert report.oracle.top1 > 0.99
    assert report.identity.top1 < 0.1
    assert report.top1 > 0.95
    diagnostics = aligner.diagnostics_
    assert diagnostics.orthogonality_gap < 1e-4
    assert diagnostics.nn_similarity.final >= diagnostics.nn_similarity.initial
    # The restart kept is the one with the best label-free score after refinement.
    finals = [r.nn_similarity.final for r in diagnostics.restarts]
    assert diagnostics.chosen_restart == int(np.argmax(finals))
    assert diagnostics.converged is True
    assert aligner.converged_ is True and aligner.confidence_ >= 0.9 and not diagnostics.problems
    assert diagnostics.nn_similarity.final > diagnostics.identity_nn_similarity
    assert diagnostics.trust.lift > aligner.trust_margin  # trusted on the hub-corrected score too
    # Restarts stop at the first pass whose structural search converged (the agreement passes come after them).
    restarts = [r for r in diagnostics.restarts if r.label.startswith("restart")]
    last_swapped = [r.structure_swapped[-1] for r in restarts]
    assert all(share > 0.1 for share in last_swapped[:-1])
    assert len(last_swapped) == FAST["n_restarts"] or last_swapped[-1] <= 0.1


def test_without_a_structural_search_convergence_is_not_judged():
    rng = np.random.default_rng(0)
    source, target = clustered(rng, 1000), clustered(rng, 1000)
    aligner = MiniVec2Vec(**QUICK | {"n_restarts": 2, "structure": StructureParams(n_iter=0)}).fit(source, target)
    assert aligner.diagnostics_.converged is None
    restarts = [r for r in aligner.diagnostics_.restarts if r.label.startswith("restart")]
    assert len(restarts) == 2  # nothing to stop on: every restart runs


def test_a_fit_that_never_converges_warns():
    rng = np.random.default_rng(0)
    # Two spaces with different cluster layouts: no rotation maps one onto the other.
    source, target = clustered(rng, 2000, seed=0), clustered(rng, 2000, seed=1)
    with pytest.warns(ConvergenceWarning, match="no pass of the alignment converged"):
        aligner = MiniVec2Vec(**FAST | {"n_restarts": 2, "agreement_threshold": None}).fit(source, target)
    assert aligner.diagnostics_.converged is False and aligner.converged_ is False
    assert len(aligner.diagnostics_.restarts) == 2
    # With the agreement check (the default), the unconverged passes are not compared: still flagged.
    with pytest.warns(ConvergenceWarning, match="no two independent passes of the alignment agree"):
        checked = MiniVec2Vec(**FAST | {"n_restarts": 2}).fit(source, target)
    assert checked.converged_ is False and checked.confidence_ == 0.0


@pytest.mark.parametrize(("share", "passes"), [(None, 3), (1.0, 1)])
def test_converged_swap_share_decides_how_many_restarts_run(share, passes):
    rng = np.random.default_rng(0)
    source, target = clustered(rng, 1000), clustered(rng, 1000)
    settings = {"n_restarts": 3, "converged_swap_share": share, "structure": StructureParams(n_iter=1)}
    aligner = MiniVec2Vec(**QUICK | settings | {"agreement_search": 0}).fit(source, target)
    assert len(aligner.diagnostics_.restarts) == passes


def structural_case(seed: int):
    """Two clustered samples (3,000 rows) related by a rotation, held-out pairs, a poor start (top-1 under 0.05),
    the label-free score, and ``refine(**settings)``: the structural refinement from that start."""
    q = ortho_group.rvs(8, random_state=1)
    rng = np.random.default_rng(seed)
    source, target, held = clustered(rng, 3000), clustered(rng, 3000) @ q, clustered(rng, 500)
    a, b = center_normalize(source, source.mean(0)), center_normalize(target, target.mean(0))
    x, y = center_normalize(held, source.mean(0)), center_normalize(held @ q, target.mean(0))
    start = polar_factor(0.4 * q + 0.6 * ortho_group.rvs(8, random_state=2))

    def score(w):
        return bidirectional_nn_similarity(a[:500], b[:500], a, b, w)

    def refine(**settings):
        step = NeighbourStep(a, b, np.random.default_rng(seed), RefineParams(sample=1000, k=10, bidirectional=False))
        shared = {"n_iter": 8, "n_clusters": 10, "n_runs": 3, "sample": 3000, "steps": 3, "stop_swap_share": None}
        return refine_by_structure(start, step, StructureParams(**shared | settings), score=score)

    return x, y, start, score, refine


def test_structural_refinement_pulls_a_poor_map_onto_the_true_rotation():
    """From a start with top-1 under 0.05, about half of the data seeds are pulled in (4 of 8 here; 12 of 24 with
    the float64 polar factors, 13 of 24 with faiss's k-means): which ones moves with rounding, so the test counts
    them over 8 seeds instead of naming one."""
    pulled_in = 0
    for seed in range(8):
        x, y, start, score, refine = structural_case(seed)
        matrix, history = refine()
        assert retrieval_metrics(x @ start, y).top1 < 0.05
        assert score(matrix) == history.best_score == history.scores[history.best_iteration]  # best map kept
        assert orthogonality_gap(matrix) < 1e-4
        if retrieval_metrics(x @ matrix, y).top1 > 0.95:
            pulled_in += 1
            # The structure search corrects many seeded pairs at first and, once the map is right, none or one
            # exchange of two (2 of the 30 seeded pairs) a round: which rounds swap one moves with the CPU's rounding
            # (an AMD AVX2 machine swapped one in the last round of two of the four seeds pulled in).
            assert history.swapped[0] > 0.2 and history.swapped[-1] <= 2 / 30 + 1e-9 and 0.0 in history.swapped
    assert pulled_in >= 3


def test_structural_refinement_ends_at_the_first_converged_round():
    *_, refine = structural_case(0)
    full, stopped = (refine(patience=8, stop_swap_share=stop)[1] for stop in (None, 0.1))
    first = next(i for i, share in enumerate(full.swapped) if share <= 0.1)
    assert 0 < first < len(full.swapped) - 1  # the full run goes on past its first converged round
    assert stopped.swapped == full.swapped[: first + 1]  # same rounds (same seed), ended right there
    assert not stopped.stopped_early  # ended by convergence, not by patience


@pytest.mark.parametrize(("source_dim", "target_dim"), [(8, 12), (12, 8)])
def test_different_dimensions(source_dim, target_dim):
    """A lossless embedding of an 8-d space into 12-d, in either direction, is recovered."""
    rng = np.random.default_rng(0)
    lift = ortho_group.rvs(12, random_state=4)[:8]  # 8 x 12, orthonormal rows

    def space(x, dim):
        return x if dim == 8 else x @ lift

    source = space(clustered(rng, 2000), source_dim)
    target = space(clustered(rng, 2000), target_dim) + 1.0
    held = clustered(rng, 500)
    aligner = MiniVec2Vec(**FAST).fit(source, target)
    assert aligner.matrix_.shape == (source_dim, target_dim)
    report = evaluate_alignment(aligner, space(held, source_dim), space(held, target_dim) + 1.0)
    assert report.identity is None
    assert report.top1 > 0.9


@pytest.mark.filterwarnings("ignore::subspaces.errors.ConvergenceWarning")  # QUICK settings: the map is not judged
def test_save_load_round_trip_and_stored_means(tmp_path):
    rng = np.random.default_rng(0)
    q = ortho_group.rvs(8, random_state=1)
    source = clustered(rng, 1500) + 5.0
    target = clustered(rng, 1500) @ q - 2.0
    aligner = MiniVec2Vec(**QUICK).fit(source, target)
    aligner.save(tmp_path / "aligner")
    loaded = MiniVec2Vec.load(tmp_path / "aligner")
    new = clustered(rng, 7) + 5.0
    np.testing.assert_array_equal(loaded.transform(new), aligner.transform(new))
    assert loaded.get_params() == aligner.get_params()
    # The float type the fit ran in and the CPU it ran on are kept with the map.
    assert loaded.precision_ == aligner.precision_ == resolve_precision(None)
    assert {k: getattr(loaded.diagnostics_, k) for k in ("precision", "cpu", "native_bfloat16")} == cpu_record(None)
    assert loaded.diagnostics_ == aligner.diagnostics_  # every record read back as saved
    # New rows are centred on the *training* mean, not their own: one row transforms the same alone or in a batch.
    np.testing.assert_allclose(loaded.transform(new[:1]), loaded.transform(new)[:1], atol=1e-6)
    expected = center_normalize(new, aligner.source_mean_) @ aligner.matrix_
    expected /= np.linalg.norm(expected, axis=1, keepdims=True)
    np.testing.assert_allclose(loaded.transform(new, centered=True), expected, atol=1e-5)
    # Default output lives in the target's own coordinates.
    np.testing.assert_allclose(
        loaded.transform(new), aligner.target_mean_ + aligner.target_scale_ * expected, atol=1e-4
    )


def test_an_aligner_saved_before_format_2_grew_its_records_still_loads(tmp_path):
    """The first format-2 files (before the trust checks and candidates were recorded) load, untrusted as then."""
    import json

    rng = np.random.default_rng(0)
    aligner = MiniVec2Vec(**QUICK).fit(clustered(rng, 1000), clustered(rng, 1000))
    aligner.save(tmp_path / "aligner")
    path = tmp_path / "aligner" / "aligner.json"
    config = json.loads(path.read_text())
    first = ("chosen_restart", "converged", "nn_similarity", "anchor_consistency", "orthogonality_gap", "restarts")
    config["diagnostics"] = {key: config["diagnostics"][key] for key in first}
    for record in config["diagnostics"]["restarts"]:
        for key in ("label", "refined", "anchor_clusters"):
            del record[key]
    path.write_text(json.dumps(config))
    loaded = MiniVec2Vec.load(tmp_path / "aligner")
    assert loaded.converged_ is False and loaded.precision_ == "float32" and not loaded.stopped_early_
    with pytest.raises(SubspacesError, match=r"not trusted \(its fit did not converge\)"):
        loaded.check_trusted()
    new = clustered(rng, 7)
    np.testing.assert_array_equal(loaded.transform(new), aligner.transform(new))


def test_cross_fitted_oracle_never_sees_the_pair_it_maps():
    rng = np.random.default_rng(0)
    q = ortho_group.rvs(40, random_state=3)
    x = rng.normal(size=(120, 40))
    y = x @ q + 1.5 * rng.normal(size=(120, 40))  # noisy pairs, few of them: in-sample Procrustes overfits
    mapped = cross_fitted_oracle(x, y)
    expected = x[:60] @ procrustes(x[60:], y[60:])
    np.testing.assert_allclose(mapped[:60], expected / np.linalg.norm(expected, axis=1, keepdims=True), atol=1e-5)
    in_sample = retrieval_metrics(x @ procrustes(x, y), y)
    assert retrieval_metrics(mapped, y).top1 < in_sample.top1


def test_retrieval_metrics_by_hand():
    target = np.eye(4, dtype=np.float32)
    mapped = np.array([[1, 0, 0, 0], [0.9, 0.1, 0, 0], [0, 0, 1, 0], [0, 0, 0.2, 1]], dtype=np.float32)
    metrics = retrieval_metrics(mapped, target, pool_size=4)
    # ranks: 1, 2 (row 1 is closer to target 0), 1, 1
    assert metrics.top1 == pytest.approx(0.75)
    assert metrics.mean_rank == pytest.approx(1.25)
    # pools of 2: rows 0-1 compete only with targets 0-1, rows 2-3 with 2-3
    assert retrieval_metrics(mapped, target, pool_size=2).mean_rank == pytest.approx(1.25)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda x: np.where(np.arange(len(x))[:, None] == 3, np.nan, x), "NaN or inf.*row 3"),
        (lambda x: np.where(np.arange(len(x))[:, None] == 5, 0.0, x), "zero vectors.*row 5"),
        (lambda x: x[:, :, None], "2-D"),
    ],
)
def test_bad_input_is_a_clear_error(mutate, message):
    rng = np.random.default_rng(0)
    good = clustered(rng, 500)
    with pytest.raises(DimensionError, match=message):
        MiniVec2Vec(**FAST).fit(mutate(good), good)


def test_too_few_rows_for_the_cluster_counts():
    rng = np.random.default_rng(0)
    with pytest.raises(DataError, match="needs at least"):
        MiniVec2Vec(**FAST).fit(clustered(rng, 500), clustered(rng, 30))


def test_transform_checks_dimension_and_fitted_state(tmp_path):
    from subspaces.errors import SubspacesError

    with pytest.raises(SubspacesError, match="not fitted"):
        MiniVec2Vec().transform(np.ones((2, 8)))
    with pytest.raises(DataError, match="aligner.json"):
        MiniVec2Vec.load(tmp_path)
    rng = np.random.default_rng(0)
    aligner = MiniVec2Vec(**QUICK).fit(clustered(rng, 1000), clustered(rng, 1000))
    with pytest.raises(DimensionError, match="fitted on 8"):
        aligner.transform(np.ones((2, 5)))
    with pytest.raises(DimensionError, match="equal row counts"):
        evaluate_alignment(aligner, np.ones((3, 8)), np.ones((2, 8)))


def test_neighbour_means_average_the_k_nearest_rows():
    rng = np.random.default_rng(3)
    base = rng.standard_normal((300, 8)).astype(np.float32)
    base /= np.linalg.norm(base, axis=1, keepdims=True)
    values = rng.standard_normal((300, 5)).astype(np.float32)
    queries = base[:20] + 0.01 * rng.standard_normal((20, 8)).astype(np.float32)
    ids = np.argsort(-(queries @ base.T), axis=1)[:, :7]  # brute force, by hand
    np.testing.assert_allclose(
        neighbour_means(queries, NeighbourIndex(base), values, 7), values[ids].mean(1), atol=1e-6
    )
    np.testing.assert_allclose(mean_of_rows(values, ids), values[ids].mean(1), atol=1e-6)


@pytest.mark.parametrize("bidirectional", [False, True])
def test_refine1_steps_move_a_nearby_map_onto_the_true_rotation(bidirectional):
    rng = np.random.default_rng(0)
    q = ortho_group.rvs(8, random_state=1)
    source, target = clustered(rng, 3000), clustered(rng, 3000) @ q
    a, b = center_normalize(source, source.mean(0)), center_normalize(target, target.mean(0))
    matrix = start = polar_factor(0.8 * q + 0.2 * ortho_group.rvs(8, random_state=2))
    params = RefineParams(sample=1000, k=10, bidirectional=bidirectional)
    step = NeighbourStep(a, b, rng, params, target_index=NeighbourIndex(b), source_index=NeighbourIndex(a))
    for _ in range(10):
        matrix = step(matrix)
    assert np.linalg.norm(matrix - q) < 0.5 * np.linalg.norm(start - q)
    assert orthogonality_gap(matrix) < 1e-4


class NoisyStep:
    """A refine-1 step whose fits scatter around a fixed rotation, as steps on random samples do."""

    orthogonalize = True

    def __init__(self, rotation: np.ndarray, noise: float, rng: np.random.Generator) -> None:
        self.rotation, self.noise, self.rng = rotation, noise, rng

    def __call__(self, matrix: np.ndarray) -> np.ndarray:
        fitted = polar_factor(self.rotation + self.noise * self.rng.standard_normal(self.rotation.shape))
        return polar_factor(0.5 * matrix + 0.5 * fitted)


@pytest.mark.parametrize("average", [False, True])
def test_refine1_tail_average_lands_closer_to_the_fixed_point_than_any_iterate(average):
    q = ortho_group.rvs(16, random_state=4)
    distance = lambda m: float(np.linalg.norm(m - q))  # noqa: E731
    iterates = []
    step = NoisyStep(q, 0.3, np.random.default_rng(0))

    def recorded(m):
        iterates.append(step(m))
        return iterates[-1]

    recorded.orthogonalize = True
    start = ortho_group.rvs(16, random_state=5)
    params = RefineParams(n_iter=40, patience=40, score_every=1, average=average)
    matrix, history = refine_by_neighbours(start, recorded, params, score=lambda m: -distance(m))
    assert len(history.scores) == 40
    best_iterate = min(distance(m) for m in iterates)
    if average:
        assert history.averaged and history.average_score == pytest.approx(-distance(matrix))
        tail_mean = polar_factor(np.mean(iterates[20:], axis=0))  # the last half, by hand
        np.testing.assert_allclose(matrix, tail_mean, atol=1e-5)
        assert distance(matrix) < 0.7 * best_iterate  # averaging 20 scattered iterates cancels most of the scatter
        assert orthogonality_gap(matrix) < 1e-5
    else:
        assert not history.averaged and history.average_score is None
        assert distance(matrix) == pytest.approx(best_iterate)


def test_refine1_scores_every_nth_iteration_and_counts_patience_in_iterations():
    q = ortho_group.rvs(8, random_state=4)
    step = NoisyStep(q, 0.3, np.random.default_rng(0))
    scored = []
    score = lambda m: scored.append(m) or -float(np.linalg.norm(m - q))  # noqa: E731
    _, history = refine_by_neighbours(
        np.eye(8), step, RefineParams(n_iter=23, patience=100, score_every=5, average=False), score=score
    )
    assert len(history.scores) == 5 and len(scored) == 6  # iterations 5, 10, 15, 20, the last (23); the start
    params = RefineParams(n_iter=100, patience=10, score_every=5, average=False)
    _, history = refine_by_neighbours(q, step, params, score=lambda m: 0.0, start_score=1.0)
    assert history.stopped_early and len(history.scores) == 2  # two checks = 10 iterations without a gain


def test_refine1_from_minus_infinity_returns_an_iterate_and_counts_patience_among_them():
    """Started at the fixed point itself, every step moves away: scored against the start, refine-1 returns the start
    after its patience; with ``start_score=-inf`` (the polish) it returns its best iterate, and its patience runs from
    the first iterate, not from a start no iterate can beat."""
    q = ortho_group.rvs(8, random_state=4)
    score = lambda m: -float(np.linalg.norm(m - q))  # noqa: E731
    params = RefineParams(n_iter=60, patience=10, score_every=1, average=False)
    kept, history = refine_by_neighbours(q, NoisyStep(q, 0.3, np.random.default_rng(0)), params, score=score)
    assert np.array_equal(kept, q) and history.best_iteration == -1 and history.iterations == 10
    moved, history = refine_by_neighbours(
        q, NoisyStep(q, 0.3, np.random.default_rng(0)), params, score=score, start_score=float("-inf")
    )
    assert not np.array_equal(moved, q) and history.best_iteration >= 0 and history.best_score == score(moved)
    assert history.iterations > 10  # it ran past the first 10 steps: some iterate beat the first one


def test_gram_kernel_factor_and_matching_of_raw_cluster_means():
    rng = np.random.default_rng(0)
    x = center_normalize(clustered(rng, 2000), np.zeros(8))
    means = cluster_means(x, kmeans(x, 10, seed=0))
    assert np.all(np.linalg.norm(means, axis=1) < 1.0)  # means of unit vectors: their length is the tightness
    h = np.eye(10) - 1.0 / 10
    factor = gram_factor(means)
    np.testing.assert_allclose(factor @ factor.T, h @ means @ means.T @ h, atol=1e-5)
    perm = rng.permutation(10)
    rotated = np.empty_like(means)
    rotated[perm] = means @ ortho_group.rvs(8, random_state=3)
    match = match_centroids(factor, gram_factor(rotated), n_restarts=30, rng=rng)  # the default; 5 can miss
    np.testing.assert_array_equal(match.permutation, perm)


def test_gram_anchor_kernel_recovers_the_rotation():
    rng = np.random.default_rng(0)
    q = ortho_group.rvs(8, random_state=1)
    source, target, held = clustered(rng, 3000), clustered(rng, 3000) @ q, clustered(rng, 500)
    aligner = MiniVec2Vec(**FAST | {"anchors": replace(FAST["anchors"], kernel="gram")}).fit(source, target)
    assert evaluate_alignment(aligner, held, held @ q).top1 > 0.95
    with pytest.raises(SubspacesError, match="anchors.kernel must be one of 'cosine', 'gram'"):
        AnchorParams(kernel="euclid")


def test_swap_shares_outside_zero_one_are_refused():
    rng = np.random.default_rng(0)
    with pytest.raises(SubspacesError, match="converged_swap_share"):
        MiniVec2Vec(converged_swap_share=1.5).fit(clustered(rng, 500), clustered(rng, 500))
    with pytest.raises(SubspacesError, match="structure.stop_swap_share must be at most 1"):
        StructureParams(stop_swap_share=1.5)


def test_structural_stop_above_the_convergence_share_is_refused():
    rng = np.random.default_rng(0)
    with pytest.raises(SubspacesError, match="must not exceed converged_swap_share"):
        MiniVec2Vec(structure=StructureParams(stop_swap_share=0.2), converged_swap_share=0.1).fit(
            clustered(rng, 500), clustered(rng, 500)
        )


@pytest.mark.filterwarnings("ignore::subspaces.errors.ConvergenceWarning")
def test_a_damaged_or_mixed_aligner_folder_is_refused(tmp_path):
    import hashlib
    import json
    import os
    import stat

    from subspaces.errors import DataError

    rng = np.random.default_rng(0)
    params = QUICK | {"random_state": np.int64(5)}  # numpy scalars must not break the JSON
    first = MiniVec2Vec(**params).fit(clustered(rng, 1500), clustered(rng, 1500))
    first.save(tmp_path / "one")
    assert MiniVec2Vec.load(tmp_path / "one").random_state == 5
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE((tmp_path / "one" / "state.npz").stat().st_mode) == 0o666 & ~umask
    second = MiniVec2Vec(**QUICK | {"random_state": 1}).fit(clustered(rng, 1500), clustered(rng, 1500))
    second.save(tmp_path / "two")
    # A save interrupted between its two files: new state beside the old config.
    (tmp_path / "one" / "state.npz").write_bytes((tmp_path / "two" / "state.npz").read_bytes())
    with pytest.raises(DataError, match="does not belong"):
        MiniVec2Vec.load(tmp_path / "one")
    (tmp_path / "two" / "state.npz").write_bytes(b"PK truncated")
    config = json.loads((tmp_path / "two" / "aligner.json").read_text())
    config["state_sha256"] = hashlib.sha256(b"PK truncated").hexdigest()  # a damaged state that was saved so
    (tmp_path / "two" / "aligner.json").write_text(json.dumps(config))
    with pytest.raises(DataError, match="unreadable aligner state"):
        MiniVec2Vec.load(tmp_path / "two")
    config["params"]["no_such_param"] = 1
    (tmp_path / "two" / "aligner.json").write_text(json.dumps(config))
    with pytest.raises(DataError, match="not an aligner config"):
        MiniVec2Vec.load(tmp_path / "two")


@pytest.mark.filterwarnings("ignore::subspaces.errors.ConvergenceWarning")
def test_is_a_scikit_learn_estimator_that_clones_and_round_trips():
    from sklearn.base import clone

    aligner = MiniVec2Vec(**FAST)
    copy = clone(aligner)
    assert copy is not aligner and copy.get_params() == aligner.get_params()
    assert "AnchorParams(n_runs=6, n_clusters=10, sample=1000, kmeans_redo=3, n_pseudo_pairs=1000)" in repr(aligner)
    assert repr(MiniVec2Vec()) == "MiniVec2Vec()"  # only what differs from the defaults
    copy.set_params(n_restarts=2, refine=RefineParams(n_iter=3))
    assert copy.n_restarts == 2 and aligner.n_restarts == 4  # the clone is independent
    assert MiniVec2Vec.from_params(aligner.to_params()).get_params() == aligner.get_params()
    with pytest.raises(ValueError, match="Invalid parameter"):
        copy.set_params(refine_iter=3)  # the flat names are gone from the estimator
    rng = np.random.default_rng(0)
    source, target = clustered(rng, 1000), clustered(rng, 1000)
    fitted = clone(MiniVec2Vec(**QUICK)).fit(source, target)
    assert hasattr(fitted, "matrix_") and not hasattr(clone(fitted), "matrix_")  # a clone is unfitted


def test_stage_settings_check_their_own_fields_and_name_the_valid_ones():
    with pytest.raises(SubspacesError, match="anchors.n_clusters must be at least 3"):
        AnchorParams(n_clusters=2)
    with pytest.raises(SubspacesError, match="refine.alpha must be above 0"):
        RefineParams(alpha=0.0)
    with pytest.raises(SubspacesError, match="refine.average must be true or false"):
        RefineParams(average="yes")
    with pytest.raises(SubspacesError, match="structure.n_runs must be an integer"):
        StructureParams(n_runs=2.5)
    with pytest.raises(SubspacesError, match="unknown refine setting.*iters; valid: n_iter, sample"):
        MiniVec2Vec.from_params({"refine": {"iters": 3}})
    with pytest.raises(SubspacesError, match="unknown aligner parameter.*refine_iter; valid: anchors"):
        MiniVec2Vec.from_params({"refine_iter": 3})
    with pytest.raises(SubspacesError, match=r"anchors.sample \(30\) must be at least 4 x anchors.n_clusters"):
        MiniVec2Vec(anchors=AnchorParams(sample=30)).check_params()  # a cross-field check, in check_together
    with pytest.raises(SubspacesError, match="refine must be a RefineParams"):
        MiniVec2Vec(refine={"n_iter": 3}).check_params()


@pytest.mark.filterwarnings("ignore::subspaces.errors.ConvergenceWarning")
def test_how_long_one_pass_ran_does_not_shift_the_next_passes_draws():
    """Each pass (and stage) draws from its own stream: a stopping rule that reads rounding-sensitive scores
    (the BLAS kernel differs between CPUs) cannot change what every later pass samples."""
    rng = np.random.default_rng(0)
    source, target = clustered(rng, 1000), clustered(rng, 1000)

    def passes(structure_rounds):
        settings = QUICK | {
            "n_restarts": 2,
            "converged_swap_share": None,
            "structure": StructureParams(n_iter=structure_rounds, patience=5, stop_swap_share=None),
        }
        return MiniVec2Vec(**settings).fit(source, target).diagnostics_.restarts

    short, long = passes(1), passes(3)
    assert len(short[0].structure_swapped) == 1 and len(long[0].structure_swapped) == 3
    for key in ("qap_agreement", "mean_qap_objective", "anchor_consistency_initial"):
        assert getattr(short[1], key) == getattr(long[1], key), key
    assert short[1].nn_similarity.initial == long[1].nn_similarity.initial
    assert short[1].structure_swapped[0] == long[1].structure_swapped[0]


FIT_AND_HASH = """
import hashlib, sys, numpy as np
sys.path.insert(0, {tests!r})
from test_align import QUICK, clustered
from subspaces.align import MiniVec2Vec
from subspaces.align.params import SearchParams
rng = np.random.default_rng(0)
search = SearchParams(probe_size=500, precision={precision!r})
aligner = MiniVec2Vec(**QUICK | {{"n_restarts": 2, "search": search}}).fit(clustered(rng, 1500), clustered(rng, 1500))
trust = aligner.diagnostics_.trust  # the verdict's inputs too, not only the map
verdict = repr((trust.final, trust.identity, trust.random_rotation, aligner.converged_)).encode()
print(hashlib.sha256(aligner.matrix_.tobytes() + verdict).hexdigest())
"""


def test_fit_runs_blas_on_one_thread_and_gives_the_threads_back(monkeypatch):
    """numpy's BLAS runs on one thread inside fit (torch's pool does the large products; two pools on the same
    cores cost 30 % of the fit's time), and the process's setting is what it was afterwards."""
    from threadpoolctl import threadpool_info, threadpool_limits

    import subspaces.align.aligner as aligner_module

    def blas_threads() -> list[int]:
        return [pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"]

    seen: list[list[int]] = []
    real = aligner_module.procrustes

    def watched(*args, **kwargs):
        seen.append(blas_threads())
        return real(*args, **kwargs)

    monkeypatch.setattr(aligner_module, "procrustes", watched)
    rng = np.random.default_rng(0)
    source = clustered(rng, 600)
    with threadpool_limits(limits=2, user_api="blas"):  # a setting fit must not keep
        MiniVec2Vec(**QUICK | {"n_restarts": 1}).fit(
            source, source[:, ::-1].copy(), pairs=(source[:50], source[:50, ::-1])
        )
        after = blas_threads()
    assert seen and all(threads and set(threads) == {1} for threads in seen)
    assert after and set(after) == {2}


@pytest.mark.parametrize("precision", ["bfloat16", "float32"])
def test_the_same_seed_gives_the_same_map_at_one_and_two_threads(precision):
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = FIT_AND_HASH.format(tests=str(Path(__file__).parent), precision=precision)
    hashes = []
    for threads in ("1", "2"):  # numpy's BLAS, faiss's OpenMP and BLAS all read these at start-up
        env = os.environ | {
            "OMP_NUM_THREADS": threads,
            "OPENBLAS_NUM_THREADS": threads,
            "MKL_NUM_THREADS": threads,
            "PYTHONWARNINGS": "ignore",
        }
        done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        hashes.append(done.stdout.strip())
    assert hashes[0] == hashes[1]


def test_a_map_no_better_than_the_identity_is_flagged():
    """Two samples of one space: the identity is the right map; an anchors-only map (no refinement) is worse."""
    rng = np.random.default_rng(0)
    source, target = clustered(rng, 1500), clustered(rng, 1500)
    weak = QUICK | {
        "structure": StructureParams(n_iter=0),
        "refine": RefineParams(n_iter=0, centroid_clusters=0),
        "anchors": replace(QUICK["anchors"], n_runs=1),
    }
    with pytest.warns(ConvergenceWarning, match="not clearly better than leaving the vectors unmapped"):
        aligner = MiniVec2Vec(**weak).fit(source, target)
    d = aligner.diagnostics_
    assert d.trust.lift <= aligner.trust_margin and d.trust.rows == [1500, 1500]
    assert aligner.converged_ is False and aligner.confidence_ == 0.0


def test_too_few_rows_for_trustworthy_clusters_warns():
    rng = np.random.default_rng(0)
    with pytest.warns(ConvergenceWarning, match="600 rows for 50 structure clusters"):
        aligner = MiniVec2Vec(**QUICK).fit(clustered(rng, 600), clustered(rng, 700))
    assert aligner.converged_ is False
    # refine-2's 40 centroids (15 rows each) are not warned about: that stage is kept only if the score holds.
    assert not any("refine.centroid" in problem for problem in aligner.diagnostics_.problems)


@pytest.mark.filterwarnings("ignore::subspaces.errors.ConvergenceWarning")
def test_fit_and_apply_progress_name_the_task_and_show_off_a_terminal(tmp_path, capsys):
    from subspaces.align.apply import apply_to_file

    rng = np.random.default_rng(0)
    aligner = MiniVec2Vec(**QUICK | {"verbose": True}).fit(clustered(rng, 1000), clustered(rng, 1000))
    err = capsys.readouterr().err
    assert "align fit: anchors (restart 1/1): 2/2 runs" in err and "align fit: refine (restart 1/1)" in err
    assert "\r" not in err  # plain lines when stderr is not a terminal, not a redrawn bar
    np.save(tmp_path / "x.npy", clustered(rng, 50))
    apply_to_file(aligner, tmp_path / "x.npy", tmp_path / "y.npy", show_progress=True)
    assert "align apply: mapping x.npy: 50/50 rows (100%)" in capsys.readouterr().err


def test_max_seconds_stops_at_the_next_safe_point_and_keeps_a_map(tmp_path):
    rng = np.random.default_rng(0)
    source, target = clustered(rng, 1500), clustered(rng, 1500)
    # The first safe point is before the identity candidate (which runs first); the anchored pass's initial map
    # is still made.
    with pytest.warns(ConvergenceWarning, match="stopped early: max_seconds=0 reached before the identity candidate"):
        aligner = MiniVec2Vec(**FAST | {"max_seconds": 0}).fit(source, target)
    d = aligner.diagnostics_
    assert aligner.stopped_early_ and d.stopped_early and "max_seconds=0" in d.stop_reason
    assert d.identity_reference.skipped == "out of time" and d.kept == "anchors"
    (only,) = d.restarts  # no further restart began
    assert only.runs_kept == 1  # one anchor run, then the initial map; no refinement step ran
    assert only.structure_iterations == only.refine1_iterations == 0
    assert only.nn_similarity.refine2 is None
    assert aligner.transform(source[:3]).shape == (3, 8)
    aligner.save(tmp_path / "a")
    assert MiniVec2Vec.load(tmp_path / "a").stopped_early_ is True


@pytest.mark.filterwarnings("ignore::subspaces.errors.ConvergenceWarning")
def test_a_budget_that_is_not_reached_changes_nothing():
    rng = np.random.default_rng(0)
    source, target = clustered(rng, 1000), clustered(rng, 1000)
    free = MiniVec2Vec(**QUICK).fit(source, target)
    bounded = MiniVec2Vec(**QUICK | {"max_seconds": 1e6}).fit(source, target)
    np.testing.assert_array_equal(free.matrix_, bounded.matrix_)
    assert bounded.stopped_early_ is False and bounded.diagnostics_.stop_reason is None
    # An infinite budget is no budget: the same fit as None (unconverged passes refined lazily), saved as null.
    endless = MiniVec2Vec(**QUICK | {"max_seconds": float("inf")}).fit(source, target)
    np.testing.assert_array_equal(free.matrix_, endless.matrix_)
    assert endless.to_params()["max_seconds"] is None


def test_the_library_refuses_to_apply_an_untrusted_map_unless_forced(tmp_path):
    from subspaces.align.apply import apply_to_file

    rng = np.random.default_rng(0)
    aligner = MiniVec2Vec(**QUICK).fit(clustered(rng, 1000), clustered(rng, 1000))
    np.save(tmp_path / "in.npy", clustered(rng, 20).astype(np.float32))
    aligner.diagnostics_.problems = ["a problem"]
    assert aligner.converged_ is False  # read from the diagnostics, not a copy of them
    with pytest.raises(SubspacesError, match=r"this map is not trusted \(a problem\); refit, or pass --force"):
        apply_to_file(aligner, tmp_path / "in.npy", tmp_path / "out.npy")
    assert apply_to_file(aligner, tmp_path / "in.npy", tmp_path / "out.npy", force=True) == 20


def gaussian_spaces(rng: np.random.Generator, dim: int = 16):
    """A hard case for unpaired alignment: nearly isotropic Gaussians have no shape for a matching to find."""
    scale = np.geomspace(2, 1, dim)
    q = ortho_group.rvs(dim, random_state=1)

    def draw(n):
        return rng.normal(size=(n, dim)) * scale

    return draw, q


def test_known_pairs_recover_a_rotation_the_unpaired_fit_misses():
    rng = np.random.default_rng(0)
    draw, q = gaussian_spaces(rng)
    source, target, held, paired = draw(2000), draw(2000) @ q, draw(500), draw(50)
    unpaired = MiniVec2Vec(**FAST).fit(source, target)
    with_pairs = MiniVec2Vec(**FAST).fit(source, target, pairs=(paired, paired @ q))
    assert evaluate_alignment(unpaired, held, held @ q).top1 < 0.2
    assert evaluate_alignment(with_pairs, held, held @ q).top1 > 0.98
    d = with_pairs.diagnostics_
    assert d.n_pairs == 50 and len(d.restarts) == 1  # the pairs replace the anchors: one pass
    assert d.restarts[0].runs_kept == 0 and d.restarts[0].qap_agreement is None


def test_known_pairs_stay_fixed_anchors_in_every_refinement_step():
    """A step on the true map moves it; with the true pairs weighed heavily in the fit it stays put."""
    rng = np.random.default_rng(0)
    draw, q = gaussian_spaces(rng, dim=8)
    a, b = center_normalize(draw(1000), np.zeros(8)), center_normalize(draw(1000) @ q, np.zeros(8))
    p = center_normalize(draw(100), np.zeros(8))
    free = NeighbourStep(a, b, np.random.default_rng(0), RefineParams(k=10, bidirectional=False))
    anchored = replace(
        free, rng=np.random.default_rng(0), pairs=(p, p @ q), params=replace(free.params, pair_weight=100.0)
    )
    assert np.abs(anchored(q) - q).max() < 0.5 * np.abs(free(q) - q).max()


@pytest.mark.parametrize(
    ("pairs", "error", "message"),
    [
        (lambda p: (p, p[:-1]), DataError, "one row per pair, got 50 and 49"),
        (lambda p: (p, np.where(np.arange(8) == 3, np.nan, p)), DimensionError, "NaN or inf"),
        (lambda p: (p, p[:, :6]), DimensionError, "paired target embeddings have 6 dimensions, the target ones 8"),
        (lambda p: (p[:, :5], p), DimensionError, "paired source embeddings have 5 dimensions"),
        (lambda p: (p[:1], p[:1]), DataError, "at least 2 known pairs"),
        (lambda p: p, SubspacesError, "pairs must be two arrays"),
    ],
)
def test_bad_known_pairs_are_a_clear_error(pairs, error, message):
    rng = np.random.default_rng(0)
    with pytest.raises(error, match=message):
        MiniVec2Vec(**QUICK).fit(clustered(rng, 1000), clustered(rng, 1000), pairs=pairs(clustered(rng, 50)))


@pytest.mark.parametrize(
    ("final", "identity", "control", "margin", "flagged"),
    [
        (0.50, None, 0.30, 0.0, None),  # dims differ, above chance
        (0.30, None, 0.30, 0.0, "random rotation"),  # at chance
        (0.50, 0.40, 0.30, 0.0, None),  # beats the identity
        (0.40, 0.40, 0.30, 0.0, "unmapped"),  # ties the identity
        (0.30, 0.45, 0.30, 0.0, "unmapped"),  # below the identity (issue 24's 0.045 map)
        (0.50, 0.40, 0.30, 0.5, "unmapped"),  # beats it by a third of chance level, not by half
        (0.60, 0.40, 0.30, 0.5, None),  # by two thirds
        (0.40, 0.20, 0.30, 0.5, "random rotation"),  # an identity below chance: the control is the trivial map
    ],
)
def test_trust_rule_against_identity_and_random_rotation(final, identity, control, margin, flagged):
    from subspaces.align.verify import trust_problem

    problem = trust_problem(final, identity, control, margin=margin)
    assert problem is None if flagged is None else flagged in problem


def test_the_trust_score_ranks_a_hub_making_map_below_the_true_one():
    """Mapped points crowded around the densest target row (+ noise) lie closer to target rows than the true
    map's do, so the plain neighbour similarity prefers them; CSLS discounts the crowding and does not."""
    from subspaces.align.verify import cross_similarities, csls_score, mean_nn_similarity, trust_score

    rng = np.random.default_rng(0)
    q = ortho_group.rvs(8, random_state=1)
    source, target = clustered(rng, 1500), clustered(rng, 1500) @ q
    a, b = center_normalize(source, source.mean(0)), center_normalize(target, target.mean(0))
    hub = b[(b @ b.T > 0.95).sum(1).argmax()]
    crowded = normalize_rows(hub + 0.05 * rng.normal(size=(len(a), 8)))
    eye = np.eye(8)
    assert mean_nn_similarity(crowded, b, eye) > mean_nn_similarity(a, b, q)  # the old score is fooled
    assert csls_score(cross_similarities(crowded, b, eye)) < trust_score(a, b, q)
    assert trust_score(a, b, q) > trust_score(a, b, ortho_group.rvs(8, random_state=2))  # above chance


def test_a_fit_to_a_shuffled_target_is_not_trusted():
    """Each target coordinate shuffled across rows: no map exists, whatever the fit's own score says."""
    rng = np.random.default_rng(0)
    source, target = clustered(rng, 2000), clustered(rng, 2000) @ ortho_group.rvs(8, random_state=1)
    shuffled = np.stack([rng.permutation(column) for column in target.T], axis=1)
    with pytest.warns(ConvergenceWarning, match="no two independent passes of the alignment agree"):
        aligner = MiniVec2Vec(**FAST).fit(source, shuffled)
    d = aligner.diagnostics_
    assert aligner.converged_ is False and aligner.confidence_ == 0.0
    assert d.agreement.agreement < aligner.agreement_threshold
    # (Here the structure and the trust score catch it too; on the dev pools' shuffled targets they did not.)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        unchecked = MiniVec2Vec(**FAST | {"agreement_threshold": None}).fit(source, shuffled)
    assert unchecked.diagnostics_.agreement.skipped == "agreement_threshold is None"
    # Here no pass converged, so the search compared none: the kept map is the restarts' choice.
    assert np.array_equal(unchecked.matrix_, aligner.matrix_)


def test_a_good_fit_agrees_with_an_independent_pass():
    rng = np.random.default_rng(1)  # seeds 0-7: the check pass agrees at once on 6 (0.999-1.0), 0.615 on one
    q = ortho_group.rvs(8, random_state=1)
    source, target = clustered(rng, 2000), clustered(rng, 2000) @ q
    aligner = MiniVec2Vec(**FAST | {"random_state": 1}).fit(source, target)
    check = aligner.diagnostics_.agreement
    assert check.agreement > 0.9 and check.skipped is None and check.threshold == 0.55
    assert aligner.confidence_ == pytest.approx(min(check.agreement, 1.0))
    # An agreeing check pass is refined too, and the better of the two maps by final neighbour similarity is kept.
    assert set(check.check_stage_seconds) == {"anchors_and_initial_map", "structure", "refine1", "refine2"}
    restarts = aligner.diagnostics_.restarts
    assert restarts[-1].label == "agreement check" and restarts[-1].refined
    candidates = [i for i, r in enumerate(restarts) if r.refined]  # the kept restart and the check pass
    finals = {i: restarts[i].nn_similarity.final for i in candidates}
    assert len(candidates) == 2 and aligner.diagnostics_.chosen_restart == max(finals, key=finals.get)
    # agreement_search=0: the check only judges; it is not refined and the map is the restarts' own.
    judged = MiniVec2Vec(**FAST | {"random_state": 1, "agreement_search": 0}).fit(source, target)
    assert "agreement check" not in [r.label for r in judged.diagnostics_.restarts]
    assert judged.diagnostics_.agreement.agreement == check.agreement


def test_the_agreement_search_finds_a_right_map_where_the_restarts_held_none():
    """Weak anchors and one restart: the kept pass is wrong and the check disagrees; the search refines more
    passes until two converged ones agree, and keeps the best-scoring of them (issue 24's small pools)."""
    rng = np.random.default_rng(2)  # seeds 0-11: the search ran on 5, found a right map on 3
    q = ortho_group.rvs(8, random_state=2)
    source, target, held = clustered(rng, 1500), clustered(rng, 1500) @ q, clustered(rng, 500)
    settings = FAST | {"anchors": replace(FAST["anchors"], n_runs=3, kmeans_redo=1), "n_restarts": 1}

    def top1(aligner: MiniVec2Vec) -> float:
        x, y = aligner.transform(held, centered=True), aligner.preprocess_target(held @ q)
        return float(np.mean(np.argmax(x @ y.T, axis=1) == np.arange(len(y))))

    with pytest.warns(ConvergenceWarning, match="no two independent passes of the alignment agree"):
        judged = MiniVec2Vec(**settings | {"random_state": 2, "agreement_search": 0}).fit(source, target)
    assert top1(judged) < 0.1 and judged.converged_ is False
    searched = MiniVec2Vec(**settings | {"random_state": 2}).fit(source, target)
    d = searched.diagnostics_
    assert top1(searched) > 0.95 and searched.converged_ is True
    assert d.agreement.agreement >= 0.55 and d.agreement.search.new_passes >= 2
    labels = [r.label for r in d.restarts]
    assert labels[:2] == ["restart 1/1", "agreement check"] and labels[d.chosen_restart] != "restart 1/1"
    pairs = {(i, j): value for i, j, value in d.agreement.search.pairwise}
    agreeing = {i for pair, value in pairs.items() if value >= 0.55 for i in pair}
    assert d.chosen_restart in agreeing
    finals = {i: d.restarts[i].nn_similarity.final for i in agreeing}
    assert finals[d.chosen_restart] == max(finals.values())
    # The search's new passes try the second partition scale first, then the restarts' own, in turn.
    new = [r.anchor_clusters for r in d.restarts if r.label.startswith("search pass")]
    assert new and new == [40, 10, 40, 10][: len(new)] and d.restarts[0].anchor_clusters == 10
    # Where the rows cannot hold the second scale (4 x 1,000 > 1,500), the search keeps the restarts' count.
    kept = MiniVec2Vec(**settings | {"random_state": 2, "search_anchor_clusters": 1000}).fit(source, target)
    counts = {r.anchor_clusters for r in kept.diagnostics_.restarts}
    assert counts == {10} and kept.diagnostics_.agreement.search.new_passes >= 2


def test_known_pairs_skip_the_agreement_check():
    rng = np.random.default_rng(0)
    q = ortho_group.rvs(8, random_state=1)
    source, pairs = clustered(rng, 1500), clustered(rng, 50)
    aligner = MiniVec2Vec(**QUICK).fit(source, clustered(rng, 1500) @ q, pairs=(pairs, pairs @ q))
    assert aligner.diagnostics_.agreement.skipped == "known pairs anchor every pass alike"


@pytest.mark.filterwarnings("ignore::subspaces.errors.ConvergenceWarning")
def test_enough_known_pairs_judge_the_map_instead_of_the_structural_swap_share():
    """A swap-share threshold of 0 fails every structural stage (as utterances' overlapping clusters did at 10 %,
    issue 24); 50 right pairs judge the map instead and trust it, 10 pairs are too few to judge by."""
    rng = np.random.default_rng(0)
    q = ortho_group.rvs(8, random_state=1)
    source, target, pairs = clustered(rng, 1500), clustered(rng, 1500) @ q, clustered(rng, 50)
    strict = QUICK | {"converged_swap_share": 0.0, "structure": StructureParams(stop_swap_share=None)}
    judged = MiniVec2Vec(**strict).fit(source, target, pairs=(pairs, pairs @ q))
    check = judged.diagnostics_.paired_check
    assert check.judged and check.pairs == 50 and check.top1 > 0.9
    assert judged.diagnostics_.converged is False  # the structure did not settle at 0 %...
    assert judged.converged_ and judged.confidence_ == check.top1  # ...but the pairs vouch for the map
    few = MiniVec2Vec(**strict).fit(source, target, pairs=(pairs[:10], pairs[:10] @ q))
    assert not few.diagnostics_.paired_check.judged and few.converged_ is False
    assert any("converged" in problem for problem in few.diagnostics_.problems)


@pytest.mark.parametrize(
    ("n", "d_out", "scramble", "judged", "flagged"),
    [
        (19, 8, False, False, False),  # too few to judge
        (20, 8, False, True, False),  # right map, top-1 1.0, tying the identity's 1.0: not a failure
        (20, 8, True, True, True),  # a map that places none of them
        (200, 12, False, True, False),  # dims differ: no identity to compare with
        (200, 12, True, True, True),
    ],
)
def test_the_paired_check(n, d_out, scramble, judged, flagged):
    from subspaces.align.aligner import _random_orthogonal
    from subspaces.align.verify import paired_check

    rng = np.random.default_rng(0)
    right = _random_orthogonal(8, d_out, rng) if d_out != 8 else np.eye(8, dtype=np.float32)
    source = center_normalize(rng.normal(size=(n, 8)), np.zeros(8))
    target = source @ right
    matrix = _random_orthogonal(8, d_out, rng) if scramble else right
    identity = np.eye(8, dtype=np.float32) if d_out == 8 else None
    check = paired_check((source, target), matrix, identity)
    assert check.judged is judged and (check.problem is not None) is (judged and flagged)
    assert check.pairs == check.scored == n and (check.identity_top1 is None) is (identity is None)
    if scramble:
        assert check.top1 < 0.5
    else:
        assert check.top1 == 1.0


def test_the_paired_check_counts_repeated_texts_and_scores_a_bounded_subset(monkeypatch):
    import subspaces.align.verify as diagnostics

    rng = np.random.default_rng(0)
    source = center_normalize(rng.normal(size=(30, 8)), np.zeros(8))
    repeated = np.concatenate([source, source[:10]])  # the same text twice: a tie, found either way
    eye = np.eye(8, dtype=np.float32)
    assert diagnostics.paired_check((repeated, repeated), eye, None).top1 == 1.0
    monkeypatch.setattr(diagnostics, "MAX_JUDGING_PAIRS", 25)
    check = diagnostics.paired_check((source, source), eye, eye)
    assert check.pairs == 30 and check.scored == 25


def test_known_pairs_that_the_map_does_not_place_are_flagged():
    """Pairs whose rows do not belong together (a shuffled pair file) pull the map nowhere useful: flagged."""
    rng = np.random.default_rng(0)
    q = ortho_group.rvs(8, random_state=1)
    source, target, pairs = clustered(rng, 1500), clustered(rng, 1500) @ q, clustered(rng, 200)
    shuffled = (pairs, (pairs @ q)[rng.permutation(200)])
    with pytest.warns(ConvergenceWarning, match="known pairs' source texts nearest their own target vectors"):
        aligner = MiniVec2Vec(**QUICK | {"refine": replace(QUICK["refine"], pair_weight=50.0)}).fit(
            source, target, pairs=shuffled
        )
    assert aligner.converged_ is False and aligner.confidence_ == 0.0
    assert aligner.diagnostics_.paired_check.top1 < 0.5


@pytest.mark.parametrize(("d_in", "d_out"), [(8, 8), (8, 12), (12, 8)])
def test_random_rotation_control_is_semi_orthogonal(d_in, d_out):
    from subspaces.align.aligner import _random_orthogonal

    w = _random_orthogonal(d_in, d_out, np.random.default_rng(0))
    assert w.shape == (d_in, d_out) and orthogonality_gap(w) < 1e-5


def test_a_good_fit_beats_the_random_rotation_control():
    rng = np.random.default_rng(0)
    q = ortho_group.rvs(8, random_state=1)
    aligner = MiniVec2Vec(**FAST).fit(clustered(rng, 2000), clustered(rng, 2000) @ q)
    d = aligner.diagnostics_
    assert d.nn_similarity.final > d.random_rotation_nn_similarity + 0.05
    assert d.trust.final > d.trust.random_rotation and d.trust.lift > aligner.trust_margin


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ({"max_seconds": -1}, "max_seconds must be"),
        ({"trust_margin": -0.1}, "trust_margin must be a number of at least 0"),
        ({"agreement_threshold": 1.5}, "agreement_threshold must be a number in"),
        ({"agreement_threshold": True}, "agreement_threshold must be a number in"),
        ({"agreement_search": -1}, "agreement_search must be an integer of at least 0"),
        ({"agreement_search": 1.5}, "agreement_search must be an integer of at least 0"),
        ({"search_anchor_clusters": 2}, "search_anchor_clusters must be an integer of at least 3 or None"),
        ({"search_anchor_clusters": True}, "search_anchor_clusters must be an integer of at least 3 or None"),
    ],
)
def test_budget_and_trust_settings_are_checked(setting, message):
    with pytest.raises(SubspacesError, match=message):
        MiniVec2Vec(**QUICK | setting).check_params()


def test_map_agreement_is_the_mean_cosine_of_the_rows_mapped_by_each():
    from subspaces.align.verify import map_agreement

    rng = np.random.default_rng(0)
    rows, q = rng.normal(size=(200, 8)), np.linalg.qr(rng.normal(size=(8, 8)))[0]
    assert map_agreement(rows, q, q) == pytest.approx(1.0)
    assert map_agreement(rows, q, -q) == pytest.approx(-1.0)
    other = np.linalg.qr(rng.normal(size=(8, 8)))[0]  # an unrelated rotation: near chance, far from 1
    assert abs(map_agreement(rows, q, other)) < 0.5


def test_blocked_float32_product_gives_the_same_bits_at_any_thread_count():
    """The float32 search product runs in fixed row blocks on torch's thread count; the blocks, not the threads,
    decide the bits (OpenBLAS's own threading gave other bits at 2 threads than at 1 on an AMD CPU)."""
    import torch

    from subspaces.align.precision import BLOCK_ROWS, blocked_product

    rng = np.random.default_rng(0)
    rows = rng.normal(size=(3 * BLOCK_ROWS + 7, 64)).astype(np.float32)  # a short last block too
    columns = np.ascontiguousarray(rng.normal(size=(500, 64)).astype(np.float32).T)
    threads = torch.get_num_threads()
    try:
        products = []
        for count in (1, 2, 3):
            torch.set_num_threads(count)
            products.append(blocked_product(rows, columns))
    finally:
        torch.set_num_threads(threads)
    assert all(np.array_equal(products[0], p) for p in products[1:])
    np.testing.assert_allclose(products[0], rows @ columns, rtol=1e-5, atol=1e-4)


@pytest.mark.filterwarnings("ignore::subspaces.errors.ConvergenceWarning")
def test_polish_continues_a_capped_refine1_and_keeps_the_map_only_if_the_trust_score_rises():
    """Refine-1 capped at 3 steps with no patience stop is 'still climbing': polishing runs, its trust scores are
    recorded, and the map kept is the polished one exactly when the trust score rose. With ``polish_iter=0`` (and
    where refine-1 stopped by patience) the kept map is the pass's own: the passes' streams do not move."""
    rng = np.random.default_rng(0)
    q = ortho_group.rvs(8, random_state=1)
    source, target = clustered(rng, 1500), clustered(rng, 1500) @ q
    capped = replace(QUICK["refine"], n_iter=3, patience=100, score_every=1, polish_iter=0)
    settings = QUICK | {"agreement_threshold": None}
    plain = MiniVec2Vec(**settings | {"refine": capped}).fit(source, target)
    polished = MiniVec2Vec(**settings | {"refine": replace(capped, polish_iter=20)}).fit(source, target)
    assert plain.diagnostics_.polish.to_dict() == {
        "ran": False, "iterations": 0, "trust_before": None, "trust_after": None, "accepted": False
    }  # fmt: skip
    p = polished.diagnostics_.polish
    assert p.ran and 1 <= p.iterations <= 20 and p.accepted == (p.trust_after > p.trust_before)
    same = np.array_equal(polished.matrix_, plain.matrix_)
    assert same != p.accepted  # the polished map where accepted, else the pass's own, bit for bit
    # judged among its own iterates, the polish always offers a map other than its start
    assert p.trust_after != p.trust_before
    np.testing.assert_array_equal(polished.pass_maps_[0]["final"], plain.pass_maps_[0]["final"])
    # A refine-1 stopped by its patience is not climbing: nothing to polish.
    patient = replace(QUICK["refine"], n_iter=200, patience=2, score_every=1, polish_iter=20)
    settled = MiniVec2Vec(**settings | {"refine": patient}).fit(source, target)
    assert settled.diagnostics_.restarts[0].refine1_stopped_early and not settled.diagnostics_.polish.ran


def test_polish_does_not_run_with_known_pairs():
    rng = np.random.default_rng(0)
    q = ortho_group.rvs(8, random_state=1)
    source, pairs = clustered(rng, 1500), clustered(rng, 50)
    capped = replace(QUICK["refine"], n_iter=3, patience=100, score_every=1, polish_iter=20)
    aligner = MiniVec2Vec(**QUICK | {"refine": capped}).fit(source, clustered(rng, 1500) @ q, pairs=(pairs, pairs @ q))
    assert aligner.diagnostics_.restarts[0].refine1_iterations == 3 and not aligner.diagnostics_.polish.ran


def test_init_identity_starts_from_the_vectors_as_they_are_and_needs_equal_dims():
    """Two samples of one near-isotropic space: no shape for anchors to match, and the identity is the right map."""
    rng = np.random.default_rng(0)
    draw, _ = gaussian_spaces(rng)
    source, target, held = draw(2000), draw(2000), draw(500)
    aligner = MiniVec2Vec(**FAST | {"init": "identity"}).fit(source, target)
    assert evaluate_alignment(aligner, held, held).top1 > 0.95 and aligner.converged_
    d = aligner.diagnostics_
    assert [r.label for r in d.restarts] == ["identity start"] and d.restarts[0].qap_agreement is None
    assert d.agreement.skipped.startswith("init='identity'") and d.identity_reference.skipped
    with pytest.raises(DimensionError, match="init='identity' needs equal dims"):
        MiniVec2Vec(**QUICK | {"init": "identity"}).fit(source, target[:, :8])
    with pytest.raises(SubspacesError, match="init must be one of auto, anchors, identity"):
        MiniVec2Vec(init="eye").fit(source, target)


def test_the_identity_candidate_is_kept_where_it_clearly_beats_the_anchored_map_and_only_flags_with_anchors():
    """Two samples of one space, so the identity is right; one weak anchored pass (one k-means run, no structural
    stage, no check) lands in a wrong basin on seed 0 and in the right one on seed 1 (seeds 0-3: 3 wrong).
    ``init="anchors"`` flags the wrong map and keeps it; ``"auto"`` (the default) keeps the identity candidate."""
    weak = FAST | {
        "n_restarts": 1,
        "agreement_threshold": None,
        "structure": StructureParams(n_iter=0),
        "anchors": replace(FAST["anchors"], n_runs=1, kmeans_redo=1),
    }
    assert MiniVec2Vec().init == "auto"
    for seed, wrong in ((0, True), (1, False)):
        rng = np.random.default_rng(seed)
        source, target, held = clustered(rng, 2000), clustered(rng, 2000), clustered(rng, 500)
        fits = {}
        for init in ("anchors", "auto"):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                aligner = MiniVec2Vec(**weak | {"random_state": seed, "init": init}).fit(source, target)
            fits[init] = (aligner, evaluate_alignment(aligner, held, held).top1, caught)
        anchored, top1, caught = fits["anchors"]
        reference = anchored.diagnostics_.identity_reference
        flagged = any("init='identity'" in str(w.message) for w in caught)
        assert (top1 < 0.1, reference.lift > IDENTITY_REFERENCE_MARGIN, flagged) == (wrong, wrong, wrong)
        assert reference.seconds > 0 and (anchored.converged_ is False or not wrong)
        assert anchored.diagnostics_.kept == "anchors"
        auto, auto_top1, caught = fits["auto"]
        # The same anchored pass and the same candidate: "auto" differs only in which map it keeps.
        timing = auto.diagnostics_.identity_reference
        assert timing == replace(reference, seconds=timing.seconds, cpu_seconds=timing.cpu_seconds)
        if wrong:
            assert auto.diagnostics_.kept == "identity reference" and auto_top1 > 0.9
            assert not any("init='identity'" in str(w.message) for w in caught)
            assert auto.diagnostics_.trust.final >= reference.trust  # the candidate's, polished or not
            # The map's own diagnostics describe the candidate, not the anchored restart that was not kept.
            assert auto.diagnostics_.anchor_consistency is None
            assert auto.diagnostics_.nn_similarity.final == reference.nn_similarity
        else:
            assert auto.diagnostics_.kept == "anchors"
            np.testing.assert_array_equal(auto.matrix_, anchored.matrix_)
    # (Seed 1's right map is flagged too, by the trust check: here the unrefined identity is as right as it.)


@pytest.mark.filterwarnings("ignore::subspaces.errors.ConvergenceWarning")
def test_the_identity_reference_leaves_a_right_map_alone():
    """Where the identity is right the reference lands in the anchored map's basin; where the target is rotated
    it starts at chance. Neither flags nor replaces a right map: the map is the anchors' own either way."""
    rng = np.random.default_rng(0)
    source, target, held = clustered(rng, 2000), clustered(rng, 2000), clustered(rng, 500)
    q = ortho_group.rvs(8, random_state=1)
    # float32 pinned: the rotation control below compares two fits whose products round differently (a rotated
    # basis); float32's 6e-8 a product stays under 1e-3 through the fit, bfloat16's 4e-3 moved this map by 0.02.
    settings = FAST | {"search": replace(FAST["search"], precision="float32")}
    maps = {}
    for name, truth in (("plain", np.eye(8)), ("rotated", q)):
        aligner = MiniVec2Vec(**settings).fit(source, target @ truth)
        reference = aligner.diagnostics_.identity_reference
        assert reference.trust is not None and reference.lift <= IDENTITY_REFERENCE_MARGIN
        assert aligner.converged_ and evaluate_alignment(aligner, held, held @ truth).top1 > 0.9
        assert aligner.diagnostics_.kept == "anchors"
        maps[name] = aligner.matrix_
    # The rotation control: the same fit on the rotated target gives the rotated map (the reference draws last).
    assert np.abs(maps["rotated"] - maps["plain"] @ q).max() < 1e-3
    # Not run where the dims differ, nor with known pairs (they judge against the identity themselves).
    narrow = MiniVec2Vec(**QUICK).fit(source, target[:, :6])
    assert narrow.diagnostics_.identity_reference.skipped == "the dims differ"
    paired = MiniVec2Vec(**QUICK).fit(source, target, pairs=(held[:30], held[:30]))
    assert paired.diagnostics_.identity_reference.skipped.startswith("known pairs")
