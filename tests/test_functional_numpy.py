"""``tj.grad`` / ``tj.value_and_grad`` on functions written with plain NumPy, and the
``__array_ufunc__`` / ``__array_function__`` protocols they rely on."""
import numpy as np
import pytest
import scipy.optimize as so

import tapejit as tj
from tapejit import registry
from tapejit.testing import central_differences
from tapejit.numpy_interop import supported_functions
from tapejit.numpy_mode import to_tensor


def rosen(x):
    return np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)


# ---- value_and_grad / grad ------------------------------------------------------------------

def test_rosenbrock_value_and_gradient_match_scipy():
    x = np.random.default_rng(0).uniform(-2, 2, 10)
    value, g = tj.value_and_grad(rosen)(x)
    assert type(value) is float
    assert value == pytest.approx(so.rosen(x), rel=1e-14)
    assert g.dtype == np.float64 and g.shape == x.shape and isinstance(g, np.ndarray)
    np.testing.assert_allclose(g, so.rosen_der(x), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(tj.grad(rosen)(x), so.rosen_der(x), rtol=1e-12, atol=1e-12)


def test_scipy_minimize_converges_with_value_and_grad():
    x0 = np.full(20, -1.0)
    result = so.minimize(tj.value_and_grad(rosen), x0, jac=True, method="L-BFGS-B")
    assert result.success
    np.testing.assert_allclose(result.x, np.ones(20), atol=1e-4)


def test_gradient_is_a_fresh_array_each_call():
    f = tj.value_and_grad(lambda x: np.sum(x * x))
    x = np.array([1.0, 2.0])
    _, g1 = f(x)
    _, g2 = f(x + 1)
    np.testing.assert_array_equal(g1, [2.0, 4.0])
    np.testing.assert_array_equal(g2, [4.0, 6.0])


def test_float32_argument_gives_float32_gradient_and_ints_become_float64():
    x = np.array([1.0, 2.0], np.float32)
    g = tj.grad(lambda x: np.sum(np.exp(x)))(x)
    assert g.dtype == np.float32
    np.testing.assert_allclose(g, np.exp(x), rtol=1e-6)
    g = tj.grad(lambda x: np.sum(x ** 2))(np.array([1, 2, 3]))
    assert g.dtype == np.float64
    np.testing.assert_array_equal(g, [2.0, 4.0, 6.0])


def test_python_scalar_argument():
    assert float(tj.grad(lambda x: x ** 3)(2.0)) == pytest.approx(12.0)


def test_argnums_tuple_and_non_differentiated_arguments():
    def f(w, x, b, scale):
        return scale * np.sum(np.tanh(x @ w + b))

    rng = np.random.default_rng(1)
    w, x, b = rng.normal(size=(3, 2)), rng.normal(size=(4, 3)), rng.normal(size=2)
    gw, gb = tj.grad(f, argnums=(0, 2))(w, x, b, 0.5)
    np.testing.assert_allclose(gw, central_differences(lambda w_: f(w_, x, b, 0.5), w), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(gb, central_differences(lambda b_: f(w, x, b_, 0.5), b), rtol=1e-6, atol=1e-8)
    gx = tj.grad(f, argnums=1)(w, x, b, 0.5)
    np.testing.assert_allclose(gx, central_differences(lambda x_: f(w, x_, b, 0.5), x), rtol=1e-6, atol=1e-8)


def test_has_aux_returns_the_auxiliary_value():
    def f(x):
        return np.sum(x ** 2), {"norm": np.linalg.norm(x)}

    (value, aux), g = tj.value_and_grad(f, has_aux=True)(np.array([3.0, 4.0]))
    assert value == 25.0 and aux["norm"] == pytest.approx(5.0)
    assert type(aux["norm"]) is np.ndarray   # a traced aux comes back as its NumPy value
    np.testing.assert_array_equal(g, [6.0, 8.0])
    g, aux = tj.grad(f, has_aux=True)(np.array([3.0, 4.0]))
    np.testing.assert_array_equal(g, [6.0, 8.0])


def test_python_control_flow_is_recorded_per_call():
    # Branches on shapes and on non-differentiated arguments; a branch on a traced value
    # raises (tests/test_numpy_mode.py): np.where is the way.
    def f(x, sign):
        if x.size > 1 and sign > 0:
            return np.sum(x ** 2)
        return np.sum(-3.0 * x)

    np.testing.assert_array_equal(tj.grad(f)(np.array([1.0, 2.0]), 1), [2.0, 4.0])
    np.testing.assert_array_equal(tj.grad(f)(np.array([-1.0, -2.0]), -1), [-3.0, -3.0])


def test_unused_argument_and_constant_output_give_zero_gradients():
    value, (gx, gy) = tj.value_and_grad(lambda x, y: np.sum(x * 2.0), argnums=(0, 1))(
        np.ones(2), np.ones((2, 3)))
    assert value == 4.0
    np.testing.assert_array_equal(gx, [2.0, 2.0])
    np.testing.assert_array_equal(gy, np.zeros((2, 3)))
    value, g = tj.value_and_grad(lambda x: 7.0)(np.ones(3))
    assert value == 7.0
    np.testing.assert_array_equal(g, np.zeros(3))


def test_non_scalar_output_is_an_error():
    with pytest.raises(TypeError, match=r"must return a scalar.*shape \(3,\)"):
        tj.grad(lambda x: x * 2)(np.ones(3))


def test_bad_argnums_and_argument_types():
    with pytest.raises(TypeError, match="argnums 2 is out of range for 1 positional"):
        tj.grad(lambda x: np.sum(x), argnums=2)(np.ones(3))
    with pytest.raises(TypeError, match="argument 0 must be a real float array"):
        tj.grad(lambda x: np.sum(x))(np.ones(3, complex))


# ---- every supported NumPy function against central differences ----------------------------

def positive(shape, rng):
    return rng.uniform(0.5, 2.0, shape)


def anywhere(shape, rng):
    return rng.uniform(-2.0, 2.0, shape)


CONST = np.array([[0.3, -1.2, 2.0], [1.5, 0.7, -0.4]])

CASES = {
    "negative": (lambda x: np.sum(np.negative(x) * CONST), anywhere),
    "positive": (lambda x: np.sum(np.positive(x) * CONST), anywhere),
    "absolute": (lambda x: np.sum(np.abs(x) * CONST), anywhere),
    "exp": (lambda x: np.sum(np.exp(x) * CONST), anywhere),
    "exp2": (lambda x: np.sum(np.exp2(x) * CONST), anywhere),
    "log": (lambda x: np.sum(np.log(x) * CONST), positive),
    "log2": (lambda x: np.sum(np.log2(x) * CONST), positive),
    "log10": (lambda x: np.sum(np.log10(x) * CONST), positive),
    "log1p": (lambda x: np.sum(np.log1p(x) * CONST), positive),
    "expm1": (lambda x: np.sum(np.expm1(x) * CONST), anywhere),
    "sqrt": (lambda x: np.sum(np.sqrt(x) * CONST), positive),
    "square": (lambda x: np.sum(np.square(x) * CONST), anywhere),
    "reciprocal": (lambda x: np.sum(np.reciprocal(x) * CONST), positive),
    "sin": (lambda x: np.sum(np.sin(x) * CONST), anywhere),
    "cos": (lambda x: np.sum(np.cos(x) * CONST), anywhere),
    "tan": (lambda x: np.sum(np.tan(x * 0.5) * CONST), anywhere),
    "tanh": (lambda x: np.sum(np.tanh(x) * CONST), anywhere),
    "sign": (lambda x: np.sum(np.sign(x) * x * CONST), anywhere),
    "sinh": (lambda x: np.sum(np.sinh(x) * CONST), anywhere),
    "cosh": (lambda x: np.sum(np.cosh(x) * CONST), anywhere),
    "add_array": (lambda x: np.sum(np.add(CONST, x) ** 2), anywhere),
    "subtract_reflected": (lambda x: np.sum((CONST - x) ** 2), anywhere),
    "multiply_scalar": (lambda x: np.sum(np.float64(3.0) * x * CONST), anywhere),
    "divide_reflected": (lambda x: np.sum(CONST / x), positive),
    "power_scalar_base": (lambda x: np.sum(np.power(2.0, x) * CONST), anywhere),
    "power_tensor_exponent": (lambda x: np.sum(x ** x), positive),
    "matmul": (lambda x: np.sum(np.tanh(x @ CONST.T)), anywhere),
    "maximum": (lambda x: np.sum(np.maximum(x, 0.25) * CONST), anywhere),
    "minimum_array": (lambda x: np.sum(np.minimum(CONST, x) * x), anywhere),
    "logaddexp": (lambda x: np.sum(np.logaddexp(x, CONST)), anywhere),
    "add_reduce": (lambda x: np.sum(np.add.reduce(x * CONST) ** 2), anywhere),
    "multiply_reduce": (lambda x: np.sum(np.multiply.reduce(x, axis=1)), anywhere),
    "maximum_reduce": (lambda x: np.sum(np.maximum.reduce(x * CONST, axis=None)), anywhere),
    "sum_axis": (lambda x: np.sum(np.sum(x * CONST, axis=0, keepdims=True) ** 2), anywhere),
    "mean": (lambda x: np.mean(np.mean(x ** 2, axis=1) * np.array([1.0, 2.0])), anywhere),
    "prod": (lambda x: np.prod(x, axis=1).sum(), anywhere),
    "max": (lambda x: np.max(x * CONST, axis=1).sum() + np.max(x), anywhere),
    "amin": (lambda x: np.amin(x * CONST, axis=0).sum() + np.min(x), anywhere),
    "var": (lambda x: np.var(x, axis=1).sum() + np.var(x, ddof=1), anywhere),
    "std": (lambda x: np.std(x * CONST, axis=0, ddof=1).sum() + np.std(x), anywhere),
    "linalg_norm": (lambda x: np.linalg.norm(x) + np.linalg.norm(x, axis=1).sum()
                    + np.linalg.norm(x[0], ord=1), anywhere),
    "dot": (lambda x: np.dot(x[0], x[1]) + np.sum(np.dot(x, CONST.T)), anywhere),
    "inner": (lambda x: np.inner(x[0], CONST[1]), anywhere),
    "outer": (lambda x: np.sum(np.outer(x[0], x[1]) ** 2), anywhere),
    "trace": (lambda x: np.trace(x[:, :2] @ x[:, 1:]), anywhere),
    "where": (lambda x: np.sum(np.where(x > 0, x ** 2, -x) * CONST), anywhere),
    "clip": (lambda x: np.sum(np.clip(x, -1.0, 1.0) * CONST), anywhere),
    "concatenate": (lambda x: np.sum(np.concatenate([x, CONST, x ** 2], axis=1) ** 2), anywhere),
    "concatenate_flat": (lambda x: np.sum(np.concatenate([x, CONST], axis=None) ** 3), anywhere),
    "stack": (lambda x: np.sum(np.stack([x, x * CONST], axis=-1) ** 2), anywhere),
    "hstack_vstack": (lambda x: np.sum(np.hstack([x, x]) ** 2) + np.sum(np.vstack([x, CONST]) ** 3), anywhere),
    "reshape_ravel": (lambda x: np.sum(np.reshape(x, (3, 2)) @ CONST) + np.sum(np.ravel(x) ** 3), anywhere),
    "transpose": (lambda x: np.sum(np.transpose(x) @ CONST), anywhere),
    "swapaxes_moveaxis": (lambda x: np.sum(np.swapaxes(x, 0, 1) ** 3)
                          + np.sum(np.moveaxis(x[None], 0, -1)[..., 0] * CONST), anywhere),
    "squeeze_expand_dims": (lambda x: np.sum(np.squeeze(np.expand_dims(x, (0, 2)), axis=2) ** 3), anywhere),
    "diff": (lambda x: np.sum(np.diff(x, axis=1) ** 2) + np.sum(np.diff(x.reshape(-1), n=2) ** 2), anywhere),
    "split": (lambda x: sum(np.sum(p * (i + 1)) for i, p in enumerate(np.split(x, [1, 2], axis=1))), anywhere),
    "copy": (lambda x: np.sum(np.copy(x) ** 2), anywhere),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_numpy_function_gradient_matches_central_differences(name):
    f, domain = CASES[name]
    x = domain((2, 3), np.random.default_rng(abs(hash(name)) % 2**32))
    value, g = tj.value_and_grad(f)(x)
    assert value == pytest.approx(float(f(x)), rel=1e-12, abs=1e-12)
    np.testing.assert_allclose(g, central_differences(f, x), rtol=1e-5, atol=1e-7)


def test_every_supported_numpy_ufunc_has_a_gradient_case():
    covered = " ".join(CASES)
    boolean = {"isnan", "isinf", "isfinite", "logical_not", "logical_and", "logical_or", "logical_xor",
               "equal", "not_equal", "less", "less_equal", "greater", "greater_equal"}
    aliases = {"true_divide": "divide"}
    # ufuncs an op names as its own run that op's front end: its samples check its gradient
    # (test_gradients) and tests/test_registry_names.py that np.<ufunc> records it
    routed = {name for op in registry.OPS if op.names is not None for name in op.names.numpy}
    for name in supported_functions():
        short = name.rsplit(".", 1)[1]
        if short in boolean or short in routed or name.endswith("_like") or short in (
                "shape", "ndim", "size", "allclose", "isclose", "array_equal", "count_nonzero",
                "nonzero", "argwhere", "flatnonzero", "argmax", "argmin", "cumsum", "amax"):
            continue
        assert aliases.get(short, short) in covered, f"{name} has no gradient case"


def test_comparisons_and_metadata_work_on_tensors():
    x = tj.tensor([1.0, -2.0, 3.0], requires_grad=True)
    np.testing.assert_array_equal(np.greater(x, 0).numpy(), [True, False, True])
    np.testing.assert_array_equal(np.isfinite(x).numpy(), [True, True, True])
    assert np.shape(x) == (3,) and np.ndim(x) == 1 and np.size(x) == 3
    z = np.zeros_like(x)
    assert isinstance(z, np.ndarray) and z.shape == (3,) and z.dtype == np.float32
    assert np.allclose(x, [1.0, -2.0, 3.0])
    assert int(np.argmax(x)) == 2


def test_ndarray_on_the_left_of_an_operator_records_the_gradient():
    x = tj.tensor([1.0, 2.0], dtype=tj.float64, requires_grad=True)
    y = np.array([3.0, 4.0]) * x + np.array([1.0, 1.0])
    assert isinstance(y, tj.Tensor)
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 4.0])


def test_python_scalar_on_the_left_keeps_float32():
    x = tj.tensor([1.0, 2.0], requires_grad=True)
    assert np.subtract(2.0, x).dtype == tj.float32
    assert np.multiply(np.float64(2.0), x).dtype == tj.float32


# ---- refusals: never a silently wrong gradient -------------------------------------------

@pytest.mark.parametrize("call, name", [
    (lambda x: np.float_power(x, 2.0), "numpy.float_power"),
    (lambda x: np.heaviside(x, 0.5), "numpy.heaviside"),
    (lambda x: np.linalg.eig(x[:, :2])[0], "numpy.linalg.eig"),
    (lambda x: np.add.at(x, 0, 1.0), "numpy.add.at"),
    (lambda x: np.exp(x, out=np.empty((2, 3))), "numpy.exp with out="),
    (lambda x: np.sum(x, where=x > 0), "numpy.sum with where="),
    (lambda x: np.linalg.lstsq(x, x[:, 0])[0], "numpy.linalg.lstsq"),
    (lambda x: np.linalg.matrix_power(x[:, :2], 3), "numpy.linalg.matrix_power"),
])
def test_unsupported_numpy_function_raises_type_error_naming_it(call, name):
    with pytest.raises(TypeError, match=name.replace(".", r"\.")):
        tj.grad(lambda x: np.sum(call(x)))(np.ones((2, 3)))


def test_converting_a_tensor_that_requires_grad_to_an_array_is_refused():
    with pytest.raises(RuntimeError, match="Can't call numpy\\(\\) on Tensor that requires grad"):
        np.asarray(tj.tensor([1.0, 2.0], requires_grad=True))
    np.testing.assert_array_equal(np.asarray(tj.tensor([1.0, 2.0])), [1.0, 2.0])
    # Inside tj.grad, a float array of a traced value would be its values cut out of the graph.
    with pytest.raises(TypeError, match="converting a traced array to a NumPy float64 array"):
        tj.grad(lambda x: np.asarray(x, dtype=np.float64).sum())(np.ones(3))


def test_graph_spanning_a_retired_tape_still_gives_the_full_gradient():
    # Reading a value mid-function may retire a long tape that few tensors use; the rest of
    # the function records on a new tape that loads tensors from the old one.
    def f(x):
        y = x
        for _ in range(100):
            y = y * 1.01
        if to_tensor(y).sum().item() > 0:   # a torch-style value read: the tape may retire here
            y = y * 2.0
        return np.sum(y * x)

    x = np.array([0.5, 1.5])
    expected = central_differences(lambda v: float(np.sum(v * 1.01 ** 100 * 2.0 * v)), x)
    np.testing.assert_allclose(tj.grad(f)(x), expected, rtol=1e-6)


# ---- NumPy's own edge semantics ----------------------------------------------------------------

def test_squeeze_with_negative_axes_and_a_non_unit_axis():
    x = tj.tensor(np.ones((3, 1, 1)), requires_grad=True)
    assert np.squeeze(x, axis=(-1, -2)).shape == (3,)
    assert np.squeeze(x, axis=-2).shape == (3, 1)
    with pytest.raises(ValueError, match="size not equal to one"):
        np.squeeze(x, axis=0)


def test_split_takes_numpy_slice_bounds():
    x = np.arange(5.0)
    for indices in ([-1], [3, 1], [2, 2, 4], [0, 7]):
        mine = np.split(tj.tensor(x), indices)
        expected = np.split(x, indices)
        assert [tuple(p.shape) for p in mine] == [p.shape for p in expected], indices
        for p, e in zip(mine, expected):
            np.testing.assert_array_equal(p.numpy(), e)
    g = tj.grad(lambda v: sum(np.sum(p * (k + 1)) for k, p in enumerate(np.split(v, [-2]))))(x)
    np.testing.assert_array_equal(g, [1, 1, 1, 2, 2])


def test_like_functions_pass_their_arguments_through():
    x = tj.tensor([1.0, 2.0, 3.0], requires_grad=True)
    np.testing.assert_array_equal(np.full_like(x, 7.0), [7.0, 7.0, 7.0])
    assert np.zeros_like(x, dtype=np.float64).dtype == np.float64
    assert np.ones_like(x, shape=(2, 2)).shape == (2, 2)


def test_logaddexp_of_equal_infinities_and_its_gradient():
    x = tj.tensor([-np.inf, np.inf, 1.0], dtype=tj.float64)
    np.testing.assert_array_equal(np.logaddexp(x, x).numpy()[:2], [-np.inf, np.inf])
    g = tj.grad(lambda a: np.sum(np.logaddexp(a, a)))(np.array([0.5, -2.0]))
    np.testing.assert_allclose(g, [1.0, 1.0])


def test_empty_axis_tuple_reduces_nothing():
    x = np.arange(6.0).reshape(2, 3)
    t = tj.tensor(x)
    for fn in (np.sum, np.mean, np.prod, np.max, np.min):
        assert fn(t, axis=()).shape == (2, 3), fn.__name__
        np.testing.assert_array_equal(fn(t, axis=()).numpy(), fn(x, axis=()))


def test_repeated_argnums_give_the_gradient_each_time():
    def f(x, y):
        return np.sum(x * y * y)

    gx, gy1, gy2 = tj.grad(f, argnums=(0, 1, 1))(np.array([1.0, 2.0]), np.array([3.0, 4.0]))
    np.testing.assert_array_equal(gy1, [6.0, 16.0])
    np.testing.assert_array_equal(gy2, [6.0, 16.0])
    assert gy1 is not gy2
    np.testing.assert_array_equal(gx, [9.0, 16.0])


def test_numpy_functions_on_eager_tensors_follow_numpy():
    # np.inner / np.hstack / np.cumsum are NumPy's functions: NumPy's rules, also on tensors.
    t = tj.tensor([1.0, 2.0, 3.0], dtype=tj.float64, requires_grad=True)
    assert np.inner(t[0], t[1]).item() == 2.0
    np.testing.assert_array_equal(np.inner(t.reshape(1, 3), t.reshape(1, 3)).detach().numpy(), [[14.0]])
    np.testing.assert_array_equal(np.hstack([t[0], t]).detach().numpy(), [1.0, 1.0, 2.0, 3.0])
    (np.cumsum(t) ** 2).sum().backward()
    np.testing.assert_array_equal(t.grad.numpy(), [20.0, 18.0, 12.0])   # d/dt sum(cumsum(t)^2)
