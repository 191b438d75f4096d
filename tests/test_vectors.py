import numpy as np
import pytest
import torch

from subspaces.errors import DimensionError
from subspaces.vectors import (
    check_finite,
    check_rows,
    cosine_rows,
    normalize_rows,
    parse_dims,
    principal_axes,
    resolve_dims,
    unit_prefix,
)


def test_unit_prefix_renormalises_the_first_coordinates_and_keeps_zero_rows_and_dtypes():
    x = np.array([[3.0, 4.0, 12.0], [0.0, 0.0, 1.0]])
    np.testing.assert_allclose(unit_prefix(x, 2), [[0.6, 0.8], [0.0, 0.0]])
    assert unit_prefix(x.astype(np.float32), 2).dtype == np.float32
    assert unit_prefix(x).dtype == np.float64
    np.testing.assert_allclose(np.linalg.norm(unit_prefix(x), axis=1), 1.0)
    for bad in (0, 4):
        with pytest.raises(DimensionError, match="outside 1..3"):
            unit_prefix(x, bad)


def test_tensors_are_normalised_by_torch_bit_for_bit():
    x = torch.randn(50, 33)
    assert torch.equal(unit_prefix(x, 8), torch.nn.functional.normalize(x[:, :8], dim=-1))
    assert torch.equal(normalize_rows(x), torch.nn.functional.normalize(x, dim=-1))


def test_cosine_rows_pairs_rows():
    a = np.array([[1.0, 0.0], [1.0, 1.0], [0.0, 0.0]])
    b = np.array([[2.0, 0.0], [-1.0, -1.0], [1.0, 0.0]])
    np.testing.assert_allclose(cosine_rows(a, b), [1.0, -1.0, 0.0])


def test_dims_parse_in_the_given_order_and_resolve_in_the_order_asked_for():
    assert parse_dims("16, 32,full,16") == [16, 32, None, 16]
    for bad in ("", "a", "0"):
        with pytest.raises(DimensionError):
            parse_dims(bad)
    assert resolve_dims([32, None, 8, 32], 64, order="given") == [32, 64, 8]
    assert resolve_dims([32, None, 8, 32], 64, order="descending") == [64, 32, 8]
    assert resolve_dims([32, None, 8, 32], 64, order="ascending") == [8, 32, 64]
    with pytest.raises(DimensionError, match=r"Matryoshka dims \[128\] are outside 1..64"):
        resolve_dims([128, 8], 64, order="descending", what="Matryoshka dims")
    with pytest.raises(DimensionError, match="no dims given"):
        resolve_dims([], 64, order="given")


def test_a_dtype_converts_numpy_rows_first_and_a_tensor_keeps_its_own():
    got = normalize_rows([[3.0, 4.0], [0.0, 0.0]], dtype=np.float32)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, np.array([[0.6, 0.8], [0.0, 0.0]], dtype=np.float32))
    x = np.random.default_rng(0).normal(size=(20, 6))
    np.testing.assert_array_equal(unit_prefix(x, 4, dtype=np.float32), unit_prefix(x.astype(np.float32), 4))
    assert unit_prefix(torch.ones(2, 3, dtype=torch.float64), 2, dtype=np.float32).dtype == torch.float64


def test_dims_read_from_text_rise_strictly_where_asked_and_may_exclude_the_full_size():
    assert resolve_dims("16,full", 32, order="increasing") == [16, 32]
    for bad in ([16, 16], [16, 8]):
        with pytest.raises(DimensionError, match="strictly increasing"):
            resolve_dims(bad, 32, order="increasing")
    assert resolve_dims("16, 8,16", 32, order="ascending", below_full=True) == [8, 16]
    with pytest.raises(DimensionError, match=r"dims \[32\] are outside 1..31 \(the vectors have 32 dimensions\)"):
        resolve_dims("8,full", 32, order="ascending", below_full=True)
    with pytest.raises(DimensionError, match="integers"):
        resolve_dims(["eight"], 32, order="given")


def test_principal_axes_are_orthonormal_and_ordered_by_variance():
    x = np.random.default_rng(0).normal(size=(500, 4)) * [0.1, 3.0, 1.0, 0.5]
    axes = principal_axes(x)
    np.testing.assert_allclose(axes.T @ axes, np.eye(4), atol=1e-5)
    variance = (x @ axes).var(axis=0)
    assert list(variance) == sorted(variance, reverse=True)


def test_checks_name_the_bad_row():
    x = np.ones((10, 4), dtype=np.float64)
    assert check_rows(x, "rows").dtype == np.float32
    x[7, 1] = np.nan
    with pytest.raises(DimensionError, match="row 7"):
        check_rows(x, "rows")
    with pytest.raises(DimensionError, match="1 row"):
        check_finite(x)
    with pytest.raises(DimensionError, match="1 row"):
        check_finite(torch.from_numpy(x))
    with pytest.raises(DimensionError, match="the adapter was fitted on 8"):
        check_rows(np.ones((2, 4)), "rows", dim=8, fitted="the adapter")
    with pytest.raises(DimensionError, match="has 4 dimensions, expected 8"):
        check_rows(np.ones((2, 4)), "rows", dim=8)
    with pytest.raises(DimensionError, match="row 12"):
        check_rows(np.zeros((1, 4)), "rows", row_offset=12)
    with pytest.raises(DimensionError, match="2-D"):
        check_rows(np.ones(4), "rows")
