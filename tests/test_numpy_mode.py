"""NumPy mode: inside ``tj.grad``/``tj.value_and_grad`` (and ``tj.compile`` of them) the
arguments and everything computed from them behave as NumPy arrays (tapejit/numpy_mode.py).

The numbered sections are the cases of the NumPy-mode issue; each states the truth
(NumPy's value, the analytic gradient, or torch's where torch has the op)."""
import math
import operator

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import tapejit as tj
from tapejit.testing import central_differences
from tapejit import CompileError
from tapejit.numpy_mode import TracedArray, from_tensor, to_tensor


def seen(f, *args):
    """What ``f`` sees of its first argument inside tj.grad (a traced array)."""
    box = []
    tj.grad(lambda x, *rest: (box.append(f(x, *rest)), np.sum(x * 0.0))[1])(*args)
    return box[0]


# ---- 1. `%` has a gradient: (1, -floor(x / y)) ---------------------------------------------------

def test_remainder_gradient_of_scalars():
    gx, gy = tj.grad(lambda x, y: x % y, argnums=(0, 1))(2.0, 1.5)
    assert (float(gx), float(gy)) == (1.0, -1.0)   # d(x - floor(x/y) y) = (1, -floor(2/1.5))


def test_remainder_of_arrays_matches_numpy_and_torch():
    x = np.array([2.0, -2.0, 5.5, 7.25, -0.5])
    y = np.array([1.5, 1.5, -2.0, 2.0, 3.0])
    value, (gx, gy) = tj.value_and_grad(lambda a, b: np.sum(a % b * np.arange(1.0, 6.0)), argnums=(0, 1))(x, y)
    assert value == pytest.approx(np.sum(np.remainder(x, y) * np.arange(1.0, 6.0)), rel=1e-14)
    np.testing.assert_array_equal(gx, np.arange(1.0, 6.0))
    np.testing.assert_array_equal(gy, -np.floor(x / y) * np.arange(1.0, 6.0))
    torch = pytest.importorskip("torch")
    tx = torch.tensor(x, requires_grad=True)
    ty = torch.tensor(y, requires_grad=True)
    (torch.remainder(tx, ty) * torch.arange(1.0, 6.0, dtype=torch.float64)).sum().backward()
    np.testing.assert_array_equal(gx, tx.grad.numpy())
    np.testing.assert_array_equal(gy, ty.grad.numpy())


def test_remainder_value_is_numpys_exactly_and_divmod_floordiv_fmod():
    x = np.array([1e16 + 3.0, 0.3, -7.1, 5.0])
    y = np.array([0.1, 0.1, 2.0, -3.0])
    assert np.array_equal(seen(lambda a, b: (a % b)._t._value(), x, y), np.remainder(x, y))
    q, r = seen(lambda a, b: divmod(a, b), x, y)
    np.testing.assert_array_equal(np.asarray(q._t._value()), np.floor_divide(x, y))
    np.testing.assert_array_equal(np.asarray(r._t._value()), np.remainder(x, y))
    # x // y is piecewise constant: zero gradient; fmod's is (1, -trunc(x / y))
    np.testing.assert_array_equal(tj.grad(lambda a: np.sum(a // 2.0))(x), np.zeros(4))
    gx, gy = tj.grad(lambda a, b: np.sum(np.fmod(a, b)), argnums=(0, 1))(x[1:], y[1:])
    np.testing.assert_array_equal(gx, np.ones(3))
    np.testing.assert_array_equal(gy, -np.trunc(x[1:] / y[1:]))


def test_remainder_with_python_scalars_on_either_side():
    x = np.array([2.5, -1.25, 7.0])
    np.testing.assert_array_equal(tj.grad(lambda a: np.sum(a % 2.0))(x), np.ones(3))
    np.testing.assert_array_equal(tj.grad(lambda a: np.sum(10.0 % a))(x), -np.floor(10.0 / x))


# ---- 2. np.std / np.var route to the registry's moments ---------------------------------------------

@pytest.mark.parametrize("fn, kwargs", [
    (np.std, {}), (np.std, {"ddof": 1}), (np.var, {"axis": 0}), (np.std, {"axis": 1, "keepdims": True}),
    (np.var, {"axis": (0, 1), "ddof": 1}),
])
def test_std_and_var_with_ddof_and_axes(fn, kwargs):
    x = np.random.default_rng(3).normal(size=(3, 4))
    f = lambda a: np.sum(fn(a, **kwargs) * 1.5)  # noqa: E731
    value, g = tj.value_and_grad(f)(x)
    assert value == pytest.approx(f(x), rel=1e-13)
    np.testing.assert_allclose(g, central_differences(f, x), rtol=1e-6, atol=1e-8)
    method = operator.methodcaller(fn.__name__, **kwargs)   # x.std(...), x.var(...)
    np.testing.assert_allclose(tj.grad(lambda a: np.sum(method(a) * 1.5))(x), g, rtol=1e-14)


# ---- 3. NumPy's indexing rules ------------------------------------------------------------------------

def test_integer_beside_a_list_is_an_advanced_index():
    x = np.arange(24.0).reshape(2, 3, 4)
    np.testing.assert_array_equal(seen(lambda a: a[1, 1:, [0, 3]]._t._value(), x), [[16, 20], [19, 23]])
    w = np.array([[1.0, 2.0], [3.0, 4.0]])
    value, g = tj.value_and_grad(lambda a: np.sum(a[1, 1:, [0, 3]] * w))(x)
    assert value == np.sum(x[1, 1:, [0, 3]] * w)
    expected = np.zeros_like(x)
    np.add.at(expected, (1, slice(1, None), [0, 3]), w)
    np.testing.assert_array_equal(g, expected)


def test_masks_none_ellipsis_negative_steps_and_duplicates():
    x = np.arange(12.0).reshape(3, 4)
    cases = [
        lambda a: a[a > 4],
        lambda a: a[None, ..., ::-2],
        lambda a: a[[0, 0, 2], [-1, -1, 0]],
        lambda a: a[np.array([[1, 1], [0, 2]])],
        lambda a: a[::-1, 1:3],
        lambda a: a[[True, False, True]],
        lambda a: a[1][-1],
        lambda a: a[..., 1],
    ]
    for make in cases:
        want = make(x)
        got = seen(lambda a: make(a), x)
        assert got.shape == want.shape
        np.testing.assert_array_equal(got._t._value(), want)
        g = tj.grad(lambda a: np.sum(make(a) * 2.0))(x)
        expected = np.zeros_like(x)
        np.add.at(expected.reshape(-1), make(np.arange(12).reshape(3, 4)).reshape(-1), 2.0)
        np.testing.assert_array_equal(g, expected)


def test_traced_integer_arrays_index():
    x = np.array([0.5, 1.2, 2.7, 3.1])
    g = tj.grad(lambda a: np.sum(a[a.astype(int)[:3]] * np.array([1.0, 2.0, 3.0])))(x)
    np.testing.assert_array_equal(g, [1.0, 2.0, 3.0, 0.0])
    g = tj.grad(lambda a: a[np.argmax(a)] * 3.0)(x)
    np.testing.assert_array_equal(g, [0.0, 0.0, 0.0, 3.0])


def test_a_float_index_is_numpys_index_error():
    with pytest.raises(IndexError, match=r"arrays used as indices must be of integer \(or boolean\) type"):
        tj.grad(lambda a: np.sum(a[a[0]]))(np.ones(3))
    with pytest.raises(IndexError):
        tj.grad(lambda a: np.sum(a[5]))(np.ones(3))


@st.composite
def index_expressions(draw):
    """``(shape, key)``: a random NumPy index of an array of ``shape``: integers (negative
    too), slices with steps (negative too), None, one Ellipsis, integer lists and arrays
    (duplicates, negatives), boolean masks, advanced indices apart or together."""
    ndim = draw(st.integers(1, 4))
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=ndim, max_size=ndim)))
    key = []
    dim = 0
    ellipsis = False
    while dim < ndim and draw(st.booleans()) or not key:
        kind = draw(st.sampled_from(["int", "slice", "none", "ellipsis", "list", "array", "mask", "mask2"]))
        if kind == "none":
            key.append(None)
            continue
        if kind == "ellipsis":
            if not ellipsis:
                ellipsis = True
                key.append(Ellipsis)
            continue
        if dim >= ndim:
            continue
        size = shape[dim]
        if kind == "int":   # now and then out of range: NumPy's IndexError
            key.append(draw(st.integers(-size - 1, size)))
        elif kind == "slice":
            bound = st.one_of(st.none(), st.integers(-size - 2, size + 2))
            step = draw(st.sampled_from([None, 1, 2, 3, -1, -2]))
            key.append(slice(draw(bound), draw(bound), step))
        elif kind in ("list", "array"):
            n = draw(st.integers(1, 4))
            items = draw(st.lists(st.integers(-size, size - 1), min_size=n, max_size=n))
            if kind == "list":
                key.append(items)
            else:
                key.append(np.array(items).reshape(draw(st.sampled_from([(n,), (1, n), (n, 1)]))))
        elif kind == "mask":
            key.append(np.array(draw(st.lists(st.booleans(), min_size=size, max_size=size))))
        else:
            span = min(2, ndim - dim)
            mshape = shape[dim:dim + span]
            bits = draw(st.lists(st.booleans(), min_size=int(np.prod(mshape)), max_size=int(np.prod(mshape))))
            key.append(np.array(bits).reshape(mshape))
            dim += span
            continue
        dim += 1
    return shape, tuple(key)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(index_expressions(), st.integers(0, 2**31 - 1))
def test_random_indexing_gives_numpys_values_shapes_and_scatter_gradient(expression, seed):
    shape, key = expression
    x = np.arange(np.prod(shape), dtype=np.float64).reshape(shape) * 0.5 + 1.0
    try:
        want = x[key]
    except IndexError as e:   # NumPy refuses the key: so must NumPy mode, with NumPy's error
        with pytest.raises(IndexError) as info:
            tj.grad(lambda a: np.sum(a[key]))(x)
        assert str(info.value) == str(e)
        return
    got = seen(lambda a: a[key], x)
    assert got.shape == np.shape(want)
    np.testing.assert_array_equal(got._t._value(), want)
    upstream = np.random.default_rng(seed).normal(size=np.shape(want))
    g = tj.grad(lambda a: np.sum(a[key] * upstream))(x)
    expected = np.zeros_like(x)
    np.add.at(expected, key, upstream)
    np.testing.assert_allclose(g, expected, rtol=1e-14, atol=0)


# ---- 4. nested differentiation (tests/test_higher_order.py has more) ------------------------------

@pytest.mark.parametrize("call, expected", [
    (lambda: tj.grad(tj.grad(np.sin))(0.3), -np.sin(0.3)),
    # d/dx [x * d/dy (x y)] = d/dx x^2
    (lambda: tj.grad(lambda x: x * tj.grad(lambda y: x * y)(2.0))(1.0), 2.0),
    (lambda: tj.grad(lambda x: tj.value_and_grad(lambda y: np.sum(y ** 3))(x)[0])(np.ones(2)), [3.0, 3.0]),
    # the inner gradient is x itself, read through a closure
    (lambda: tj.grad(lambda x: np.sum(tj.grad(lambda y: np.sum(y * x))(np.ones(2))))(np.ones(2)), [1.0, 1.0]),
    (lambda: tj.grad(lambda x: tj.value_and_grad(lambda y, c: y * c, argnums=0)(2.0, x)[0])(1.0), 2.0),
    (lambda: tj.grad(lambda x: tj.grad(lambda y: y * to_tensor(x).sum())(2.0))(np.ones(2)), [1.0, 1.0]),
    # aux stays traced inside an enclosing derivative (JAX's): d/dx x = 1
    (lambda: tj.grad(lambda x: tj.grad(lambda y: (y * x, x), has_aux=True)(2.0)[1])(1.0), 1.0),
])
def test_nested_differentiation(call, expected):
    np.testing.assert_allclose(call(), expected, rtol=1e-14)


@pytest.mark.parametrize("call", [
    lambda: tj.grad(lambda x: tj.compile(tj.grad(lambda y: np.sum(y * y)))(x)[0])(np.ones(2)),
    lambda: tj.grad(lambda x: tj.compile(tj.grad(lambda y: np.sum(y * x)))(np.ones(2))[0])(np.ones(2)),
])
def test_a_compiled_derivative_inside_a_derivative_raises(call):
    # its replays would hand back constants: refused, never a wrong number
    with pytest.raises(NotImplementedError, match="nested differentiation"):
        call()


def test_an_inner_gradient_that_does_not_depend_on_the_outer_argument_is_a_constant():
    # d/dx [x * (d/dy y**2 at 2)] = 4: the inner call reads nothing of the outer one.
    g = tj.grad(lambda x: x * tj.grad(lambda y: y ** 2)(2.0))(1.0)
    assert float(g) == 4.0


def test_grad_inside_a_compiled_function_is_refused():
    @tj.compile
    def step(x):
        g = tj.grad(lambda y: np.sum(y ** 2))(np.ones(2))
        return x * tj.tensor(g).sum()
    with pytest.raises(CompileError, match="grad called inside a function being compiled"):
        step(tj.ones(2))


def test_a_pending_torch_graph_survives_a_tj_grad_call():
    w = tj.tensor([1.0, 2.0], requires_grad=True)
    loss = (w * w).sum()
    tj.grad(lambda x: np.sum(x ** 2))(np.ones(3))
    loss.backward()
    np.testing.assert_array_equal(w.grad.numpy(), [2.0, 4.0])


# ---- 5. reading a traced value into Python raises a TypeError naming the call ------------------------

@pytest.mark.parametrize("read, words", [
    (lambda x: float(x), r"float\(\)"),
    (lambda x: math.sin(x), r"float\(\).*math\.\*"),
    (lambda x: int(x), r"int\(\)"),
    (lambda x: bool(x > 0), r"bool\(\)"),
    (lambda x: x if x > 0 else -x, r"bool\(\).*`if`"),
    (lambda x: x.item(), r"x\.item\(\)"),
    (lambda x: x.tolist(), r"x\.tolist\(\)"),
    (lambda x: [1.0, 2.0][x.astype(int)], r"operator\.index"),
    (lambda x: operator.index(x.astype(int)), r"operator\.index"),
    (lambda x: np.float64(x), r"np\.float64"),
    (lambda x: complex(x), r"complex\(\)"),
    (lambda x: np.max([x, 2 * x]), r"bool\(\).*object array"),
])
def test_reading_a_traced_value_is_a_type_error(read, words):
    with pytest.raises(TypeError, match=words) as info:
        tj.grad(lambda x: read(x) * x)(1.0)
    assert "np.where" in str(info.value)


def test_float_times_x_and_math_sin_no_longer_give_a_wrong_gradient():
    with pytest.raises(TypeError, match="float"):
        tj.grad(lambda x: float(x) * x)(3.0)     # was 3 (truth 6)
    with pytest.raises(TypeError, match="float"):
        tj.grad(math.sin)(3.0)                    # was 0 (truth cos 3)


def test_reading_is_refused_the_same_way_under_compile():
    f = tj.compile(tj.value_and_grad(lambda x: float(x.sum()) * np.sum(x)))
    with pytest.raises(TypeError, match=r"float\(\)"):
        f(np.ones(3))


def test_eager_torch_style_code_keeps_torch_behaviour():
    t = tj.tensor(2.5, requires_grad=True)
    assert float(t) == 2.5 and math.sin(t) == pytest.approx(math.sin(2.5))
    assert bool(t > 0) and int(t) == 2 and t.item() == 2.5


def test_control_flow_on_shapes_and_other_arguments_works():
    def f(x, mode):
        if x.ndim == 1 and x.size > 2 and mode == "square":
            return np.sum(x ** 2)
        return np.sum(x)
    np.testing.assert_array_equal(tj.grad(f)(np.array([1.0, 2.0, 3.0]), "square"), [2.0, 4.0, 6.0])
    np.testing.assert_array_equal(tj.grad(f)(np.array([1.0, 2.0]), "square"), [1.0, 1.0])


# ---- 6. a bool- or int-valued function has no gradient --------------------------------------------------

@pytest.mark.parametrize("fn, kind", [
    (lambda x, y: np.allclose(x, y), "boolean"),
    (lambda x, y: np.sum(x) > np.sum(y), "boolean"),
    (lambda x, y: bool(np.array_equal([1], [1])), "boolean"),
    (lambda x, y: np.argmax(x), "integer"),
    (lambda x, y: np.count_nonzero(x > y), "integer"),
    (lambda x, y: 3, "integer"),
])
def test_bool_or_int_valued_function_raises(fn, kind):
    with pytest.raises(TypeError, match=f"returned a {kind} value"):
        tj.grad(fn)(np.array([1.0, 2.0]), np.array([1.0, 2.5]))


def test_has_aux_gives_values_of_traced_aux():
    def f(x):
        return np.sum(x ** 2), {"twice": x * 2, "mask": x > 1.5, "pair": (np.sum(x), 7)}
    (value, aux), g = tj.value_and_grad(f, has_aux=True)(np.array([1.0, 2.0]))
    assert value == 5.0
    assert type(aux["twice"]) is np.ndarray and aux["twice"].tolist() == [2.0, 4.0]
    assert aux["mask"].dtype == np.bool_ and aux["mask"].tolist() == [False, True]
    assert aux["pair"][0] == 3.0 and aux["pair"][1] == 7
    np.testing.assert_array_equal(g, [2.0, 4.0])
    g, aux = tj.grad(f, has_aux=True)(np.array([1.0, 2.0]))
    assert np.asarray(aux["twice"]).tolist() == [2.0, 4.0]
    compiled = tj.compile(tj.value_and_grad(lambda x: (np.sum(x ** 2), {"twice": x * 2}), has_aux=True))
    for k in (1.0, 3.0):
        (value, aux), g = compiled(np.array([1.0, 2.0]) * k)
        assert type(aux["twice"]) is np.ndarray
        np.testing.assert_array_equal(aux["twice"], np.array([2.0, 4.0]) * k)
        np.testing.assert_array_equal(g, np.array([2.0, 4.0]) * k)


# ---- 7. what used to crash ----------------------------------------------------------------------------

X3 = np.array([0.7, -1.3, 2.1])

CRASHES = {
    "np.array of traced scalars": (lambda x: np.sum(np.array([x[0], 2 * x[1], x[2] ** 2]) ** 2), None),
    "np.array of traced arrays": (lambda x: np.sum(np.array([x, 2 * x]) * np.array([[1.0], [3.0]])), None),
    "np.array 2-d of scalars": (lambda x: np.sum(np.array([[x[0], 1.0], [2.0, x[1] * x[2]]]) ** 2), None),
    "np.array packed then traced": (lambda x: np.sum(np.array([x[0], x[1]]) * x[1:]), None),
    "np.asarray": (lambda x: np.sum(np.asarray(x) ** 3), None),
    "np.r_": (lambda x: np.sum(np.r_[x, 2.0 * x, 1:3] ** 2), None),
    "np.c_": (lambda x: np.sum(np.c_[x, x ** 2] ** 2), None),
    "np.mean of a list": (lambda x: np.mean([x[0], 2 * x[1], 3.0]), None),
    "np.std of a list": (lambda x: np.std([x[0], 2 * x[1], x[2]]), None),
    "np.var of a list": (lambda x: np.var([x[0], 2 * x[1], x[2]], ddof=1), None),
    "np.linalg.norm of a list": (lambda x: np.linalg.norm([x[0], 2 * x[1]]), None),
    "np.append of a list": (lambda x: np.sum(np.append([x[0], x[1]], 3.0) ** 2), None),
    "np.append of an array": (lambda x: np.sum(np.append(x, x[:1] * 2) ** 2), None),
    "np.sum of a list": (lambda x: np.sum([x[0] ** 2, x[1]]), None),
    "np.exp of an object array": (lambda x: np.sum(np.exp(np.array([x[0], x[1]]))), None),
    "np.int64 of a traced array": (lambda x: np.sum(x[np.int64(np.abs(x))] ** 2), None),
    "np.hstack of 1-d": (lambda x: np.sum(np.hstack([x, x[:2] * 3.0]) ** 2), None),
    "np.vstack of 1-d": (lambda x: np.sum(np.vstack([x, x ** 2]) ** 2), None),
    "np.inner of 0-d": (lambda x: np.inner(x[0], x[1]), None),
    "np.inner of 2-d": (lambda x: np.sum(np.inner(x.reshape(1, 3), np.arange(6.0).reshape(2, 3) * x)), None),
    "x.ravel()": (lambda x: np.sum(x.reshape(3, 1).ravel() * np.arange(3.0)), None),
    "x.flatten()": (lambda x: np.sum(x.reshape(1, 3).flatten() ** 2), None),
    "x.astype(float64)": (lambda x: np.sum(x.reshape(3, 1).astype(np.float64) ** 2), None),
    "x.size == 3": (lambda x: np.sum(x ** 2) if x.size == 3 else 0.0, None),
    "x.dtype == np.float64": (lambda x: np.sum(x ** 2) if x.dtype == np.float64 else 0.0, None),
    "np.cumsum": (lambda x: np.sum(np.cumsum(x) ** 2), None),
    "np.cumsum 2-d axis": (lambda x: np.sum(np.cumsum(np.outer(x, x), axis=1) ** 2), None),
    "np.cumprod": (lambda x: np.sum(np.cumprod(x)), None),
    "x.cumsum()": (lambda x: np.sum(x.cumsum() ** 2), None),
}


@pytest.mark.parametrize("name", sorted(CRASHES))
def test_former_crashes_work(name):
    f, rtol = CRASHES[name]
    value, g = tj.value_and_grad(f)(X3)
    assert value == pytest.approx(float(f(X3)), rel=1e-12)
    np.testing.assert_allclose(g, central_differences(f, X3), rtol=rtol or 1e-6, atol=1e-8)


def test_np_int64_of_a_traced_array_is_its_integer_value():
    def f(w):
        cols = np.int64(w[:, -1])    # HIPS autograd's test_cast_to_int
        assert cols.dtype == np.int64
        return np.sum(w[:, :-1][cols])
    w = np.random.default_rng(0).normal(size=(5, 4))
    w[:, -1] = [0.5, 1.2, 3.7, 2.2, 4.9]
    expected = np.zeros_like(w)
    np.add.at(expected[:, :-1], np.int64(w[:, -1]), 1.0)
    np.testing.assert_array_equal(tj.grad(f)(w), expected)


# ---- NumPy's semantics: attributes, promotion, errors ----------------------------------------------------

def test_attributes_are_numpys():
    x = np.arange(6.0).reshape(2, 3)

    def look(a):
        return (a.shape, a.ndim, a.size, a.dtype, a.T.shape, len(a), a.real.shape, a.imag.dtype,
                a.itemsize, a.nbytes, [r.shape for r in a], np.shape(a), np.ndim(a), np.size(a))
    assert seen(look, x) == ((2, 3), 2, 6, np.dtype(np.float64), (3, 2), 2, (2, 3), np.dtype(np.float64),
                             8, 48, [(3,), (3,)], (2, 3), 2, 6)
    assert type(seen(lambda a: a.size, x)) is int and type(seen(lambda a: a.shape, x)) is tuple
    assert seen(lambda a: a.dtype == np.float32, x.astype(np.float32))
    with pytest.raises(TypeError, match="len\\(\\) of unsized object"):
        seen(lambda a: len(a), 1.0)


@pytest.mark.parametrize("make, dtype", [
    (lambda a: a * 2.0, np.float32),                          # a Python float is weak
    (lambda a: a * 2, np.float32),
    (lambda a: a + np.ones(3), np.float64),                   # float32 with a float64 array
    (lambda a: a + np.ones((), np.float64), np.float64),      # NEP 50: 0-d arrays are not weak
    (lambda a: a * np.float64(2.0), np.float64),              # nor NumPy scalars
    (lambda a: a + np.ones(3, np.float32), np.float32),
    (lambda a: a + np.arange(3), np.float64),                 # int64 with float32
    (lambda a: a + a.astype(np.float64), np.float64),
    (lambda a: a.astype(int) / 2, np.float64),                # true division of ints
    (lambda a: a.astype(int) + 1, np.int64),
    (lambda a: a > 0, np.bool_),
    (lambda a: np.exp(a.astype(int)), np.float64),
    (lambda a: np.sum(a), np.float32),
])
def test_type_promotion_is_numpys(make, dtype):
    x = np.array([1.5, 2.5, 3.5], np.float32)
    assert seen(lambda a: make(a).dtype, x) == dtype
    assert np.result_type(make(x)) == dtype   # what NumPy itself gives


def test_astype_float32_is_a_differentiable_cast():
    g = tj.grad(lambda a: np.sum(a.astype(np.float32) ** 2))(np.array([0.1, 0.2]))
    assert g.dtype == np.float64
    np.testing.assert_allclose(g, 2 * np.array([0.1, 0.2], np.float32), rtol=1e-7)


def test_float32_argument_keeps_float32_gradient():
    g = tj.grad(lambda a: np.sum(a * 2.0 + np.sin(a)))(np.array([1.0, 2.0], np.float32))
    assert g.dtype == np.float32
    np.testing.assert_allclose(g, 2.0 + np.cos(np.array([1.0, 2.0], np.float32)), rtol=1e-6)


def test_broadcasting_error_is_numpys():
    with pytest.raises(ValueError, match=r"operands could not be broadcast together with shapes \(3,\) \(2,\)"):
        seen(lambda a: a + np.ones(2), np.ones(3))
    with pytest.raises(ValueError, match="matmul: Input operand 0 does not have enough dimensions"):
        seen(lambda a: a @ a, 1.0)


def test_comparisons_give_boolean_traced_arrays_for_np_where():
    x = np.array([-1.0, 0.5, 2.0])
    mask = seen(lambda a: a > 0, x)
    assert isinstance(mask, TracedArray) and mask.dtype == np.bool_
    g = tj.grad(lambda a: np.sum(np.where((a > 0) & (a < 1), a ** 2, -a)))(x)
    np.testing.assert_array_equal(g, [-1.0, 1.0, -1.0])
    g = tj.grad(lambda a: np.sum(np.where(np.isfinite(a), a, 0.0) * (a == a)))(x)
    np.testing.assert_array_equal(g, [1.0, 1.0, 1.0])


def test_methods_with_numpy_signatures():
    x = np.random.default_rng(1).normal(size=(2, 3, 4))
    methods = [
        lambda a: a.sum(axis=(0, 2), keepdims=True),
        lambda a: a.mean(axis=-1),
        lambda a: a.prod(axis=1),
        lambda a: a.max(axis=0) - a.min(axis=2, keepdims=True).sum(),
        lambda a: a.std(axis=1, ddof=1),
        lambda a: a.var(),
        lambda a: a.transpose(2, 0, 1) * np.arange(3.0),
        lambda a: a.transpose((1, 0, 2)).reshape(3, -1),
        lambda a: a.reshape(4, 6, order="F"),
        lambda a: a.ravel(order="F")[::5],
        lambda a: a.swapaxes(0, 2),
        lambda a: a[:, :1].squeeze(1),
        lambda a: a.clip(-0.5, 0.5),
        lambda a: a.dot(np.ones(4)),
        lambda a: a.cumsum(axis=1),
        lambda a: a.copy() * 2,
        lambda a: a.T,
        lambda a: a.diagonal(axis1=1, axis2=2),
        lambda a: a.repeat(2, axis=1),
        lambda a: a.take([0, 3, 3], axis=2),
        lambda a: a.conj(),
    ]
    for make in methods:
        f = lambda a: np.sum(make(a) * np.cos(np.arange(make(x).size)).reshape(make(x).shape))  # noqa: E731
        value, g = tj.value_and_grad(f)(x)
        assert value == pytest.approx(f(x), rel=1e-12)
        np.testing.assert_allclose(g, central_differences(f, x), rtol=1e-6, atol=1e-8)


def test_integer_and_boolean_results_are_values():
    x = np.array([3.0, -1.0, 2.0])
    got = seen(lambda a: (a.argmax(), a.argsort(), (a > 0).all(), (a > 0).any(), np.nonzero(a > 0)), x)
    assert got[0].dtype == np.int64 and got[1].dtype == np.int64 and got[2].dtype == np.bool_
    np.testing.assert_array_equal(np.asarray(got[1]), np.argsort(x))
    np.testing.assert_array_equal(np.asarray(got[4][0]), [0, 2])
    np.testing.assert_array_equal(tj.grad(lambda a: np.sum(np.floor(a) + np.round(a) * a))(x),
                                  np.round(x))


def test_astype_to_unsupported_dtype_raises():
    with pytest.raises(TypeError, match=r"astype\(int32\)"):
        seen(lambda a: a.astype(np.int32), np.ones(2))


# ---- arrays are values: in-place and assignment ------------------------------------------------------------

def test_in_place_operators_rebind_the_array():
    def f(x):
        y = x * 1.0
        alias = y
        y += x
        y *= 3.0
        return np.sum(alias ** 2)   # the same object: NumPy's y += x changes it too
    x = np.array([1.0, 2.0])
    np.testing.assert_allclose(tj.grad(f)(x), 2 * (6 * x) * 6)


def test_in_place_on_a_view_or_its_base_is_refused():
    with pytest.raises(TypeError, match="shares memory"):
        tj.grad(lambda x: (lambda v: (v.__iadd__(1.0), np.sum(x))[1])(x[1:]))(np.ones(3))
    with pytest.raises(TypeError, match="shares memory"):
        def f(x):
            y = x * 1.0
            row = y.reshape(3, 1)   # noqa: F841  (a view of y)
            y += 1.0
            return np.sum(y)
        tj.grad(f)(np.ones(3))


def test_in_place_casting_rule_is_numpys():
    with pytest.raises(TypeError, match="Cannot cast ufunc 'add' output"):
        seen(lambda a: operator.iadd(a.astype(int), 0.5), np.ones(2))
    with pytest.raises(ValueError, match="non-broadcastable output operand"):
        seen(lambda a: operator.iadd(a * 1.0, np.ones((2, 2))), np.ones(2))


def test_assignment_is_refused():
    with pytest.raises(TypeError, match="cannot be assigned to"):
        tj.grad(lambda x: (x.__setitem__(0, 1.0), np.sum(x))[1])(np.ones(2))
    def fill(x):
        out = np.zeros(2)
        out[0] = x[0]   # NumPy calls float(x[0]), and turns its TypeError into a ValueError
        return np.sum(out)
    with pytest.raises(ValueError, match="setting an array element") as info:
        tj.grad(fill)(np.ones(2))
    assert isinstance(info.value.__cause__, TypeError) and "out[i] = x" in str(info.value.__cause__)


# ---- object arrays, printing, the tensor bridge ------------------------------------------------------------

def test_np_array_of_traced_values_is_an_object_array_of_the_right_shape():
    x = np.arange(3.0)
    got = seen(lambda a: np.array([a, 2 * a]), x)
    assert got.dtype == object and got.shape == (2, 3)
    assert all(isinstance(e, TracedArray) and e.shape == () for e in got.flat)


def test_large_object_arrays_warn():
    with pytest.warns(RuntimeWarning, match="object array of a traced array of 20000 elements"):
        tj.grad(lambda x: np.sum(x * np.asarray(x)[:1]))(np.ones(20000))


def test_printing_shows_values_eagerly_and_shape_when_compiled():
    printed = []
    f = lambda x: (printed.append((repr(x), str(x[0]), f"{x[0]:.2f}")), np.sum(x))[1]  # noqa: E731
    tj.grad(f)(np.array([1.5, 2.0]))
    assert printed[-1] == ("TracedArray([1.5, 2. ])", "1.5", "1.50")
    tj.compile(tj.grad(f))(np.array([1.5, 2.0]))
    assert printed[-1][0] == "TracedArray(shape=(2,), dtype=float64)"


def test_tensor_bridge():
    def f(x):
        t = to_tensor(x)
        assert isinstance(t, tj.Tensor)
        y = from_tensor(tj.nn.functional.softplus(t))
        return np.sum(y * x)
    x = np.array([0.5, -1.0])
    sp = np.log1p(np.exp(x))
    np.testing.assert_allclose(tj.grad(f)(x), sp + x / (1 + np.exp(-x)), rtol=1e-12)
    # the function may return a tensor too
    np.testing.assert_allclose(tj.grad(lambda x: tj.tanh(to_tensor(x)).sum())(x), 1 - np.tanh(x) ** 2)


def test_torch_style_calls_on_traced_arrays_say_what_to_do():
    with pytest.raises(TypeError, match=r"tanh\(\): argument 'input' .*numpy_mode.to_tensor"):
        tj.grad(lambda x: tj.tanh(x).sum())(np.ones(2))
    with pytest.raises(AttributeError, match="NumPy-mode traced arrays"):
        tj.grad(lambda x: x.detach())(np.ones(2))
    assert not seen(lambda a: hasattr(a, "requires_grad"), np.ones(2))


def test_unsupported_function_names_itself():
    with pytest.raises(TypeError, match=r"numpy\.float_power"):
        tj.grad(lambda x: np.sum(np.float_power(x, 2.0)))(np.ones(2))
    with pytest.raises(TypeError, match=r"numpy\.linalg\.matrix_power"):
        tj.grad(lambda x: np.sum(np.linalg.matrix_power(x, 2)))(np.eye(2))


def test_constants_compute_through_numpy():
    # Nothing traced can carry a gradient here: NumPy computes (any function), no refusal.
    g = tj.grad(lambda x: np.sum(x * np.einsum("i->", np.floor(x))))(np.array([1.5, 2.5]))
    np.testing.assert_array_equal(g, [3.0, 3.0])


# ---- tj.compile of NumPy-mode functions ----------------------------------------------------------------------

def _numpy_heavy(x, w):
    h = np.tanh(x.reshape(2, 3) @ w)
    z = np.concatenate([h.ravel(), x[::-1][[0, 2, 2]]])
    return np.sum(np.cumsum(z) ** 2) / z.size + np.std(x, ddof=1) + np.sum(x[1, None] * h.T[0])


def test_compile_replays_numpy_mode_functions_like_eager():
    rng = np.random.default_rng(7)
    w = rng.normal(size=(3, 2))
    eager = tj.value_and_grad(_numpy_heavy, argnums=(0, 1))
    compiled = tj.compile(tj.value_and_grad(_numpy_heavy, argnums=(0, 1)))
    for _ in range(3):
        x = rng.normal(size=6)
        value, (gx, gw) = compiled(x, w)
        ref, (rx, rw) = eager(x, w)
        assert value == pytest.approx(ref, rel=1e-12)
        np.testing.assert_allclose(gx, rx, rtol=1e-11, atol=1e-14)
        np.testing.assert_allclose(gw, rw, rtol=1e-11, atol=1e-14)
    assert compiled.stats()["traces"] == 1
    np.testing.assert_allclose(
        gx, central_differences(lambda v: _numpy_heavy(v, w), x), rtol=1e-6, atol=1e-8)


def test_compile_non_differentiated_float_arguments_are_traced_arrays_too():
    f = tj.compile(tj.grad(lambda x, c: np.sum(x * c[::-1]) + np.sum(c) * 0.0 * c.size))
    for k in (1.0, 2.0):
        np.testing.assert_array_equal(f(np.ones(3), np.arange(3.0) * k), np.arange(3.0)[::-1] * k)


def test_compile_refuses_value_dependent_numpy_mode_operations():
    # np.where's mask and % read values: a replay would freeze them.
    for fn in (lambda x: np.sum(np.where(x > 0, x, 0.0)), lambda x: np.sum(x % 2.0)):
        with pytest.raises(CompileError, match="reads a traced tensor's value"):
            tj.compile(tj.grad(fn))(np.ones(3))


def test_compile_batch_of_a_numpy_mode_function():
    f = tj.compile(tj.value_and_grad(lambda x: np.sum(np.cumsum(x[::-1]) ** 2)))
    xs = np.random.default_rng(2).normal(size=(9, 5))
    values, grads = f.batch(xs)
    for i in range(9):
        value, g = tj.value_and_grad(lambda x: np.sum(np.cumsum(x[::-1]) ** 2))(xs[i])
        assert values[i] == pytest.approx(value, rel=1e-12)
        np.testing.assert_allclose(grads[i], g, rtol=1e-12)


# ---- every function NumPy mode adds, against central differences ---------------------------------------

C23 = np.array([[0.3, -1.2, 2.0], [1.5, 0.7, -0.4]])

FUNCTION_CASES = {
    "deg2rad/rad2deg": lambda x: np.sum(np.deg2rad(x) * np.rad2deg(x) + np.radians(x) - np.degrees(x)),
    "arcsinh": lambda x: np.sum(np.arcsinh(x * 3.0) * C23),
    "arccosh": lambda x: np.sum(np.arccosh(x * x + 1.5) * C23),
    "arctanh": lambda x: np.sum(np.arctanh(x * 0.3) * C23),
    "cbrt": lambda x: np.sum(np.cbrt(x) * C23),
    "fabs": lambda x: np.sum(np.fabs(x) * C23),
    "hypot": lambda x: np.sum(np.hypot(x, C23)),
    "logaddexp2": lambda x: np.sum(np.logaddexp2(x, C23)),
    "fmax/fmin": lambda x: np.sum(np.fmax(x, C23) - np.fmin(x, 0.1)),
    "copysign": lambda x: np.sum(np.copysign(x, C23) * C23),
    "maximum reduce": lambda x: np.sum(np.maximum.reduce(x * C23, axis=1)),
    "ptp": lambda x: np.sum(np.ptp(x, axis=0)),
    "average": lambda x: np.average(x) + np.sum(np.average(x, axis=1, weights=np.array([1.0, 2.0, 3.0]))),
    "average returned": lambda x: np.sum(np.average(x, axis=0, weights=np.array([2.0, 1.0]), returned=True)[0]),
    "cumprod": lambda x: np.sum(np.cumprod(x, axis=1) * C23),
    "vdot": lambda x: np.vdot(x, C23),
    "dot n-d": lambda x: np.sum(np.dot(x.reshape(1, 2, 3), np.arange(12.0).reshape(2, 3, 2))),
    "tensordot": lambda x: np.sum(np.tensordot(x, C23 * x, axes=([0, 1], [0, 1])) + np.tensordot(x, C23.T, 1)),
    "kron": lambda x: np.sum(np.kron(x, C23) ** 2),
    "cross": lambda x: np.sum(np.cross(x, C23) ** 2),
    "trace": lambda x: np.trace(x @ x.T) + np.trace(x, offset=1),
    "linalg.norm": lambda x: np.linalg.norm(x) + np.sum(np.linalg.norm(x, axis=0)) + np.linalg.norm(x[0], ord=3),
    "select": lambda x: np.sum(np.select([x > 1, x < -1], [x ** 2, -x], default=x * 0.5)),
    "nan_to_num": lambda x: np.sum(np.nan_to_num(np.log(x * x)) * C23),
    "sinc": lambda x: np.sum(np.sinc(x) * C23),
    "linspace": lambda x: np.sum(np.linspace(x[0, 0], x[1, 1], 7) ** 2),
    "diff": lambda x: np.sum(np.diff(x, axis=1) ** 2) + np.sum(np.diff(x[0], prepend=1.0) ** 2),
    "dstack/column_stack": lambda x: np.sum(np.dstack([x, x]) ** 2) + np.sum(np.column_stack([x[0], x[1]]) ** 3),
    "row_stack/vstack": lambda x: np.sum(np.vstack([x[0], x]) ** 3),
    "expand_dims/moveaxis": lambda x: np.sum(np.moveaxis(np.expand_dims(x, 0), 2, 0) ** 3 * np.arange(2.0)[:, None]),
    "atleast": lambda x: np.sum(np.atleast_3d(x[0]) ** 3) + np.sum(np.atleast_2d(x[0, 0]) ** 2),
    "broadcast_to": lambda x: np.sum(np.broadcast_to(x[0], (4, 3)) * np.arange(12.0).reshape(4, 3)),
    "roll": lambda x: np.sum(np.roll(x, 2) * C23) + np.sum(np.roll(x, -1, axis=1) * C23),
    "flip family": lambda x: np.sum((np.flip(x) + np.fliplr(x) + np.flipud(x)) * C23),
    "rot90": lambda x: np.sum(np.rot90(x) * C23.T),
    "repeat/tile": lambda x: np.sum(np.repeat(x, [1, 3], axis=0) ** 2) + np.sum(np.tile(x, (2, 1)) ** 3),
    "diag/diagflat": lambda x: np.sum(np.diag(x[0]) @ C23.T) + np.sum(np.diag(x)) + np.sum(np.diagflat(x) ** 2),
    "diagonal": lambda x: np.sum(np.diagonal(x, offset=1) ** 2),
    "tril/triu": lambda x: np.sum(np.tril(x) * C23 + np.triu(x, 1) ** 2),
    "take/take_along_axis": lambda x: np.sum(np.take(x, [5, 0, 5]) ** 2)
    + np.sum(np.take_along_axis(x, np.array([[2, 0], [1, 1]]), axis=1) ** 3),
    "sort/partition": lambda x: np.sum(np.sort(x, axis=1) * C23) + np.sum(np.partition(x.ravel(), 2)[:3] ** 2),
    "pad": lambda x: np.sum(np.pad(x, ((1, 0), (2, 1))) ** 2 * np.arange(18.0).reshape(3, 6)),
    "delete/resize": lambda x: np.sum(np.delete(x, 1, axis=1) ** 2) + np.sum(np.resize(x, (4, 2)) ** 3),
    "split family": lambda x: sum(np.sum(p ** 2) * (i + 1) for i, p in enumerate(
        np.array_split(x, 2, axis=1) + np.hsplit(x, 3) + np.vsplit(x, [1]) + np.split(x.ravel(), 3))),
    "dsplit": lambda x: sum(np.sum(p ** 3) for p in np.dsplit(x.reshape(1, 2, 3), 3)),
    "accumulate": lambda x: np.sum(np.multiply.accumulate(x, axis=1) + np.add.accumulate(x) ** 2),
    "stack axis": lambda x: np.sum(np.stack([x, C23], axis=-1) ** 3),
    "concatenate axis None": lambda x: np.sum(np.concatenate([x, C23], axis=None) ** 3),
    "where one-sided constant": lambda x: np.sum(np.where(C23 > 0, x, 2.0) ** 2),
    "clip arrays": lambda x: np.sum(np.clip(x, C23 - 0.5, C23 + 0.5) ** 2),
    "swapaxes": lambda x: np.sum(np.swapaxes(x, 0, 1) ** 3 * C23.T),
    "real/imag/conj": lambda x: np.sum(np.real(x) * C23 + np.imag(x) + np.conj(x) ** 2),
    "squeeze": lambda x: np.sum(np.squeeze(x[:1]) ** 3),
    "copy": lambda x: np.sum(np.copy(x) ** 3),
}


@pytest.mark.parametrize("name", sorted(FUNCTION_CASES))
def test_numpy_mode_function_matches_central_differences(name):
    f = FUNCTION_CASES[name]
    x = np.random.default_rng(abs(hash(name)) % 2**32).uniform(-2.0, 2.0, (2, 3))
    value, g = tj.value_and_grad(f)(x)
    assert value == pytest.approx(float(f(x)), rel=1e-12, abs=1e-12)
    np.testing.assert_allclose(g, central_differences(f, x), rtol=1e-5, atol=1e-7)
