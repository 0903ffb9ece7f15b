"""Trust, numerics (issue 14): the op kernels never give a silently wrong number.

Two parts.

* An audit of every backward rule, driven by the registry's samples (the cases of
  tests/test_gradients.py): an operand whose adjoint already holds a contribution when
  the op's backward runs (``f(x) + (x * c).sum()``, the second term recorded after ``f``
  so that its backward runs first), the op applied twice to the same operands, and one
  tensor passed as every operand (``x * x``, ``where(c, x, x)``), each unchunked and in
  chunked runs (tapejit/executor.py) on one and two threads.  The expected gradients are
  tapejit's own plain ones, which tests/test_gradients.py holds to finite differences
  and PyTorch, so this part needs no torch.
* NaN, inf, zeros and bad arguments, case by case: each case states PyTorch's result
  (value and gradient, or exception type and message), checked against tapejit always and
  against torch when it is installed (so the stated values are torch's).
"""
import math
import warnings

import numpy as np
import pytest

import tapejit as tj
from tapejit import executor

from test_gradients import CASES

inf = math.inf
nan = math.nan


# ---- part 1: the audit ------------------------------------------------------------------------

CHUNKING = {"whole": None, "chunked-1-thread": 1, "chunked-2-threads": 2}


@pytest.fixture(params=list(CHUNKING), ids=list(CHUNKING))
def chunking(request, monkeypatch):
    """Unchunked, or every elementwise record of two or more elements chunked three
    elements a chunk (tests/test_chunked.py's setting), on one thread or two."""
    threads = CHUNKING[request.param]
    if threads is not None:
        monkeypatch.setattr(executor, "MIN_ELEMENTS", 2)
        monkeypatch.setattr(executor, "CHUNK", 3)
        monkeypatch.setattr(executor, "THREADS", threads)
    return request.param


def _leaves(inputs):
    return [tj.tensor(np.array(x, dtype=np.float64), requires_grad=True) for x in inputs]


def _grads(leaves, inputs):
    return [np.zeros(x.shape) if t.grad is None else t.grad.numpy().copy() for t, x in zip(leaves, inputs)]


def _weighted(out, u):
    return (out * tj.tensor(u)).sum()


def _cotangent(fn, inputs, seed):
    shape = tuple(fn(tj, *[tj.tensor(np.array(x)) for x in inputs]).shape)
    return np.random.default_rng(seed).standard_normal(shape)


def _plain_grads(fn, inputs, u):
    """The gradients of ``sum(u * fn(inputs))``, unchunked, each operand its own leaf."""
    leaves = _leaves(inputs)
    _weighted(fn(tj, *leaves), u).backward()
    return _grads(leaves, inputs)


def _close(got, expected, what):
    for i, (g, e) in enumerate(zip(got, expected)):
        np.testing.assert_allclose(g, e, rtol=1e-12, atol=1e-12 * max(1.0, float(np.max(np.abs(e), initial=0))),
                                   err_msg=f"{what}: gradient of input {i}")


@pytest.mark.parametrize("order", ["other-term-after", "other-term-before"])
@pytest.mark.parametrize("op, label, fn, inputs", CASES)
def test_adjoint_already_holding_a_contribution(op, label, fn, inputs, order, chunking):
    """``sum(u * f(x)) + sum_i (x_i * c_i).sum()``: recorded after ``f``, the other terms'
    backward runs first, so ``f``'s backward must add to what the operands' adjoints hold
    (prod's multiplied it instead); recorded before, it must write without reading."""
    u = _cotangent(fn, inputs, 1)
    rng = np.random.default_rng(2)
    coefficients = [rng.standard_normal(x.shape) for x in inputs]
    expected = [g + c for g, c in zip(_plain_grads(fn, inputs, u), coefficients)]
    leaves = _leaves(inputs)

    def others():
        total = None
        for x, c in zip(leaves, coefficients):
            term = (x * tj.tensor(c)).sum()
            total = term if total is None else total + term
        return total

    if order == "other-term-after":
        loss = _weighted(fn(tj, *leaves), u) + others()
    else:
        first = others()
        loss = first + _weighted(fn(tj, *leaves), u)
    loss.backward()
    _close(_grads(leaves, inputs), expected, f"{op.name} ({order}, {chunking})")


@pytest.mark.parametrize("op, label, fn, inputs", CASES)
def test_op_applied_twice_to_the_same_operands(op, label, fn, inputs, chunking):
    """``sum(u * f(x)) + sum(u * f(x))``: the first record's backward finds the adjoints the
    second one wrote; the gradient is twice the op's."""
    u = _cotangent(fn, inputs, 3)
    expected = [2.0 * g for g in _plain_grads(fn, inputs, u)]
    leaves = _leaves(inputs)
    (_weighted(fn(tj, *leaves), u) + _weighted(fn(tj, *leaves), u)).backward()
    _close(_grads(leaves, inputs), expected, f"{op.name} twice ({chunking})")


SAME_SHAPED = [case for case in CASES if len(case.values[3]) >= 2 and len({x.shape for x in case.values[3]}) == 1]


@pytest.mark.parametrize("op, label, fn, inputs", SAME_SHAPED)
def test_one_tensor_as_every_operand(op, label, fn, inputs, chunking):
    """``f(x, x)``: both operands are one slot (``a == b``), whose adjoint gets both
    contributions: the sum of the gradients ``f(x, y)`` gives its operands at ``y = x``."""
    x = inputs[0]
    same = [x] * len(inputs)
    u = _cotangent(fn, same, 4)
    expected = sum(_plain_grads(fn, same, u))
    leaf = tj.tensor(np.array(x), requires_grad=True)
    _weighted(fn(tj, *[leaf] * len(inputs)), u).backward()
    _close([leaf.grad.numpy()], [expected], f"{op.name}(x, x) ({chunking})")


@pytest.mark.parametrize("op, label, fn, inputs", SAME_SHAPED)
def test_one_tensor_as_every_operand_matches_torch(op, label, fn, inputs):
    torch = pytest.importorskip("torch")
    x = inputs[0]
    u = _cotangent(fn, [x] * len(inputs), 4)
    leaf = tj.tensor(np.array(x), requires_grad=True)
    _weighted(fn(tj, *[leaf] * len(inputs)), u).backward()
    pt = torch.tensor(np.array(x), requires_grad=True)
    (fn(torch, *[pt] * len(inputs)) * torch.tensor(u)).sum().backward()
    np.testing.assert_allclose(leaf.grad.numpy(), pt.grad.numpy(), rtol=1e-10, atol=1e-12)


# Kernels whose operands the samples above never make one slot (mm's x @ x.t() reads a
# transposed copy): the same tensor as both operands, and as an operand and a bias.
SHARED_OPERANDS = {
    "mm_self": (lambda m, x: m.mm(x, x), (3, 3)),
    "matmul_self": (lambda m, x: x @ x, (3, 3)),
    "bmm_self": (lambda m, x: m.bmm(x, x), (2, 3, 3)),
    "dot_self": (lambda m, x: m.dot(x, x), (4,)),
    "linear_self": (lambda m, x: m.nn.functional.linear(x, x), (3, 3)),
    "linear_self_bias": (lambda m, x: m.nn.functional.linear(x, x, x[0]), (3, 3)),
    "linear_vector_bias": (lambda m, x: m.nn.functional.linear(x, x.reshape(1, 3).expand(3, 3), x), (3,)),
    "cat_self": (lambda m, x: m.cat([x, x * 2.0, x], 1), (2, 3)),
    "where_self": (lambda m, x: m.where(x > 0, x, x), (3, 4)),
    "maximum_self": (lambda m, x: m.maximum(x, x), (5,)),
    "pow_self": (lambda m, x: (lambda y: y ** y)(x.abs() + 0.5), (5,)),
}


def _shared_operand_inputs(shape):
    return np.random.default_rng(5).uniform(-2.0, 2.0, size=shape)


@pytest.mark.parametrize("name", list(SHARED_OPERANDS))
def test_shared_operands_of_kernels(name, chunking):
    """The same gradient with the shared tensor as one leaf as with one leaf per use."""
    fn, shape = SHARED_OPERANDS[name]
    x = _shared_operand_inputs(shape)
    leaf = tj.tensor(x, requires_grad=True)
    out = fn(tj, leaf)
    u = np.random.default_rng(6).standard_normal(tuple(out.shape))
    _weighted(out, u).backward()
    # finite differences of the same function along a random direction
    v = np.random.default_rng(7).standard_normal(shape)

    def value(at):
        return float(np.sum(u * fn(tj, tj.tensor(at)).numpy()))
    h = 1e-6
    directional = (value(x + h * v) - value(x - h * v)) / (2 * h)
    assert abs(float(np.sum(leaf.grad.numpy() * v)) - directional) <= 1e-6 * max(1.0, abs(directional))


@pytest.mark.parametrize("name", list(SHARED_OPERANDS))
def test_shared_operands_of_kernels_match_torch(name):
    torch = pytest.importorskip("torch")
    fn, shape = SHARED_OPERANDS[name]
    x = _shared_operand_inputs(shape)
    leaf = tj.tensor(x, requires_grad=True)
    out = fn(tj, leaf)
    u = np.random.default_rng(6).standard_normal(tuple(out.shape))
    _weighted(out, u).backward()
    pt = torch.tensor(x, requires_grad=True)
    (fn(torch, pt) * torch.tensor(u)).sum().backward()
    np.testing.assert_allclose(leaf.grad.numpy(), pt.grad.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("threads", [1, 2])
def test_chunked_runs_at_full_size_add_to_held_adjoints(threads, monkeypatch):
    """Runs of real chunk size (8,192 elements over 70,000): same-operand products, a
    slice's reader, an activation, the joined sum, with adjoints holding contributions."""
    monkeypatch.setattr(executor, "THREADS", threads)
    n = 70_000
    rng = np.random.default_rng(8)
    xv = rng.uniform(0.5, 1.5, n)
    c = rng.standard_normal(n)
    x = tj.tensor(xv, requires_grad=True)
    # amax and norm are whole records after the runs: their backward writes x's adjoint first
    loss = ((x * x).sin().sum() + (x / x + x - x).sum() + (x[1:] * x[:-1]).sum() + tj.relu(x - 1.0).sum()
            + (x * tj.tensor(c)).sum() + x.amax() + x.norm())
    loss.backward()
    expected = 2 * xv * np.cos(xv * xv) + c + (xv > 1.0) + xv / np.linalg.norm(xv)
    expected[np.argmax(xv)] += 1.0
    expected[1:] += xv[:-1]
    expected[:-1] += xv[1:]
    np.testing.assert_allclose(x.grad.numpy(), expected, rtol=1e-12, atol=1e-12)


# ---- part 2: edge cases against PyTorch ----------------------------------------------------------
# (name, f(module, x), x, PyTorch's value, PyTorch's gradient of value.sum()) in float64.
# ``m`` is tapejit or torch.

def _rows(m, x):
    return x.reshape(2, 2)


EDGE_CASES = [
    # prod: the adjoint already holds sum's contribution (issue 14: prod's backward multiplied it
    # too), zeros, infinities
    ("prod+sum", lambda m, x: x.prod() + x.sum(), [1.0, 2.0, 3.5], 13.5, [8.0, 4.5, 3.0]),
    ("prod+sum_issue", lambda m, x: x.prod() + x.sum(), [2.0, 3.0, 3.5], 29.5, [11.5, 8.0, 7.0]),
    ("prod+prod", lambda m, x: x.prod() + x.prod(), [1.0, 2.0, 3.5], 14.0, [14.0, 7.0, 4.0]),
    ("prod_dim+sum", lambda m, x: _rows(m, x).prod(1).sum() + x.sum(), [1.0, 2.0, 3.0, 4.0], 24.0,
     [3.0, 2.0, 5.0, 4.0]),
    ("prod_one_zero", lambda m, x: x.prod(), [2.0, 0.0, 3.0], 0.0, [0.0, 6.0, 0.0]),
    ("prod_two_zeros", lambda m, x: x.prod(), [0.0, 0.0, 3.0], 0.0, [0.0, 0.0, 0.0]),
    ("prod_zero_inf", lambda m, x: x.prod(), [inf, 0.0, 2.0], nan, [0.0, inf, nan]),
    ("prod_inf", lambda m, x: x.prod(), [inf, 2.0], inf, [nan, inf]),
    ("prod_dim_zero_elsewhere", lambda m, x: _rows(m, x).prod(1), [inf, 2.0, 0.0, 3.0], [inf, 0.0],
     [2.0, inf, 3.0, 0.0]),
    ("prod_dim_two_zeros_inf", lambda m, x: x.prod(0), [0.0, 0.0, inf], nan, [nan, nan, 0.0]),
    ("prod_full_two_zeros_inf", lambda m, x: x.prod(), [0.0, 0.0, inf], nan, [0.0, 0.0, 0.0]),
    ("prod_0d_zero", lambda m, x: x.prod(), 0.0, 0.0, 1.0),
    ("prod_0d_inf", lambda m, x: x.prod(0), inf, inf, 1.0),
    ("prod_1_inf", lambda m, x: x.prod(0), [inf], inf, [nan]),
    # logsumexp (issue 14: nan for these values)
    ("logsumexp_all_-inf", lambda m, x: x.logsumexp(0), [-inf, -inf], -inf, [nan, nan]),
    ("logsumexp_+inf", lambda m, x: x.logsumexp(0), [inf, 1.0], inf, [nan, 0.0]),
    ("logsumexp_+inf_-inf", lambda m, x: x.logsumexp(0), [inf, -inf], inf, [nan, 0.0]),
    ("logsumexp_two_+inf", lambda m, x: x.logsumexp(0), [inf, inf], inf, [nan, nan]),
    ("logsumexp_nan", lambda m, x: x.logsumexp(0), [nan, 1.0], nan, [nan, nan]),
    ("logsumexp_one_-inf", lambda m, x: x.logsumexp(0), [-inf, 1.0], 1.0, [0.0, 1.0]),
    ("logsumexp_dim", lambda m, x: _rows(m, x).logsumexp(1), [-inf, -inf, 1.0, 2.0], [-inf, 2.3132616875182228],
     [nan, nan, 0.2689414213699951, 0.7310585786300049]),
    ("logsumexp_keepdim", lambda m, x: _rows(m, x).logsumexp(1, keepdim=True), [-inf, -inf, inf, 2.0],
     [[-inf], [inf]], [nan, nan, nan, 0.0]),
    ("logsumexp_dim0", lambda m, x: _rows(m, x).logsumexp(0), [-inf, -inf, inf, 2.0], [inf, 2.0],
     [0.0, 0.0, nan, 1.0]),
    # std/var of equal values (issue 14: NaN gradient), of one element, and n - correction <= 0
    ("std_equal", lambda m, x: x.std(), [2.0, 2.0, 2.0], 0.0, [0.0, 0.0, 0.0]),
    ("var_equal", lambda m, x: x.var(), [2.0, 2.0, 2.0], 0.0, [0.0, 0.0, 0.0]),
    ("std_equal_biased", lambda m, x: x.std(correction=0), [0.5, 0.5, 0.5], 0.0, [0.0, 0.0, 0.0]),
    ("std_equal_dim", lambda m, x: _rows(m, x).std(1), [1.0, 1.0, 2.0, 3.0], [0.0, 0.7071067811865476],
     [0.0, 0.0, -0.7071067811865476, 0.7071067811865476]),
    ("std_one", lambda m, x: x.std(), [3.5], nan, [nan]),
    ("std_one_biased", lambda m, x: x.std(correction=0), [3.5], 0.0, [0.0]),
    ("var_one", lambda m, x: x.var(), [3.5], nan, [nan]),
    ("var_one_biased", lambda m, x: x.var(unbiased=False), [3.5], 0.0, [0.0]),
    ("std_0d_biased", lambda m, x: x.std(correction=0), 3.5, 0.0, 0.0),
    ("var_0d", lambda m, x: x.var(), 3.5, nan, nan),
    ("std_length_one_dim", lambda m, x: x.reshape(2, 1).std(1, correction=0), [1.0, 2.0], [0.0, 0.0], [0.0, 0.0]),
    ("std_length_one_dim_unbiased", lambda m, x: x.reshape(2, 1).std(1), [1.0, 2.0], [nan, nan], [nan, nan]),
    ("var_length_one_dim_unbiased", lambda m, x: x.reshape(2, 1).var(1), [1.0, 2.0], [nan, nan], [nan, nan]),
    ("var_correction_n", lambda m, x: x.var(correction=2), [1.0, 2.0], inf, [inf, inf]),
    ("std_correction_n", lambda m, x: x.std(correction=2), [1.0, 2.0], inf, [nan, nan]),
    ("var_correction_above_n", lambda m, x: x.var(correction=3), [1.0, 2.0], inf, [inf, inf]),
    ("var_correction_n_equal", lambda m, x: x.var(correction=2), [1.0, 1.0], nan, [nan, nan]),
    ("var_dim_correction_above_n", lambda m, x: x.reshape(1, 2).var(1, correction=3), [1.0, 2.0], [inf],
     [1.0, -1.0]),
    ("var_dim_correction_above_n_equal", lambda m, x: x.reshape(1, 2).var(1, correction=3), [1.0, 1.0], [nan],
     [0.0, 0.0]),
    ("std_dim_correction_above_n", lambda m, x: x.reshape(1, 2).std(1, correction=3), [1.0, 2.0], [inf],
     [0.0, 0.0]),
    ("var_all_dims_correction_n", lambda m, x: x.reshape(1, 2).var((0, 1), correction=2), [1.0, 2.0], inf,
     [-inf, inf]),
    ("var_inf", lambda m, x: x.var(), [1.0, 2.0, 4.0, inf], nan, [-inf, -inf, -inf, nan]),
    ("std_nan", lambda m, x: x.std(), [1.0, 2.0, 4.0, nan], nan, [nan, nan, nan, nan]),
    ("var_fractional_correction", lambda m, x: x.var(correction=0.5), [1.0, 2.0, 4.0], 1.8666666666666667,
     [-1.0666666666666667, -0.26666666666666666, 1.3333333333333333]),
    # max/min with NaN (issue 14: all-zero gradient), ties
    ("max_nan", lambda m, x: x.max(), [1.0, nan, 3.0], nan, [0.0, 1.0, 0.0]),
    ("max_two_nans", lambda m, x: x.max(), [nan, nan, 3.0], nan, [0.5, 0.5, 0.0]),
    ("min_nan", lambda m, x: x.min(), [1.0, nan, 3.0], nan, [0.0, 1.0, 0.0]),
    ("max_ties", lambda m, x: x.max(), [3.0, 1.0, 3.0], 3.0, [0.5, 0.0, 0.5]),
    ("amax_nan", lambda m, x: x.amax(), [1.0, nan, 3.0], nan, [nan, nan, nan]),
    ("amin_nan", lambda m, x: x.amin(), [1.0, nan, 3.0], nan, [nan, nan, nan]),
    ("amin_ties", lambda m, x: x.amin(), [1.0, 3.0, 1.0], 1.0, [0.5, 0.0, 0.5]),
    ("amax_dim_nan", lambda m, x: _rows(m, x).amax(1), [1.0, nan, 3.0, 4.0], [nan, 4.0], [nan, nan, 0.0, 1.0]),
    ("amax_dim0_nan", lambda m, x: _rows(m, x).amax(0), [1.0, nan, 3.0, 4.0], [3.0, nan], [0.0, nan, 1.0, nan]),
    ("amin_dim0_nan", lambda m, x: _rows(m, x).amin(0), [1.0, nan, 3.0, 4.0], [1.0, nan], [1.0, nan, 0.0, nan]),
    ("max_dim_nan", lambda m, x: _rows(m, x).max(1).values, [1.0, nan, 3.0, 4.0], [nan, 4.0], [0.0, 1.0, 0.0, 1.0]),
    ("max_dim_two_nans", lambda m, x: _rows(m, x).max(1).values, [nan, nan, 3.0, 4.0], [nan, 4.0],
     [1.0, 0.0, 0.0, 1.0]),
    ("min_dim_nan", lambda m, x: _rows(m, x).min(0).values, [1.0, nan, 3.0, 4.0], [1.0, nan], [1.0, 1.0, 0.0, 0.0]),
    ("maximum_nan", lambda m, x: m.maximum(x[:2], x[2:]), [1.0, nan, nan, 2.0], [nan, nan], [1.0, 1.0, 1.0, 1.0]),
    ("maximum_both_nan", lambda m, x: m.maximum(x[:1], x[1:]), [nan, nan], [nan], [1.0, 1.0]),
    ("minimum_nan", lambda m, x: m.minimum(x[:2], x[2:]), [1.0, nan, nan, 2.0], [nan, nan], [1.0, 1.0, 1.0, 1.0]),
    ("maximum_tie", lambda m, x: m.maximum(x[:1], x[1:]), [2.0, 2.0], [2.0], [0.5, 0.5]),
    # activations and clamps: NaN, infinities, the sign of zero (relu(-1) was -0.0)
    ("relu", lambda m, x: m.relu(x), [nan, -1.0, -0.0, 0.0, 2.0, -inf], [nan, 0.0, -0.0, 0.0, 2.0, 0.0],
     [1.0, 0.0, 0.0, 0.0, 1.0, 0.0]),
    ("one_over_relu", lambda m, x: 1.0 / m.relu(x), [-1.0], [inf], [0.0]),
    ("clamp", lambda m, x: x.clamp(0.0, 1.0), [nan, -1.0, 2.0, 0.5, -inf, inf], [nan, 0.0, 1.0, 0.5, 0.0, 1.0],
     [0.0, 0.0, 0.0, 1.0, 0.0, 0.0]),
    ("clamp_min_zero", lambda m, x: x.clamp(min=0.0), [-1.0, -0.0, 0.0, -inf], [0.0, -0.0, 0.0, 0.0],
     [0.0, 1.0, 1.0, 0.0]),
    ("clamp_min_negative_zero", lambda m, x: x.clamp(min=-0.0), [-1.0], [-0.0], [0.0]),
    ("clamp_max", lambda m, x: x.clamp(max=1.0), [inf, nan, 0.5], [1.0, nan, 0.5], [0.0, 0.0, 1.0]),
    ("clamp_min_above_max", lambda m, x: x.clamp(2.0, 1.0), [0.0, 1.5, 3.0], [1.0, 1.0, 1.0], [0.0, 0.0, 0.0]),
    ("clamp_tensor_bounds", lambda m, x: x[:5].clamp(x[5:10], x[10:]),
     [0.0, 1.0, -1.0, nan, 2.0, 0.0, 0.0, 0.0, 0.0, 3.0, 1.0, 1.0, 1.0, 1.0, 2.5], [0.0, 1.0, 0.0, nan, 2.5],
     [1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0]),
    ("clamp_min_tensor", lambda m, x: m.clamp_min(x[:5], x[5:]), [0.0, 1.0, -1.0, nan, 2.0, 0.0, 0.0, 0.0, 0.0, 3.0],
     [0.0, 1.0, 0.0, nan, 3.0], [1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 1.0]),
    ("clamp_max_tensor", lambda m, x: x[:5].clamp(max=x[5:]), [0.0, 1.0, -1.0, nan, 2.0, 1.0, 1.0, 1.0, 1.0, 2.5],
     [0.0, 1.0, -1.0, nan, 2.0], [1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0]),
    ("clamp_nan_bound", lambda m, x: m.clamp_min(x[:1], x[1:]), [1.0, nan], [nan], [0.0, 0.0]),
    ("leaky_relu", lambda m, x: m.nn.functional.leaky_relu(x), [nan, -1.0, -0.0, 0.0], [nan, -0.01, -0.0, 0.0],
     [0.01, 0.01, 0.01, 0.01]),
    ("leaky_relu_slope_0", lambda m, x: m.nn.functional.leaky_relu(x, 0.0), [-1.0], [-0.0], [0.0]),
    ("elu", lambda m, x: m.nn.functional.elu(x), [nan, -0.0, 0.0, -1.0], [nan, -0.0, 0.0, -0.6321205588285577],
     [1.0, 1.0, 1.0, 0.36787944117144233]),
    ("silu", lambda m, x: m.nn.functional.silu(x), [nan, -0.0, -1000.0], [nan, -0.0, -0.0], [nan, 0.5, -0.0]),
    ("gelu", lambda m, x: m.nn.functional.gelu(x), [nan, -0.0, -1000.0], [nan, -0.0, -0.0], [nan, 0.5, 0.0]),
    ("softplus", lambda m, x: m.nn.functional.softplus(x), [nan, -0.0, -1000.0, inf, -inf],
     [nan, 0.6931471805599453, 0.0, inf, 0.0], [nan, 0.5, 0.0, 1.0, 0.0]),
    ("sigmoid", lambda m, x: m.sigmoid(x), [nan, -0.0, -1000.0, inf, -inf], [nan, 0.5, 0.0, 1.0, 0.0],
     [nan, 0.25, 0.0, 0.0, 0.0]),
    ("tanh", lambda m, x: m.tanh(x), [nan, -0.0, inf, -inf], [nan, -0.0, 1.0, -1.0], [nan, 1.0, 0.0, 0.0]),
    ("abs", lambda m, x: x.abs(), [nan, -0.0, 0.0, -2.0], [nan, 0.0, 0.0, 2.0], [0.0, 0.0, 0.0, -1.0]),
    ("sign", lambda m, x: m.sign(x), [nan, -0.0, 0.0, -2.0, inf], [0.0, 0.0, 0.0, -1.0, 1.0], [0.0] * 5),
    # other reductions
    ("sum_inf", lambda m, x: x.sum(), [inf, -inf], nan, [1.0, 1.0]),
    ("mean_inf", lambda m, x: x.mean(), [inf, 1.0], inf, [0.5, 0.5]),
    ("norm_zeros", lambda m, x: x.norm(), [0.0, 0.0, 0.0], 0.0, [0.0, 0.0, 0.0]),
    ("norm1_zeros", lambda m, x: x.norm(1), [0.0, 0.0], 0.0, [0.0, 0.0]),
    ("norm3_zeros", lambda m, x: x.norm(3), [0.0, 0.0], 0.0, [0.0, 0.0]),
    ("norm_half_zeros", lambda m, x: x.norm(0.5), [0.0, 0.0], 0.0, [0.0, 0.0]),
    ("norm_1.5_zeros", lambda m, x: x.norm(1.5), [0.0, 0.0], 0.0, [0.0, 0.0]),
    ("norm_inf_zeros", lambda m, x: x.norm(inf), [0.0, 0.0], 0.0, [0.0, 0.0]),
    ("norm_dim_zeros", lambda m, x: _rows(m, x).norm(dim=1), [0.0, 0.0, 3.0, 4.0], [0.0, 5.0], [0.0, 0.0, 0.6, 0.8]),
    ("norm3_dim_zeros", lambda m, x: _rows(m, x).norm(p=3, dim=1), [0.0, 0.0, 3.0, 4.0], [0.0, 4.497941445275415],
     [0.0, 0.0, 0.4448513517305356, 0.7908468475209521]),
    ("norm1_nan", lambda m, x: x.norm(1), [1.0, 2.0, nan], nan, [1.0, 1.0, 0.0]),
    ("norm2_nan", lambda m, x: x.norm(), [1.0, 2.0, nan], nan, [nan, nan, nan]),
    ("norm_inf_nan", lambda m, x: x.norm(inf), [1.0, 2.0, nan], nan, [0.0, 0.0, 0.0]),
    ("norm_inf_ties", lambda m, x: x.norm(inf), [1.0, -3.0, 3.0], 3.0, [0.0, -0.5, 0.5]),
    ("softmax_-inf", lambda m, x: (x.softmax(0) * m.tensor([1.0, 2.0, 3.0], dtype=x.dtype)).sum(),
     [-inf, 0.0, 1.0], 2.7310585786300049, [-0.0, -0.19661193324148196, 0.1966119332414816]),
    ("softmax_all_-inf", lambda m, x: x.softmax(0), [-inf, -inf], [nan, nan], [nan, nan]),
    ("softmax_+inf", lambda m, x: x.softmax(0), [inf, 0.0], [nan, nan], [nan, nan]),
    ("log_softmax_-inf", lambda m, x: (x.log_softmax(0) * m.tensor([1.0, 2.0, 3.0], dtype=x.dtype)).sum(),
     [-inf, 0.0, 1.0], -inf, [1.0, 0.3863514717800294, -1.3863514717800294]),
    ("log_softmax_all_-inf", lambda m, x: x.log_softmax(0), [-inf, -inf], [nan, nan], [nan, nan]),
    # binary cross-entropy at the ends of [0, 1]: PyTorch caps the loss at 100 but not the gradient
    ("binary_cross_entropy_ends",
     lambda m, x: m.nn.functional.binary_cross_entropy(x, m.tensor([1.0, 0.0, 1.0, 0.0, 0.25], dtype=x.dtype),
                                                       reduction="none"),
     [0.0, 1.0, 1e-20, 1e-17, 0.3], [100.0, 100.0, 46.051701859880914, 1e-17, 0.5684994090355333],
     [-1000000003995.8029, 1000000003995.8029, -1000000003995.8029, 1.000000003995803e-05, 0.23809523809523805]),
]


def _tj_value_and_grad(f, x, dtype=np.float64):
    leaf = tj.tensor(np.array(x, dtype=dtype), requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)   # var's degrees of freedom <= 0, as torch
        y = f(tj, leaf)
    y.sum().backward()
    return y.detach().numpy().copy(), leaf.grad.numpy().copy()


def _torch_value_and_grad(torch, f, x):
    leaf = torch.tensor(np.array(x, dtype=np.float64), requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        y = f(torch, leaf)
    y.sum().backward()
    return y.detach().numpy(), leaf.grad.numpy()


def _same(got, expected, what, rtol=1e-12):
    expected = np.asarray(expected, dtype=np.float64)
    assert got.shape == expected.shape, f"{what}: shape {got.shape}, expected {expected.shape}"
    np.testing.assert_allclose(got, expected, rtol=rtol, atol=0, equal_nan=True, err_msg=what)


@pytest.mark.parametrize("name, f, x, value, grad", EDGE_CASES, ids=[c[0] for c in EDGE_CASES])
def test_edge_case_gives_torch_result(name, f, x, value, grad):
    got_value, got_grad = _tj_value_and_grad(f, x)
    _same(got_value, value, "value")
    zeros = np.asarray(value) == 0
    np.testing.assert_array_equal(np.signbit(got_value[zeros]), np.signbit(np.asarray(value)[zeros]),
                                  err_msg="the sign of a zero value")
    _same(got_grad, grad, "gradient")


@pytest.mark.slow
@pytest.mark.parametrize("name, f, x, value, grad", EDGE_CASES, ids=[c[0] for c in EDGE_CASES])
def test_edge_case_in_float32(name, f, x, value, grad):
    """The same NaN, inf and zero pattern in float32, values to float32 precision."""
    got_value, got_grad = _tj_value_and_grad(f, x, np.float32)
    assert got_value.dtype == np.float32 and got_grad.dtype == np.float32
    _same(got_value.astype(np.float64), value, "value", rtol=1e-5)
    _same(got_grad.astype(np.float64), grad, "gradient", rtol=1e-5)


@pytest.mark.parametrize("name, f, x, value, grad", EDGE_CASES, ids=[c[0] for c in EDGE_CASES])
def test_edge_case_states_torch_result(name, f, x, value, grad):
    torch = pytest.importorskip("torch")
    got_value, got_grad = _torch_value_and_grad(torch, f, x)
    _same(got_value, value, "torch's value")
    zeros = np.asarray(value) == 0
    np.testing.assert_array_equal(np.signbit(got_value[zeros]), np.signbit(np.asarray(value)[zeros]))
    _same(got_grad, grad, "torch's gradient")


# (name, f(module, x), x, gradient seed, PyTorch's gradient): where PyTorch masks a gradient
# (where, masked_fill, zeros_like) it is an exact zero even for an infinite seed, where it
# multiplies, inf * 0 is NaN.
INFINITE_SEEDS = [
    ("maximum", lambda m, x: m.maximum(x[:1], x[1:]), [1.0, 2.0], [inf], [0.0, inf]),
    ("minimum", lambda m, x: m.minimum(x[:1], x[1:]), [1.0, 2.0], [inf], [inf, 0.0]),
    ("pow_exponent_0", lambda m, x: x[:1] ** x[1:], [2.0, 0.0], [inf], [0.0, inf]),
    ("pow_base_0", lambda m, x: x[:1] ** x[1:], [0.0, 2.0], [inf], [nan, nan]),
    ("pow_scalar_0", lambda m, x: x ** 0.0, [2.0], [inf], [0.0]),
    ("rpow_scalar", lambda m, x: 0.0 ** x, [2.0], [inf], [nan]),
    ("sign", lambda m, x: m.sign(x), [2.0], [inf], [0.0]),
    ("abs_at_0", lambda m, x: x.abs(), [0.0], [inf], [nan]),
    ("where", lambda m, x: m.where(x > 0, x, x * 2.0), [1.0, -1.0], [inf, inf], [inf, inf]),
    ("relu", lambda m, x: m.relu(x), [-1.0, 1.0], [inf, inf], [0.0, inf]),
    ("clamp", lambda m, x: x.clamp(0.0, 1.0), [-1.0, nan], [inf, inf], [0.0, 0.0]),
    ("leaky_relu", lambda m, x: m.nn.functional.leaky_relu(x, 0.0), [-1.0], [inf], [nan]),
    ("max", lambda m, x: x.max().reshape(1), [1.0, 3.0], [inf], [0.0, inf]),
    ("amax", lambda m, x: x.amax().reshape(1), [1.0, 3.0], [inf], [nan, inf]),
    ("norm_at_0", lambda m, x: x.norm().reshape(1), [0.0, 0.0], [inf], [nan, nan]),
    ("norm3_at_0", lambda m, x: x.norm(3).reshape(1), [0.0, 0.0], [inf], [0.0, 0.0]),
    ("std_equal", lambda m, x: x.std().reshape(1), [2.0, 2.0], [inf], [0.0, 0.0]),
]


def _seeded(m, f, x, seed):
    leaf = m.tensor(np.array(x, dtype=np.float64), requires_grad=True)
    f(m, leaf).backward(m.tensor(np.array(seed, dtype=np.float64)))
    return leaf.grad.numpy()


@pytest.mark.parametrize("name, f, x, seed, grad", INFINITE_SEEDS, ids=[c[0] for c in INFINITE_SEEDS])
def test_infinite_gradient_through_masks(name, f, x, seed, grad):
    _same(_seeded(tj, f, x, seed), grad, "gradient")


@pytest.mark.parametrize("name, f, x, seed, grad", INFINITE_SEEDS, ids=[c[0] for c in INFINITE_SEEDS])
def test_infinite_gradient_through_masks_in_torch(name, f, x, seed, grad):
    torch = pytest.importorskip("torch")
    _same(_seeded(torch, f, x, seed), grad, "torch's gradient")


# Reductions over nothing: PyTorch's identities (prod 1, logsumexp -inf, norm 0), and errors
# for those without one.
EMPTY_REDUCTIONS = [
    ("prod", lambda m, x: x.prod(), (0,), 1.0),
    ("prod_dim", lambda m, x: x.prod(1), (2, 0), [1.0, 1.0]),
    ("prod_over_rows", lambda m, x: x.prod(0), (2, 0), np.zeros(0)),
    ("logsumexp", lambda m, x: x.logsumexp(0), (0,), -inf),
    ("logsumexp_dim", lambda m, x: x.logsumexp(1), (2, 0), [-inf, -inf]),
    ("norm", lambda m, x: x.norm(), (0,), 0.0),
    ("norm3_dim", lambda m, x: x.norm(3, dim=1), (2, 0), [0.0, 0.0]),
    ("amax_over_rows", lambda m, x: x.amax(0), (2, 0), np.zeros(0)),
    ("softmax", lambda m, x: x.softmax(0), (0,), np.zeros(0)),
    ("sum", lambda m, x: x.sum(), (0,), 0.0),
    ("mean", lambda m, x: x.mean(), (0,), nan),
]


@pytest.mark.parametrize("name, f, shape, value", EMPTY_REDUCTIONS, ids=[c[0] for c in EMPTY_REDUCTIONS])
@pytest.mark.parametrize("lib", ["tapejit", "torch"])
def test_reduction_over_nothing(name, f, shape, value, lib):
    m = tj if lib == "tapejit" else pytest.importorskip("torch")
    x = m.zeros(shape, dtype=m.float64, requires_grad=True)
    y = f(m, x)
    _same(y.detach().numpy(), value, "value")
    y.sum().backward()
    assert tuple(x.grad.shape) == shape


EMPTY_ERRORS = [
    ("amax", lambda m, x: x.amax(), (2, 0), RuntimeError,
     r"amax\(\): Expected reduction dim to be specified for input.numel\(\) == 0"),
    ("amax_dim", lambda m, x: x.amax(1), (2, 0), IndexError,
     r"amax\(\): Expected reduction dim 1 to have non-zero size"),
    ("max", lambda m, x: x.max(), (0,), RuntimeError,
     r"max\(\): Expected reduction dim to be specified for input.numel\(\) == 0"),
    ("norm_inf", lambda m, x: x.norm(inf), (0,), RuntimeError,
     "linalg.vector_norm cannot compute the inf norm on an empty tensor because the operation does not have an "
     "identity"),
]


@pytest.mark.parametrize("name, f, shape, error, message", EMPTY_ERRORS, ids=[c[0] for c in EMPTY_ERRORS])
@pytest.mark.parametrize("lib", ["tapejit", "torch"])
def test_reduction_over_nothing_without_identity_raises(name, f, shape, error, message, lib):
    m = tj if lib == "tapejit" else pytest.importorskip("torch")
    with pytest.raises(error, match=message):
        f(m, m.zeros(shape, dtype=m.float64, requires_grad=True))


def test_relu_reciprocal_is_plus_inf():
    """Issue 14's report: 1 / relu(-1) was -inf (relu gave -0.0); torch gives inf."""
    assert (1 / tj.relu(tj.tensor(-1.0))).item() == inf
    assert not math.copysign(1.0, tj.clamp(tj.tensor(-1.0), min=0.0).item()) < 0


# ---- var/std: warnings and NumPy's std ------------------------------------------------------------

def test_var_warns_when_degrees_of_freedom_are_not_positive():
    x = tj.tensor([1.0, 2.0], requires_grad=True)
    with pytest.warns(UserWarning, match=r"var\(\): degrees of freedom is <= 0"):
        x.var(correction=2)
    with pytest.warns(UserWarning, match=r"std\(\): degrees of freedom is <= 0"):
        x[:1].std()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        x.std()


def test_numpy_std_of_one_element_has_zero_gradient():
    """Issue 14: tj.grad(np.std)(3.5) was NaN (np.std has ddof=0: the std of one value is 0)."""
    assert tj.grad(np.std)(3.5) == 0.0
    np.testing.assert_array_equal(tj.grad(lambda a: np.std(a, axis=0).sum())(np.array([[1.0, 2.0, 3.0]])),
                                  [[0.0, 0.0, 0.0]])
    np.testing.assert_array_equal(tj.grad(np.std)(np.full(4, 0.1)), np.zeros(4))
    np.testing.assert_array_equal(tj.grad(np.var)(np.full(3, 2.0)), np.zeros(3))


def test_std_of_equal_values_is_exactly_zero():
    """A slice's mean is summed as differences from its first element, so equal values have
    that value as mean exactly, and std, var and their gradients are exactly 0.  (torch's
    full reduction sums the values: for [0.1] * 3 in float64 it gives std 1.7e-17 and
    gradient -0.408 each; along a dim it gives 0, as tapejit does everywhere.)"""
    for dtype in (tj.float64, tj.float32):
        for values in ([0.1] * 3, [0.1] * 7, [1 / 3] * 5):
            x = tj.tensor(values, dtype=dtype, requires_grad=True)
            y = x.std() + x.var(correction=0) + x.reshape(1, -1).std(1).sum()
            y.backward()
            assert y.item() == 0.0 and (x.grad.numpy() == 0).all(), (dtype, values)


def test_var_std_grad_fn_names_and_empty_input():
    x = tj.tensor([1.0, 2.0, 4.0], requires_grad=True)
    assert type(x.var().grad_fn).__name__ == "VarBackward0"
    assert type(x.std(0).grad_fn).__name__ == "StdBackward0"
    with pytest.warns(UserWarning):
        assert math.isnan(tj.zeros(0).var().item())     # torch: nan
        np.testing.assert_array_equal(tj.zeros(2, 0).std(1).numpy(), [nan, nan])


# ---- integer division by zero, remainder and fmod ---------------------------------------------------

INT_DIVISIONS = {
    "floordiv_scalar": lambda m, t: t // 0,
    "mod_scalar": lambda m, t: t % 0,
    "floordiv_tensor": lambda m, t: t // m.tensor([1, 0, 2]),
    "mod_tensor": lambda m, t: t % m.tensor([1, 0, 2]),
    "rfloordiv": lambda m, t: 5 // t,
    "rmod": lambda m, t: 5 % t,
    "div_floor": lambda m, t: m.div(t, 0, rounding_mode="floor"),
    "div_trunc": lambda m, t: m.div(t, m.tensor(0), rounding_mode="trunc"),
    "floor_divide": lambda m, t: m.floor_divide(t, 0),
    "remainder": lambda m, t: m.remainder(t, 0),
    "fmod": lambda m, t: m.fmod(t, 0),
    "fmod_tensor": lambda m, t: m.fmod(t, m.tensor([1, 0, 2])),
}


@pytest.mark.parametrize("name", list(INT_DIVISIONS))
def test_integer_division_by_zero_raises(name):
    """torch raises ``RuntimeError('ZeroDivisionError')``; NumPy would give 0."""
    with pytest.raises(RuntimeError, match="^ZeroDivisionError"):
        INT_DIVISIONS[name](tj, tj.tensor([5, -3, 0]))


@pytest.mark.parametrize("name", list(INT_DIVISIONS))
def test_integer_division_by_zero_raises_in_torch(name):
    torch = pytest.importorskip("torch")
    with pytest.raises(RuntimeError, match="^ZeroDivisionError$"):
        INT_DIVISIONS[name](torch, torch.tensor([5, -3, 0]))


def test_integer_division_values():
    big = 2**60 + 1   # exact: through float64 the quotient would round
    t = tj.tensor([7, -7, big])
    np.testing.assert_array_equal((t // tj.tensor(2)).numpy(), [3, -4, big // 2])
    np.testing.assert_array_equal((t % 3).numpy(), [1, 2, big % 3])
    np.testing.assert_array_equal(tj.div(t, 3, rounding_mode="trunc").numpy(), [2, -2, big // 3])
    np.testing.assert_array_equal(tj.div(-t, 3, rounding_mode="trunc").numpy(), [-2, 2, -(big // 3)])
    np.testing.assert_array_equal(tj.fmod(tj.tensor([7, -7]), 2).numpy(), [1, -1])
    np.testing.assert_array_equal((tj.tensor([7, -7]) // -2).numpy(), [-4, 3])
    r = tj.tensor([5]) // 2.5     # torch: tensor([2.]), a float
    assert r.dtype is tj.float32 and r.tolist() == [2.0]
    with pytest.raises(RuntimeError, match="rounding_mode to be one of None, 'trunc', or 'floor'"):
        tj.div(t, 2, rounding_mode="round")


def test_float_division_by_zero_is_silent_inf_and_nan():
    x = tj.tensor([5.0, -3.0, 0.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # NumPy's divide-by-zero warnings stay inside
        np.testing.assert_array_equal((x // 0).numpy(), [inf, -inf, nan])
        np.testing.assert_array_equal((x % 0).numpy(), [nan, nan, nan])
        np.testing.assert_array_equal(tj.fmod(x, 0.0).numpy(), [nan, nan, nan])
        np.testing.assert_array_equal((tj.tensor([1, 0]) / 0).numpy(), [inf, nan])


def test_remainder_and_fmod_are_differentiable():
    """``x % y`` silently dropped the graph (``x + x % 2`` had gradient 1, not 2).  torch's
    values and gradients: remainder [1.5, 0.5, -1.0] with d/dy = -floor(x / y) = [-1, 2, 2],
    fmod [1.5, -1.5, 0.5] with d/dy = -trunc(x / y) = [-1, 1, 1]."""
    for fn, value, dy, node in [(tj.remainder, [1.5, 0.5, -1.0], [-1.0, 2.0, 2.0], "RemainderBackward1"),
                                (tj.fmod, [1.5, -1.5, 0.5], [-1.0, 1.0, 1.0], "FmodBackward1")]:
        x = tj.tensor([3.5, -3.5, 2.0], dtype=tj.float64, requires_grad=True)
        y = tj.tensor([2.0, 2.0, -1.5], dtype=tj.float64, requires_grad=True)
        z = fn(x, y)
        assert type(z.grad_fn).__name__ == node
        np.testing.assert_array_equal(z.detach().numpy(), value)
        z.sum().backward()
        np.testing.assert_array_equal(x.grad.numpy(), [1.0, 1.0, 1.0])
        np.testing.assert_array_equal(y.grad.numpy(), dy)
    x = tj.tensor([3.5], requires_grad=True)
    z = x % 2.0
    assert type(z.grad_fn).__name__ == "RemainderBackward0"
    assert type(tj.fmod(x, 2.0).grad_fn).__name__ == "FmodBackward0"
    (x + z).sum().backward()
    assert x.grad.tolist() == [2.0]
    assert tj.grad(lambda a: (a % 2.0).sum())(np.array([3.5])).tolist() == [1.0]
    # torch: remainder(-5, inf) is inf (the sign of the divisor), fmod(-5, inf) is -5
    assert (tj.tensor([-5.0]) % inf).tolist() == [inf]
    assert tj.fmod(tj.tensor([-5.0]), inf).tolist() == [-5.0]


# ---- index_select / gather ----------------------------------------------------------------------

def test_index_select_refuses_negative_and_out_of_range_indices():
    """torch raises IndexError or RuntimeError (depending on the dim) where NumPy wraps -1."""
    for dim, index in [(1, [-1]), (0, [-1]), (1, [3]), (0, [0, -2])]:
        for grad in (False, True):
            x = tj.arange(6.0).reshape(2, 3).requires_grad_(grad)
            with pytest.raises(IndexError, match="index out of range in self"):
                tj.index_select(x, dim, tj.tensor(index))
            with pytest.raises(RuntimeError, match="index out of range in self"):
                tj.index_select(x, dim, tj.tensor(index))
    x = tj.arange(6.0).reshape(2, 3)
    with pytest.raises(RuntimeError, match=r"index_select\(\): Expected dtype int32 or int64 for index"):
        tj.index_select(x, 1, tj.tensor([0.7]))
    with pytest.raises(IndexError, match=r"index_select\(\): Index is supposed to be a vector"):
        tj.index_select(x, 1, tj.tensor([[0]]))
    np.testing.assert_array_equal(tj.index_select(x, 1, tj.tensor(1)).numpy(), [[1.0], [4.0]])


def test_index_select_errors_in_torch():
    torch = pytest.importorskip("torch")
    x = torch.arange(6.0).reshape(2, 3)
    with pytest.raises(RuntimeError, match="INDICES element is out of DATA bounds, id=-1 axis_dim=3"):
        torch.index_select(x, 1, torch.tensor([-1]))
    with pytest.raises(IndexError, match="index out of range in self"):
        torch.index_select(x, 0, torch.tensor([-1]))
    with pytest.raises(RuntimeError, match=r"index_select\(\): Expected dtype int32 or int64 for index"):
        torch.index_select(x, 1, torch.tensor([0.7]))
    with pytest.raises(IndexError, match=r"index_select\(\): Index is supposed to be a vector"):
        torch.index_select(x, 1, torch.tensor([[0]]))


GATHER_ERRORS = [
    ("negative", lambda m, x: m.gather(x, 1, m.tensor([[-1], [0]])), RuntimeError,
     "index -1 is out of bounds for dimension 1 with size 3"),
    ("too_large", lambda m, x: m.gather(x, 1, m.tensor([[3], [0]])), RuntimeError,
     "index 3 is out of bounds for dimension 1 with size 3"),
    ("float_index", lambda m, x: m.gather(x, 1, m.tensor([[0.5], [1.0]])), RuntimeError,
     r"gather\(\): Expected dtype int32/int64 for index"),
    ("index_larger_than_input", lambda m, x: m.gather(x, 1, m.tensor([[0], [1], [0]])), RuntimeError,
     r"Size does not match at dimension 0 expected index \[3, 1\] to be no larger than self \[2, 3\] "
     "apart from dimension 1"),
    ("ndim", lambda m, x: m.gather(x, 1, m.tensor([0, 1])), RuntimeError,
     "Index tensor must have the same number of dimensions as input tensor"),
    ("0d_negative", lambda m, x: m.gather(x[0, 0], 0, m.tensor(-1)), RuntimeError,
     "index -1 is out of bounds for dimension 0 with size 1"),
]


@pytest.mark.parametrize("name, f, error, message", GATHER_ERRORS, ids=[c[0] for c in GATHER_ERRORS])
def test_gather_errors(name, f, error, message):
    with pytest.raises(error, match=message):
        f(tj, tj.arange(6.0).reshape(2, 3).requires_grad_())


@pytest.mark.parametrize("name, f, error, message", GATHER_ERRORS, ids=[c[0] for c in GATHER_ERRORS])
def test_gather_errors_in_torch(name, f, error, message):
    torch = pytest.importorskip("torch")
    with pytest.raises(error, match=message):
        f(torch, torch.arange(6.0).reshape(2, 3).requires_grad_())


def test_gather_with_a_smaller_index_reads_the_leading_part():
    """torch gathers within the index's extent on the other dims (NumPy's take_along_axis
    would broadcast it over every row): [[2., 0.]], gradient [[1, 0, 1], [0, 0, 0]]."""
    x = tj.arange(6.0).reshape(2, 3).requires_grad_()
    y = tj.gather(x, 1, tj.tensor([[2, 0]]))
    np.testing.assert_array_equal(y.detach().numpy(), [[2.0, 0.0]])
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[1.0, 0.0, 1.0], [0.0, 0.0, 0.0]])
    np.testing.assert_array_equal(tj.gather(tj.tensor([1.0, 2.0, 3.0]), 0, tj.tensor(1)).numpy(), 2.0)
    np.testing.assert_array_equal(tj.gather(tj.tensor(5.0), 0, tj.tensor([0, 0])).numpy(), [5.0, 5.0])


# ---- binary_cross_entropy's ranges -----------------------------------------------------------------

BCE_ERRORS = [
    ("target_above_1", [0.5], [1.5], "all elements of target should be between 0 and 1"),
    ("target_below_0", [0.5], [-0.5], "all elements of target should be between 0 and 1"),
    ("target_nan", [0.5], [nan], "all elements of target should be between 0 and 1"),
    ("input_above_1", [1.5], [1.0], "all elements of input should be between 0 and 1"),
    ("input_below_0", [-0.1], [1.0], "all elements of input should be between 0 and 1"),
    ("input_nan", [nan], [1.0], "all elements of input should be between 0 and 1"),
    ("both", [1.5], [1.5], "all elements of input should be between 0 and 1"),
]


@pytest.mark.parametrize("name, x, t, message", BCE_ERRORS, ids=[c[0] for c in BCE_ERRORS])
@pytest.mark.parametrize("grad", [False, True])
def test_binary_cross_entropy_refuses_values_outside_0_1(name, x, t, message, grad):
    with pytest.raises(RuntimeError, match=message):
        tj.nn.functional.binary_cross_entropy(tj.tensor(x, requires_grad=grad), tj.tensor(t, requires_grad=grad))
    with pytest.raises(RuntimeError, match=message):
        tj.nn.BCELoss()(tj.sigmoid(tj.tensor([0.0], requires_grad=True)) * tj.tensor(x) * 2.0, tj.tensor(t))


@pytest.mark.parametrize("name, x, t, message", BCE_ERRORS, ids=[c[0] for c in BCE_ERRORS])
def test_binary_cross_entropy_errors_in_torch(name, x, t, message):
    torch = pytest.importorskip("torch")
    with pytest.raises(RuntimeError, match=message):
        torch.nn.functional.binary_cross_entropy(torch.tensor(x, requires_grad=True), torch.tensor(t))


def test_binary_cross_entropy_in_a_replay_is_nan_outside_0_1():
    """A tj.compile trace cannot read the values it checks (they change with each call), so
    there the loss and gradients of values outside [0, 1] are NaN, never finite and wrong."""
    w = tj.tensor([0.5, -0.25], requires_grad=True)

    def loss(x, t):
        return tj.nn.functional.binary_cross_entropy(tj.sigmoid(x @ w), t)
    compiled = tj.compile(loss)
    x = tj.tensor([[0.3, -1.2], [2.0, 0.1]])
    good = compiled(x, tj.tensor([1.0, 0.0]))
    assert good.item() == pytest.approx(loss(x, tj.tensor([1.0, 0.0])).item(), rel=1e-6)
    bad = compiled(x, tj.tensor([1.5, 0.0]))
    bad.backward()
    assert math.isnan(bad.item()) and np.isnan(w.grad.numpy()).all()


def test_binary_cross_entropy_target_gradient_and_mean():
    """torch's target gradient is -logit(x), unclamped: [39.14394658089878, 0.8472978603872036,
    -36.7368005696771, inf, -inf] for these; the mean divides both by n."""
    x = tj.tensor([1e-17, 0.3, 1 - 1e-16, 0.0, 1.0], dtype=tj.float64, requires_grad=True)
    t = tj.tensor([0.0, 0.25, 1.0, 0.5, 0.5], dtype=tj.float64, requires_grad=True)
    loss = tj.nn.functional.binary_cross_entropy(x, t, reduction="none")
    _same(loss.detach().numpy(), [1e-17, 0.5684994090355333, 1.1102230246251565e-16, 50.0, 50.0], "loss")
    loss.sum().backward()
    _same(x.grad.numpy(), [1.000000003995803e-05, 0.23809523809523805, -0.00011102230290613889,
                           -500000001997.9014, 500000001997.9014], "input gradient")
    _same(t.grad.numpy(), [39.14394658089878, 0.8472978603872036, -36.7368005696771, inf, -inf],
          "target gradient")
    x32 = tj.tensor([0.0, 1.0, 1e-30, 0.3], requires_grad=True)
    loss = tj.nn.functional.binary_cross_entropy(x32, tj.tensor([1.0, 0.0, 1.0, 0.25]), reduction="sum")
    loss.backward()
    _same(x32.grad.numpy().astype(np.float64), [-999999995904.0, 999999995904.0, -999999995904.0,
                                                0.23809528350830078], "float32 input gradient", rtol=1e-6)


# ---- casts of values the target dtype cannot hold -----------------------------------------------

@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("requires_grad", [False, True])
def test_nan_and_infinities_to_int64_are_torchs_values_without_a_warning(dtype, requires_grad):
    # torch 2.13 (x86 C cast): NaN, inf, -inf and values past int64 are INT64_MIN, silently;
    # to bool any nonzero (NaN too) is True
    values = [math.nan, math.inf, -math.inf, 1e30, -1e30, 9.3e18, 2.5, -2.5]
    x = tj.tensor(values, dtype=getattr(tj, dtype), requires_grad=requires_grad)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        as_int = x.to(tj.int64).tolist()
        as_long = x.long().tolist()
        as_bool = x.to(tj.bool).tolist()
    assert as_int == as_long == [-2**63] * 6 + [2, -2]
    assert as_bool == [True] * 8
    torch = pytest.importorskip("torch")
    t = torch.tensor(values, dtype=getattr(torch, dtype))
    assert t.to(torch.int64).tolist() == as_int and t.to(torch.bool).tolist() == as_bool


def test_float64_past_float32s_range_casts_to_inf_without_a_warning():
    # torch 2.13: inf, silently; a float64 gradient past float32's range reaches a float32
    # leaf as inf
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert tj.tensor([1e300, -1e300, 1.0], dtype=tj.float64).float().tolist() == [math.inf, -math.inf, 1.0]
        x = tj.tensor([1e300], dtype=tj.float64, requires_grad=True)
        assert x.float().tolist() == [math.inf]
        a = tj.tensor([1e30], requires_grad=True)
        (a.double() ** 3).sum().backward()   # 3e60 in float64
        assert a.grad.tolist() == [math.inf]
