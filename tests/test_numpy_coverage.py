"""NumPy mode's coverage of NumPy's and SciPy's numeric functions (tapejit/numpy_mode.py):
each function the registry differentiates (tensor_math, linalg, ops/special) under its NumPy
or SciPy name, with NumPy's argument names, result shapes and dtypes.

Every case states the truth twice: the value is NumPy's (SciPy's) own, computed by calling
the same function on plain arrays, and the gradient is central finite differences at
float64."""
import zlib

import numpy as np
import pytest

import tapejit as tj
from tapejit.testing import central_differences

sp = pytest.importorskip("scipy.special")
stats = pytest.importorskip("scipy.stats")


rng = np.random.default_rng(16)
W3 = rng.normal(size=3)
W23 = rng.normal(size=(2, 3))
W33 = rng.normal(size=(3, 3))
W32 = rng.normal(size=(3, 2))
SPD = W33 @ W33.T + 3.0 * np.eye(3)


def spd(x):
    """A symmetric positive definite matrix depending on every element of ``x`` (3x3)."""
    return x @ x.T + 3.0 * np.eye(3)


def sym(x):
    return x + np.swapaxes(x, -1, -2)


# name -> (function of x, shape of x, low, high): x is drawn uniformly from [low, high).
CASES = {
    # einsum: NumPy's subscripts, implicit output, ellipsis broadcasting, size-1 broadcasting
    "einsum matmul": (lambda x: np.sum(np.einsum("ij,jk->ik", x, W32) ** 2), (2, 3), -1, 1),
    "einsum implicit": (lambda x: np.sum(np.einsum("ij,jk", x, W32) ** 3), (2, 3), -1, 1),
    "einsum trace": (lambda x: np.einsum("ii", x) * np.einsum("ii->i", x)[1], (3, 3), -1, 1),
    "einsum transpose": (lambda x: np.sum(np.einsum("ij->ji", x) * W23.T), (2, 3), -1, 1),
    "einsum ellipsis": (lambda x: np.sum(np.einsum("...ij,jk->...ik", x, W32) ** 2), (2, 2, 3), -1, 1),
    "einsum three operands": (lambda x: np.einsum("i,ij,j->", x[0], W23.T @ W23, x[1]), (2, 3), -1, 1),
    "einsum size-1 broadcast": (lambda x: np.sum(np.einsum("ij,ij->i", x[:, :1], W23) ** 2), (2, 3), -1, 1),
    "einsum outer": (lambda x: np.sum(np.einsum("i,j->ij", x, W3) ** 2), (3,), -1, 1),
    "tensordot axes=0/1": (lambda x: np.sum(np.tensordot(x, W3, axes=0) ** 2) + np.sum(np.tensordot(x, W33, 1) ** 2),
                           (3,), -1, 1),
    "outer": (lambda x: np.sum(np.outer(x, W23) ** 2), (2, 2), -1, 1),
    # np.linalg
    "svd values": (lambda x: np.sum(np.linalg.svd(x, compute_uv=False) ** 2) + np.linalg.svd(x)[1][0],
                   (3, 3), -1, 1),
    "svd vectors": (lambda x: np.sum(np.linalg.svd(x, full_matrices=False).U ** 2 @ W23.T[:2])
                    + np.sum(np.linalg.svd(x, full_matrices=False)[2] ** 2 * W23), (2, 3), -1, 1),
    "svd reconstruct": (lambda x: np.sum((lambda u, s, vh: (u * s) @ vh)(*np.linalg.svd(x, full_matrices=False)) * W23),
                        (2, 3), -1, 1),
    "solve vector": (lambda x: np.sum(np.linalg.solve(spd(x), W3) ** 2), (3, 3), -1, 1),
    "solve matrix": (lambda x: np.sum(np.linalg.solve(spd(x), W32) * W32), (3, 3), -1, 1),
    "solve batched A, one matrix b": (lambda x: np.sum(np.linalg.solve(sym(x) + 6.0 * np.eye(3), W33) ** 2),
                                      (2, 3, 3), -1, 1),
    "solve b depends on x": (lambda x: np.sum(np.linalg.solve(SPD, x) ** 2), (3, 2), -1, 1),
    "eigh": (lambda x: np.sum(np.linalg.eigh(sym(x))[0] * W3) + np.sum(np.linalg.eigh(sym(x)).eigenvectors ** 2 * W33),
             (3, 3), -1, 1),
    "eigh UPLO=U": (lambda x: np.sum(np.linalg.eigh(x, UPLO="U")[0] ** 2), (3, 3), -1, 1),
    "eigvalsh batched": (lambda x: np.sum(np.linalg.eigvalsh(sym(x)) ** 2), (2, 3, 3), -1, 1),
    "det": (lambda x: np.linalg.det(x + 2.0 * np.eye(3)), (3, 3), -1, 1),
    "det batched": (lambda x: np.sum(np.linalg.det(x + 2.0 * np.eye(2)) ** 2), (3, 2, 2), -1, 1),
    "inv": (lambda x: np.sum(np.linalg.inv(x + 2.0 * np.eye(3)) * W33), (3, 3), -1, 1),
    "slogdet": (lambda x: np.linalg.slogdet(x - 2.0 * np.eye(3)).logabsdet * np.linalg.slogdet(x - 2.0 * np.eye(3))[0],
                (3, 3), -1, 1),
    "cholesky": (lambda x: np.sum(np.linalg.cholesky(spd(x)) * W33), (3, 3), -1, 1),
    "cholesky upper": (lambda x: np.sum(np.linalg.cholesky(spd(x), upper=True) * W33), (3, 3), -1, 1),
    # NumPy's eigh and cholesky read one triangle: the other has no gradient
    "cholesky of a non-symmetric matrix": (lambda x: np.sum(np.linalg.cholesky(x + 4.0 * np.eye(3)) * W33),
                                           (3, 3), -1, 1),
    "cholesky upper of a non-symmetric matrix": (
        lambda x: np.sum(np.linalg.cholesky(x + 4.0 * np.eye(3), upper=True) * W33), (3, 3), -1, 1),
    "eigvalsh of a non-symmetric matrix": (lambda x: np.sum(np.linalg.eigvalsh(x) * W3), (3, 3), -1, 1),
    "pinv tall": (lambda x: np.sum(np.linalg.pinv(x) * W23), (3, 2), -1, 1),
    "pinv wide": (lambda x: np.sum(np.linalg.pinv(x) ** 2 * W32), (2, 3), -1, 1),
    "pinv square batched": (lambda x: np.sum(np.linalg.pinv(x + 2.0 * np.eye(3)) * W33), (2, 3, 3), -1, 1),
    "pinv hermitian reads the lower triangle": (
        lambda x: np.sum(np.linalg.pinv(x + 3.0 * np.eye(3), hermitian=True) * W33), (3, 3), -1, 1),
    "norm nuc/2/-2": (lambda x: np.linalg.norm(x, "nuc") + np.linalg.norm(x, 2) + np.linalg.norm(x, -2), (2, 3), -1, 1),
    "norm 1/inf/fro": (lambda x: np.linalg.norm(x, 1) + np.linalg.norm(x, np.inf) + np.linalg.norm(x, "fro"),
                       (2, 3), -1, 1),
    "norm axes": (lambda x: np.sum(np.linalg.norm(x, axis=(1, 2))) + np.sum(np.linalg.norm(x, 3, axis=0, keepdims=True)),
                  (2, 2, 3), -1, 1),
    # ufuncs: the registry's ops
    "arcsin": (lambda x: np.sum(np.arcsin(x) * W23), (2, 3), -0.9, 0.9),
    "arccos": (lambda x: np.sum(np.arccos(x) * W23), (2, 3), -0.9, 0.9),
    "arctan": (lambda x: np.sum(np.arctan(x * 3.0) * W23), (2, 3), -1, 1),
    "arcsinh": (lambda x: np.sum(np.arcsinh(x * 3.0) * W23), (2, 3), -1, 1),
    "arccosh": (lambda x: np.sum(np.arccosh(x) * W23), (2, 3), 1.1, 3),
    "arctanh": (lambda x: np.sum(np.arctanh(x) * W23), (2, 3), -0.9, 0.9),
    "sinh/cosh": (lambda x: np.sum(np.sinh(x) * W23 + np.cosh(x) ** 2), (2, 3), -2, 2),
    "arctan2 broadcast": (lambda x: np.sum(np.arctan2(x, W3) + np.arctan2(W23[:, :1], x) ** 2), (2, 3), -1, 1),
    "hypot broadcast": (lambda x: np.sum(np.hypot(x, W3) * W23), (2, 3), -1, 1),
    "fmax/fmin broadcast": (lambda x: np.sum(np.fmax(x, W3) * W23 + np.fmin(W23[:1], x) ** 2), (2, 3), -1, 1),
    "logaddexp/logaddexp2": (lambda x: np.sum(np.logaddexp2(x, W3) * W23 + np.logaddexp(x, W23)), (2, 3), -1, 1),
    "deg2rad family": (lambda x: np.sum(np.deg2rad(x) * np.rad2deg(x) + np.radians(x) * W23 - np.degrees(x) ** 2),
                       (2, 3), -1, 1),
    "sinc": (lambda x: np.sum(np.sinc(x * 2.0) * W23), (2, 3), -1, 1),
    "nan_to_num": (lambda x: np.sum(np.nan_to_num(np.log(x)) * W23), (2, 3), -1, 1),
    "step functions (zero gradient)": (lambda x: np.sum(x * (np.ceil(x * 3) + np.floor(x * 3) + np.round(x * 3)
                                                             + np.sign(x) + np.trunc(x * 3) + np.rint(x * 3))),
                                       (2, 3), -1, 1),
    "cumsum/cumprod": (lambda x: np.sum(np.cumsum(x) * np.arange(6.0)) + np.sum(np.cumprod(x, axis=1) * W23)
                       + np.sum(np.cumsum(x, axis=0) ** 2), (2, 3), -1, 1),
    # scipy.special ufuncs
    "gammaln": (lambda x: np.sum(sp.gammaln(x) * W23), (2, 3), 0.2, 4),
    "digamma/psi": (lambda x: np.sum(sp.digamma(x) * W23 + sp.psi(x)), (2, 3), 0.2, 4),
    "erf/erfc": (lambda x: np.sum(sp.erf(x) * W23 + sp.erfc(x) ** 2), (2, 3), -2, 2),
    "erfinv": (lambda x: np.sum(sp.erfinv(x) * W23), (2, 3), -0.9, 0.9),
    "expit/logit": (lambda x: np.sum(sp.expit(x * 3.0) * W23 + sp.logit(sp.expit(x)) ** 2), (2, 3), -1, 1),
    "logit": (lambda x: np.sum(sp.logit(x) * W23), (2, 3), 0.1, 0.9),
    "ndtr": (lambda x: np.sum(sp.ndtr(x) * W23), (2, 3), -2, 2),
    "xlogy broadcast": (lambda x: np.sum(sp.xlogy(x, W3 ** 2 + 0.5) + sp.xlogy(W23, x)), (2, 3), 0.2, 2),
    "xlog1py broadcast": (lambda x: np.sum(sp.xlog1py(x, W3 ** 2) + sp.xlog1py(W23, x)), (2, 3), 0.2, 2),
    # SciPy's Python-level functions NumPy mode intercepts for traced arguments
    "logsumexp axis": (lambda x: sp.logsumexp(x) + np.sum(sp.logsumexp(x, axis=0) * W3), (2, 3), -1, 1),
    "logsumexp b broadcast keepdims": (
        lambda x: np.sum(sp.logsumexp(x, axis=1, b=W3 ** 2 + 0.1, keepdims=True) * W23[:, :1]), (2, 3), -1, 1),
    "logsumexp traced b return_sign": (
        lambda x: np.sum(np.prod(sp.logsumexp(W23, axis=(0, 1), b=x - 1.0, return_sign=True), axis=0)),
        (2, 3), 0.2, 2),
    "logsumexp/softmax of packed traced values": (
        lambda x: sp.logsumexp(np.array([x[0, 0], 2 * x[1, 2]])) + np.sum(sp.softmax([x[0, 1], x[1, 1]]) * W3[:2]),
        (2, 3), -1, 1),
    "softmax": (lambda x: np.sum(sp.softmax(x, axis=1) * W23) + np.sum(sp.softmax(x) ** 2), (2, 3), -1, 1),
    "log_softmax": (lambda x: np.sum(sp.log_softmax(x, axis=0) * W23) + sp.log_softmax(x)[0, 1], (2, 3), -1, 1),
    "norm.logpdf loc/scale broadcast": (
        lambda x: np.sum(stats.norm.logpdf(x, loc=W3, scale=W23[:, :1] ** 2 + 0.5))
        + np.sum(stats.norm.logpdf(W23, x, 2.0)), (2, 3), -1, 1),
    "norm.cdf/pdf": (lambda x: np.sum(stats.norm.cdf(x, 0.1, W3 ** 2 + 0.5) * W23)
                     + np.sum(stats.norm.pdf(x, scale=1.5) * W23), (2, 3), -1, 1),
    "norm traced scale, frozen": (lambda x: np.sum(stats.norm.logpdf(W23, 0.3, x) + stats.norm.cdf(W23, 0.3, x))
                                  + np.sum(stats.norm(0.5, 2.0).logpdf(x) * W23), (2, 3), 0.5, 2),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_value_is_numpys_and_gradient_matches_central_differences(name):
    f, shape, low, high = CASES[name]
    x = np.random.default_rng(zlib.crc32(name.encode())).uniform(low, high, shape)   # the same draw in every process
    value, g = tj.value_and_grad(f)(x)
    expected = f(x)   # NumPy's (SciPy's) own value on plain arrays
    assert np.asarray(value).dtype == np.float64
    assert value == pytest.approx(expected, rel=1e-12, abs=1e-12)
    np.testing.assert_allclose(g, central_differences(f, x), rtol=1e-5, atol=1e-7)


def _seen(f, x):
    box = []
    tj.grad(lambda t: (box.append(f(t)), np.sum(t * 0.0))[1])(x)
    return box[0]


def test_result_shapes_and_named_results_are_numpys():
    x = np.random.default_rng(0).normal(size=(2, 4, 3))
    u, s, vh = _seen(lambda t: np.linalg.svd(t, full_matrices=False), x)
    ref = np.linalg.svd(x, full_matrices=False)
    assert (u.shape, s.shape, vh.shape) == (ref.U.shape, ref.S.shape, ref.Vh.shape)
    r = _seen(lambda t: np.linalg.svd(t, full_matrices=False), x)
    assert r.S.shape == (2, 3) and type(r).__name__ == "SVDResult"
    a = x[:, :3, :] @ np.swapaxes(x[:, :3, :], 1, 2)
    e = _seen(np.linalg.eigh, a)
    assert type(e).__name__ == "EighResult" and e.eigenvalues.shape == (2, 3) and e.eigenvectors.shape == (2, 3, 3)
    sl = _seen(np.linalg.slogdet, a)
    assert type(sl).__name__ == "SlogdetResult" and sl.sign.shape == (2,) and sl.logabsdet.shape == (2,)
    # NumPy 2's solve: a 1-D b is one vector; a 2-D b is one matrix broadcast over A's batch
    b = np.arange(3.0)
    assert _seen(lambda t: np.linalg.solve(t, b), a).shape == np.linalg.solve(a, b).shape == (2, 3)
    B = np.arange(9.0).reshape(3, 3)
    np.testing.assert_allclose(np.array(_seen(lambda t: np.linalg.solve(t, B), a)._t._value()),
                               np.linalg.solve(a, B), rtol=1e-12)
    for b in (np.ones((2, 2)), np.ones(2)):   # NumPy's ValueError (np.linalg.solve(a, b) raises it too)
        with pytest.raises(ValueError, match="mismatch in its core dimension 0"):
            np.linalg.solve(a, b)
        with pytest.raises(ValueError, match="mismatch in its core dimension 0"):
            _seen(lambda t: np.linalg.solve(t, b), a)
    # integers compute in float64, as NumPy's linalg does
    assert _seen(lambda t: np.linalg.det(t.astype(np.int64)), np.eye(2) * 2).dtype == np.float64
    assert _seen(lambda t: np.einsum("i,i", t, t), np.ones(3, np.float32)).dtype == np.float32
    assert _seen(lambda t: np.einsum("i,i", t, np.ones(3)), np.ones(3, np.float32)).dtype == np.float64


def test_svd_full_matrices_of_a_non_square_matrix_is_refused():
    # NumPy's default full_matrices=True: the singular vectors past min(m, n) are any
    # orthonormal completion, so they have no derivative.
    with pytest.raises(TypeError, match=r"numpy\.linalg\.svd with full_matrices=True.*2x3.*full_matrices=False"):
        tj.grad(lambda x: np.sum(np.linalg.svd(x)[0]))(np.ones((2, 3)))
    # square: full and reduced are the same, no refusal
    g = tj.grad(lambda x: np.sum(np.linalg.svd(x)[1]))(np.diag([3.0, 2.0]))
    np.testing.assert_allclose(g, np.eye(2), atol=1e-12)


def test_pinv_of_a_rank_deficient_matrix_is_refused():
    with pytest.raises(TypeError, match=r"numpy\.linalg\.pinv of a rank-deficient 2x3 matrix"):
        tj.grad(lambda x: np.sum(np.linalg.pinv(x)))(np.ones((2, 3)))


def test_arcsinh_gradient_at_zero_is_one():
    # d/dx arcsinh(x) = 1 / sqrt(1 + x^2): 1 at 0 (a sign(x) * log(...) composition gave 0).
    np.testing.assert_allclose(tj.grad(lambda x: np.sum(np.arcsinh(x)))(np.zeros(2)), [1.0, 1.0])
    np.testing.assert_allclose(tj.grad(lambda x: np.sum(np.arctanh(x)))(np.zeros(2)), [1.0, 1.0])


# issue 16's coverage list (np.mod is np.remainder, np.conj np.conjugate)
ISSUE_16_FUNCTIONS = (
    "einsum tensordot linalg.svd repeat tril triu linalg.solve remainder fmod linalg.eigh roll trace "
    "split array_split hsplit vsplit dsplit diag diagonal append arcsin arccos arctan arcsinh arccosh "
    "arctanh arctan2 hypot column_stack row_stack deg2rad rad2deg degrees radians gradient linalg.det "
    "linalg.inv linalg.slogdet linalg.cholesky linalg.pinv linalg.norm atleast_1d atleast_2d atleast_3d "
    "ceil floor round sign cross kron flip fliplr flipud rot90 fmax fmin logaddexp2 nan_to_num pad sort "
    "partition select sinc tile linspace cumsum cumprod real imag conjugate var std average outer prod ptp")
ISSUE_16_SCIPY = ("special.gammaln special.digamma special.erf special.erfc special.expit special.logit "
                  "special.xlogy special.xlog1py special.logsumexp special.softmax special.log_softmax "
                  "stats.norm.logpdf stats.norm.cdf")


def test_supported_functions_cover_the_issue_list():
    from tapejit.numpy_mode import supported_functions
    names = set(supported_functions())
    wanted = {f"numpy.{n}" for n in ISSUE_16_FUNCTIONS.split()} | {f"scipy.{n}" for n in ISSUE_16_SCIPY.split()}
    assert wanted <= names, sorted(wanted - names)
    assert "numpy.linalg.eig" not in names and "numpy.median" not in names   # refused by name


def test_intercepted_scipy_functions_edge_values_are_scipys():
    # SciPy's own values: infinite/NaN elements, a zero weight ignoring a NaN, a negative
    # weighted sum (NaN, or its sign with return_sign), float32 kept, an empty reduction,
    # scale <= 0 giving NaN; shapes and dtypes as SciPy's
    checks = [
        (lambda x: sp.logsumexp(x), np.array([1.0, np.inf])),
        (lambda x: sp.logsumexp(x), np.array([-np.inf, -np.inf])),
        (lambda x: sp.logsumexp(x, b=[0.0, 1.0]), np.array([np.nan, 1.0])),
        (lambda x: sp.logsumexp(x, b=[-2.0, 1.0]), np.array([1.0, 0.5])),
        (lambda x: sp.logsumexp(x, b=[-2.0, 1.0], return_sign=True), np.array([1.0, 0.5])),
        (lambda x: sp.logsumexp(x, axis=0), np.ones((2, 3), np.float32)),
        (lambda x: sp.logsumexp(x, axis=1, return_sign=True), np.ones((2, 0))),
        (lambda x: sp.log_softmax(x), np.array([np.inf, 1.0])),
        (lambda x: sp.softmax(x), np.array([1000.0, 1.0])),
        (lambda x: stats.norm.logpdf(x), np.ones(3, np.float32)),
        (lambda x: stats.norm.cdf(x, scale=np.array([0.0, -1.0, 1.0])), np.ones(3)),
        (lambda x: stats.norm.cdf(1.0, 0.0, x), np.array([0.0, -1.0, 1.0])),
    ]
    with np.errstate(all="ignore"):
        for f, x in checks:
            got, expected = _seen(f, x), f(x)
            got, expected = (got, expected) if isinstance(got, tuple) else ((got,), (expected,))
            for g, e in zip(got, expected):
                g = np.array(g._t._value())
                assert g.shape == np.shape(e) and g.dtype == np.asarray(e).dtype
                np.testing.assert_allclose(g, e, rtol=1e-14)


def test_intercepted_scipy_functions_are_scipys_own_outside_tj_grad():
    import inspect
    tj.grad(lambda x: sp.logsumexp(x))(np.ones(2))   # intercepted by now, whenever SciPy was imported
    # the function object itself dispatches: a name bound before tapejit saw SciPy works too
    from scipy.special._logsumexp import logsumexp
    assert logsumexp is sp.logsumexp and hasattr(logsumexp, "_tapejit_numpy_mode")
    assert str(inspect.signature(sp.logsumexp)) == "(a, axis=None, b=None, keepdims=False, return_sign=False)"
    a, b = np.array([[0.5, -1.0], [2.0, 0.0]]), np.array([1.0, -3.0])
    out, sign = sp.logsumexp(a, axis=1, b=b, return_sign=True)   # plain arrays: SciPy's own code
    s = np.sum(b * np.exp(a), axis=1)
    np.testing.assert_allclose(out, np.log(np.abs(s)), rtol=1e-14)
    np.testing.assert_array_equal(sign, np.sign(s))
    assert isinstance(sp.softmax(np.ones(2)), np.ndarray) and stats.norm.logpdf(0.0) == pytest.approx(-0.5 * np.log(2 * np.pi))


@pytest.mark.parametrize("call, name", [
    (lambda x: np.sum(stats.norm.sf(x)), "scipy.stats.norm.sf"),
    (lambda x: np.sum(stats.t.logpdf(x, 3.0)), "scipy.stats.t.logpdf"),
    (lambda x: np.sum(stats.zscore(x)), "scipy.stats.zscore"),   # was an AttributeError deep in SciPy
])
def test_scipy_functions_not_intercepted_are_refused_by_scipys_name(call, name):
    with pytest.raises(TypeError, match=name.replace(".", r"\.") + " is not supported"):
        tj.grad(call)(np.array([0.5, -1.0, 2.0]))


def test_a_function_scipy_optimize_calls_is_not_taken_for_scipys_code():
    optimize = pytest.importorskip("scipy.optimize")
    # packing a list works there (np.array of traced values is NumPy-mode code, not SciPy's) ...
    result = optimize.minimize(tj.value_and_grad(lambda x: np.sum(np.array([x[0], 2.0 * x[1]]) ** 2)),
                               np.ones(2), jac=True, method="L-BFGS-B", options={"maxiter": 2})
    assert result.fun < 5.0
    # ... and a read into Python is the user's, named as such (it once blamed scipy.optimize)
    with pytest.raises(TypeError, match=r"^float\(\) reads the value of a traced array"):
        optimize.minimize(tj.value_and_grad(lambda x: float(x[0]) * np.sum(x)), np.ones(2), jac=True)


def test_unsupported_functions_name_themselves():
    with pytest.raises(TypeError, match=r"numpy\.linalg\.eig\b"):
        tj.grad(lambda x: np.sum(np.linalg.eig(x)[0]))(np.eye(2))
    with pytest.raises(TypeError, match=r"numpy\.float_power"):
        tj.grad(lambda x: np.sum(np.float_power(x, 2.0)))(np.ones(2))
    with pytest.raises(TypeError, match=r"scipy\.special\.gamma\b"):
        tj.grad(lambda x: np.sum(sp.gamma(x)))(np.ones(2))
    # (einsum's sublist form is supported: tests/test_numpy_more.py)
    np.testing.assert_array_equal(tj.grad(lambda x: np.einsum(x, [0], []))(np.ones(2)), [1.0, 1.0])


def test_compile_replays_registry_ops_without_reading_values():
    # The registry's ops read no value (sinc, nan_to_num, fmax, hypot were compositions over
    # np.where masks): tj.compile replays them.
    f = lambda x: np.sum(np.sinc(x) + np.nan_to_num(np.log(x)) + np.hypot(x, 1.0) + np.fmax(x, 0.5)
                         + sp.gammaln(x + 2.0) + np.linalg.slogdet(np.outer(x, x) + np.eye(3))[1]
                         + np.einsum("i,i", x, x) + sp.logsumexp(x) + np.sum(sp.log_softmax(x) * x)
                         + np.sum(stats.norm.logpdf(x, 0.5, 2.0) + stats.norm.cdf(x)))
    compiled = tj.compile(tj.value_and_grad(f))
    for x in (np.array([0.3, 1.5, 2.0]), np.array([0.7, 0.2, 1.1])):
        value, g = compiled(x)
        ref_value, ref_g = tj.value_and_grad(f)(x)
        assert value == pytest.approx(ref_value, rel=1e-12)
        np.testing.assert_allclose(g, ref_g, rtol=1e-12)
