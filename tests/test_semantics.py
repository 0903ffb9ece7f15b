"""Autograd semantics of SPEC section 3, checked against PyTorch's behaviour.

Every test runs without torch; the few that compare with torch directly import it with
``pytest.importorskip`` inside the test.
"""
import warnings

import numpy as np
import pytest

import tapejit as tj


def val(t):
    """A tensor's value as a NumPy array (whatever its requires_grad)."""
    return np.asarray(t.detach())


def grad_of(t):
    g = t.grad
    assert g is not None, "expected a gradient"
    return np.asarray(g)


# ---- the seeds' worked examples -----------------------------------------------------------

def test_seed_example_squared_error():
    w = tj.tensor(2.0, requires_grad=True)
    x = tj.tensor(3.0)
    b = tj.tensor(1.0, requires_grad=True)
    y_true = tj.tensor(10.0)
    loss = (w * x + b - y_true) ** 2
    assert loss.item() == 9.0
    loss.backward()
    assert w.grad.item() == -18.0
    assert b.grad.item() == -6.0
    assert x.grad is None
    assert y_true.grad is None


def test_seed_example_scalar_constant_target():
    x = tj.tensor(1.0)
    w = tj.tensor(2.0, requires_grad=True)
    b = tj.tensor(0.5, requires_grad=True)
    loss = (w * x + b - 3) ** 2
    loss.backward()
    assert w.grad.item() == -1.0
    assert b.grad.item() == -1.0
    assert x.grad is None
    assert not x.requires_grad


def test_seed_example_retain_graph_accumulates():
    x = tj.tensor(1.0, requires_grad=True)
    w = tj.tensor(3.0, requires_grad=True)
    y = (x + w) * 2
    seen = []
    for _ in range(3):
        y.backward(retain_graph=True)
        seen.append(x.grad.item())
    assert seen == [2.0, 4.0, 6.0]
    assert w.grad.item() == 6.0


def test_seed_example_retain_graph_zeroed_each_time():
    x = tj.tensor(1.0, requires_grad=True)
    w = tj.tensor(3.0, requires_grad=True)
    y = (x + w) * 2
    seen = []
    for _ in range(3):
        y.backward(retain_graph=True)
        seen.append(x.grad.item())
        x.grad.zero_()
    assert seen == [2.0, 2.0, 2.0]
    assert x.grad.item() == 0.0


# ---- accumulation, leaves, non-leaves ------------------------------------------------------

def test_gradients_accumulate_across_backward_calls():
    w = tj.tensor([1.0, 2.0, 3.0], requires_grad=True)
    (w * 3).sum().backward()
    np.testing.assert_array_equal(grad_of(w), [3.0, 3.0, 3.0])
    (w * w).sum().backward()          # a new graph: adds 2w
    np.testing.assert_array_equal(grad_of(w), [5.0, 7.0, 9.0])
    w.grad = None                     # reset as optimizers do
    (w * 3).sum().backward()
    np.testing.assert_array_equal(grad_of(w), [3.0, 3.0, 3.0])


def test_grad_is_a_tensor_of_the_leaf_shape_and_dtype():
    for dt in (tj.float32, tj.float64):
        w = tj.ones(2, 3, dtype=dt, requires_grad=True)
        (w * 2).sum().backward()
        assert isinstance(w.grad, tj.Tensor)
        assert tuple(w.grad.shape) == (2, 3)
        assert w.grad.dtype == dt
        assert not w.grad.requires_grad


def test_only_leaves_keep_grad_nonleaf_warns():
    x = tj.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    z = y.sum()
    z.backward()
    assert x.is_leaf and not y.is_leaf and not z.is_leaf
    with pytest.warns(UserWarning, match="not a leaf Tensor"):
        assert y.grad is None
    with pytest.warns(UserWarning, match="retain_grad"):
        assert z.grad is None
    np.testing.assert_array_equal(grad_of(x), [2.0, 2.0])


def test_leaf_grad_access_does_not_warn():
    x = tj.tensor([1.0, 2.0], requires_grad=True)
    c = tj.tensor([1.0, 2.0])
    d = (x * 2).detach()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert x.grad is None
        assert c.grad is None
        assert d.grad is None
        (x * c).sum().backward()
        assert x.grad is not None


def test_retain_grad_keeps_nonleaf_grad_without_warning():
    x = tj.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x * 2
    y.retain_grad()
    assert y.retains_grad
    z = (y * y).sum()
    z.backward()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_allclose(grad_of(y), 2 * val(y))
    np.testing.assert_allclose(grad_of(x), 8 * val(x))
    assert not y.is_leaf


def test_retain_grad_accumulates_like_a_leaf():
    x = tj.tensor([1.0, 2.0], requires_grad=True)
    y = x * 3
    y.retain_grad()
    s = (y * y).sum()
    s.backward(retain_graph=True)
    s.backward()
    np.testing.assert_allclose(grad_of(y), 2 * 2 * val(y))
    np.testing.assert_allclose(grad_of(x), 2 * 18 * val(x))


# ---- non-scalar outputs: vector-Jacobian products -------------------------------------------

def test_backward_non_scalar_with_gradient_is_vjp():
    x = tj.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x * x
    v = tj.tensor([1.0, 10.0, 100.0])
    y.backward(gradient=v)
    np.testing.assert_allclose(grad_of(x), 2 * np.array([1.0, 2.0, 3.0]) * [1.0, 10.0, 100.0])


def test_backward_non_scalar_matrix_vjp():
    a = np.arange(6.0).reshape(2, 3)
    x = tj.tensor(a, requires_grad=True)
    m = tj.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], dtype=tj.float64)
    y = x @ m                       # (2, 2)
    g = np.array([[1.0, 0.5], [-1.0, 2.0]])
    y.backward(tj.tensor(g))
    np.testing.assert_allclose(grad_of(x), g @ val(m).T)


def test_backward_on_one_element_non_0d_tensor_needs_no_gradient():
    x = tj.tensor([2.0], requires_grad=True)
    y = x * x                       # shape (1,): torch allows an implicit gradient
    y.backward()
    np.testing.assert_array_equal(grad_of(x), [4.0])


# ---- freed graphs ------------------------------------------------------------------------------

def test_second_backward_without_retain_graph_raises():
    x = tj.tensor([1.0, 2.0], requires_grad=True)
    y = (x * x).sum()
    y.backward()
    with pytest.raises(RuntimeError, match="Trying to backward through the graph a second time"):
        y.backward()
    np.testing.assert_array_equal(grad_of(x), [2.0, 4.0])   # the first backward still counted


def test_retain_graph_allows_second_backward():
    x = tj.tensor([1.0, 2.0], requires_grad=True)
    y = (x * x).sum()
    y.backward(retain_graph=True)
    y.backward()
    np.testing.assert_array_equal(grad_of(x), [4.0, 8.0])


def test_ops_saving_nothing_can_backward_twice():
    # torch: AddBackward0 (with a scalar) and SumBackward0 save no tensors, so a second
    # backward through them works even without retain_graph.
    x = tj.tensor([1.0, 2.0], requires_grad=True)
    y = (x + 1).sum()
    y.backward()
    y.backward()
    np.testing.assert_array_equal(grad_of(x), [2.0, 2.0])


def test_saving_nothing_matches_torch():
    torch = pytest.importorskip("torch")
    xt = torch.tensor([1.0, 2.0], requires_grad=True)
    yt = (xt + 1).sum()
    yt.backward()
    yt.backward()
    x = tj.tensor([1.0, 2.0], requires_grad=True)
    y = (x + 1).sum()
    y.backward()
    y.backward()
    np.testing.assert_array_equal(grad_of(x), xt.grad.numpy())


def test_freed_graph_after_autograd_grad():
    x = tj.tensor(3.0, requires_grad=True)
    y = x * x
    (g,) = tj.autograd.grad(y, x)
    assert g.item() == 6.0
    with pytest.raises(RuntimeError, match="Trying to backward through the graph a second time"):
        y.backward()


# ---- detach ------------------------------------------------------------------------------------

def test_detach_of_leaf_shares_data():
    x = tj.tensor([1.0, 2.0], requires_grad=True)
    d = x.detach()
    assert not d.requires_grad and d.is_leaf and d.grad_fn is None
    assert np.shares_memory(val(d), val(x))
    with tj.no_grad():
        d.add_(10.0)                  # a change through the detached tensor shows in x
    np.testing.assert_array_equal(val(x), [11.0, 12.0])


def test_detach_of_nonleaf_stops_gradient():
    x = tj.tensor([1.0, 2.0], requires_grad=True)
    y = x * 3
    d = y.detach()
    assert not d.requires_grad and d.is_leaf and d.grad_fn is None
    np.testing.assert_array_equal(val(d), [3.0, 6.0])
    (d * x).sum().backward()          # d is a constant: grad is d's value
    np.testing.assert_array_equal(grad_of(x), [3.0, 6.0])


def test_detach_then_requires_grad_makes_new_leaf():
    x = tj.tensor([1.0, 2.0], requires_grad=True)
    y = (x * 2).detach().requires_grad_()
    assert y.is_leaf and y.requires_grad
    (y * y).sum().backward()
    np.testing.assert_array_equal(grad_of(y), [4.0, 8.0])
    assert x.grad is None


# ---- integers never require grad -------------------------------------------------------------

def test_integer_tensors_never_require_grad():
    i = tj.tensor([1, 2, 3])
    assert i.dtype == tj.int64
    assert not i.requires_grad
    assert not tj.arange(5).requires_grad
    x = tj.tensor([0.5, 1.0, 1.5], requires_grad=True)
    y = x * i
    assert y.requires_grad and y.dtype == tj.float32
    y.sum().backward()
    np.testing.assert_array_equal(grad_of(x), [1.0, 2.0, 3.0])
    assert i.grad is None
    cmp = x > 0.75
    assert cmp.dtype == tj.bool and not cmp.requires_grad
    am = x.argmax()
    assert am.dtype == tj.int64 and not am.requires_grad
    assert am.item() == 2


def test_integer_results_of_float_ops_do_not_require_grad():
    x = tj.tensor([[0.5, 3.0], [2.0, -1.0]], requires_grad=True)
    assert not x.argmax(dim=1).requires_grad
    assert not (x == x).requires_grad
    _, idx = x.max(dim=1)
    assert idx.dtype == tj.int64 and not idx.requires_grad
    np.testing.assert_array_equal(val(idx), [1, 0])


# ---- broadcasting ------------------------------------------------------------------------------

def test_broadcast_gradients_sum_back_to_input_shape():
    a = tj.tensor(np.arange(3.0).reshape(3, 1), requires_grad=True)
    b = tj.tensor(np.arange(4.0).reshape(1, 4), requires_grad=True)
    c = a * b + a
    assert tuple(c.shape) == (3, 4)
    c.sum().backward()
    assert tuple(a.grad.shape) == (3, 1)
    assert tuple(b.grad.shape) == (1, 4)
    np.testing.assert_allclose(grad_of(a), np.full((3, 1), 0 + 1 + 2 + 3 + 4.0))
    np.testing.assert_allclose(grad_of(b), np.full((1, 4), 0 + 1 + 2.0))


def test_broadcast_bias_over_leading_dims():
    x = tj.ones(2, 3, 4)
    bias = tj.zeros(4, requires_grad=True)
    s = tj.tensor(0.0, requires_grad=True)            # 0-d
    ((x + bias) * 2 + s).sum().backward()
    assert tuple(bias.grad.shape) == (4,)
    np.testing.assert_allclose(grad_of(bias), np.full(4, 12.0))
    assert tuple(s.grad.shape) == ()
    assert s.grad.item() == 24.0


def test_broadcast_gradients_match_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    shapes = [((2, 1, 3), (4, 1)), ((3,), (2, 3)), ((1,), (2, 2)), ((), (3, 2)), ((5, 1), (1,))]
    for sa, sb in shapes:
        an = rng.standard_normal(sa)
        bn = rng.standard_normal(sb)
        a, b = tj.tensor(an, requires_grad=True), tj.tensor(bn, requires_grad=True)
        at, bt = torch.tensor(an, requires_grad=True), torch.tensor(bn, requires_grad=True)
        (a * b - a / (b * b + 1)).sum().backward()
        (at * bt - at / (bt * bt + 1)).sum().backward()
        np.testing.assert_allclose(grad_of(a), at.grad.numpy(), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(grad_of(b), bt.grad.numpy(), rtol=1e-12, atol=1e-12)


# ---- subgradients at kinks ---------------------------------------------------------------------

def _grad_of_sum(fn, values, dtype=None):
    x = tj.tensor(values, dtype=dtype, requires_grad=True)
    out = fn(x)
    out.sum().backward()
    return grad_of(x)


def test_relu_subgradient_at_zero_is_zero():
    np.testing.assert_array_equal(_grad_of_sum(tj.relu, [-1.0, 0.0, 2.0]), [0.0, 0.0, 1.0])


def test_abs_subgradient_at_zero_is_zero():
    np.testing.assert_array_equal(_grad_of_sum(tj.abs, [-1.0, 0.0, 2.0]), [-1.0, 0.0, 1.0])
    np.testing.assert_array_equal(_grad_of_sum(lambda x: abs(x), [-1.0, 0.0, 2.0]), [-1.0, 0.0, 1.0])


def test_clamp_and_sign_subgradients():
    np.testing.assert_array_equal(_grad_of_sum(lambda x: x.clamp(0.0, 2.0), [-1.0, 0.0, 2.0, 1.0]),
                                  [0.0, 1.0, 1.0, 1.0])
    np.testing.assert_array_equal(_grad_of_sum(tj.sign, [-1.0, 0.0, 2.0]), [0.0, 0.0, 0.0])


def test_full_max_and_amax_ties_split_evenly():
    v = [1.0, 3.0, 3.0, 2.0]
    np.testing.assert_array_equal(_grad_of_sum(lambda x: x.max(), v), [0.0, 0.5, 0.5, 0.0])
    np.testing.assert_array_equal(_grad_of_sum(lambda x: x.amax(), v), [0.0, 0.5, 0.5, 0.0])
    np.testing.assert_allclose(_grad_of_sum(lambda x: x.min(), [2.0, 1.0, 1.0, 1.0]),
                               [0.0, 1 / 3, 1 / 3, 1 / 3], rtol=1e-6)
    np.testing.assert_array_equal(_grad_of_sum(lambda x: tj.max(x), v), [0.0, 0.5, 0.5, 0.0])


def test_amax_dim_ties_split_max_dim_goes_to_returned_index():
    v = [[1.0, 3.0, 3.0], [2.0, 2.0, 0.0]]
    np.testing.assert_array_equal(_grad_of_sum(lambda x: x.amax(dim=1), v),
                                  [[0.0, 0.5, 0.5], [0.5, 0.5, 0.0]])
    x = tj.tensor(v, requires_grad=True)
    values, indices = x.max(dim=1)
    np.testing.assert_array_equal(val(values), [3.0, 2.0])
    np.testing.assert_array_equal(val(indices), [1, 0])     # torch: first occurrence on CPU
    values.sum().backward()
    np.testing.assert_array_equal(grad_of(x), [[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]])


def test_maximum_minimum_ties_split_evenly():
    a = tj.tensor([1.0, 2.0, 3.0], requires_grad=True)
    b = tj.tensor([1.0, 1.0, 3.0], requires_grad=True)
    tj.maximum(a, b).sum().backward()
    np.testing.assert_array_equal(grad_of(a), [0.5, 1.0, 0.5])
    np.testing.assert_array_equal(grad_of(b), [0.5, 0.0, 0.5])
    a = tj.tensor([1.0, 2.0, 3.0], requires_grad=True)
    b = tj.tensor([1.0, 1.0, 3.0], requires_grad=True)
    tj.minimum(a, b).sum().backward()
    np.testing.assert_array_equal(grad_of(a), [0.5, 0.0, 0.5])
    np.testing.assert_array_equal(grad_of(b), [0.5, 1.0, 0.5])


def test_kink_subgradients_match_torch():
    torch = pytest.importorskip("torch")
    v = np.array([[-1.0, 0.0, 2.0, 2.0], [0.0, 0.0, -3.0, 1.0]])
    cases = [
        (lambda m, x: m.relu(x).sum()),
        (lambda m, x: x.abs().sum()),
        (lambda m, x: x.max()),
        (lambda m, x: x.min()),
        (lambda m, x: x.amax(dim=0).sum()),
        (lambda m, x: x.amin(dim=1).sum()),
        (lambda m, x: x.max(dim=1)[0].sum()),
        (lambda m, x: x.min(dim=0)[0].sum()),
        (lambda m, x: m.maximum(x, m.tensor(v[:, ::-1].copy())).sum()),
        (lambda m, x: m.minimum(x, m.tensor(v[:, ::-1].copy())).sum()),
        (lambda m, x: x.clamp(min=0.0, max=2.0).sum()),
    ]
    for k, f in enumerate(cases):
        xt = torch.tensor(v, requires_grad=True)
        f(torch, xt).backward()
        x = tj.tensor(v, requires_grad=True)
        f(tj, x).backward()
        np.testing.assert_array_equal(grad_of(x), xt.grad.numpy(), err_msg=f"case {k}")


# ---- dtype promotion ---------------------------------------------------------------------------

def test_float32_with_int64_tensor_stays_float32():
    f = tj.ones(3)
    i = tj.tensor([1, 2, 3])
    assert (f + i).dtype == tj.float32
    assert (i * f).dtype == tj.float32
    assert (f - tj.tensor(2)).dtype == tj.float32        # 0-d int64


def test_float32_with_python_float_stays_float32():
    f = tj.ones(3)
    assert (f * 2.5).dtype == tj.float32
    assert (2.5 * f).dtype == tj.float32
    assert (f + 1e-300).dtype == tj.float32
    assert (f ** 2.0).dtype == tj.float32
    assert (f / 3).dtype == tj.float32
    d = tj.ones(3, dtype=tj.float64)
    assert (d * 2.5).dtype == tj.float64


def test_float32_with_float64_tensor_gives_float64():
    f = tj.ones(3)
    d = tj.ones(3, dtype=tj.float64)
    assert (f + d).dtype == tj.float64
    assert (d * f).dtype == tj.float64
    assert tj.maximum(f, d).dtype == tj.float64


def test_zero_dim_tensors_do_not_promote_within_category():
    f = tj.ones(3)
    d0 = tj.tensor(2.0, dtype=tj.float64)
    assert (f + d0).dtype == tj.float32
    assert (d0 * f).dtype == tj.float32
    # both 0-d: ordinary promotion
    assert (tj.tensor(1.0) + d0).dtype == tj.float64
    # int tensor with a 0-d float tensor: a different category, so the float wins
    i = tj.tensor([1, 2])
    assert (i * tj.tensor(2.0)).dtype == tj.float32
    assert (i + tj.tensor(2.5, dtype=tj.float64)).dtype == tj.float64


def test_int_tensor_with_python_scalars():
    i = tj.tensor([1, 2, 3])
    assert (i + 1.5).dtype == tj.float32
    assert (i * 2).dtype == tj.int64
    assert (i / 2).dtype == tj.float32
    np.testing.assert_array_equal(val(i / 2), [0.5, 1.0, 1.5])
    np.testing.assert_array_equal(val(i * 2), [2, 4, 6])


def test_promotion_table_matches_torch():
    torch = pytest.importorskip("torch")
    makers = {
        "f32": (lambda m: m.ones(3)),
        "f64": (lambda m: m.ones(3, dtype=m.float64)),
        "i64": (lambda m: m.tensor([1, 2, 3])),
        "f32_0d": (lambda m: m.tensor(2.0)),
        "f64_0d": (lambda m: m.tensor(2.0, dtype=m.float64)),
        "i64_0d": (lambda m: m.tensor(2)),
        "py_float": (lambda m: 2.5),
        "py_int": (lambda m: 2),
    }
    names = {torch.float32: "float32", torch.float64: "float64", torch.int64: "int64", torch.bool: "bool"}
    for a_name, ma in makers.items():
        if a_name.startswith("py"):
            continue
        for b_name, mb in makers.items():
            for op in ("add", "mul", "sub"):
                tt = getattr(ma(torch), f"__{op}__")(mb(torch))
                jt = getattr(ma(tj), f"__{op}__")(mb(tj))
                assert jt.dtype.name == names[tt.dtype], (a_name, op, b_name)


def test_gradient_flows_through_promotion_in_leaf_dtype():
    x = tj.tensor([1.0, 2.0], requires_grad=True)                  # float32
    y = tj.tensor([3.0, 4.0], dtype=tj.float64, requires_grad=True)
    z = x * y
    assert z.dtype == tj.float64
    z.sum().backward()
    assert x.grad.dtype == tj.float32
    assert y.grad.dtype == tj.float64
    np.testing.assert_array_equal(grad_of(x), [3.0, 4.0])
    np.testing.assert_array_equal(grad_of(y), [1.0, 2.0])


# ---- int tensor ops torch allows ---------------------------------------------------------------

def test_int_tensor_comparisons_argmax_indexing():
    i = tj.tensor([3, 1, 4, 1, 5])
    eq = i == 1
    assert eq.dtype == tj.bool
    np.testing.assert_array_equal(val(eq), [False, True, False, True, False])
    np.testing.assert_array_equal(val(i > 2), [True, False, True, False, True])
    np.testing.assert_array_equal(val(i <= 3), [True, True, False, True, False])
    np.testing.assert_array_equal(val(i != 4), [True, True, False, True, True])
    assert i.argmax().item() == 4
    assert i.argmin().item() == 1
    assert tj.argmax(i).dtype == tj.int64
    assert i[2].item() == 4
    assert i[-1].item() == 5
    np.testing.assert_array_equal(val(i[1:3]), [1, 4])
    np.testing.assert_array_equal(val(i[tj.tensor([0, 4])]), [3, 5])
    np.testing.assert_array_equal(val(i[i > 2]), [3, 4, 5])
    assert i[i > 2].dtype == tj.int64
    m = tj.tensor([[1, 2], [3, 4]])
    np.testing.assert_array_equal(val(m.argmax(dim=1)), [1, 1])
    np.testing.assert_array_equal(val(m[:, 0]), [1, 3])
    assert i.sum().item() == 14


def test_int_index_tensor_into_float_tensor_with_grad():
    x = tj.tensor([1.0, 2.0, 3.0], requires_grad=True)
    idx = tj.tensor([0, 2, 0])
    x[idx].sum().backward()
    np.testing.assert_array_equal(grad_of(x), [2.0, 0.0, 1.0])   # duplicates summed


# ---- grad_fn names and next_functions -----------------------------------------------------------

def test_grad_fn_names():
    x = tj.tensor([1.0, 2.0], requires_grad=True)
    c = tj.tensor([3.0, 4.0])
    m = tj.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    cases = {
        "AddBackward0": x + c,
        "SubBackward0": x - c,
        "MulBackward0": x * c,
        "DivBackward0": x / c,
        "PowBackward0": x ** 2,
        "PowBackward1": x ** c,
        "SumBackward0": x.sum(),
        "SumBackward1": m.sum(dim=0),
        "MeanBackward0": x.mean(),
        "MeanBackward1": m.mean(dim=1),
        "MmBackward0": m.mm(m),
        "ExpBackward0": x.exp(),
        "TanhBackward0": x.tanh(),
        "NegBackward0": -x,
    }
    for name, t in cases.items():
        assert t.grad_fn is not None, name
        assert t.grad_fn.name() == name
        assert type(t.grad_fn).__name__ == name
    assert (x + 1).grad_fn.name() == "AddBackward0"
    assert (x * 2).grad_fn.name() == "MulBackward0"
    assert (x - 1).grad_fn.name() == "SubBackward0"
    assert (m @ m).grad_fn.name() == "MmBackward0"
    assert x.grad_fn is None and c.grad_fn is None
    with tj.no_grad():
        assert (x * 2).grad_fn is None


def test_grad_fn_names_match_torch():
    torch = pytest.importorskip("torch")
    fns = [
        lambda m, x, c: x + c, lambda m, x, c: x - c, lambda m, x, c: x * c, lambda m, x, c: x / c,
        lambda m, x, c: x ** 2, lambda m, x, c: x ** c, lambda m, x, c: x.sum(),
        lambda m, x, c: x.sum(dim=1), lambda m, x, c: x.mean(), lambda m, x, c: x.mean(dim=0),
        lambda m, x, c: x.mm(c.t()), lambda m, x, c: x @ c.t(), lambda m, x, c: x.exp(),
        lambda m, x, c: x.tanh(), lambda m, x, c: x + 1, lambda m, x, c: x * 2,
        lambda m, x, c: x.log(), lambda m, x, c: x.sqrt(), lambda m, x, c: x.relu(),
        lambda m, x, c: x.sigmoid(), lambda m, x, c: x.abs(), lambda m, x, c: -x,
        lambda m, x, c: x.reshape(-1), lambda m, x, c: x.t(), lambda m, x, c: x.sin(),
    ]
    v = np.array([[1.0, 2.0], [3.0, 4.0]])
    w = np.array([[0.5, 1.5], [2.5, 3.0]])
    for k, f in enumerate(fns):
        xt = torch.tensor(v, requires_grad=True)
        x = tj.tensor(v, requires_grad=True)
        expected = f(torch, xt, torch.tensor(w)).grad_fn.name()
        assert f(tj, x, tj.tensor(w)).grad_fn.name() == expected, k


def test_next_functions_structure():
    x = tj.tensor([1.0, 2.0], requires_grad=True)
    c = tj.tensor([3.0, 4.0])
    y = x * c
    nf = y.grad_fn.next_functions
    assert isinstance(nf, tuple) and len(nf) == 2
    node, index = nf[0]
    assert type(node).__name__ == "AccumulateGrad"
    assert node.variable is x
    assert index == 0
    assert nf[1] == (None, 0)

    z = (y + x).sum()
    assert z.grad_fn.name() == "SumBackward0"
    (add_node, _), = z.grad_fn.next_functions
    assert add_node.name() == "AddBackward0"
    first, second = add_node.next_functions
    assert first[0].name() == "MulBackward0"
    assert type(second[0]).__name__ == "AccumulateGrad" and second[0].variable is x

    w = tj.tensor([1.0, 2.0], requires_grad=True)
    u = x * w
    a, b = u.grad_fn.next_functions
    assert a[0].variable is x and b[0].variable is w


def test_next_functions_scalar_operand_like_torch():
    # torch: ``x + 1`` has next_functions ((AccumulateGrad, 0), (None, 0)).
    x = tj.tensor([1.0, 2.0], requires_grad=True)
    nf = (x + 1).grad_fn.next_functions
    assert len(nf) == 2
    assert nf[0][0].variable is x
    assert nf[1] == (None, 0)


# ---- repr --------------------------------------------------------------------------------------

def test_repr_formats():
    x = tj.tensor([0.5, 1.0], requires_grad=True)
    assert repr(x * 2) == "tensor([1., 2.], grad_fn=<MulBackward0>)"
    assert repr(tj.tensor(2.0, requires_grad=True)) == "tensor(2., requires_grad=True)"
    assert repr(tj.tensor([1.0, 2.0])) == "tensor([1., 2.])"
    assert repr(tj.tensor([1, 2])) == "tensor([1, 2])"
    assert repr(tj.tensor([1.5, 2.25])) == "tensor([1.5000, 2.2500])"
    assert repr(x.sum()) == "tensor(1.5000, grad_fn=<SumBackward0>)"
    assert repr(tj.tensor([1.0, 2.0], dtype=tj.float64)) == "tensor([1., 2.], dtype=tapejit.float64)"
    assert str(tj.tensor(3.5)) == "tensor(3.5000)"


def test_repr_matches_torch():
    torch = pytest.importorskip("torch")
    cases = [
        lambda m: m.tensor([1.0, 2.0]),
        lambda m: m.tensor([1.5, 2.25]),
        lambda m: m.tensor(3.5),
        lambda m: m.tensor([1, 2, 3]),
        lambda m: m.tensor([True, False]),
        lambda m: m.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True),
        lambda m: m.tensor([1.0, 2.0], dtype=m.float64),
        lambda m: m.tensor([1.0, 2.0], dtype=m.float64, requires_grad=True) * 2,
        lambda m: m.tensor([1.0, 2.0], requires_grad=True).sum(),
        lambda m: m.tensor([1e-5, 1.0]),
        lambda m: m.tensor([-1.25, 0.0, 7.0]),
    ]
    for k, f in enumerate(cases):
        expected = repr(f(torch)).replace("torch.", "tapejit.")
        assert repr(f(tj)) == expected, k


# ---- grad modes ---------------------------------------------------------------------------------

def test_no_grad_context():
    x = tj.tensor([1.0, 2.0], requires_grad=True)
    assert tj.is_grad_enabled()
    with tj.no_grad():
        assert not tj.is_grad_enabled()
        y = x * 2
        assert not y.requires_grad and y.grad_fn is None
    assert tj.is_grad_enabled()
    assert (x * 2).requires_grad


def test_enable_grad_inside_no_grad():
    x = tj.tensor([1.0, 2.0], requires_grad=True)
    with tj.no_grad():
        with tj.enable_grad():
            assert tj.is_grad_enabled()
            y = x * 2
        assert not tj.is_grad_enabled()
    assert y.requires_grad
    y.sum().backward()
    np.testing.assert_array_equal(grad_of(x), [2.0, 2.0])


def test_set_grad_enabled_context_and_call():
    x = tj.tensor([1.0], requires_grad=True)
    with tj.set_grad_enabled(False):
        assert not tj.is_grad_enabled()
        assert not (x * 2).requires_grad
    assert tj.is_grad_enabled()
    with tj.set_grad_enabled(True):
        assert (x * 2).requires_grad
    try:
        tj.set_grad_enabled(False)        # plain call, as in torch
        assert not tj.is_grad_enabled()
        assert not (x * 2).requires_grad
    finally:
        tj.set_grad_enabled(True)
    assert tj.is_grad_enabled()


def test_grad_mode_restored_after_exception():
    with pytest.raises(ValueError):
        with tj.no_grad():
            raise ValueError
    assert tj.is_grad_enabled()


def test_grad_mode_decorators():
    x = tj.tensor([1.0, 2.0], requires_grad=True)

    @tj.no_grad()
    def f(t):
        assert not tj.is_grad_enabled()
        return t * 2

    @tj.enable_grad()
    def g(t):
        return t * 2

    @tj.inference_mode()
    def h(t):
        return t * 2

    y = f(x)
    assert not y.requires_grad
    assert tj.is_grad_enabled()
    with tj.no_grad():
        z = g(x)
    assert z.requires_grad
    assert not h(x).requires_grad
    assert f.__name__ == "f"


def test_bare_no_grad_decorator():
    # torch 2.x accepts ``@torch.no_grad`` without parentheses.
    x = tj.tensor([1.0, 2.0], requires_grad=True)

    @tj.no_grad
    def f(t):
        return t * 2

    assert not f(x).requires_grad
    assert tj.is_grad_enabled()


def test_set_grad_enabled_decorator_restores_mode_at_definition():
    x = tj.tensor([1.0, 2.0], requires_grad=True)
    try:
        @tj.set_grad_enabled(False)
        def f(t):
            return t * 2

        assert tj.is_grad_enabled()          # torch: decorating does not change the mode
        assert not f(x).requires_grad
        assert tj.is_grad_enabled()
    finally:
        tj.set_grad_enabled(True)


def test_inference_mode_context():
    x = tj.tensor([1.0, 2.0], requires_grad=True)
    with tj.inference_mode():
        assert not tj.is_grad_enabled()
        assert tj.is_inference_mode_enabled()
        y = x * 2
        assert not y.requires_grad
    assert tj.is_grad_enabled()
    assert not tj.is_inference_mode_enabled()
    with tj.inference_mode(False):
        assert (x * 2).requires_grad


# ---- hooks --------------------------------------------------------------------------------------

def test_hook_on_leaf_sees_gradient_and_can_replace_it():
    x = tj.tensor([1.0, 2.0], requires_grad=True)
    seen = []
    x.register_hook(lambda g: seen.append(np.array(g)))
    (x * 3).sum().backward()
    np.testing.assert_array_equal(seen[0], [3.0, 3.0])
    np.testing.assert_array_equal(grad_of(x), [3.0, 3.0])

    w = tj.tensor([1.0, 2.0], requires_grad=True)
    w.register_hook(lambda g: g * 10)
    (w * 3).sum().backward()
    np.testing.assert_array_equal(grad_of(w), [30.0, 30.0])


def test_hook_on_nonleaf_replaces_gradient_downstream():
    x = tj.tensor([1.0, 2.0], requires_grad=True)
    y = x * 3
    seen = []

    def hook(g):
        seen.append(np.array(g))
        return g * 10

    y.register_hook(hook)
    (y * y).sum().backward()
    np.testing.assert_allclose(seen[0], 2 * np.array([3.0, 6.0]))
    np.testing.assert_allclose(grad_of(x), 3 * 10 * 2 * np.array([3.0, 6.0]))
    with pytest.warns(UserWarning):
        assert y.grad is None           # a hook does not make y keep .grad


def test_hook_handle_remove():
    x = tj.tensor([1.0], requires_grad=True)
    h = x.register_hook(lambda g: g * 100)
    h.remove()
    (x * 2).sum().backward()
    np.testing.assert_array_equal(grad_of(x), [2.0])


def test_hook_and_retain_grad_together():
    x = tj.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    y.retain_grad()
    y.register_hook(lambda g: g + 1)
    y.sum().backward()
    np.testing.assert_array_equal(grad_of(x), [4.0, 4.0])
    # torch: retain_grad's stored value includes the hook's change
    np.testing.assert_array_equal(grad_of(y), [2.0, 2.0])


def test_hook_and_retain_grad_match_torch():
    torch = pytest.importorskip("torch")

    def run(m):
        x = m.tensor([1.0, 2.0], requires_grad=True)
        y = x * 2
        y.retain_grad()
        y.register_hook(lambda g: g * 3)
        z = y * y
        z.register_hook(lambda g: g + 1)
        z.sum().backward()
        return np.asarray(x.grad.numpy()), np.asarray(y.grad.numpy())

    for a, b in zip(run(tj), run(torch)):
        np.testing.assert_allclose(a, b)


# ---- tj.autograd.grad / backward ---------------------------------------------------------------

def test_autograd_grad_does_not_touch_dot_grad():
    x = tj.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = (x * x).sum()
    (g,) = tj.autograd.grad(y, x)
    np.testing.assert_array_equal(val(g), [2.0, 4.0, 6.0])
    assert x.grad is None
    assert not g.requires_grad


def test_autograd_grad_multiple_inputs_and_grad_outputs():
    a = tj.tensor([1.0, 2.0], requires_grad=True)
    b = tj.tensor([3.0, 4.0], requires_grad=True)
    y = a * b
    ga, gb = tj.autograd.grad([y], [a, b], grad_outputs=[tj.tensor([1.0, 10.0])])
    np.testing.assert_array_equal(val(ga), [3.0, 40.0])
    np.testing.assert_array_equal(val(gb), [1.0, 20.0])
    assert a.grad is None and b.grad is None


def test_autograd_grad_allow_unused():
    a = tj.tensor([1.0, 2.0], requires_grad=True)
    b = tj.tensor([3.0, 4.0], requires_grad=True)
    y = (a * 2).sum()
    with pytest.raises(RuntimeError, match="appears to not have been used in the graph"):
        tj.autograd.grad(y, [a, b], retain_graph=True)
    ga, gb = tj.autograd.grad(y, [a, b], allow_unused=True)
    np.testing.assert_array_equal(val(ga), [2.0, 2.0])
    assert gb is None


def test_autograd_grad_wrt_nonleaf():
    x = tj.tensor([1.0, 2.0], requires_grad=True)
    h = x * 3
    y = (h * h).sum()
    (gh,) = tj.autograd.grad(y, h)
    np.testing.assert_allclose(val(gh), 2 * np.array([3.0, 6.0]))
    assert x.grad is None


def test_autograd_grad_retain_graph():
    x = tj.tensor(2.0, requires_grad=True)
    y = x ** 3
    (g1,) = tj.autograd.grad(y, x, retain_graph=True)
    (g2,) = tj.autograd.grad(y, x)
    assert g1.item() == g2.item() == 12.0


def test_autograd_grad_same_input_twice():
    # torch returns the gradient once per listed input.
    x = tj.tensor([1.0, 2.0], requires_grad=True)
    y = (x * 3).sum()
    g1, g2 = tj.autograd.grad(y, [x, x])
    np.testing.assert_array_equal(val(g1), [3.0, 3.0])
    np.testing.assert_array_equal(val(g2), [3.0, 3.0])


def test_backward_inputs_argument_limits_accumulation():
    x = tj.tensor([1.0, 2.0], requires_grad=True)
    w = tj.tensor([3.0, 4.0], requires_grad=True)
    (x * w).sum().backward(inputs=[x])
    np.testing.assert_array_equal(grad_of(x), [3.0, 4.0])
    assert w.grad is None


def _only_paths_to_inputs(lib, how):
    """A leaf and an intermediate off every path to the inputs asked for, each with a
    hook, beside a linear (its bias an operand listed in ints) and a cat on the path."""
    x = lib.tensor([[1.0, -2.0, 0.5]], requires_grad=True)
    w = lib.tensor([[0.5, 1.0, -1.0], [2.0, 0.0, 1.5]], requires_grad=True)
    b = lib.tensor([0.25, -0.5], requires_grad=True)
    calls = []
    x.register_hook(lambda g: calls.append("x"))
    off_path = x * 2.0
    off_path.register_hook(lambda g: calls.append("x*2"))
    h = lib.nn.functional.linear(off_path, w, b)
    y = (lib.cat([h, h * h], 1) ** 2).sum()
    if how == "grad":
        grads = lib.autograd.grad(y, [w, b])
    elif how == "create_graph":
        grads = [g.detach() for g in lib.autograd.grad(y, [w, b], create_graph=True)]
    else:
        y.backward(inputs=[w, b])
        grads = [w.grad, b.grad]
    return [np.array(g.tolist()) for g in grads], calls, x.grad


@pytest.mark.parametrize("how", ("grad", "create_graph", "backward_inputs"))
def test_gradient_runs_only_the_paths_to_its_inputs(how):
    # torch's engine runs only the nodes on a path to autograd.grad's inputs (or
    # backward's inputs=): a leaf or tensor off those paths gets no gradient, so its hooks
    # are not called and its .grad stays None; tapejit's sweep leaves their gradients out.
    torch = pytest.importorskip("torch")
    ours, our_calls, our_x_grad = _only_paths_to_inputs(tj, how)
    theirs, their_calls, their_x_grad = _only_paths_to_inputs(torch, how)
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    assert our_calls == their_calls == []
    assert our_x_grad is None and their_x_grad is None


def test_gradient_toward_some_inputs_through_many_stacks():
    # More records with operands listed in ints (stack) than the engine reads one by one
    # (engine._LISTED_READ): their results count as leading to the inputs, the others'
    # operands are still left out; the gradients are torch's.
    torch = pytest.importorskip("torch")

    def grads(lib):
        xs = [lib.tensor(0.1 * (i + 1), dtype=lib.float64, requires_grad=True) for i in range(4)]
        nodes = list(xs)
        for k in range(70):
            nodes.append(lib.tanh(lib.stack(nodes[-3:]).sum() * nodes[k % 4]))
        return [g.item() for g in lib.autograd.grad(nodes[-1], xs[:2])]

    np.testing.assert_allclose(grads(tj), grads(torch), rtol=1e-10)


def test_leaf_hook_called_once_with_total_gradient():
    x = tj.tensor([1.0, 2.0], requires_grad=True)
    calls = []
    x.register_hook(lambda g: calls.append(np.array(g)))
    (x * x + x * 3).sum().backward()
    assert len(calls) == 1
    np.testing.assert_array_equal(calls[0], [5.0, 7.0])


def test_backward_on_a_leaf():
    x = tj.tensor(2.0, requires_grad=True)
    x.backward()
    assert x.grad.item() == 1.0


def test_autograd_backward():
    a = tj.tensor([1.0, 2.0], requires_grad=True)
    b = tj.tensor([3.0, 4.0], requires_grad=True)
    y1 = (a * b).sum()
    y2 = a * 2
    tj.autograd.backward([y1, y2], [None, tj.tensor([1.0, 1.0])])
    np.testing.assert_array_equal(grad_of(a), [3.0 + 2.0, 4.0 + 2.0])
    np.testing.assert_array_equal(grad_of(b), [1.0, 2.0])
    c = tj.tensor(1.0, requires_grad=True)
    tj.autograd.backward(c * 5)
    assert c.grad.item() == 5.0


# ---- gradcheck ----------------------------------------------------------------------------------

def test_gradcheck_passes_on_smooth_functions():
    rng = np.random.default_rng(1)
    x = tj.tensor(rng.standard_normal((3, 4)), requires_grad=True)
    y = tj.tensor(rng.standard_normal((4, 2)), requires_grad=True)
    assert tj.autograd.gradcheck(lambda a, b: (a @ b).tanh(), (x, y))
    z = tj.tensor(rng.uniform(0.5, 2.0, 5), requires_grad=True)
    assert tj.autograd.gradcheck(lambda a: (a.log() * a.sin() / (a + 1)).sum(), (z,))
    assert tj.autograd.gradcheck(lambda a: tj.softmax(a, dim=1), (x,))


def test_gradcheck_detects_wrong_gradient():
    # A function whose true derivative (via a hook that rescales the gradient) is wrong.
    x = tj.tensor([0.3, 0.7], dtype=tj.float64, requires_grad=True)

    def f(a):
        h = a * 1.0
        h.register_hook(lambda g: g * 2)
        return h.sin()

    assert tj.autograd.gradcheck(f, (x,), raise_exception=False) is False
    with pytest.raises(RuntimeError, match="Jacobian mismatch"):
        tj.autograd.gradcheck(f, (x,))


# ---- in-place ops -------------------------------------------------------------------------------

def test_inplace_on_nonleaf_follows_torch():
    x = tj.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    y += 1
    assert y.grad_fn.name() == "AddBackward0"
    y *= x
    assert y.grad_fn.name() == "MulBackward0"
    np.testing.assert_array_equal(val(y), [3.0, 10.0])
    y.sum().backward()
    np.testing.assert_array_equal(grad_of(x), [5.0, 9.0])     # d/dx (2x+1)x = 4x+1


def test_inplace_methods_on_nonleaf():
    x = tj.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    r = y.add_(1.0)
    assert r is y
    y.mul_(3.0)
    y.sub_(1.0)
    y.div_(2.0)
    np.testing.assert_array_equal(val(y), [4.0, 7.0])
    y.sum().backward()
    np.testing.assert_array_equal(grad_of(x), [3.0, 3.0])


def test_inplace_operator_keeps_identity():
    x = tj.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    before = id(y)
    y += 1
    y -= 0.5
    y *= 2
    y /= 4
    assert id(y) == before
    np.testing.assert_allclose(val(y), [1.25, 2.25])


def test_zero_fill_clamp_copy_on_nonleaf():
    x = tj.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    y.clamp_(0.0, 3.0)
    np.testing.assert_array_equal(val(y), [2.0, 3.0])
    y.sum().backward()
    np.testing.assert_array_equal(grad_of(x), [2.0, 0.0])

    x = tj.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    y.zero_()
    np.testing.assert_array_equal(val(y), [0.0, 0.0])
    y.sum().backward()
    np.testing.assert_array_equal(grad_of(x), [0.0, 0.0])

    x = tj.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    y.fill_(7.0)
    np.testing.assert_array_equal(val(y), [7.0, 7.0])
    y.sum().backward()
    np.testing.assert_array_equal(grad_of(x), [0.0, 0.0])

    x = tj.tensor([1.0, 2.0], requires_grad=True)
    s = tj.tensor([5.0, 6.0], requires_grad=True)
    y = x * 2
    y.copy_(s * 3)
    np.testing.assert_array_equal(val(y), [15.0, 18.0])
    y.sum().backward()
    np.testing.assert_array_equal(grad_of(x), [0.0, 0.0])
    np.testing.assert_array_equal(grad_of(s), [3.0, 3.0])


def test_inplace_on_plain_tensor():
    c = tj.ones(3)
    c.mul_(2.0)
    c += 1
    np.testing.assert_array_equal(val(c), [3.0, 3.0, 3.0])
    c.zero_()
    np.testing.assert_array_equal(val(c), [0.0, 0.0, 0.0])
    c.fill_(4.0)
    np.testing.assert_array_equal(val(c), [4.0, 4.0, 4.0])
    c.copy_(tj.tensor([1.0, 2.0, 3.0]))
    np.testing.assert_array_equal(val(c), [1.0, 2.0, 3.0])
    assert not c.requires_grad


def test_sgd_update_on_leaf_under_no_grad():
    p = tj.tensor([1.0, -2.0], requires_grad=True)
    lr = 0.1
    (p * p).sum().backward()
    ident = id(p)
    with tj.no_grad():
        p -= lr * p.grad
    assert id(p) == ident
    assert p.is_leaf and p.requires_grad and p.grad_fn is None
    np.testing.assert_allclose(val(p), [0.8, -1.6], rtol=1e-6)
    p.grad = None
    (p * p).sum().backward()              # the graph sees the updated values
    np.testing.assert_allclose(grad_of(p), [1.6, -3.2], rtol=1e-6)
    with tj.no_grad():
        p.add_(p.grad, alpha=-lr)
        p.mul_(2.0)
    np.testing.assert_allclose(val(p), [2 * (0.8 - 0.16), 2 * (-1.6 + 0.32)], rtol=1e-6)
    assert p.is_leaf and p.requires_grad


def test_training_loop_with_leaf_updates_converges():
    rng = np.random.default_rng(0)
    xs = tj.tensor(rng.standard_normal((32, 3)).astype(np.float32))
    true_w = np.array([1.5, -2.0, 0.5], np.float32)
    ys = tj.tensor(np.asarray(xs) @ true_w)
    w = tj.zeros(3, requires_grad=True)
    for _ in range(200):
        loss = ((xs @ w - ys) ** 2).mean()
        loss.backward()
        with tj.no_grad():
            w -= 0.1 * w.grad
        w.grad = None
    np.testing.assert_allclose(val(w), true_w, atol=1e-3)


def test_inplace_after_use_in_op_that_saves_nothing_is_fine():
    x = tj.tensor([1.0, 2.0], requires_grad=True)
    a = x * 2
    b = a + 1                       # AddBackward0 saves nothing
    a.add_(1)
    b.sum().backward()
    np.testing.assert_array_equal(grad_of(x), [2.0, 2.0])
    np.testing.assert_array_equal(val(b), [3.0, 5.0])
    np.testing.assert_array_equal(val(a), [3.0, 5.0])


def test_inplace_on_constant_leaf_after_use_keeps_recorded_forward_value():
    # torch: modifying ``c`` after ``y = x + c`` does not change y (add saves nothing).
    x = tj.tensor([1.0, 2.0], requires_grad=True)
    c = tj.tensor([10.0, 20.0])
    y = x + c
    c.add_(1.0)
    np.testing.assert_array_equal(val(y), [11.0, 22.0])
    y.sum().backward()
    np.testing.assert_array_equal(grad_of(x), [1.0, 1.0])


def test_requires_grad_flag_setters():
    x = tj.tensor([1.0, 2.0])
    assert not x.requires_grad
    r = x.requires_grad_()
    assert r is x and x.requires_grad and x.is_leaf
    x.requires_grad = False
    assert not x.requires_grad
    x.requires_grad = True
    (x * 2).sum().backward()
    np.testing.assert_array_equal(grad_of(x), [2.0, 2.0])


def test_tensor_subclass_operands_take_the_tensor_path():
    """nn.Parameter (a Tensor subclass) as the second operand of every binary function."""
    p = tj.nn.Parameter(tj.tensor([1.0, 2.0]))
    x = tj.tensor([3.0, 4.0], requires_grad=True)
    out = tj.add(x, p) + tj.sub(x, p) + tj.mul(x, p) + tj.div(x, p) + tj.pow(x, p) + x.add(p, alpha=0.5)
    out.sum().backward()
    expected_p = [0.5 + 3.0 - 3.0 + 3 ** 1 * np.log(3.0), 0.5 + 4.0 - 4.0 / 4.0 + 4 ** 2 * np.log(4.0)]
    np.testing.assert_allclose(p.grad.numpy(), expected_p, rtol=1e-6)
    g = tj.tensor([1.0, 1.0])
    with tj.no_grad():
        g.add_(p, alpha=0.1)
    np.testing.assert_allclose(g.numpy(), [1.1, 1.2], rtol=1e-6)


def test_data_assignment_swaps_value_shape_and_dtype_as_torch():
    x = tj.zeros(3, requires_grad=True)
    version = x._version_counter
    x.data = tj.ones(2, dtype=tj.float64)
    assert x.dtype == tj.float64 and x.shape == (2,) and x.requires_grad and x.is_leaf
    assert x._version_counter == version + 1
    np.testing.assert_array_equal(x.detach().numpy(), [1.0, 1.0])
    with pytest.raises(RuntimeError, match="must be floating point or complex dtype"):
        x.data = tj.zeros(2, dtype=tj.int64)
    with pytest.raises(TypeError, match="Variable data has to be a tensor, but got list"):
        x.data = [1.0, 2.0]


def test_reductions_of_infinities_follow_ieee_as_torch():
    x = tj.tensor([np.inf, 2.0], dtype=tj.float64)
    assert x.sum().item() == np.inf
    assert x.prod().item() == np.inf
    assert x.norm().item() == np.inf
    assert tj.tensor([np.inf, -np.inf]).sum().isnan().item()


def test_an_alias_collected_at_interpreter_shutdown_is_silent(monkeypatch):
    """At shutdown Python clears module globals (to None) before the last tensors go; the
    weak-reference callback of a ``detach()`` alias then has nothing to update and must
    not raise (it printed "Exception ignored in _member_gone ... 'NoneType'")."""
    from tapejit import inplace
    x = tj.randn(3, requires_grad=True)
    alias = x.detach()
    member = inplace._shared[id(alias)].members[id(alias)]
    monkeypatch.setattr(inplace, "_shared", None)
    inplace._member_gone(member)   # what the callback does then: nothing, no exception
