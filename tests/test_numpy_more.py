"""NumPy mode: np.linalg.lstsq, np.linalg.eig refused, einsum's sublist form, np.gradient,
np.pad's moving modes and constant fills, index arguments computed from traced values.
Each against NumPy's value and central finite differences at float64."""
import numpy as np
import pytest

import tapejit as tj


def _fd(f, x, eps=1e-6):
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        d = np.zeros_like(x)
        d[i] = eps
        g[i] = (f(x + d) - f(x - d)) / (2 * eps)
    return g


def _check(f, x, rtol=1e-6, atol=1e-7):
    value, grad = tj.value_and_grad(f)(x)
    np.testing.assert_allclose(value, f(x), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(grad, _fd(f, x), rtol=rtol, atol=atol)


@pytest.mark.parametrize("m, n, k", [(5, 3, None), (5, 3, 2), (3, 5, None), (3, 5, 2), (4, 4, None)])
def test_lstsq_value_and_gradient(m, n, k):
    rng = np.random.default_rng(m * 10 + n)
    A = rng.standard_normal((m, n))
    B = rng.standard_normal((m,) if k is None else (m, k))
    w = rng.standard_normal((n,) if k is None else (n, k))

    def f(A, B):
        x, residuals, rank, s = np.linalg.lstsq(A, B)
        return np.sum(x * w) + np.sum(residuals) + np.sum(s ** 2)

    value, (ga, gb) = tj.value_and_grad(f, argnums=(0, 1))(A, B)
    assert value == pytest.approx(f(A, B), rel=1e-13)
    np.testing.assert_allclose(ga, _fd(lambda a: f(a, B), A), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(gb, _fd(lambda b: f(A, b), B), rtol=1e-6, atol=1e-7)
    expected = np.linalg.lstsq(A, B)
    seen = []
    tj.grad(lambda A: seen.append(np.linalg.lstsq(A, B)) or np.sum(seen[-1][0]))(A)
    x, residuals, rank, s = seen[0]
    assert x.shape == expected[0].shape and residuals.shape == expected[1].shape and s.shape == expected[3].shape
    assert rank == expected[2]


def test_lstsq_rank_deficient_is_refused():
    with pytest.raises(TypeError, match=r"numpy\.linalg\.lstsq of a rank-deficient 4x3 matrix \(rank 1\)"):
        tj.grad(lambda A: np.linalg.lstsq(A, np.ones(4))[0].sum())(np.ones((4, 3)))


@pytest.mark.parametrize("fn", [np.linalg.eig, np.linalg.eigvals])
def test_eig_of_a_general_matrix_is_refused_by_name(fn):
    with pytest.raises(TypeError, match=rf"numpy\.linalg\.{fn.__name__} .*complex"):
        tj.grad(lambda A: np.sum(np.real(fn(A)[0] if fn is np.linalg.eig else fn(A))))(np.eye(3))


@pytest.mark.parametrize("build", [
    lambda a, b: np.einsum(a, [0, 1], b, [1, 2], [0, 2]),
    lambda a, b: np.einsum(a, [0, 1], b, [1, 2]),
    lambda a, b: np.einsum(a, [Ellipsis, 1], b, [1, 2]),
    lambda a, b: np.einsum(a, [0, 1], [1]),
    lambda a, b: np.einsum(a[:, :3], [0, 0]),
    lambda a, b: np.einsum(a, [30, 27], b, [27, 2], [2, 30]),
])
def test_einsum_sublist_form(build):
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((3, 4)), rng.standard_normal((4, 5))
    _check(lambda a: np.sum(build(a, b) ** 2), a)


_W = np.random.default_rng(4).standard_normal(200)


def _weighted(r):
    return np.sum(r ** 2 * _W[:np.size(r)].reshape(np.shape(r)))


@pytest.mark.parametrize("f", [
    lambda x: _weighted(np.gradient(x)[0]) + _weighted(np.gradient(x)[1]),
    lambda x: _weighted(np.gradient(x[0])),
    lambda x: _weighted(np.gradient(x[0], 0.5)),
    lambda x: _weighted(np.gradient(x, axis=1)),
    lambda x: _weighted(np.gradient(x, 2.0, axis=-1)),
    lambda x: _weighted(np.gradient(x[0], edge_order=2)),
    lambda x: _weighted(np.gradient(x[0], np.array([0.0, 1, 3, 4, 7, 8]))),
    lambda x: _weighted(np.gradient(x[0], np.array([0.0, 1, 3, 4, 7, 8]), edge_order=2)),
    lambda x: _weighted(np.gradient(x, 1.0, np.arange(6.0) ** 2)[1]),
    lambda x: _weighted(np.gradient(x[:, :2], axis=1)),
    lambda x: _weighted(np.gradient(x[:3, :3], edge_order=2)[0]),
])
def test_gradient_matches_numpy(f):
    _check(f, np.random.default_rng(5).standard_normal((4, 6)))


def test_gradient_errors_are_numpys():
    with pytest.raises(ValueError, match="at least"):
        tj.grad(lambda x: np.sum(np.gradient(x, edge_order=2)))(np.ones(2))
    with pytest.raises(TypeError, match="traced spacings"):
        tj.grad(lambda x: np.sum(np.gradient(np.ones(3), x)))(2.0)


@pytest.mark.parametrize("mode, kwargs", [
    ("reflect", {}), ("symmetric", {}), ("edge", {}), ("wrap", {}), ("constant", {}),
    ("constant", {"constant_values": 2.5}), ("constant", {"constant_values": ((1.5, 2), (3, -1))}),
])
def test_pad_modes(mode, kwargs):
    weights = np.random.default_rng(6).standard_normal((6, 8))
    _check(lambda a: np.sum(np.pad(a, ((1, 2), (3, 1)), mode=mode, **kwargs) * weights),
           np.random.default_rng(7).standard_normal((3, 4)))


@pytest.mark.parametrize("mode, kwargs", [("mean", {}), ("linear_ramp", {}), ("reflect", {"reflect_type": "odd"})])
def test_pad_modes_that_compute_are_refused(mode, kwargs):
    with pytest.raises(TypeError, match="numpy.pad with mode="):
        tj.grad(lambda a: np.sum(np.pad(a, 1, mode=mode, **kwargs)))(np.ones((2, 2)))


def test_take_along_axis_with_traced_argsort():
    # the indices come from the traced array: their values (no gradient), not a recursion
    _check(lambda x: _weighted(np.take_along_axis(x, np.argsort(x, axis=1), axis=1)),
           np.random.default_rng(8).standard_normal((4, 6)))
