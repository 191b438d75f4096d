import pytest
import torch

from subspaces.errors import DimensionError, SubspacesError
from subspaces.models.heads import (
    HypernetHead,
    check_head_fits,
    head_from_config,
    head_parameter_count,
    make_head,
)

D = 24


@pytest.fixture
def batch():
    g = torch.Generator().manual_seed(0)
    s = torch.nn.functional.normalize(torch.randn(5, D, generator=g), dim=-1)
    c = torch.nn.functional.normalize(torch.randn(5, D, generator=g), dim=-1)
    return s, c


@pytest.mark.parametrize(("kind", "rank"), [("hadamard", None), ("concat", None), ("hypernet", 4), ("hypernet", None)])
def test_shapes_and_split_equals_forward(kind, rank, batch):
    s, c = batch
    torch.manual_seed(0)
    head = make_head(kind, D, rank)
    out = head(s, c)
    assert out.shape == (5, D)
    assert torch.allclose(out, head.project(s, head.condition_params(c)), atol=1e-6)
    assert sum(p.numel() for p in head.parameters()) == head_parameter_count(kind, D, rank)


def test_low_rank_equals_explicit_product(batch):
    s, c = batch
    torch.manual_seed(1)
    head = make_head("hypernet", D, 3)
    w1, w2 = head.condition_params(c)
    assert w1.shape == w2.shape == (5, D, 3)
    w = head.projection_matrix(c)
    assert w.shape == (5, D, D)
    assert all(int(torch.linalg.matrix_rank(m)) == 3 for m in w)
    explicit = torch.einsum("bij,bj->bi", w1 @ w2.transpose(1, 2), s)
    assert torch.allclose(head(s, c), explicit, atol=1e-5)
    assert torch.allclose(head(s, c), torch.einsum("bij,bj->bi", w, s), atol=1e-5)


def test_full_rank_matrix_is_full(batch):
    s, c = batch
    torch.manual_seed(2)
    head = make_head("hypernet", D, None)
    w = head.projection_matrix(c)
    assert w.shape == (5, D, D)
    assert int(torch.linalg.matrix_rank(w[0])) == D
    assert torch.allclose(head(s, c), torch.einsum("bij,bj->bi", w, s), atol=1e-5)


def test_hadamard_is_diagonal_and_starts_as_plain_product(batch):
    s, c = batch
    head = make_head("hadamard", D)
    assert torch.allclose(head(s, c), s * c)  # the condition transform starts at the identity
    w = head.projection_matrix(c)
    assert torch.allclose(w, torch.diag_embed(c))


def test_concat_has_no_projection_matrix(batch):
    _, c = batch
    with pytest.raises(SubspacesError, match="not a per-condition linear map"):
        make_head("concat", D).projection_matrix(c)


def test_hypernet_init_keeps_scale():
    torch.manual_seed(0)
    d = 128
    s = torch.nn.functional.normalize(torch.randn(64, d), dim=-1)
    c = torch.nn.functional.normalize(torch.randn(64, d), dim=-1)
    for rank in (8, None):
        norms = make_head("hypernet", d, rank)(s, c).norm(dim=-1)
        assert 0.3 < norms.mean() < 3.0


def test_condition_changes_projection(batch):
    s, c = batch
    head = make_head("hypernet", D, 4)
    assert not torch.allclose(head(s, c), head(s, c.flip(0)))


def test_errors():
    with pytest.raises(SubspacesError, match="unknown head"):
        make_head("attention", D)
    with pytest.raises(SubspacesError, match="rank must be"):
        make_head("hypernet", D, D + 1)
    with pytest.raises(SubspacesError, match="GiB.*--rank 85"):
        check_head_fits("hypernet", 1024, None, memory_bytes=8 * 2**30)
    check_head_fits("hypernet", 1024, 85, memory_bytes=8 * 2**30)
    with pytest.raises(DimensionError):
        make_head("hadamard", D)(torch.zeros(2, D), torch.zeros(3, D))


def test_config_round_trip(batch):
    s, c = batch
    head = make_head("hypernet", D, 5)
    clone = head_from_config(head.config())
    assert isinstance(clone, HypernetHead) and clone.rank == 5
    clone.load_state_dict(head.state_dict())
    assert torch.allclose(clone(s, c), head(s, c))


@pytest.mark.parametrize(("kind", "rank"), [("hypernet", 4), ("hypernet", None), ("hadamard", None), ("concat", None)])
def test_conditional_search_equals_the_explicit_product(kind, rank):
    from subspaces.models.heads import conditional_cosines, conditional_search, corpus_view

    g = torch.Generator().manual_seed(2)
    corpus, queries, c = torch.randn(50, D, generator=g), torch.randn(3, D, generator=g), torch.randn(1, D, generator=g)
    torch.manual_seed(3)
    head = make_head(kind, D, rank).eval()
    with torch.no_grad():
        params = head.condition_params(c)
        if kind == "hypernet":  # brute force: the d×d matrix W_c applied to every row and query
            w = head.projection_matrix(c)[0]
            want = torch.nn.functional.normalize(queries @ w.T, dim=1) @ torch.nn.functional.normalize(corpus @ w.T).T
        else:
            want = torch.nn.functional.cosine_similarity(
                head(queries.repeat_interleave(50, 0), c.expand(150, D)), head(corpus.repeat(3, 1), c.expand(150, D))
            ).view(3, 50)
    view = corpus_view(head, corpus, params, block_rows=16)  # several blocks
    if kind == "hypernet" and rank is not None:
        assert view.rows.shape == (50, 4)  # the corpus in the K-dim factor space, not N×d
    if kind == "hadamard":
        assert view.rows is None  # the corpus itself, plus N norms
    assert torch.allclose(conditional_cosines(head, queries, params, view, corpus), want, atol=1e-5)
    scores, rows = conditional_search(head, queries, params, corpus, k=5)
    assert (rows == torch.argsort(want, dim=1, descending=True)[:, :5].numpy()).all()
    assert scores.shape == (3, 5)


def test_conditional_search_scores_a_zero_projection_as_zero_and_checks_shapes():
    from subspaces.models.heads import conditional_search

    head = make_head("hadamard", D).eval()
    corpus = torch.randn(6, D)
    corpus[2] = 0.0
    scores, rows = conditional_search(head, corpus[:1], head.condition_params(torch.ones(1, D)), corpus, k=6)
    assert scores[0][list(rows[0]).index(2)] == 0.0
    with pytest.raises(DimensionError, match="the head reads 24"):
        conditional_search(head, torch.randn(1, 8), head.condition_params(torch.ones(1, D)), corpus)
    with pytest.raises(SubspacesError, match="k must be"):
        conditional_search(head, corpus[:1], head.condition_params(torch.ones(1, D)), corpus, k=0)
